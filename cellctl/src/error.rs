//! `cellctl`'s one error type; `main` prints it as the one line of a failed command.

use crate::admin::AdminError;

/// Everything that can make a `cellctl` command fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtlError {
    #[error(transparent)]
    Fleet(#[from] fleet_description::Error),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The command ran but did not achieve its goal (a cell down, a step not finished, a
    /// revocation not confirmed everywhere): the message says what.
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    Client(String),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("placement map: {0}")]
    Map(#[from] protocol::map::MapError),
    #[error("internal: {0}")]
    Internal(String),
}

/// The crate's result type.
pub type Result<T, E = CtlError> = std::result::Result<T, E>;
