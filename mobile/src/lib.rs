//! uniffi bindings of the Cellbind SDK for Kotlin, Swift and Python (module `cellbind`).
//!
//! This crate only converts and forwards: every rule lives in `cellbind-sdk`. Errors cross the
//! boundary through exactly one table, `impl From<sdk::Error> for CellbindError`.

use std::sync::Arc;

use protocol::{ContractorId, ErrorCode, Login, Password};

uniffi::setup_scaffolding!("cellbind");

/// Which blob the SDK stores: each slot is saved, loaded and cleared on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum StoreSlot {
    /// The session (its token included).
    Session,
    /// The offline outbox: writes waiting for delivery.
    Outbox,
    /// The device tokens the cells gave this device (they outlive a sign-out: a device that
    /// signed in before is not held by an account's lockout ceiling).
    Device,
}

/// Where the app keeps the SDK's blobs, one per slot (Keychain, Keystore-backed storage, a
/// file…). Each blob is opaque JSON with a schema version; keep it as it is. `save` must have
/// made the blob durable when it returns (an outbox write counts as queued from then on).
#[uniffi::export(foreign)]
pub trait SessionStore: Send + Sync {
    /// The blob saved in `slot`, or nothing.
    fn load(&self, slot: StoreSlot) -> Result<Option<String>, CellbindError>;
    /// Replaces the blob in `slot`.
    fn save(&self, slot: StoreSlot, blob: String) -> Result<(), CellbindError>;
    /// Removes the blob in `slot`.
    fn clear(&self, slot: StoreSlot) -> Result<(), CellbindError>;
}

/// Told what every outbox flush (also the background ones started by `restore()` and after a
/// successful request) delivered or had refused for good, in order, once that flush has
/// finished. An error thrown here is ignored.
#[uniffi::export(foreign)]
pub trait OutboxObserver: Send + Sync {
    fn on_delivered(&self, write: QueuedWrite, status: u16) -> Result<(), CellbindError>;
    fn on_rejected(&self, rejection: WriteRejection) -> Result<(), CellbindError>;
}

/// Told about every call the client makes to a cell, once, with its final outcome after the
/// SDK's retries (so an app can graph failures before a cell apart from failures inside it).
/// An error thrown here is ignored: it never fails a request. Keep it quick: it runs before
/// the request's result is delivered.
#[uniffi::export(foreign)]
pub trait RequestObserver: Send + Sync {
    fn on_request(&self, event: RequestEvent) -> Result<(), CellbindError>;
}

/// How to build a client.
#[derive(uniffi::Record)]
pub struct CellbindConfig {
    /// The signed placement map shipped with the app (JSON bytes).
    pub map: Vec<u8>,
    /// The control plane's map key (base64url Ed25519), pinned in the app.
    pub map_public_key: String,
    /// CA certificate(s) to trust instead of the built-in roots (dev fleets), PEM.
    pub extra_ca_pem: Option<String>,
    pub store: Arc<dyn SessionStore>,
    /// Optional: told about every call to a cell.
    #[uniffi(default)]
    pub observer: Option<Arc<dyn RequestObserver>>,
    /// Optional: told what outbox flushes delivered or had refused.
    #[uniffi(default)]
    pub outbox_observer: Option<Arc<dyn OutboxObserver>>,
    /// Time allowed to connect (default 5 s).
    #[uniffi(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Time allowed for one whole request attempt (default 20 s).
    #[uniffi(default)]
    pub request_timeout_ms: Option<u64>,
}

impl std::fmt::Debug for CellbindConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellbindConfig")
            .field("map_bytes", &self.map.len())
            .field("map_public_key", &self.map_public_key)
            .field("extra_ca_pem", &self.extra_ca_pem.is_some())
            .field("observer", &self.observer.is_some())
            .field("outbox_observer", &self.outbox_observer.is_some())
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// A query parameter, unencoded (the SDK percent-encodes it).
#[derive(uniffi::Record)]
pub struct QueryParam {
    pub name: String,
    pub value: String,
}

/// An extra request header. The SDK's own (`Authorization`, `Cookie`, `Host`,
/// `Idempotency-Key`, `Content-Type`, `Content-Length`, `User-Agent`, `X-Cellbind-*`) and
/// hop-by-hop headers are refused with `InvalidInput`.
#[derive(uniffi::Record)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// Names only: a value may be secret.
impl std::fmt::Debug for QueryParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryParam")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Names only: a value may be secret.
impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Header")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A request to the session's cell.
#[derive(uniffi::Record)]
pub struct Request {
    /// e.g. "GET", "POST".
    pub method: String,
    /// e.g. "/api/jobs/j-1/complete": no query (use `query`), no `.`/`..` segments.
    pub path: String,
    #[uniffi(default)]
    pub query: Vec<QueryParam>,
    #[uniffi(default)]
    pub headers: Vec<Header>,
    #[uniffi(default)]
    pub body: Option<Vec<u8>>,
    /// The body's content type; `application/json` when there is a body and this is absent.
    #[uniffi(default)]
    pub content_type: Option<String>,
    /// The caller's idempotency key (1–128 of `A-Z a-z 0-9 - _ . : ~`), sent as it is on every
    /// attempt. Without one, every write gets a random key for this call only: give your own to
    /// retry a write safely after a `Network` error with `reached_cell` true.
    #[uniffi(default)]
    pub idempotency_key: Option<String>,
}

