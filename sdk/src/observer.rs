//! An optional [`RequestObserver`] sees every call the client makes to a cell, once, with its
//! final outcome after the SDK's retries, so an app can graph failures before a cell (no
//! connection, TLS, timeouts before sending) apart from failures inside it (error answers).
//!
//! One event per call to a cell, not per attempt: `attempts` says how many were made. An app
//! request that meets `WRONG_CELL` is two events (the old cell's refusal, then the owner's
//! answer) with the session's transfer and rebind between them; the SDK's own calls (sign-in,
//! renewal, transfer, rebind, placement map, sign-out) are events too, told apart by path.
//! A request refused before sending (bad input, no session) is no event.
//!
//! An event carries no token, no header, no body and no query: the path alone, as the app gave
//! it (an id in a path is the app's choice). The observer runs on the request's task before
//! the caller gets the result: keep it quick. A panicking observer is caught and ignored; it
//! never fails a request.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use protocol::CellId;

use crate::error::NetworkErrorKind;

/// Told about every call to a cell (see the module doc).
pub trait RequestObserver: Send + Sync + 'static {
    fn on_request(&self, event: &RequestEvent);
}

/// Any `Fn(&RequestEvent)` is an observer.
impl<F> RequestObserver for F
where
    F: Fn(&RequestEvent) + Send + Sync + 'static,
{
    fn on_request(&self, event: &RequestEvent) {
        self(event)
    }
}

/// One call to a cell, after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestEvent {
    /// The cell the call went to (as the signed map names it).
    pub cell_id: CellId,
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    pub outcome: RequestOutcome,
    /// The HTTP status of the last attempt's answer, when one came.
    pub status: Option<u16>,
    /// Whether any attempt may have been received by the cell (see
    /// [`crate::Error::Network`]); always true when an answer came.
    pub reached_cell: bool,
    /// Attempts made (1 when the first one settled it).
    pub attempts: u32,
    /// From the first attempt to the final outcome, retry waits included.
    pub duration: Duration,
}

/// How a call to a cell ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestOutcome {
    /// The cell answered with a status below 400.
    Answered,
    /// The cell answered with a status of 400 or more; `code` is the Cellbind error code of
    /// the body when it had one (also a code this SDK does not know), `None` for any other
    /// body (an app's own 404, a proxy's 502).
    Refused { code: Option<String> },
    /// No complete answer.
    Network { kind: NetworkErrorKind },
}

impl RequestOutcome {
    /// A stable name (for metrics labels): `answered`, `refused` or the network kind.
    pub fn as_str(&self) -> &'static str {
        match self {
            RequestOutcome::Answered => "answered",
            RequestOutcome::Refused { .. } => "refused",
            RequestOutcome::Network { kind } => kind.as_str(),
        }
    }
}

/// The client's observer, if any.
#[derive(Clone, Default)]
pub(crate) struct Observer(Option<Arc<dyn RequestObserver>>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(set)"
        } else {
            "Observer(none)"
        })
    }
}

impl Observer {
    pub fn new(o: Option<Arc<dyn RequestObserver>>) -> Self {
        Self(o)
    }

    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Tells the observer; a panic in it is caught and logged, never propagated.
    pub fn tell(&self, event: &RequestEvent) {
        let Some(o) = &self.0 else { return };
        // The observer only reads the event; nothing of ours is left half-updated by a panic.
        if catch_unwind(AssertUnwindSafe(|| o.on_request(event))).is_err() {
            tracing::warn!("the request observer panicked; ignored");
        }
    }
}
