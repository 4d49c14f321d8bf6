//! The refetch gate: when a request needs something the held state lacks (a key id nobody has
//! seen, a peer's key set), fetch again, but at most once per cooldown and once at a time,
//! however many requests are waiting (ATTACKS A4: a flood of unknown kids must not become a
//! flood of fetches).
//!
//! ```text
//!   miss ─▶ cooling down? ── yes ─▶ None (no fetch, no wait)
//!              │ no
//!              ▼
//!        wait for the one fetch in flight (single flight)
//!              │
//!        the state now has it? ── yes ─▶ Some (someone else's fetch brought it)
//!              │ no
//!        claim the cooldown ── lost (another fetch just ran) ─▶ None
//!              │ won
//!        run the caller's fetch, then ask the state again ─▶ Some / None
//! ```
//!
//! The gate knows nothing of what is fetched: the caller passes a `check` (does the held
//! state have it now?) and the fetch future (which applies what it fetched, logs its own
//! failures and bounds its own time).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Single-flight, cooldown-bounded refetches. One per thing refetched (e.g. per feed).
#[derive(Debug)]
pub struct RefetchGate {
    cooldown: Duration,
    /// When the last fetch was claimed.
    last: Mutex<Option<Instant>>,
    /// Held for the whole of a fetch: waiters queue here and look again afterwards.
    flight: tokio::sync::Mutex<()>,
}

impl RefetchGate {
    /// A gate allowing one fetch per `cooldown`.
    pub fn new(cooldown: Duration) -> Self {
        Self {
            cooldown,
            last: Mutex::new(None),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether a fetch ran less than the cooldown ago (a poisoned lock counts as cooling:
    /// fail towards fewer fetches).
    pub fn cooling(&self) -> bool {
        self.last.lock().map_or(true, |g| self.within(*g))
    }

    /// Claims the right to fetch now; false while cooling down.
    fn claim(&self) -> bool {
        let Ok(mut g) = self.last.lock() else {
            return false;
        };
        if self.within(*g) {
            return false;
        }
        *g = Some(Instant::now());
        true
    }

    /// Whether `last` (the last claim) is less than the cooldown ago.
    fn within(&self, last: Option<Instant>) -> bool {
        last.is_some_and(|t| t.elapsed() < self.cooldown)
    }

    /// After a miss: the diagram of the module doc. `check` looks in the held state (it is
    /// called again after waiting and after fetching); `fetch` runs only when this caller won
    /// the claim, and is dropped unpolled otherwise.
    pub async fn refetch<T>(
        &self,
        check: impl Fn() -> Option<T>,
        fetch: impl Future<Output = ()>,
    ) -> Option<T> {
        if self.cooling() {
            return None;
        }
        let _flight = self.flight.lock().await;
        if let Some(found) = check() {
            return Some(found);
        }
        if !self.claim() {
            return None;
        }
        fetch.await;
        check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A refetch for something never found, counting the fetches that ran.
    async fn miss(gate: &RefetchGate, fetches: &AtomicUsize) -> Option<()> {
        gate.refetch(|| None, async {
            fetches.fetch_add(1, Ordering::SeqCst);
        })
        .await
    }

    #[tokio::test]
    async fn one_fetch_for_many_waiters_then_none_while_cooling() {
        let gate = Arc::new(RefetchGate::new(Duration::from_secs(60)));
        let fetches = Arc::new(AtomicUsize::new(0));
        let present = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (gate, fetches, present) = (gate.clone(), fetches.clone(), present.clone());
            tasks.push(tokio::spawn(async move {
                let check = || present.load(Ordering::SeqCst).then_some(());
                gate.refetch(check, async {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    present.store(true, Ordering::SeqCst);
                })
                .await
            }));
        }
        let mut found = 0;
        for t in tasks {
            if t.await.unwrap().is_some() {
                found += 1;
            }
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert!(found >= 1);
        assert!(gate.cooling());
        // Still missing something else: no second fetch within the cooldown.
        assert!(miss(&gate, &fetches).await.is_none());
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_zero_cooldown_fetches_every_time() {
        let gate = RefetchGate::new(Duration::ZERO);
        let fetches = AtomicUsize::new(0);
        for _ in 0..3 {
            assert!(miss(&gate, &fetches).await.is_none());
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
        assert!(!gate.cooling());
    }
}
