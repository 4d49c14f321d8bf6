//! What a dev fleet is started with ([`FleetOptions`]), the fleet's fixed settings, and the
//! names it derives from a cell (child ids, data folders, database names).

use std::path::{Path, PathBuf};
use std::time::Duration;

use control_plane::config::DEFAULT_BUCKET_COUNT;
use protocol::CellId;
use runtime::IoContext as _;

use crate::error::{FleetError, Result};
use crate::ports::DEFAULT_PORT_BASE;
use crate::seed;
use fleet_description::StoreKind;

/// Cells of a dev fleet.
pub const DEFAULT_CELLS: u8 = 5;
/// Longest a fleet may take to start once built, in milliseconds (it normally takes 1–3 s).
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 15_000;
/// Default fleet directory.
pub const DEFAULT_DIR: &str = "dev-fleet";
/// Session lifetime configured on the dev cells, in seconds (30 days).
pub const SESSION_LIFETIME_S: u64 = protocol::token::DEFAULT_SESSION_LIFETIME_S;
/// Key rotation interval configured on the dev auth-services, in seconds (30 days).
pub const KEY_ROTATION_INTERVAL_S: u64 = 30 * 24 * 3600;
/// How often the dev auth-services poll the control plane's map, in milliseconds.
pub const MAP_POLL_INTERVAL_MS: u64 = 5_000;
/// Map poll interval of a cell whose map refresh is stalled on purpose (tests): one day.
pub const STALLED_MAP_POLL_INTERVAL_MS: u64 = 24 * 3600 * 1000;
/// Edge write lease, in milliseconds.
pub const WRITE_LEASE_MS: u64 = 30_000;
/// Edge feed long-poll, in milliseconds.
pub const FEED_WAIT_MS: u64 = 20_000;

/// Most auth-service replicas per cell.
pub const MAX_AUTH_REPLICAS: u8 = 4;
/// Connections each auth-service replica of a PostgreSQL fleet may hold
/// (`database_max_connections`); the private server allows every replica this many and a few
/// more (its `LISTEN` connection, `psql`).
pub const DEV_DB_MAX_CONNECTIONS: u32 = 10;
/// Environment variable of [`FleetOptions::with_test_env`]: the store of a test's fleet
/// (`sqlite` or `postgres`).
pub const TEST_STORE_ENV: &str = "CELLBIND_TEST_STORE";
/// Environment variable of [`FleetOptions::with_test_env`]: auth-service replicas per cell of
/// a test's fleet.
pub const TEST_AUTH_REPLICAS_ENV: &str = "CELLBIND_TEST_AUTH_REPLICAS";
/// Folder of the fleet directory that holds the private PostgreSQL server (its log always; its
/// data and socket unless the fleet runs as root).
pub const POSTGRES_DIR: &str = "postgres";
/// File name of a cell's database URL in its secrets folder.
pub const DATABASE_URL_FILE: &str = "database.url";
/// File name of a cell's key-encryption key in its secrets folder (PostgreSQL fleets: every
/// replica of the cell unseals the same keys).
pub const KEK_FILE: &str = "kek";

/// Binary of the control plane.
pub const CONTROL_PLANE_BIN: &str = "cellbind-control-plane";
/// Binary of a cell's auth-service.
pub const AUTH_SERVICE_BIN: &str = "cellbind-auth-service";
/// Binary of a cell's edge.
pub const CELL_ENDPOINT_BIN: &str = "cellbind-cell-endpoint";
/// Binary of a cell's demo app.
pub const DEMO_APP_BIN: &str = "cellbind-demo-app";

/// What to start.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The fleet directory (created if missing; locked while the fleet runs).
    pub dir: PathBuf,
    pub port_base: u16,
    /// Where the four binaries are (normally the directory of `cellctl` itself).
    pub bin_dir: PathBuf,
    pub cells: u8,
    pub contractors: u32,
    pub bucket_count: usize,
    pub startup_timeout: Duration,
    /// Tests: this cell's auth-service (by number, 1-based) polls the control plane's map only
    /// every [`STALLED_MAP_POLL_INTERVAL_MS`], so its map stays at the first one it took.
    pub stalled_map_cell: Option<u8>,
    /// Where the auth-services keep their state (default SQLite).
    pub store: StoreKind,
    /// Auth-service replicas per cell, `1..=`[`MAX_AUTH_REPLICAS`] (default 1; more than one
    /// needs [`StoreKind::Postgres`]).
    pub auth_replicas: u8,
    /// Every auth-service's signing-key rotation interval, in seconds (default
    /// [`KEY_ROTATION_INTERVAL_S`]; game days shorten it to see a scheduled rotation).
    pub key_rotation_interval_s: u64,
}

