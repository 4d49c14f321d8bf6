//! Time as unix seconds, and the clock every component reads it from (so tests can fake days).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds since the unix epoch.
pub type UnixSeconds = u64;

/// Largest integer time accepted in a token (2^53, the JSON-safe integer bound; ATTACKS A13).
pub const MAX_JSON_SAFE_INT: u64 = 1 << 53;

/// Where "now" comes from.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> UnixSeconds;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixSeconds {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Clone, Default)]
pub struct FakeClock(Arc<AtomicU64>);

impl FakeClock {
    pub fn at(t: UnixSeconds) -> Self {
        Self(Arc::new(AtomicU64::new(t)))
    }
    pub fn set(&self, t: UnixSeconds) {
        self.0.store(t, Ordering::SeqCst);
    }
    pub fn advance(&self, secs: u64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> UnixSeconds {
        self.0.load(Ordering::SeqCst)
    }
}

/// A shareable clock.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock, shared.
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}
