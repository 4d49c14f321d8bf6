//! The crate's one error type and the one function that turns it into an HTTP answer.

use axum::response::{IntoResponse, Response};
use protocol::{ErrorBody, ErrorCode};

/// Seconds a client is told to wait before retrying a write refused during a handoff.
pub const HANDOFF_RETRY_AFTER_S: u64 = 1;
/// Seconds a client is told to wait before retrying when this app's view is behind.
pub const STALE_RETRY_AFTER_S: u64 = 1;

/// Everything that can go wrong in the demo app.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    #[error("configuration: {0}")]
    Secret(#[from] runtime::secret::SecretError),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("stored data is not valid: {0}")]
    Corrupt(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("the edge key is missing or wrong")]
    EdgeKey,
    #[error("the internal token is missing or wrong")]
    InternalToken,
    #[error("unknown contractor")]
    UnknownContractor,
    #[error("this cell's app does not serve the contractor at that generation")]
    WrongCell,
    #[error("this app's view of the contractor is behind the request's generation")]
    Stale,
    #[error("the contractor is frozen for a handoff")]
    Handoff,
    #[error("not found")]
    NotFound,
    #[error("the request body is over the limit")]
    PayloadTooLarge,
    #[error("internal: {0}")]
    Internal(String),
}

impl AppError {
    /// The one mapping from errors to HTTP answers.
    pub fn to_body(&self) -> ErrorBody {
        match self {
            AppError::BadRequest(m) => ErrorBody::new(ErrorCode::InvalidRequest, m.clone()),
            AppError::EdgeKey => ErrorBody::new(
                ErrorCode::Forbidden,
                "requests to the app must come through the cell's edge",
            ),
            AppError::InternalToken => ErrorBody::new(
                ErrorCode::Forbidden,
                "a valid internal token of this app is required",
            ),
            AppError::UnknownContractor => stale("this app does not know the contractor (yet)"),
            AppError::WrongCell => ErrorBody::new(
                ErrorCode::WrongCell,
                "the contractor is served elsewhere or at a newer generation",
            ),
            AppError::Stale => stale("this app's view of the contractor is behind the request"),
            AppError::Handoff => ErrorBody::new(
                ErrorCode::HandoffInProgress,
                "the contractor is being handed off; writes are paused",
            )
            .retry_after(HANDOFF_RETRY_AFTER_S),
            AppError::NotFound => ErrorBody::new(ErrorCode::NotFound, "no such resource"),
            AppError::PayloadTooLarge => {
                ErrorBody::new(ErrorCode::PayloadTooLarge, "request body too large")
            }
            AppError::Config(_)
            | AppError::Secret(_)
            | AppError::Io(_)
            | AppError::Db(_)
            | AppError::Corrupt(_)
            | AppError::Internal(_) => ErrorBody::new(ErrorCode::Internal, "internal error"),
        }
    }
}

/// `503 CELL_STATE_STALE` with `Retry-After`: this app's view is behind the request.
fn stale(message: &'static str) -> ErrorBody {
    ErrorBody::new(ErrorCode::CellStateStale, message).retry_after(STALE_RETRY_AFTER_S)
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        runtime::answer::failed_request(&self, self.to_body())
    }
}

pub type Result<T, E = AppError> = std::result::Result<T, E>;
