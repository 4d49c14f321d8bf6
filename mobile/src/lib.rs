//! uniffi bindings of the Cellbind SDK for Kotlin, Swift and Python (module `cellbind`).
//!
//! This crate only converts and forwards: every rule lives in `cellbind-sdk`. Errors cross the
//! boundary through exactly one table, `impl From<sdk::Error> for CellbindError`.
//!
//! This file is the whole foreign surface, as a UDL file would be: the callback traits the app
//! implements, the records and enums that cross the boundary, the error, and the client object
//! with its methods (each converts its arguments, calls the SDK's client and converts the
//! answer). Everything here appears in the generated bindings and nothing else does: uniffi
//! puts the module path of each declaration and exported method into the checksums the
//! bindings verify, so these stay in the crate's root module. What they do is in files by
//! responsibility:
//!
//! - [`records`]: the records' conversions from and to the SDK's types, and their `Debug`
//!   (which never shows a secret).
//! - [`callbacks`]: the adapters of the app's store, observers and device key to the SDK's
//!   traits.
//! - [`error`]: the one mapping table from the SDK's errors to [`CellbindError`].

use std::sync::Arc;

use protocol::{ContractorId, Login, Password};

uniffi::setup_scaffolding!("cellbind");

pub mod callbacks;
pub mod error;
pub mod records;

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