/// Never shows query or header values, the body or the key (any may be secret).
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query.len())
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("idempotency_key", &self.idempotency_key.is_some())
            .finish()
    }
}

/// Why a request got no complete answer. `Connect`, `Tls` and `TimeoutBeforeSend` mean the
/// cell never saw the attempt; `TimeoutAfterSend` and `Interrupted` mean it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NetworkErrorKind {
    /// DNS failure, connection refused, host or network unreachable.
    Connect,
    /// The TLS handshake failed (certificate not trusted, protocol error).
    Tls,
    /// No connection within the connect timeout.
    TimeoutBeforeSend,
    /// Sent (or maybe sent), no answer within the request timeout.
    TimeoutAfterSend,
    /// The connection broke after sending or while reading the answer.
    Interrupted,
}

/// How a call to a cell ended.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum RequestOutcome {
    /// An answer with a status below 400.
    Answered,
    /// An answer with a status of 400 or more; `code` is its Cellbind error code, if any.
    Refused { code: Option<String> },
    /// No complete answer.
    Network { kind: NetworkErrorKind },
}

/// One call to a cell, after the SDK's retries. No token, header, body or query.
#[derive(Debug, Clone, uniffi::Record)]
pub struct RequestEvent {
    pub cell_id: String,
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub outcome: RequestOutcome,
    /// The last attempt's HTTP status, when an answer came.
    pub status: Option<u16>,
    /// Whether any attempt may have been received by the cell.
    pub reached_cell: bool,
    pub attempts: u32,
    /// From the first attempt to the outcome, retry waits included.
    pub duration_ms: u64,
}

/// A write waiting in the offline outbox (or handed back by `take_undelivered()` / `sign_out()`).
#[derive(uniffi::Record)]
pub struct QueuedWrite {
    /// Increasing in the order the writes were queued.
    pub id: u64,
    pub method: String,
    pub path: String,
    pub query: Vec<QueryParam>,
    pub headers: Vec<Header>,
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    /// Sent on every attempt of this write.
    pub idempotency_key: String,
    /// Unix seconds.
    pub enqueued_at: u64,
}

/// Never shows query or header values, the body or the key (any may be secret).
impl std::fmt::Debug for QueuedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueuedWrite#{} {} {}", self.id, self.method, self.path)
    }
}

/// A write refused for good (removed from the outbox).
#[derive(Debug, uniffi::Record)]
pub struct WriteRejection {
    pub write: QueuedWrite,
    /// The refusal's HTTP status; 0 when the SDK refused it before sending.
    pub status: u16,
    /// The Cellbind error code; empty when the app answered without one.
    pub code: String,
    pub detail: String,
}

/// What one flush did.
#[derive(Debug, uniffi::Record)]
pub struct FlushReport {
    /// Delivered and removed, in order.
    pub delivered: Vec<QueuedWrite>,
    /// Refused for good and removed, in order.
    pub rejected: Vec<WriteRejection>,
    /// Writes still queued.
    pub remaining: u64,
    /// Why the flush stopped with writes left (they are kept, in order).
    pub stopped: Option<String>,
    /// The writes' session ended (or another user is signed in): they wait for
    /// `take_undelivered()`.
    pub session_ended: bool,
}

/// What a sign-out did.
#[derive(Debug, uniffi::Record)]
pub struct SignOutResult {
    /// Whether the cell confirmed the revocation.
    pub revoked: bool,
    /// The writes the outbox still held (now removed from it): decide what to do with them.
    pub undelivered: Vec<QueuedWrite>,
}

/// An answer of the session's cell.
#[derive(Debug, uniffi::Record)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What the app may know about its session (never the token).
#[derive(Debug, uniffi::Record)]
pub struct SessionInfo {
    pub session_id: String,
    pub contractor_id: String,
    pub subject: String,
    pub cell_id: String,
    pub endpoint: String,
    pub generation: u64,
    pub expires_at: u64,
}

