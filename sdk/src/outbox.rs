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
//!                   (flush stops;        an owner not followable yet, the session ended
//!                    order is kept)      (then only take_undelivered() / sign_out() hand it back)
//! ```
//!
//! The outcome classes are decided in one place, the `match` of `verdict`.
//!
//! The blob is JSON, `{"schema":1,"owner":{"contractor":…,"subject":…},"next_id":…,"entries":[…]}`
//! with bodies in base64; a blob of another schema is refused with [`Error::Store`], never
//! dropped.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use serde::{Deserialize, Serialize};

use protocol::time::UnixSeconds;
use protocol::{ContractorId, ErrorCode, SubjectId};

use crate::Error;
use crate::request::Request;
use crate::session::Session;
use crate::transport::Response;

/// Schema version of the outbox blob. Bump it when [`QueuedWrite`] or the blob change shape.
pub const OUTBOX_SCHEMA: u32 = 1;
/// Most writes the outbox holds by default.
pub const DEFAULT_OUTBOX_MAX_WRITES: usize = 100;
/// Most body bytes (all writes together) the outbox holds by default.
pub const DEFAULT_OUTBOX_MAX_BYTES: usize = 1024 * 1024;

/// The methods that may be queued (writes).
const WRITE_METHODS: [Method; 4] = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

/// Why the outbox refuses a user's write or holds its writes back.
pub(crate) const OTHER_OWNER: &str =
    "the outbox holds writes of another user: take them with take_undelivered() first";

/// The outbox's share of the client (its methods are in `client/outbox.rs`).
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

/// A write waiting in the outbox (or handed back by [`Client::take_undelivered`](crate::Client::take_undelivered)).
/// `Debug` shows no query or header value, no body and no key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedWrite {
    /// Increasing in the order the writes were queued.
    pub id: u64,
    #[serde(with = "method_name")]
    pub method: Method,
    pub path: String,
    /// Query parameters, unencoded, in order.
    pub query: Vec<(String, String)>,
    /// The caller's extra headers, in order.
    pub headers: Vec<(String, String)>,
    #[serde(with = "base64_body")]
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    /// Sent on every attempt of this write.
    pub idempotency_key: String,
    pub enqueued_at: UnixSeconds,
}

impl std::fmt::Debug for QueuedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedWrite")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query.len())
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("enqueued_at", &self.enqueued_at)
            .finish_non_exhaustive()
    }
}

impl QueuedWrite {
    /// The request this write sends (with its idempotency key).
    pub(crate) fn request(&self) -> Request {
        Request {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
            body: self.body.as_ref().map(|b| {
                let ct = self.content_type.as_deref().unwrap_or(crate::request::JSON);
                (Bytes::from(b.clone()), ct.to_owned())
            }),
            idempotency_key: Some(self.idempotency_key.clone()),
        }
    }

    fn body_len(&self) -> usize {
        self.body.as_ref().map_or(0, Vec::len)
    }
}

/// A write the cell accepted.
#[derive(Debug)]
pub struct Delivered {
    pub write: QueuedWrite,
    /// The cell's answer (status below 400).
    pub response: Response,
}

/// Why a write was refused for good.
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// A Cellbind error answer, or [`Error::InvalidInput`] when the write no longer passes the
    /// SDK's checks (nothing was sent).
    Error(Error),
    /// The app's own answer of 400 or more, without a Cellbind error body.
    Answer(Response),
}

/// Longest body text of an app's refusal kept in [`Refusal::detail`].
const MAX_DETAIL_CHARS: usize = 1024;

impl Refusal {
    /// Human text: the error, or the start of the app's answer.
    pub fn detail(&self) -> String {
        match self {
            Refusal::Error(e) => e.to_string(),
            Refusal::Answer(r) => String::from_utf8_lossy(&r.body)
                .chars()
                .take(MAX_DETAIL_CHARS)
                .collect(),
        }
    }
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

/// The user an outbox belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Owner {
    pub contractor: ContractorId,
    pub subject: SubjectId,
}

impl Owner {
    pub fn of(s: &Session) -> Self {
        Self {
            contractor: s.info.contractor_id.clone(),
            subject: s.info.subject.clone(),
        }
    }
}

/// The persisted outbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outbox {
    schema: u32,
    pub owner: Option<Owner>,
    /// The id of the next write (ids never repeat, also after the outbox emptied).
    next_id: u64,
    pub entries: Vec<QueuedWrite>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            schema: OUTBOX_SCHEMA,
            owner: None,
            next_id: 1,
            entries: vec![],
        }
    }
}

impl Outbox {
    /// Whether the writes (if any) may be sent under `session`.
    pub fn belongs_to(&self, session: &Session) -> bool {
        self.owner.as_ref() == Some(&Owner::of(session))
    }

