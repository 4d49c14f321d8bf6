//! The crate's one error type, the refusals of a session transfer, and the one function that
//! turns an error into an HTTP answer. It sits below every other module: it names no domain
//! module.

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use protocol::dpop::{NONCE_STEP_S, ProofError};
use protocol::{CellId, ErrorBody, ErrorCode};

/// Everything that can go wrong in the auth-service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Malformed body, parameter or identifier (400 `INVALID_REQUEST`).
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// Sign-in failed; the same answer for every reason (401 `INVALID_CREDENTIALS`).
    #[error("invalid credentials")]
    InvalidCredentials,
    /// A bearer token for the admin or feed API is missing or wrong (401).
    #[error("{0}")]
    Unauthorized(&'static str),
    /// No session was presented (401 `SESSION_MISSING`).
    #[error("no session presented")]
    SessionMissing,
    /// The session was refused by the verifier.
    #[error("session refused: {0}")]
    Session(#[from] protocol::token::TokenError),
    /// The session was revoked (401 `SESSION_REVOKED`).
    #[error("session revoked")]
    SessionRevoked,
    /// No cell this cell knows of owns the contractor (404).
    #[error("no known cell owns this contractor")]
    UnknownContractor,
    /// Another cell owns the contractor (409 `WRONG_CELL`).
    #[error("contractor is owned by {owner}")]
    WrongCell {
        owner: CellId,
        endpoint: Option<String>,
    },
    /// The contractor is being handed off (409, `Retry-After`).
    #[error("contractor is being handed off")]
    HandoffInProgress { retry_after_s: u64 },
    /// Request body over the limit (413).
    #[error("request body is too large")]
    PayloadTooLarge,
    /// Throttled (429, `Retry-After`).
    #[error("too many attempts")]
    RateLimited { retry_after_s: u64 },
    /// Nothing at this path, or the named object does not exist (404).
    #[error("{0} not found")]
    NotFound(String),
    /// Not ready to serve this yet (503).
    #[error("not ready: {0}")]
    NotReady(&'static str),
    /// The durable store failed.
    #[error("store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The PostgreSQL database failed or cannot be reached (503: another replica or a retry
    /// may succeed).
    #[error("database: {0}")]
    Postgres(#[from] sqlx::Error),
    /// The PostgreSQL schema could not be brought up to date.
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A commit was built on feed head `base` but the store is at `stored` (another replica
    /// committed first, or the database was restored): catch up and build again.
    #[error("stale commit: built on {base}, the store is at {stored}")]
    Stale { stored: u64, base: u64 },
    /// Start-up configuration is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// A token file could not be read, or is empty.
    #[error("token file: {0}")]
    Secret(#[from] runtime::secret::SecretError),
    /// The database was written by a newer schema than this binary reads.
    #[error("database: {0}")]
    Schema(#[from] runtime::SchemaError),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    /// A cryptographic operation failed (sealing, random numbers, hashing).
    #[error("crypto: {0}")]
    Crypto(&'static str),
    /// Anything else that is our fault.
    #[error("internal: {0}")]
    Internal(String),
    /// A `DPoP` proof (RFC 9449) was missing, invalid or by another key than the session's
    /// (401 `DPOP_*`; 429 `RATE_LIMITED` when the replay set is full). `challenge`: the
    /// `WWW-Authenticate: DPoP` and `DPoP-Nonce` headers when this service's own verifier
    /// refused it (never for a proof the edge verified: its nonce is the edge's).
    #[error("DPoP proof refused: {error}")]
    Dpop {
        error: ProofError,
        challenge: Option<Box<[(HeaderName, HeaderValue); 2]>>,
    },
    /// An unbound session of a client kind whose binding is `required` (401 `SESSION_INVALID`,
    /// as the edge answers it: the client signs in again, with a proof).
    #[error("this cell requires device-bound sessions: sign in again with a DPoP proof")]
    Unbound,
    /// A session transfer or rebind was refused (403 `FORBIDDEN`); the message starts with
    /// the refusal's name.
    #[error("{}: {detail}", refusal.as_str())]
    Ticket {
        refusal: TicketRefusal,
        detail: String,
    },
}

/// Why a transfer or rebind was refused (each answered `403 FORBIDDEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketRefusal {
    /// The source did not release the contractor at exactly the session's generation.
    NotReleased,
    /// The ticket is not a valid ticket for this cell (signature, `typ`, audience, expiry…).
    InvalidTicket,
    /// The ticket was already used.
    Replayed,
    /// This cell is not active at the ticket's new generation.
    WrongGeneration,
    /// The ticket names a source cell this cell cannot find or reach in its map.
    UnknownSource,
    /// A browser (cookie) session is not transferred: sign in at the new cell.
    CookieSession,
    /// This session was transferred already and its ticket has expired.
    AlreadyTransferred,
}

impl TicketRefusal {
    /// The refusal's name, at the start of the error message.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketRefusal::NotReleased => "not_released",
            TicketRefusal::InvalidTicket => "invalid_ticket",
            TicketRefusal::Replayed => "replayed",
            TicketRefusal::WrongGeneration => "wrong_generation",
            TicketRefusal::UnknownSource => "unknown_source",
            TicketRefusal::CookieSession => "cookie_session",
            TicketRefusal::AlreadyTransferred => "already_transferred",
        }
    }

    /// The `403` of this refusal with its detail.
    pub(crate) fn with(self, detail: impl Into<String>) -> Error {
        Error::Ticket {
            refusal: self,
            detail: detail.into(),
        }
    }
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The public error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadRequest(_) => ErrorCode::InvalidRequest,
            Error::InvalidCredentials => ErrorCode::InvalidCredentials,
            // A missing or wrong admin or feed token: not a sign-in failure, a refusal (403), like
            // the app's and the control plane's (ATTACKS A30).
            Error::Unauthorized(_) => ErrorCode::Forbidden,
            Error::SessionMissing => ErrorCode::SessionMissing,
            Error::Session(e) => e.code(),
            Error::SessionRevoked => ErrorCode::SessionRevoked,
            Error::UnknownContractor => ErrorCode::UnknownContractor,
            Error::WrongCell { .. } => ErrorCode::WrongCell,
            Error::HandoffInProgress { .. } => ErrorCode::HandoffInProgress,
            Error::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            Error::RateLimited { .. } => ErrorCode::RateLimited,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::NotReady(_) => ErrorCode::NotReady,
            Error::Ticket { .. } => ErrorCode::Forbidden,
            Error::Dpop { error, .. } => error.code(),
            Error::Unbound => ErrorCode::SessionInvalid,
            Error::Postgres(_) => ErrorCode::NotReady,
            Error::Store(_)
            | Error::Stale { .. }
            | Error::Migrate(_)
            | Error::Config(_)
            | Error::Secret(_)
            | Error::Schema(_)
            | Error::Io(_)
            | Error::Crypto(_)
            | Error::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// The one mapping from an error to an HTTP answer: an [`ErrorBody`] with the status of its
/// code, plus `Retry-After` where DESIGN §4 asks for it. Internal details are logged, never sent.
pub(crate) fn rescue(err: &Error) -> Response {
    let code = err.code();
    let mut body = match err {
        Error::WrongCell { owner, endpoint } => match endpoint {
            Some(ep) => ErrorBody::wrong_cell(owner.clone(), ep.clone()),
            None => ErrorBody {
                owner_cell: Some(owner.clone()),
                ..ErrorBody::new(code, format!("this contractor is served by {owner}"))
            },
        },
        // Our own failures (the variants `code` maps to INTERNAL): logged, never described.
        _ if code == ErrorCode::Internal => {
            tracing::error!(error = %err, "internal error");
            ErrorBody::new(code, "internal error")
        }
        // The database's own words may name hosts or users: logged, not sent.
        Error::Postgres(_) => {
            tracing::warn!(error = %err, "database unavailable");
            ErrorBody::new(code, "the cell's database is unavailable; retry")
        }
        other => ErrorBody::new(code, other.to_string()),
    };
    let retry_after = match err {
        Error::HandoffInProgress { retry_after_s } | Error::RateLimited { retry_after_s } => {
            Some(*retry_after_s)
        }
        Error::NotReady(_) | Error::Postgres(_) => Some(1),
        // The replay set takes new proofs again under the next nonce step.
        Error::Dpop {
            error: ProofError::ReplaySetFull,
            ..
        } => Some(NONCE_STEP_S),
        _ => None,
    };
    if let Some(s) = retry_after {
        body = body.retry_after(s);
    }
    let mut resp = runtime::error_response(code.status().as_u16(), body);
    if let Error::Dpop {
        challenge: Some(headers),
        ..
    } = err
    {
        for (name, value) in headers.iter() {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
    }
    resp
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        rescue(&self)
    }
}
