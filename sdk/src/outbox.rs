//! The offline outbox: writes queued while the device has no signal, delivered later in order,
//! each exactly once (the same idempotency key on every attempt, across restarts of the app and
//! across a move of the contractor to another cell).
//!
//! [`Client::enqueue`](crate::Client::enqueue) checks a write (a `POST`, `PUT`, `PATCH` or
//! `DELETE`) as [`Client::send`](crate::Client::send) would, gives it the caller's idempotency
//! key or a random 128-bit one, and saves it through the app's [`SessionStore`](crate::SessionStore)
//! in its own slot ([`StoreSlot::Outbox`](crate::StoreSlot::Outbox)) **before** returning. No
//! network. The outbox is bounded ([`DEFAULT_OUTBOX_MAX_WRITES`] writes,
//! [`DEFAULT_OUTBOX_MAX_BYTES`] of bodies; see
//! [`ClientBuilder::outbox_limits`](crate::ClientBuilder::outbox_limits)): a write that does not
//! fit is refused with [`Error::OutboxFull`] and nothing changes.
//!
//! The outbox belongs to the user who queued it (contractor and subject). Its writes are sent
//! only under a session of that user (also after a renewal or a transfer to a new cell); under
//! anyone else's they wait for [`Client::take_undelivered`](crate::Client::take_undelivered).
//!
//! [`Client::flush`](crate::Client::flush) sends the writes one at a time, oldest first, one
//! flush at a time, each through the client's normal request path (renewal, bounded retries,
//! `WRONG_CELL` → transfer + rebind → the new owner). A flush also starts by itself, in the
//! background, at [`Client::restore`](crate::Client::restore) (inside a tokio runtime) and after
//! any successful request while writes are queued; its results go to the
//! [`OutboxObserver`], which hears about every delivery and refusal of every flush, in order,
//! once that flush has finished.
//!
//! The life of one write:
//!
//! ```text
//!   enqueue() ──▶ queued ──flush()──▶ sending ──2xx/3xx──────────────────────▶ delivered (removed)
//!                   ▲                   │ ────4xx (not 409 handoff, not 429)──▶ rejected  (removed,
//!                   │                   │                                          reported)
//!                   └──── kept ◀────────┘ network, 5xx, 409 handoff, 429, stale state, pins,
//!                   (flush stops;        a refused DPoP proof or a failing device key,
//!                    order is kept)      an owner not followable yet, the session ended
//!                                        (then only take_undelivered() / sign_out() hand it back)
//! ```
//!
//! The outcome classes are decided in one place, the `match` of `verdict`.
//!
//! The blob is JSON, `{"schema":1,"owner":{"contractor":…,"subject":…},"next_id":…,"entries":[…]}`
//! with bodies in base64; a blob of another schema is refused with [`Error::Store`], never
//! dropped.

//!
//! Files: this one holds the public face (the report types, the observer, the settings);
//! `queue` the persisted queue, its blob's schema and the default limits; `verdict` the outcome
//! table and why a write is refused ([`Refusal`]); the client's methods that queue and flush
//! are in `client/flush.rs`. Neither file imports this one.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::Error;
use crate::transport::Response;

mod queue;
mod verdict;

pub use queue::{DEFAULT_OUTBOX_MAX_BYTES, DEFAULT_OUTBOX_MAX_WRITES, OUTBOX_SCHEMA, QueuedWrite};
pub(crate) use queue::{OTHER_OWNER, Outbox, Owner, decode, encode, is_write};
pub use verdict::Refusal;
pub(crate) use verdict::{Verdict, verdict};

/// The outbox's share of the client (its methods are in `client/flush.rs`).
#[derive(Debug)]
pub(crate) struct OutboxState {
    pub(crate) settings: OutboxSettings,
    /// Held around every load-change-save of the outbox slot (never across an await).
    pub(crate) io: std::sync::Mutex<()>,
    /// One flush at a time.
    pub(crate) flush: tokio::sync::Mutex<()>,
    /// Writes may be queued (starts true: unknown until the store was read).
    pub(crate) pending: std::sync::atomic::AtomicBool,
}

impl OutboxState {
    pub(crate) fn new(settings: OutboxSettings) -> Self {
        Self {
            settings,
            io: std::sync::Mutex::new(()),
            flush: tokio::sync::Mutex::new(()),
            pending: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

/// A write the cell accepted.
#[derive(Debug)]
pub struct Delivered {
    pub write: QueuedWrite,
    /// The cell's answer (status below 400).
    pub response: Response,
}

/// A write refused for good: removed from the outbox and reported.
#[derive(Debug)]
pub struct WriteRejection {
    pub write: QueuedWrite,
    /// The HTTP status of the refusal; 0 when the SDK refused it before sending.
    pub status: u16,
    /// The Cellbind error code of the refusal, when it had one.
    pub code: Option<String>,
    pub refusal: Refusal,
}

/// What one flush did.
#[derive(Debug, Default)]
pub struct FlushReport {
    /// Delivered and removed, in order.
    pub delivered: Vec<Delivered>,
    /// Refused for good and removed, in order.
    pub rejected: Vec<WriteRejection>,
    /// Writes still queued when the flush ended.
    pub remaining: usize,
    /// Why the flush stopped with writes left (the first of them is kept, and all after it).
    pub stopped: Option<Error>,
    /// The writes' session ended (expired, revoked, not followable, signed out, or another user
    /// is signed in): they wait for [`Client::take_undelivered`](crate::Client::take_undelivered).
    pub session_ended: bool,
}

/// Told what every flush (background or not) did with each write, in the order it happened,
/// once that flush has finished (so a write queued after the call was not looked at by that
/// flush). Keep it quick: it runs on the flush's task. A panic in it is caught and ignored.
pub trait OutboxObserver: Send + Sync + 'static {
    fn on_delivered(&self, delivered: &Delivered);
    fn on_rejected(&self, rejection: &WriteRejection);
}

/// The outbox's limits and observer.
#[derive(Clone)]
pub(crate) struct OutboxSettings {
    pub max_writes: usize,
    pub max_bytes: usize,
    pub observer: Option<Arc<dyn OutboxObserver>>,
}

impl Default for OutboxSettings {
    fn default() -> Self {
        Self {
            max_writes: DEFAULT_OUTBOX_MAX_WRITES,
            max_bytes: DEFAULT_OUTBOX_MAX_BYTES,
            observer: None,
        }
    }
}

impl std::fmt::Debug for OutboxSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxSettings")
            .field("max_writes", &self.max_writes)
            .field("max_bytes", &self.max_bytes)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl OutboxSettings {
    /// Tells the observer; a panic in it is caught and logged, never propagated.
    pub fn tell_delivered(&self, d: &Delivered) {
        if let Some(o) = &self.observer
            // the observer only reads; nothing of ours is left half-updated by a panic
            && catch_unwind(AssertUnwindSafe(|| o.on_delivered(d))).is_err()
        {
            tracing::warn!("the outbox observer panicked; ignored");
        }
    }

    pub fn tell_rejected(&self, r: &WriteRejection) {
        if let Some(o) = &self.observer
            && catch_unwind(AssertUnwindSafe(|| o.on_rejected(r))).is_err()
        {
            tracing::warn!("the outbox observer panicked; ignored");
        }
    }
}

#[cfg(test)]
mod tests;