    /// Queues `request` (already checked, with its key) for `owner`, within `limits`.
    pub fn push(
        &mut self,
        owner: Owner,
        request: Request,
        idempotency_key: String,
        now: UnixSeconds,
        limits: &OutboxSettings,
    ) -> Result<QueuedWrite, Error> {
        if !self.entries.is_empty() && self.owner.as_ref() != Some(&owner) {
            return Err(Error::InvalidInput(OTHER_OWNER.into()));
        }
        let (body, content_type) = match request.body {
            Some((b, ct)) => (Some(b.to_vec()), Some(ct)),
            None => (None, None),
        };
        let held: usize = self.entries.iter().map(QueuedWrite::body_len).sum();
        let adding = body.as_ref().map_or(0, Vec::len);
        if self.entries.len() >= limits.max_writes || held.saturating_add(adding) > limits.max_bytes
        {
            return Err(Error::OutboxFull {
                capacity: limits.max_writes,
                capacity_bytes: limits.max_bytes,
            });
        }
        let write = QueuedWrite {
            id: self.next_id,
            method: request.method,
            path: request.path,
            query: request.query,
            headers: request.headers,
            body,
            content_type,
            idempotency_key,
            enqueued_at: now,
        };
        self.next_id = self.next_id.saturating_add(1);
        self.owner = Some(owner);
        self.entries.push(write.clone());
        Ok(write)
    }

    /// Removes the write `id`; whether it was there.
    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|w| w.id != id);
        self.entries.len() != before
    }
}

/// Whether `method` may be queued.
pub(crate) fn is_write(method: &Method) -> bool {
    WRITE_METHODS.contains(method)
}

/// Encodes the outbox for the store.
pub(crate) fn encode(outbox: &Outbox) -> Result<String, Error> {
    serde_json::to_string(outbox)
        .map_err(|e| Error::Store(format!("cannot encode the outbox: {e}")))
}

/// Decodes the outbox blob, refusing unknown schemas (never dropping what it cannot read).
pub(crate) fn decode(blob: &str) -> Result<Outbox, Error> {
    #[derive(Deserialize)]
    struct Version {
        schema: u32,
    }
    let unreadable =
        |e: serde_json::Error| Error::Store(format!("stored outbox is not readable: {e}"));
    let v: Version = serde_json::from_str(blob).map_err(unreadable)?;
    if v.schema != OUTBOX_SCHEMA {
        return Err(Error::Store(format!(
            "stored outbox has schema {}, this SDK reads {OUTBOX_SCHEMA}",
            v.schema
        )));
    }
    serde_json::from_str(blob).map_err(unreadable)
}

/// What happens to a write after one attempt to deliver it.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Remove it; next write.
    Delivered(Response),
    /// Remove it, report it; next write.
    Rejected {
        status: u16,
        code: Option<String>,
        refusal: Refusal,
    },
    /// Keep it (and every write after it); stop the flush.
    Kept { why: Error, session_ended: bool },
}

/// The one table of outcome classes (the diagram in the module doc).
pub(crate) fn verdict(result: Result<Response, Error>) -> Verdict {
    let rejected = |status, code: Option<&str>, e| Verdict::Rejected {
        status,
        code: code.map(str::to_owned),
        refusal: Refusal::Error(e),
    };
    match result {
        Ok(r) if r.status < 400 => Verdict::Delivered(r),
        // an app's own 429 is "later", like the edge's
        Ok(r) if r.status == 429 => Verdict::Kept {
            why: Error::RateLimited { retry_after: None },
            session_ended: false,
        },
        Ok(r) => Verdict::Rejected {
            status: r.status,
            code: None,
            refusal: Refusal::Answer(r),
        },
        // the session is gone: the writes wait for their user
        Err(
            e @ (Error::SessionExpired
            | Error::SessionRevoked
            | Error::SessionInvalid
            | Error::SignInRequired
            | Error::NotSignedIn),
        ) => Verdict::Kept {
            why: e,
            session_ended: true,
        },
        // a refusal for good: a 4xx that waiting does not change
        Err(Error::Rejected {
            code,
            status,
            message,
        }) if (400..500).contains(&status) => rejected(
            status,
            Some(code.as_str()),
            Error::Rejected {
                code,
                status,
                message,
            },
        ),
        Err(Error::UnknownErrorCode {
            code,
            status,
            message,
        }) if (400..500).contains(&status) && status != 429 => {
            let c = code.clone();
            rejected(
                status,
                Some(&c),
                Error::UnknownErrorCode {
                    code,
                    status,
                    message,
                },
            )
        }
        Err(e @ Error::UnknownContractor) => rejected(
            ErrorCode::UnknownContractor.status().as_u16(),
            Some(ErrorCode::UnknownContractor.as_str()),
            e,
        ),
        // the write no longer passes the SDK's checks: it can never be sent
        Err(e @ Error::InvalidInput(_)) => rejected(0, None, e),
        // later: no answer, the cell or its app down (5xx), handoff, rate limits, a stale
        // ownership view, a certificate without its pin, an owner that cannot be followed
        // yet, local trouble (store, state) — and anything this table does not know
        Err(e) => Verdict::Kept {
            why: e,
            session_ended: false,
        },
    }
}

/// `http::Method` as its name.
mod method_name {
    use http::Method;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Method, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
        let name = String::deserialize(d)?;
        Method::from_bytes(name.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// A body as standard base64 (`null` when there is none).
mod base64_body {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_str(&STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| STANDARD.decode(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests;
