//! The layout of a fleet directory (certificates, configurations, data, logs, secrets) and
//! its exclusive lock.

use std::fs::File;
use std::path::{Path, PathBuf};

use protocol::{CellId, InstanceId};
use runtime::{IoContext as _, IoError, Secret};

use crate::error::{FleetError, Result};

/// Takes the exclusive lock of a fleet directory, or refuses.
#[allow(clippy::incompatible_msrv)] // File::try_lock is stable since Rust 1.89
pub fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(FleetError::AlreadyRunning(dir.to_path_buf()))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(IoError::new(format!("locking {}", path.display()), e).into())
        }
    }
}

/// Paths of a fleet directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) dir: PathBuf,
}

impl Layout {
    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
    pub(crate) fn ca(&self) -> PathBuf {
        self.p("ca.pem")
    }
    pub(crate) fn cert(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}.pem"))
    }
    /// The control plane's copy of a cell's certificate (see `CellTlsFiles`).
    pub(crate) fn pinned_cert(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}-pinned.pem"))
    }
    /// The control plane's next-certificate file of a cell (see `CellTlsFiles`).
    pub(crate) fn next_cert(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}-next.pem"))
    }
    pub(crate) fn key(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}-key.pem"))
    }
    pub(crate) fn config(&self, id: &str) -> PathBuf {
        self.p(&format!("config/{id}.toml"))
    }
    pub(crate) fn data(&self, id: &str) -> PathBuf {
        self.p(&format!("data/{id}"))
    }
    pub(crate) fn log(&self, id: &str) -> PathBuf {
        self.p(&format!("{id}.log"))
    }
    pub(crate) fn secrets(&self) -> PathBuf {
        self.p(SECRETS_DIR)
    }
    /// The control plane's own token (its admin API).
    pub(crate) fn control_plane_token(&self) -> PathBuf {
        self.secrets().join(CONTROL_PLANE_TOKEN_FILE)
    }
    pub(crate) fn map_key(&self) -> PathBuf {
        self.secrets().join(MAP_KEY_FILE)
    }
    /// A cell's token file of one kind.
    pub(crate) fn cell_token(&self, cell: &CellId, kind: CellToken) -> PathBuf {
        cell_token_file(&self.dir, cell, kind)
    }
}

/// The folder of a fleet directory that holds every token and the map key.
pub const SECRETS_DIR: &str = "secrets";
/// The control plane's token file in [`SECRETS_DIR`].
pub const CONTROL_PLANE_TOKEN_FILE: &str = "control-plane.token";
/// The control plane's map signing seed in [`SECRETS_DIR`].
pub const MAP_KEY_FILE: &str = "map-key";

/// The feed credential file of edge instance `instance` of `cell` in the fleet directory `dir`
/// (`DIR/secrets/<cell>/<instance>.feed`, derived from the cell's feed secret:
/// `runtime::feed_credential`).
pub fn edge_feed_credential_file(dir: &Path, cell: &CellId, instance: &InstanceId) -> PathBuf {
    dir.join(SECRETS_DIR)
        .join(cell.as_str())
        .join(format!("{instance}.feed"))
}

/// The instance id of a dev fleet cell's `n`-th edge (1-based): `<cell>-edge-<n>`.
pub fn edge_instance_id(cell: &CellId, n: u8) -> Result<InstanceId> {
    InstanceId::new(format!("{cell}-edge-{n}"))
        .map_err(|e| FleetError::Internal(format!("edge instance id: {e}")))
}

/// Writes the feed credential of edge instance `instance` of `cell` (0600) from the cell's feed
/// secret in the fleet directory `dir`; answers its path.
pub fn write_edge_feed_credential(
    dir: &Path,
    cell: &CellId,
    instance: &InstanceId,
) -> Result<PathBuf> {
    let secret_file = cell_token_file(dir, cell, CellToken::Feed);
    let secret = runtime::Secret::from_file(&secret_file)
        .map_err(|e| FleetError::Config(format!("{}: {e}", secret_file.display())))?;
    let credential = runtime::feed_credential::derive(&secret, cell, instance);
    let path = edge_feed_credential_file(dir, cell, instance);
    runtime::secret::write_private(&path, credential.expose().as_bytes())
        .map_err(|e| FleetError::Config(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// A cell's token file of one kind in the fleet directory `dir`
/// (`DIR/secrets/<cell>/<kind>.token`).
pub fn cell_token_file(dir: &Path, cell: &CellId, kind: CellToken) -> PathBuf {
    dir.join(SECRETS_DIR)
        .join(cell.as_str())
        .join(format!("{}.token", kind.as_str()))
}

/// The tokens every cell has its own of (`DIR/secrets/<cell>/<kind>.token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellToken {
    /// The auth-service's admin API (`cellctl`, the control plane's seeding; never the app).
    Admin,
    /// The app's migration interface (its internal listener; `cellctl migrate`): the app's own
    /// token, so that the app holds no key to the auth-service's admin API (ATTACKS A35).
    AppInternal,
    /// The auth-service's feed (read by the cell's edges).
    Feed,
    /// The edge key the app requires on `/api/*`.
    App,
    /// The edge key the auth-service requires before it believes the client IP or a cookie.
    Edge,
}

impl CellToken {
    pub const ALL: [CellToken; 5] = [
        CellToken::Admin,
        CellToken::AppInternal,
        CellToken::Feed,
        CellToken::App,
        CellToken::Edge,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            CellToken::Admin => "admin",
            CellToken::AppInternal => "app-internal",
            CellToken::Feed => "feed",
            CellToken::App => "app",
            CellToken::Edge => "edge",
        }
    }
}

/// Makes an owner-only (0700) folder, also when it exists with a wider mode.
pub(crate) fn mkdir(p: &Path) -> Result<()> {
    Ok(runtime::private_dir(p).with_context(|| format!("creating {}", p.display()))?)
}

/// One auth-service replica's listeners.
#[derive(Debug, Clone)]
pub(crate) struct ReplicaPlan {
    /// Its child id (`<cell>-auth-service`, `<cell>-auth-service-r<r>`).
    pub(crate) id: String,
    /// Its internal listener.
    pub(crate) url: String,
    /// Its public listener.
    pub(crate) public_url: String,
}

/// One cell's planned addresses and the tokens the fleet uses itself.
#[derive(Debug, Clone)]
pub(crate) struct CellPlan {
    pub(crate) n: u8,
    pub(crate) id: CellId,
    pub(crate) endpoint: String,
    /// The auth-service's internal listener (every route, admin included).
    pub(crate) auth_url: String,
    /// The auth-service's public listener (what the edge forwards sessions to).
    pub(crate) auth_public_url: String,
    /// Every auth-service replica (replica 0 first, the same as `auth_url` and
    /// `auth_public_url`).
    pub(crate) replicas: Vec<ReplicaPlan>,
    /// The app's public listener (what the edge forwards `/api/*` to).
    pub(crate) app_url: String,
    /// The app's internal listener (the migration interface).
    pub(crate) app_internal_url: String,
    /// This cell's admin token (its auth-service's admin API).
    pub(crate) admin: Secret,
    /// This cell's app's internal token (its migration interface).
    pub(crate) app_internal: Secret,
}
