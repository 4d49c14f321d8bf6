//! The dev fleet's one error type.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything that can stop a dev fleet from starting (or a fleet file from loading).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] runtime::IoError),
    #[error("address {0} is already in use")]
    AddrInUse(SocketAddr),
    /// A child could not bind its address: taken between the fleet's check and the child's
    /// bind (another process, or an outgoing connection's ephemeral port).
    #[error("{id} could not bind its address (already in use); see {}", log.display())]
    ChildAddrInUse { id: String, log: PathBuf },
    #[error("another `cellctl dev` is already running in {}", .0.display())]
    AlreadyRunning(PathBuf),
    #[error("certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("{0}")]
    Fleet(String),
    #[error(transparent)]
    Secret(#[from] runtime::secret::SecretError),
    #[error("control plane: {0}")]
    ControlPlane(#[from] control_plane::CpError),
    #[error(
        "PostgreSQL's {tool} was not found in PATH nor in /usr/lib/postgresql/*/bin (install the postgresql package)"
    )]
    PostgresNotFound { tool: &'static str },
    #[error("PostgreSQL must run as the system user {user}, which does not exist")]
    PostgresNoSystemUser { user: &'static str },
    #[error("PostgreSQL: {command} failed ({status}): {output}")]
    PostgresCommand {
        command: String,
        status: String,
        output: String,
    },
    #[error("internal: {0}")]
    Internal(String),
}

/// The description's errors keep their kind and their text (an exhaustive table: a new kind
/// of description error does not compile until it is given its place here).
impl From<fleet_description::Error> for FleetError {
    fn from(e: fleet_description::Error) -> Self {
        use fleet_description::Error as E;
        match e {
            E::Config(s) => FleetError::Config(s),
            E::Io(e) => FleetError::Io(e),
            E::Secret(e) => FleetError::Secret(e),
            E::Http(s) => FleetError::Http(s),
            E::Internal(s) => FleetError::Internal(s),
        }
    }
}

impl From<reqwest::Error> for FleetError {
    fn from(e: reqwest::Error) -> Self {
        FleetError::Http(e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = FleetError> = std::result::Result<T, E>;
