//! The crate's one error type and the one function that turns it into an HTTP answer.

use axum::response::{IntoResponse, Response};
use protocol::{ErrorBody, ErrorCode};

/// Everything that can go wrong in the control plane.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CpError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    #[error("address {0} is already in use")]
    AddrInUse(std::net::SocketAddr),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("placement map: {0}")]
    Map(#[from] protocol::map::MapError),
    #[error("key: {0}")]
    Key(String),
    #[error(transparent)]
    Secret(#[from] runtime::secret::SecretError),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("a valid admin token is required")]
    AdminToken,
    #[error("not found")]
    NotFound,
    #[error("no placement map has been published yet")]
    NotReady,
    #[error("internal: {0}")]
    Internal(String),
}

impl CpError {
    /// The one mapping from errors to HTTP answers.
    pub fn to_body(&self) -> ErrorBody {
        match self {
            CpError::BadRequest(m) => ErrorBody::new(ErrorCode::InvalidRequest, m.clone()),
            CpError::AdminToken => ErrorBody::new(ErrorCode::Forbidden, self.to_string()),
            CpError::NotFound => ErrorBody::new(ErrorCode::NotFound, "no such resource"),
            CpError::NotReady => ErrorBody::new(ErrorCode::NotReady, self.to_string()),
            _ => ErrorBody::new(ErrorCode::Internal, "internal error"),
        }
    }
}

impl IntoResponse for CpError {
    fn into_response(self) -> Response {
        runtime::answer::failed_request(&self, self.to_body())
    }
}

pub type Result<T, E = CpError> = std::result::Result<T, E>;