/// Every error: one variant per code of the cell API, then the client-side failures.
#[derive(Debug, thiserror::Error, uniffi::Error)]
#[non_exhaustive]
pub enum CellbindError {
    #[error("INVALID_REQUEST: {detail}")]
    InvalidRequest { detail: String },
    #[error("INVALID_CREDENTIALS: {detail}")]
    InvalidCredentials { detail: String },
    #[error("SESSION_MISSING: {detail}")]
    SessionMissing { detail: String },
    #[error("SESSION_INVALID: {detail}")]
    SessionInvalid { detail: String },
    #[error("SESSION_EXPIRED: {detail}")]
    SessionExpired { detail: String },
    #[error("SESSION_REVOKED: {detail}")]
    SessionRevoked { detail: String },
    #[error("FORBIDDEN: {detail}")]
    Forbidden { detail: String },
    #[error("UNKNOWN_CONTRACTOR: {detail}")]
    UnknownContractor { detail: String },
    #[error("WRONG_CELL: {detail}")]
    WrongCell {
        owner_cell: Option<String>,
        owner_endpoint: Option<String>,
        detail: String,
    },
    #[error("HANDOFF_IN_PROGRESS: {detail}")]
    HandoffInProgress {
        retry_after_s: Option<u64>,
        detail: String,
    },
    #[error("PAYLOAD_TOO_LARGE: {detail}")]
    PayloadTooLarge { detail: String },
    #[error("RATE_LIMITED: {detail}")]
    RateLimited {
        retry_after_s: Option<u64>,
        detail: String,
    },
    #[error("UPSTREAM_UNAVAILABLE: {detail}")]
    UpstreamUnavailable { status: u16, detail: String },
    #[error("CELL_STATE_STALE: {detail}")]
    CellStateStale { detail: String },
    #[error("NOT_READY: {detail}")]
    NotReady { detail: String },
    #[error("NOT_FOUND: {detail}")]
    NotFound { detail: String },
    #[error("INTERNAL: {detail}")]
    Internal { detail: String },
    /// No session on this device: sign in.
    #[error("not signed in: {detail}")]
    NotSignedIn { detail: String },
    /// Sign-in was redirected once and the second cell disagreed too.
    #[error("cells disagree: {detail}")]
    CellsDisagree { detail: String },
    /// Sign-in was redirected to a cell the signed map does not back.
    #[error("untrusted redirect: {detail}")]
    UntrustedRedirect { detail: String },
    /// No complete answer from the cell. `reached_cell` false: the request certainly had no
    /// effect; true: a write may have been applied (retry it with the same idempotency key).
    #[error("network ({kind:?}): {detail}")]
    Network {
        kind: NetworkErrorKind,
        reached_cell: bool,
        detail: String,
    },
    /// An error code this library does not know (a newer server): the one fallback.
    #[error("{code}: {detail}")]
    UnknownErrorCode {
        code: String,
        status: u16,
        detail: String,
    },
    /// The cell's certificate matches none of its pins in the signed map (nothing was sent).
    #[error("pin mismatch: {detail}")]
    PinMismatch { cell: String, detail: String },
    /// The offline outbox is full: nothing was queued.
    #[error("outbox full: {detail}")]
    OutboxFull {
        capacity: u64,
        capacity_bytes: u64,
        detail: String,
    },
    #[error("invalid response: {detail}")]
    InvalidResponse { detail: String },
    #[error("placement map refused: {detail}")]
    MapRefused { detail: String },
    #[error("session store: {detail}")]
    Store { detail: String },
    #[error("invalid configuration: {detail}")]
    Config { detail: String },
    #[error("invalid input: {detail}")]
    InvalidInput { detail: String },
    /// The contractor moved and the session could not follow it: sign in again.
    #[error("SIGN_IN_REQUIRED: {detail}")]
    SignInRequired { detail: String },
}

/// The one mapping table from SDK errors to the foreign error enum.
impl From<sdk::Error> for CellbindError {
    fn from(e: sdk::Error) -> Self {
        use sdk::Error as E;
        let detail = e.to_string();
        let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs());
        match e {
            E::NotSignedIn => CellbindError::NotSignedIn { detail },
            E::InvalidCredentials => CellbindError::InvalidCredentials { detail },
            E::UnknownContractor => CellbindError::UnknownContractor { detail },
            E::SessionExpired => CellbindError::SessionExpired { detail },
            E::SessionRevoked => CellbindError::SessionRevoked { detail },
            E::SessionInvalid => CellbindError::SessionInvalid { detail },
            E::WrongCell {
                owner_cell,
                owner_endpoint,
            } => CellbindError::WrongCell {
                owner_cell: owner_cell.map(|c| c.to_string()),
                owner_endpoint,
                detail,
            },
            E::CellsDisagree { .. } => CellbindError::CellsDisagree { detail },
            E::UntrustedRedirect { .. } => CellbindError::UntrustedRedirect { detail },
            E::HandoffInProgress { retry_after } => CellbindError::HandoffInProgress {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::RateLimited { retry_after } => CellbindError::RateLimited {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::CellStateStale => CellbindError::CellStateStale { detail },
            E::Upstream { status, .. } => CellbindError::UpstreamUnavailable { status, detail },
            E::Rejected { code, .. } => match code {
                ErrorCode::InvalidRequest => CellbindError::InvalidRequest { detail },
                ErrorCode::SessionMissing => CellbindError::SessionMissing { detail },
                ErrorCode::Forbidden => CellbindError::Forbidden { detail },
                ErrorCode::PayloadTooLarge => CellbindError::PayloadTooLarge { detail },
                ErrorCode::NotReady => CellbindError::NotReady { detail },
                ErrorCode::NotFound => CellbindError::NotFound { detail },
                ErrorCode::Internal => CellbindError::Internal { detail },
                // a code the protocol gained after this table was written
                other => CellbindError::UnknownErrorCode {
                    code: other.as_str().to_owned(),
                    status: other.status().as_u16(),
                    detail,
                },
            },
            E::Network {
                kind, reached_cell, ..
            } => CellbindError::Network {
                kind: kind.into(),
                reached_cell,
                detail,
            },
            E::UnknownErrorCode { code, status, .. } => CellbindError::UnknownErrorCode {
                code,
                status,
                detail,
            },
            E::PinMismatch { cell } => CellbindError::PinMismatch {
                cell: cell.to_string(),
                detail,
            },
            E::OutboxFull {
                capacity,
                capacity_bytes,
            } => CellbindError::OutboxFull {
                capacity: capacity as u64,
                capacity_bytes: capacity_bytes as u64,
                detail,
            },
            E::InvalidResponse(_) => CellbindError::InvalidResponse { detail },
            E::MapRefused(_) => CellbindError::MapRefused { detail },
            E::Store(_) => CellbindError::Store { detail },
            E::Config(_) => CellbindError::Config { detail },
            E::InvalidInput(_) => CellbindError::InvalidInput { detail },
            E::SignInRequired => CellbindError::SignInRequired { detail },
            _ => CellbindError::Internal { detail },
        }
    }
}

/// A foreign store method failed in a way its signature does not declare.
impl From<uniffi::UnexpectedUniFFICallbackError> for CellbindError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        CellbindError::Store { detail: e.reason }
    }
}

