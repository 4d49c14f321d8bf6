//! The migration drain, the edge's part (DESIGN §5 step 2): count the writes in flight per
//! contractor, and tell the auth-service on each feed request which contractors in handoff
//! still have one, so the orchestrator knows when no write can still land at the source.
//!
//! - A write registers itself ([`InFlight::begin`]) *before* it re-reads the ownership view
//!   ([`recheck`]); the sync loop swaps the view *before* it reads the counts. So either the
//!   write sees the handoff (and is refused `409 HANDOFF_IN_PROGRESS`), or the report that
//!   follows the handoff counts it as busy. No write slips between the two.
//! - The feed request reports `since` (the sequence applied, as before) and `busy=c-1,c-2`
//!   (contractors in handoff in the applied view with writes in flight).
//! - When the last in-flight write of a reported contractor ends, the sync loop is woken to
//!   report again at once instead of waiting out its long-poll.
//!
//! Cost on the hot path: writes only, one short mutex section at the start and one at the end.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use protocol::ContractorId;
use protocol::ownership::{Access, Decision, OwnershipRecord, decide};
use protocol::token::SessionClaims;

use crate::error::Refusal;
use crate::held::state::CellState;

/// Most contractors reported busy in one feed request (the rest on the next one).
pub(crate) const MAX_BUSY_REPORTED: usize = 64;

#[derive(Debug, Default)]
struct Counts {
    writes: HashMap<ContractorId, u32>,
    /// Contractors last reported busy: their last write ending wakes the sync loop.
    reported: HashSet<ContractorId>,
}

/// In-flight writes per contractor.
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Mutex<Counts>,
    drained: tokio::sync::Notify,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a write for `ctr` until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>, ctr: &ContractorId) -> WriteGuard {
        *self.lock().writes.entry(ctr.clone()).or_insert(0) += 1;
        WriteGuard {
            owner: self.clone(),
            ctr: ctr.clone(),
        }
    }

    fn end(&self, ctr: &ContractorId) {
        let wake = {
            let mut c = self.lock();
            let left = match c.writes.get_mut(ctr) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 {
                c.writes.remove(ctr);
                c.reported.remove(ctr)
            } else {
                false
            }
        };
        if wake {
            self.drained.notify_one();
        }
    }

    /// Contractors in handoff in `state` that have writes in flight (remembered as reported).
    pub(crate) fn busy_in_handoff(&self, state: Option<&CellState>) -> Vec<ContractorId> {
        let mut c = self.lock();
        let busy: Vec<ContractorId> = c
            .writes
            .keys()
            .filter(|ctr| {
                state.is_some_and(|s| {
                    matches!(s.ownership(ctr), Some(OwnershipRecord::Handoff { .. }))
                })
            })
            .take(MAX_BUSY_REPORTED)
            .cloned()
            .collect();
        c.reported = busy.iter().cloned().collect();
        busy
    }

    /// Resolves when a contractor reported busy has no write in flight any more.
    pub async fn drained(&self) {
        self.drained.notified().await;
    }

    /// Writes in flight for `ctr` (tests, metrics).
    pub fn count(&self, ctr: &ContractorId) -> u32 {
        self.lock().writes.get(ctr).copied().unwrap_or(0)
    }
}

/// A registered write; dropping it ends it.
#[derive(Debug)]
pub(crate) struct WriteGuard {
    owner: Arc<InFlight>,
    ctr: ContractorId,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        self.owner.end(&self.ctr);
    }
}

/// The second look at ownership a registered write takes: the view may have changed since the
/// request was validated.
pub(crate) fn recheck(state: Option<&CellState>, claims: &SessionClaims) -> Result<(), Refusal> {
    let record = state.and_then(|s| s.ownership(&claims.ctr));
    match decide(record, claims.generation, Access::Write) {
        Decision::Serve => Ok(()),
        _ => Err(Refusal::Handoff),
    }
}

/// The `busy` query parameter for a feed request (empty when nothing is busy).
pub(crate) fn busy_param(busy: &[ContractorId]) -> String {
    if busy.is_empty() {
        return String::new();
    }
    let list: Vec<&str> = busy.iter().map(ContractorId::as_str).collect();
    format!("&busy={}", list.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_wakes_only_for_reported_contractors() {
        let f = Arc::new(InFlight::default());
        let a = ContractorId::new("c-1").unwrap();
        let g1 = f.begin(&a);
        let g2 = f.begin(&a);
        assert_eq!(f.count(&a), 2);
        // No view: nothing is in handoff, nothing reported.
        assert!(f.busy_in_handoff(None).is_empty());
        drop(g1);
        drop(g2);
        assert_eq!(f.count(&a), 0);
        assert_eq!(busy_param(&[]), "");
        assert_eq!(busy_param(std::slice::from_ref(&a)), "&busy=c-1");
    }
}