impl FleetOptions {
    /// The defaults of `cellctl dev` for a directory and a binary directory.
    pub fn new(dir: impl Into<PathBuf>, bin_dir: impl Into<PathBuf>) -> Self {
        FleetOptions {
            dir: dir.into(),
            port_base: DEFAULT_PORT_BASE,
            bin_dir: bin_dir.into(),
            cells: DEFAULT_CELLS,
            contractors: seed::DEFAULT_CONTRACTORS,
            bucket_count: DEFAULT_BUCKET_COUNT,
            startup_timeout: Duration::from_millis(DEFAULT_STARTUP_TIMEOUT_MS),
            stalled_map_cell: None,
            store: StoreKind::Sqlite,
            auth_replicas: 1,
            key_rotation_interval_s: KEY_ROTATION_INTERVAL_S,
        }
    }

    pub fn port_base(mut self, b: u16) -> Self {
        self.port_base = b;
        self
    }

    /// Where the auth-services keep their state.
    pub fn store(mut self, store: StoreKind) -> Self {
        self.store = store;
        self
    }

    /// Auth-service replicas per cell.
    pub fn auth_replicas(mut self, n: u8) -> Self {
        self.auth_replicas = n;
        self
    }

    /// Every auth-service's signing-key rotation interval, in seconds.
    pub fn key_rotation_interval_s(mut self, secs: u64) -> Self {
        self.key_rotation_interval_s = secs;
        self
    }

    /// These options with the store and the replica count of the environment variables
    /// [`TEST_STORE_ENV`] (`sqlite` or `postgres`) and [`TEST_AUTH_REPLICAS_ENV`] when set (the
    /// end-to-end tests run once on each store). A value that does not parse is an error, not
    /// the default.
    pub fn with_test_env(mut self) -> Result<Self> {
        if let Some(v) = env_var(TEST_STORE_ENV)? {
            self.store = v.parse()?;
        }
        if let Some(v) = env_var(TEST_AUTH_REPLICAS_ENV)? {
            self.auth_replicas = v.parse().map_err(|_| {
                FleetError::Config(format!(
                    "{TEST_AUTH_REPLICAS_ENV}={v:?} is not a replica count (1..={MAX_AUTH_REPLICAS})"
                ))
            })?;
        }
        Ok(self)
    }

    /// Refuses options no fleet can run.
    pub(crate) fn check(&self) -> Result<()> {
        if self.cells == 0 || self.cells > 250 {
            return Err(FleetError::Config("a fleet has 1..=250 cells".into()));
        }
        if self.auth_replicas == 0 || self.auth_replicas > MAX_AUTH_REPLICAS {
            return Err(FleetError::Config(format!(
                "a cell has 1..={MAX_AUTH_REPLICAS} auth-service replicas"
            )));
        }
        if self.store == StoreKind::Sqlite && self.auth_replicas > 1 {
            return Err(FleetError::Config(
                "SQLite serves one replica; use --store postgres".into(),
            ));
        }
        Ok(())
    }

    /// The options of a fleet that an integration test starts in `dir`: the binaries of the
    /// test's own target directory (a test binary runs from `target/<profile>/deps/`), and the
    /// port base from the environment variable `port_base_env` when it holds a port, else
    /// `default_port_base`.
    pub fn for_test(
        dir: impl Into<PathBuf>,
        port_base_env: &str,
        default_port_base: u16,
    ) -> Result<Self> {
        let bin_dir = test_bin_dir()?;
        let port_base = std::env::var(port_base_env)
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(default_port_base);
        FleetOptions::new(dir, bin_dir)
            .port_base(port_base)
            .with_test_env()
    }
}

/// An environment variable's value; unset or empty is `None`.
fn env_var(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(FleetError::Config(format!("{name} is not UTF-8")))
        }
    }
}

/// The child id of cell `cell`'s auth-service replica `r`: `<cell>-auth-service` for replica 0
/// (the only one of most fleets), `<cell>-auth-service-r<r>` for the others. Its configuration
/// is `DIR/config/<id>.toml`, its log `DIR/<id>.log`.
pub fn auth_service_id(cell: &CellId, r: u8) -> String {
    if r == 0 {
        format!("{cell}-auth-service")
    } else {
        format!("{cell}-auth-service-r{r}")
    }
}

/// The child id of cell `cell`'s edge: `<cell>-endpoint` (its configuration, log and TLS files
/// are named by it).
pub fn edge_id(cell: &CellId) -> String {
    format!("{cell}-endpoint")
}

/// The child id of cell `cell`'s demo app: `<cell>-app`.
pub fn app_id(cell: &CellId) -> String {
    format!("{cell}-app")
}

/// The data directory (relative to `DIR/data`) of cell `cell`'s auth-service replica `r`.
pub(crate) fn auth_service_data(cell: &CellId, r: u8) -> String {
    if r == 0 {
        format!("{cell}/auth-service")
    } else {
        format!("{cell}/auth-service-r{r}")
    }
}

/// The database of cell `cell` on a PostgreSQL fleet's server (`cell-01` → `cell_01`).
pub fn database_name(cell: &CellId) -> String {
    cell.as_str().replace('-', "_")
}

/// The directory holding the workspace's binaries, seen from a test binary
/// (`target/<profile>/deps/<test>` → `target/<profile>`).
pub fn test_bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test binary")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| FleetError::Config(format!("{} has no target directory", exe.display())))
}