impl From<sdk::NetworkErrorKind> for NetworkErrorKind {
    fn from(k: sdk::NetworkErrorKind) -> Self {
        use sdk::NetworkErrorKind as K;
        match k {
            K::Connect => NetworkErrorKind::Connect,
            K::Tls => NetworkErrorKind::Tls,
            K::TimeoutBeforeSend => NetworkErrorKind::TimeoutBeforeSend,
            K::TimeoutAfterSend => NetworkErrorKind::TimeoutAfterSend,
            K::Interrupted => NetworkErrorKind::Interrupted,
            // a kind the SDK gained after this table was written: the conservative "may have
            // been sent"
            _ => NetworkErrorKind::Interrupted,
        }
    }
}

fn input<T>(r: Result<T, protocol::IdError>) -> Result<T, CellbindError> {
    r.map_err(|e| sdk::Error::from(e).into())
}

/// Adapts the foreign store to the SDK's store trait.
struct ForeignStore(Arc<dyn SessionStore>);

impl std::fmt::Debug for ForeignStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForeignStore")
    }
}

fn slot(s: sdk::StoreSlot) -> Result<StoreSlot, sdk::StoreError> {
    match s {
        sdk::StoreSlot::Session => Ok(StoreSlot::Session),
        sdk::StoreSlot::Outbox => Ok(StoreSlot::Outbox),
        sdk::StoreSlot::Device => Ok(StoreSlot::Device),
        // a slot the SDK gained after this table was written: never into another slot's blob
        other => Err(sdk::StoreError(format!(
            "{other:?} has no foreign store slot in this library"
        ))),
    }
}