/// The key that proves this device to the cells (DPoP, RFC 9449): back it with the platform's
/// keystore (Android Keystore or StrongBox, the Secure Enclave) so the private key never leaves
/// it. Every sign-in carries a proof by it, and the session it binds needs a fresh proof on
/// every request: a copied session token is useless without the key. Without one, the SDK makes
/// a software P-256 key at each sign-in and keeps it with the session in the store.
#[uniffi::export(foreign)]
pub trait DeviceKey: Send + Sync {
    /// The public key as a JWK (JSON text): `{"kty":"EC","crv":"P-256","x":…,"y":…}` (each
    /// coordinate 32 bytes, big-endian, base64url without padding) or
    /// `{"kty":"OKP","crv":"Ed25519","x":…}`. Read once, when the client is built.
    fn public_key_jwk(&self) -> Result<String, CellbindError>;
    /// Signs `data` with the private key: for P-256, ECDSA with SHA-256 over `data` (Java's
    /// `SHA256withECDSA`, the Secure Enclave's `ecdsaSignatureMessageX962SHA256`), DER or the
    /// 64-byte `r || s`; for Ed25519, the 64-byte signature. Called once per request attempt of
    /// a bound session, on a background thread; an error fails that request with `DeviceKey`.
    fn sign(&self, data: Vec<u8>) -> Result<Vec<u8>, CellbindError>;
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
    /// Optional: the device key in the platform's keystore (else a software key per sign-in).
    #[uniffi(default)]
    pub device_key: Option<Arc<dyn DeviceKey>>,
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
    /// The RFC 7638 thumbprint (base64url SHA-256 of the canonical JWK) of the device key the
    /// session is bound to; none for an unbound session.
    #[uniffi(default)]
    pub key_thumbprint: Option<String>,
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
    /// The session is bound to a device key and the request carried no proof by it: the session
    /// ended (sign in again).
    #[error("DPOP_PROOF_MISSING: {detail}")]
    DpopProofMissing { detail: String },
    /// The request's proof was malformed, badly signed, or made for another request.
    #[error("DPOP_PROOF_INVALID: {detail}")]
    DpopProofInvalid { detail: String },
    /// The request's proof had been used before.
    #[error("DPOP_PROOF_REPLAYED: {detail}")]
    DpopProofReplayed { detail: String },
    /// The cell wanted a fresh nonce twice in a row (the SDK retries once by itself).
    #[error("DPOP_NONCE_REQUIRED: {detail}")]
    DpopNonceRequired { detail: String },
    /// The proof's nonce had expired twice in a row (the SDK retries once by itself).
    #[error("DPOP_NONCE_STALE: {detail}")]
    DpopNonceStale { detail: String },
    /// The proof was made by another key than the session's: the session ended (sign in
    /// again).
    #[error("DPOP_KEY_MISMATCH: {detail}")]
    DpopKeyMismatch { detail: String },
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
    /// The device key failed to sign a proof or its public key is not P-256 or Ed25519
    /// (nothing was sent by the attempt that needed the proof).
    #[error("device key: {detail}")]
    DeviceKey { detail: String },
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
        let mut b = sdk::Client::builder(config.map, key).store(config.store.into_sdk());
        if let Some(pem) = config.extra_ca_pem {
            b = b.extra_ca_pem(pem.into_bytes());
        }
        if let Some(o) = config.observer {
            b = b.observer(o.into_sdk());
        }
        if let Some(o) = config.outbox_observer {
            b = b.outbox_observer(o.into_sdk());
        }
        if let Some(ms) = config.connect_timeout_ms {
            b = b.connect_timeout(std::time::Duration::from_millis(ms));
        }
        if let Some(ms) = config.request_timeout_ms {
            b = b.request_timeout(std::time::Duration::from_millis(ms));
        }
        if let Some(k) = config.device_key {
            b = b.device_key(k.into_sdk());
        }
        Ok(Arc::new(Self { client: b.build()? }))
    }

    /// Loads the saved session from the store. No network inside the call; with a session,
    /// a flush of the outbox starts in the background (results to the outbox observer).
    pub async fn restore(&self) -> Result<Option<SessionInfo>, CellbindError> {
        Ok(self.client.restore()?.map(SessionInfo::from))
    }

    /// Queues a write (POST, PUT, PATCH, DELETE) for a later flush and saves it to the store
    /// before returning. No network. Full: `OutboxFull`, nothing queued.
    pub fn enqueue(&self, request: Request) -> Result<QueuedWrite, CellbindError> {
        Ok(QueuedWrite::from(
            &self.client.enqueue(sdk::Request::try_from(request)?)?,
        ))
    }

    /// Delivers the queued writes in order until the outbox is empty or a write has to wait.
    pub async fn flush(&self) -> Result<FlushReport, CellbindError> {
        Ok(FlushReport::from(self.client.flush().await?))
    }

    /// The queued writes, oldest first (nothing removed).
    pub fn outbox(&self) -> Result<Vec<QueuedWrite>, CellbindError> {
        Ok(self
            .client
            .outbox()?
            .iter()
            .map(QueuedWrite::from)
            .collect())
    }

    /// Hands back every queued write and empties the outbox.
    pub fn take_undelivered(&self) -> Result<Vec<QueuedWrite>, CellbindError> {
        Ok(self
            .client
            .take_undelivered()?
            .iter()
            .map(QueuedWrite::from)
            .collect())
    }

    /// Signs in at the contractor's cell and saves the session.
    pub async fn sign_in(
        &self,
        contractor_id: String,
        login: String,
        password: String,
    ) -> Result<SessionInfo, CellbindError> {
        let contractor = ContractorId::new(contractor_id)?;
        let login = Login::new(login)?;
        let password = Password::new(password)?;
        Ok(SessionInfo::from(
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
        let r = self.client.send(sdk::Request::try_from(request)?).await?;
        Ok(Response {
            status: r.status,
            body: r.body.to_vec(),
        })
    }

    /// The current session, if any.
    pub fn session(&self) -> Option<SessionInfo> {
        self.client.session().map(SessionInfo::from)
    }

    /// Signs out: the cell revokes the session (when reachable) and the store is cleared.
    /// The writes still queued are handed back (and the outbox emptied), never dropped.
    pub async fn sign_out(&self) -> Result<SignOutResult, CellbindError> {
        let out = self.client.sign_out().await?;
        Ok(SignOutResult {
            revoked: matches!(out.outcome, sdk::SignOut::Revoked),
            undelivered: out.undelivered.iter().map(QueuedWrite::from).collect(),
        })
    }

    /// Refreshes the placement map from the session's cell; returns the version in use.
    pub async fn refresh_map(&self) -> Result<u64, CellbindError> {
        Ok(self.client.refresh_map().await?.version)
    }
}

/// An HTTP method from the app's string (any case).
pub(crate) fn http_method(m: &str) -> Result<http::Method, CellbindError> {
    let upper = m.to_ascii_uppercase();
    http::Method::from_bytes(upper.as_bytes()).map_err(|_| CellbindError::InvalidInput {
        detail: format!("{m:?} is not an HTTP method"),
    })
}
