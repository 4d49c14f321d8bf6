//! The crate's one error type.

/// Why a fleet description cannot be read, written or used.
/// Not `non_exhaustive`: the dev fleet maps every kind onto its own error, exhaustively.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that is not a valid description (the message names the file and the field).
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    #[error(transparent)]
    Secret(#[from] runtime::secret::SecretError),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("internal: {0}")]
    Internal(String),
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Self {
        Error::Http(e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