impl sdk::SessionStore for ForeignStore {
    fn load(&self, s: sdk::StoreSlot) -> Result<Option<String>, sdk::StoreError> {
        self.0
            .load(slot(s)?)
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn save(&self, s: sdk::StoreSlot, blob: &str) -> Result<(), sdk::StoreError> {
        self.0
            .save(slot(s)?, blob.to_owned())
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn clear(&self, s: sdk::StoreSlot) -> Result<(), sdk::StoreError> {
        self.0
            .clear(slot(s)?)
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
}

/// Adapts the foreign outbox observer to the SDK's.
struct ForeignOutboxObserver(Arc<dyn OutboxObserver>);

impl sdk::OutboxObserver for ForeignOutboxObserver {
    fn on_delivered(&self, d: &sdk::Delivered) {
        // An observer's failure never fails the flush.
        let _ = self.0.on_delivered(queued(&d.write), d.response.status);
    }
    fn on_rejected(&self, r: &sdk::WriteRejection) {
        let _ = self.0.on_rejected(rejection(r));
    }
}

fn queued(w: &sdk::QueuedWrite) -> QueuedWrite {
    QueuedWrite {
        id: w.id,
        method: w.method.as_str().to_owned(),
        path: w.path.clone(),
        query: w
            .query
            .iter()
            .map(|(name, value)| QueryParam {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        headers: w
            .headers
            .iter()
            .map(|(name, value)| Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        body: w.body.clone(),
        content_type: w.content_type.clone(),
        idempotency_key: w.idempotency_key.clone(),
        enqueued_at: w.enqueued_at,
    }
}

fn queued_all(ws: &[sdk::QueuedWrite]) -> Vec<QueuedWrite> {
    ws.iter().map(queued).collect()
}

fn rejection(r: &sdk::WriteRejection) -> WriteRejection {
    WriteRejection {
        write: queued(&r.write),
        status: r.status,
        code: r.code.clone().unwrap_or_default(),
        detail: r.refusal.detail(),
    }
}

fn report(r: sdk::FlushReport) -> FlushReport {
    FlushReport {
        delivered: r.delivered.iter().map(|d| queued(&d.write)).collect(),
        rejected: r.rejected.iter().map(rejection).collect(),
        remaining: r.remaining as u64,
        stopped: r.stopped.map(|e| CellbindError::from(e).to_string()),
        session_ended: r.session_ended,
    }
}

/// Adapts the foreign observer to the SDK's observer trait.
struct ForeignObserver(Arc<dyn RequestObserver>);

impl sdk::RequestObserver for ForeignObserver {
    fn on_request(&self, e: &sdk::RequestEvent) {
        // An observer's failure never fails the request.
        let _ = self.0.on_request(event(e));
    }
}

fn event(e: &sdk::RequestEvent) -> RequestEvent {
    RequestEvent {
        cell_id: e.cell_id.to_string(),
        method: e.method.as_str().to_owned(),
        path: e.path.clone(),
        outcome: match &e.outcome {
            sdk::RequestOutcome::Answered => RequestOutcome::Answered,
            sdk::RequestOutcome::Network { kind } => RequestOutcome::Network {
                kind: (*kind).into(),
            },
            sdk::RequestOutcome::Refused { code } => RequestOutcome::Refused { code: code.clone() },
            // an outcome the SDK gained after this table was written
            _ => RequestOutcome::Refused { code: None },
        },
        status: e.status,
        reached_cell: e.reached_cell,
        attempts: e.attempts,
        duration_ms: u64::try_from(e.duration.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The SDK's request for a foreign one (the SDK checks it when it is sent).
fn request(r: Request) -> Result<sdk::Request, CellbindError> {
    let mut out = sdk::Request::new(http_method(&r.method)?, r.path);
    for q in r.query {
        out = out.query(q.name, q.value);
    }
    for h in r.headers {
        out = out.header(h.name, h.value);
    }
    out = match (r.body, r.content_type) {
        (Some(b), Some(ct)) => out.body(b, ct),
        (Some(b), None) => out.json(b),
        (None, None) => out,
        (None, Some(_)) => {
            return Err(CellbindError::InvalidInput {
                detail: "a content type without a body".into(),
            });
        }
    };
    if let Some(k) = r.idempotency_key {
        out = out.idempotency_key(k);
    }
    Ok(out)
}

fn info(s: sdk::SessionInfo) -> SessionInfo {
    SessionInfo {
        session_id: s.session_id.to_string(),
        contractor_id: s.contractor_id.to_string(),
        subject: s.subject.to_string(),
        cell_id: s.cell_id.to_string(),
        endpoint: s.endpoint.into(),
        generation: s.generation.get(),
        expires_at: s.expires_at,
    }
}

/// The Cellbind client.
#[derive(Debug, uniffi::Object)]
pub struct CellbindClient {
    client: sdk::Client,
}

#[uniffi::export(async_runtime = "tokio")]
impl CellbindClient {
    /// Builds a client. No network, and no session yet: call `restore()` to pick up a saved one.
    #[uniffi::constructor]
    pub fn new(config: CellbindConfig) -> Result<Arc<Self>, CellbindError> {
        let key = protocol::map_key::parse(&config.map_public_key).map_err(|e| {
            CellbindError::Config {
                detail: format!("map public key: {e}"),
            }
        })?;
        let mut b =
            sdk::Client::builder(config.map, key).store(Arc::new(ForeignStore(config.store)));
        if let Some(pem) = config.extra_ca_pem {
            b = b.extra_ca_pem(pem.into_bytes());
        }
        if let Some(o) = config.observer {
            b = b.observer(Arc::new(ForeignObserver(o)));
        }
        if let Some(o) = config.outbox_observer {
            b = b.outbox_observer(Arc::new(ForeignOutboxObserver(o)));
        }
        if let Some(ms) = config.connect_timeout_ms {
            b = b.connect_timeout(std::time::Duration::from_millis(ms));
        }
        if let Some(ms) = config.request_timeout_ms {
            b = b.request_timeout(std::time::Duration::from_millis(ms));
        }
        Ok(Arc::new(Self { client: b.build()? }))
    }

    /// Loads the saved session from the store. No network inside the call; with a session,
    /// a flush of the outbox starts in the background (results to the outbox observer).
    pub async fn restore(&self) -> Result<Option<SessionInfo>, CellbindError> {
        Ok(self.client.restore()?.map(info))
    }

    /// Queues a write (POST, PUT, PATCH, DELETE) for a later flush and saves it to the store
    /// before returning. No network. Full: `OutboxFull`, nothing queued.
    pub fn enqueue(&self, request: Request) -> Result<QueuedWrite, CellbindError> {
        Ok(queued(&self.client.enqueue(self::request(request)?)?))
    }

    /// Delivers the queued writes in order until the outbox is empty or a write has to wait.
    pub async fn flush(&self) -> Result<FlushReport, CellbindError> {
        Ok(report(self.client.flush().await?))
    }

    /// The queued writes, oldest first (nothing removed).
    pub fn outbox(&self) -> Result<Vec<QueuedWrite>, CellbindError> {
        Ok(queued_all(&self.client.outbox()?))
    }

    /// Hands back every queued write and empties the outbox.
    pub fn take_undelivered(&self) -> Result<Vec<QueuedWrite>, CellbindError> {
        Ok(queued_all(&self.client.take_undelivered()?))
    }

    /// Signs in at the contractor's cell and saves the session.
    pub async fn sign_in(
        &self,
        contractor_id: String,
        login: String,
        password: String,
    ) -> Result<SessionInfo, CellbindError> {
        let contractor = input(ContractorId::new(contractor_id))?;
        let login = input(Login::new(login))?;
        let password = input(Password::new(password))?;
        Ok(info(
            self.client.sign_in(&contractor, &login, &password).await?,
        ))
    }

    /// Sends a request to the session's cell (`method` e.g. "GET", `path` e.g.
    /// "/api/routes/today", `body` JSON bytes).
    pub async fn request(
        &self,
        method: String,
        path: String,
        body: Option<Vec<u8>>,
    ) -> Result<Response, CellbindError> {
        let method = http_method(&method)?;
        let r = self.client.request(method, &path, body).await?;
        Ok(Response {
            status: r.status,
            body: r.body.to_vec(),
        })
    }

    /// Sends a request with query parameters, headers, a body of any content type and an
    /// optional idempotency key of the caller's own to the session's cell.
    pub async fn send(&self, request: Request) -> Result<Response, CellbindError> {
        let r = self.client.send(self::request(request)?).await?;
        Ok(Response {
            status: r.status,
            body: r.body.to_vec(),
        })
    }

    /// The current session, if any.
    pub fn session(&self) -> Option<SessionInfo> {
        self.client.session().map(info)
    }

    /// Signs out: the cell revokes the session (when reachable) and the store is cleared.
    /// The writes still queued are handed back (and the outbox emptied), never dropped.
    pub async fn sign_out(&self) -> Result<SignOutResult, CellbindError> {
        let out = self.client.sign_out().await?;
        Ok(SignOutResult {
            revoked: matches!(out.outcome, sdk::SignOut::Revoked),
            undelivered: queued_all(&out.undelivered),
        })
    }

    /// Refreshes the placement map from the session's cell; returns the version in use.
    pub async fn refresh_map(&self) -> Result<u64, CellbindError> {
        Ok(self.client.refresh_map().await?.version)
    }
}

fn http_method(m: &str) -> Result<http::Method, CellbindError> {
    let upper = m.to_ascii_uppercase();
    http::Method::from_bytes(upper.as_bytes()).map_err(|_| CellbindError::InvalidInput {
        detail: format!("{m:?} is not an HTTP method"),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use protocol::CellId;

    use super::*;

    /// Every SDK error lands on its own foreign variant (a swapped row fails here, and in the
    /// Python and Kotlin binding tests).
    #[test]
    fn the_error_table() {
        let cell = || CellId::new("cell-02").unwrap();
        let rejected = |code| sdk::Error::Rejected {
            code,
            status: code.status().as_u16(),
            message: "m".into(),
        };
        let cases: Vec<(sdk::Error, &str)> = vec![
            (sdk::Error::NotSignedIn, "NotSignedIn"),
            (sdk::Error::InvalidCredentials, "InvalidCredentials"),
            (sdk::Error::UnknownContractor, "UnknownContractor"),
            (sdk::Error::SessionExpired, "SessionExpired"),
            (sdk::Error::SessionRevoked, "SessionRevoked"),
            (sdk::Error::SessionInvalid, "SessionInvalid"),
            (
                sdk::Error::WrongCell {
                    owner_cell: Some(cell()),
                    owner_endpoint: Some("https://127.0.0.2:8443".into()),
                },
                "WrongCell",
            ),
            (
                sdk::Error::CellsDisagree {
                    first: cell(),
                    second: cell(),
                    named_owner: None,
                },
                "CellsDisagree",
            ),
            (
                sdk::Error::UntrustedRedirect {
                    owner_cell: None,
                    owner_endpoint: None,
                },
                "UntrustedRedirect",
            ),
            (
                sdk::Error::HandoffInProgress {
                    retry_after: Some(Duration::from_secs(3)),
                },
                "HandoffInProgress",
            ),
            (sdk::Error::RateLimited { retry_after: None }, "RateLimited"),
            (sdk::Error::CellStateStale, "CellStateStale"),
            (
                sdk::Error::Upstream {
                    status: 502,
                    code: None,
                },
                "UpstreamUnavailable",
            ),
            (rejected(ErrorCode::InvalidRequest), "InvalidRequest"),
            (rejected(ErrorCode::SessionMissing), "SessionMissing"),
            (rejected(ErrorCode::Forbidden), "Forbidden"),
            (rejected(ErrorCode::PayloadTooLarge), "PayloadTooLarge"),
            (rejected(ErrorCode::NotReady), "NotReady"),
            (rejected(ErrorCode::NotFound), "NotFound"),
            (rejected(ErrorCode::Internal), "Internal"),
            (
                sdk::Error::Network {
                    kind: sdk::NetworkErrorKind::TimeoutAfterSend,
                    reached_cell: true,
                    detail: "x".into(),
                },
                "Network",
            ),
            (
                sdk::Error::UnknownErrorCode {
                    code: "NEWER_CODE".into(),
                    status: 422,
                    message: "m".into(),
                },
                "UnknownErrorCode",
            ),
            (sdk::Error::InvalidResponse("x".into()), "InvalidResponse"),
            (
                sdk::Error::MapRefused(protocol::map::MapError::BadSignature),
                "MapRefused",
            ),
            (sdk::Error::Store("x".into()), "Store"),
            (sdk::Error::Config("x".into()), "Config"),
            (sdk::Error::InvalidInput("x".into()), "InvalidInput"),
            (sdk::Error::SignInRequired, "SignInRequired"),
        ];
        for (e, want) in cases {
            let shown = format!("{e:?}");
            let got = CellbindError::from(e);
            let name = format!("{got:?}");
            assert!(
                name.starts_with(&format!("{want} ")) || name == want,
                "{shown} mapped to {name}, want {want}"
            );
        }
        match CellbindError::from(sdk::Error::HandoffInProgress {
            retry_after: Some(Duration::from_secs(3)),
        }) {
            CellbindError::HandoffInProgress { retry_after_s, .. } => {
                assert_eq!(retry_after_s, Some(3))
            }
            e => panic!("{e:?}"),
        }
        match CellbindError::from(sdk::Error::Network {
            kind: sdk::NetworkErrorKind::Connect,
            reached_cell: false,
            detail: "refused".into(),
        }) {
            CellbindError::Network {
                kind, reached_cell, ..
            } => assert_eq!((kind, reached_cell), (NetworkErrorKind::Connect, false)),
            e => panic!("{e:?}"),
        }
        match CellbindError::from(sdk::Error::UnknownErrorCode {
            code: "NEWER_CODE".into(),
            status: 422,
            message: "m".into(),
        }) {
            CellbindError::UnknownErrorCode { code, status, .. } => {
                assert_eq!((code.as_str(), status), ("NEWER_CODE", 422))
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn every_network_kind_keeps_its_name() {
        use sdk::NetworkErrorKind as K;
        for (k, want) in [
            (K::Connect, NetworkErrorKind::Connect),
            (K::Tls, NetworkErrorKind::Tls),
            (K::TimeoutBeforeSend, NetworkErrorKind::TimeoutBeforeSend),
            (K::TimeoutAfterSend, NetworkErrorKind::TimeoutAfterSend),
            (K::Interrupted, NetworkErrorKind::Interrupted),
        ] {
            assert_eq!(NetworkErrorKind::from(k), want);
        }
    }

    #[test]
    fn foreign_requests_convert_field_by_field() {
        let r = request(Request {
            method: "post".into(),
            path: "/api/jobs/j-1/complete".into(),
            query: vec![QueryParam {
                name: "a".into(),
                value: "b c".into(),
            }],
            headers: vec![Header {
                name: "X-Request-Id".into(),
                value: "r-1".into(),
            }],
            body: Some(b"x".to_vec()),
            content_type: Some("text/plain".into()),
            idempotency_key: Some("k-1".into()),
        })
        .unwrap();
        assert_eq!(r.method(), http::Method::POST);
        assert_eq!(r.path(), "/api/jobs/j-1/complete");
        let shown = format!("{r:?}");
        for part in [
            "query_names: [\"a\"]",
            "header_names: [\"X-Request-Id\"]",
            "body_bytes: Some(1)",
            "idempotency_key: true",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(matches!(
            request(Request {
                method: "GET".into(),
                path: "/a".into(),
                query: vec![],
                headers: vec![],
                body: None,
                content_type: Some("text/plain".into()),
                idempotency_key: None,
            }),
            Err(CellbindError::InvalidInput { .. })
        ));
    }

    #[test]
    fn every_slot_keeps_its_name() {
        assert_eq!(slot(sdk::StoreSlot::Session).unwrap(), StoreSlot::Session);
        assert_eq!(slot(sdk::StoreSlot::Outbox).unwrap(), StoreSlot::Outbox);
    }

    /// A foreign store that records which slot each call was for.
    #[derive(Default)]
    struct Slots(std::sync::Mutex<Vec<(StoreSlot, String)>>);

    impl SessionStore for Slots {
        fn load(&self, slot: StoreSlot) -> Result<Option<String>, CellbindError> {
            self.0.lock().unwrap().push((slot, "load".into()));
            Ok(Some(format!("{slot:?}")))
        }
        fn save(&self, slot: StoreSlot, blob: String) -> Result<(), CellbindError> {
            self.0.lock().unwrap().push((slot, blob));
            Ok(())
        }
        fn clear(&self, slot: StoreSlot) -> Result<(), CellbindError> {
            self.0.lock().unwrap().push((slot, "clear".into()));
            Ok(())
        }
    }

    #[test]
    fn the_foreign_store_gets_each_call_for_its_own_slot() {
        use sdk::SessionStore as _;
        let slots = Arc::new(Slots::default());
        let store = ForeignStore(slots.clone());
        assert_eq!(
            store.load(sdk::StoreSlot::Outbox).unwrap().as_deref(),
            Some("Outbox")
        );
        store.save(sdk::StoreSlot::Session, "s").unwrap();
        store.clear(sdk::StoreSlot::Outbox).unwrap();
        assert_eq!(
            *slots.0.lock().unwrap(),
            vec![
                (StoreSlot::Outbox, "load".to_owned()),
                (StoreSlot::Session, "s".to_owned()),
                (StoreSlot::Outbox, "clear".to_owned()),
            ]
        );
    }

    fn sample_write() -> sdk::QueuedWrite {
        sdk::QueuedWrite {
            id: 7,
            method: http::Method::PUT,
            path: "/api/jobs/j-1".into(),
            query: vec![("a".into(), "b c".into())],
            headers: vec![("X-Request-Id".into(), "r-1".into())],
            body: Some(b"{}".to_vec()),
            content_type: Some("application/json".into()),
            idempotency_key: "k-7".into(),
            enqueued_at: 1_800_000_000,
        }
    }

    #[test]
    fn queued_writes_convert_field_by_field() {
        let w = queued(&sample_write());
        assert_eq!(
            (w.id, w.method.as_str(), w.path.as_str()),
            (7, "PUT", "/api/jobs/j-1")
        );
        assert_eq!(
            (w.query[0].name.as_str(), w.query[0].value.as_str()),
            ("a", "b c")
        );
        assert_eq!(
            (w.headers[0].name.as_str(), w.headers[0].value.as_str()),
            ("X-Request-Id", "r-1")
        );
        assert_eq!(w.body.as_deref(), Some(&b"{}"[..]));
        assert_eq!(w.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            (w.idempotency_key.as_str(), w.enqueued_at),
            ("k-7", 1_800_000_000)
        );
        let shown = format!("{w:?}");
        assert!(!shown.contains("k-7") && !shown.contains("r-1"), "{shown}");
    }

    #[test]
    fn flush_reports_and_rejections_convert() {
        let answer = |status: u16, body: &str| sdk::Response {
            status,
            body: body.to_owned().into(),
        };
        let r = report(sdk::FlushReport {
            delivered: vec![sdk::Delivered {
                write: sample_write(),
                response: answer(201, "{}"),
            }],
            rejected: vec![
                sdk::WriteRejection {
                    write: sample_write(),
                    status: 400,
                    code: Some("INVALID_REQUEST".into()),
                    refusal: sdk::Refusal::Error(sdk::Error::Rejected {
                        code: ErrorCode::InvalidRequest,
                        status: 400,
                        message: "bad job id".into(),
                    }),
                },
                sdk::WriteRejection {
                    write: sample_write(),
                    status: 404,
                    code: None,
                    refusal: sdk::Refusal::Answer(answer(404, "no such job")),
                },
            ],
            remaining: 3,
            stopped: Some(sdk::Error::Network {
                kind: sdk::NetworkErrorKind::TimeoutBeforeSend,
                reached_cell: false,
                detail: "connect timeout".into(),
            }),
            session_ended: false,
        });
        assert_eq!(r.delivered.len(), 1);
        assert_eq!(r.delivered[0].id, 7);
        assert_eq!(
            (r.rejected[0].status, r.rejected[0].code.as_str()),
            (400, "INVALID_REQUEST")
        );
        assert!(
            r.rejected[0].detail.contains("bad job id"),
            "{}",
            r.rejected[0].detail
        );
        assert_eq!(
            (
                r.rejected[1].status,
                r.rejected[1].code.as_str(),
                r.rejected[1].detail.as_str()
            ),
            (404, "", "no such job")
        );
        assert_eq!(r.remaining, 3);
        let stopped = r.stopped.unwrap();
        assert!(
            stopped.starts_with("network (TimeoutBeforeSend)"),
            "{stopped}"
        );
        assert!(!r.session_ended);
        let ended = report(sdk::FlushReport {
            stopped: Some(sdk::Error::SessionRevoked),
            session_ended: true,
            ..Default::default()
        });
        assert!(ended.session_ended && ended.stopped.unwrap().starts_with("SESSION_REVOKED"));
        assert_eq!(report(sdk::FlushReport::default()).stopped, None);
    }

    #[test]
    fn methods_parse_case_insensitively() {
        assert_eq!(http_method("get").unwrap(), http::Method::GET);
        assert!(matches!(
            http_method("GE T"),
            Err(CellbindError::InvalidInput { .. })
        ));
    }
}
