//! `cellctl dev`: a real local fleet (DESIGN §8). One control plane and, per cell, an
//! auth-service, an edge (cell-endpoint) and a demo app, each its own OS process, over TLS from
//! a local CA; cell `n` on `127.0.0.n`. Seeded with contractors, users, ownership records and a
//! signed placement map, described in `fleet.json`.
//!
//! Ports (base B): control plane `127.0.0.1:B`; cell n on `127.0.0.n`: edge B+3, auth-service
//! public listener B+4, app public listener B+5, auth-service internal listener B+6, app
//! internal listener B+7. The edge forwards public traffic to the public listeners only; admin,
//! feed and migration calls go to the internal ones.
//!
//! Secrets are per cell (a token of one cell is refused by every other): `DIR/secrets/<cell>/`
//! holds `admin.token`, `feed.token`, `app.token` and `edge.token`; the control plane has its
//! own `DIR/secrets/control-plane.token` and its map key `DIR/secrets/map-key`. Every folder
//! the fleet makes is 0700 (`DIR` itself included) and every secret and data file 0600.
//!
//! Children get a piped stdin and `CELLBIND_EXIT_ON_STDIN_EOF=1`, so they exit when this
//! process goes away, however it goes. A child that dies is reported on stderr and left dead.

pub mod certs;
pub mod fleet_file;
pub mod seed;

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::map::SignedMap;
use protocol::{CellId, Generation};
use serde::Serialize;
use serde_json::json;
use tokio::process::ChildStdin;
use tokio::task::JoinHandle;

use crate::config::{CellConfig, Config as CpConfig, DEFAULT_BUCKET_COUNT};
use crate::error::{CpError, Result};
use crate::secrets::{Secret, load_or_create_map_key, public_key_b64, random_token, write_private};
use crate::store::{Placement, Store};
pub use certs::{LocalCa, client_trusting, client_trusting_file};
pub use fleet_file::{Demo, DemoUser, FLEET_FILE, FleetCell, FleetFile, Service};
use seed::{DISPATCHERS, SeedPlan, TECHNICIANS};

/// Default first port (`--port-base`).
pub const DEFAULT_PORT_BASE: u16 = 8440;
/// Offset of the control plane's port (on 127.0.0.1).
pub const CONTROL_PLANE_PORT_OFFSET: u16 = 0;
/// Offset of each cell's edge port (the cell's public endpoint).
pub const EDGE_PORT_OFFSET: u16 = 3;
/// Offset of each cell's auth-service public listener (what the edge forwards sessions to).
pub const AUTH_PORT_OFFSET: u16 = 4;
/// Offset of each cell's demo app public listener (what the edge forwards `/api/*` to).
pub const APP_PORT_OFFSET: u16 = 5;
/// Offset of each cell's auth-service internal listener (admin API, feed, metrics).
pub const AUTH_INTERNAL_PORT_OFFSET: u16 = 6;
/// Offset of each cell's demo app internal listener (the migration interface).
pub const APP_INTERNAL_PORT_OFFSET: u16 = 7;
/// Cells of a dev fleet.
pub const DEFAULT_CELLS: u8 = 5;
/// Longest a fleet may take to start once built, in milliseconds (it normally takes 1–3 s).
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 15_000;
/// Interval between two readiness probes, in milliseconds.
pub const PROBE_INTERVAL_MS: u64 = 50;
/// How long children get to exit after stdin EOF and SIGTERM before SIGKILL, in milliseconds.
pub const STOP_GRACE_MS: u64 = 5_000;
/// Users per import request.
pub const IMPORT_BATCH_USERS: usize = 1_000;
/// Default fleet directory.
pub const DEFAULT_DIR: &str = "dev-fleet";
/// Environment variable that makes a child exit at the end of its stdin.
pub const EXIT_ON_STDIN_EOF_ENV: &str = crate::server::EXIT_ON_STDIN_EOF_ENV;
/// Environment variable (no-color.org) that keeps colour escapes out of the children's logs.
pub const NO_COLOR_ENV: &str = "NO_COLOR";
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
        }
    }

    pub fn port_base(mut self, b: u16) -> Self {
        self.port_base = b;
        self
    }
}

/// Addresses of the fleet for a port base.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub base: u16,
}

impl Ports {
    fn port(self, offset: u16) -> Result<u16> {
        self.base
            .checked_add(offset)
            .ok_or_else(|| CpError::Config(format!("--port-base {} is too high", self.base)))
    }
    pub fn cell_ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
    }
    pub fn control_plane(self) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(1),
            self.port(CONTROL_PLANE_PORT_OFFSET)?,
        ))
    }
    pub fn edge(self, n: u8) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(n),
            self.port(EDGE_PORT_OFFSET)?,
        ))
    }
    pub fn auth(self, n: u8) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(n),
            self.port(AUTH_PORT_OFFSET)?,
        ))
    }
    pub fn app(self, n: u8) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(n),
            self.port(APP_PORT_OFFSET)?,
        ))
    }
    pub fn auth_internal(self, n: u8) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(n),
            self.port(AUTH_INTERNAL_PORT_OFFSET)?,
        ))
    }
    pub fn app_internal(self, n: u8) -> Result<SocketAddr> {
        Ok(SocketAddr::new(
            Self::cell_ip(n),
            self.port(APP_INTERNAL_PORT_OFFSET)?,
        ))
    }
    /// Every address the fleet listens on.
    pub fn all(self, cells: u8) -> Result<Vec<SocketAddr>> {
        let mut v = vec![self.control_plane()?];
        for n in 1..=cells {
            v.extend([
                self.edge(n)?,
                self.auth(n)?,
                self.app(n)?,
                self.auth_internal(n)?,
                self.app_internal(n)?,
            ]);
        }
        Ok(v)
    }
}

fn https(addr: SocketAddr) -> String {
    format!("https://{addr}")
}

/// The cell id of cell `n` (`cell-01` …).
pub fn cell_id(n: u8) -> Result<CellId> {
    CellId::new(format!("cell-{n:02}")).map_err(|e| CpError::Internal(e.to_string()))
}

/// Refuses with a one-line error naming the first address that is already taken.
pub fn check_ports_free(addrs: &[SocketAddr]) -> Result<()> {
    for a in addrs {
        match std::net::TcpListener::bind(a) {
            Ok(l) => drop(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(CpError::AddrInUse(*a));
            }
            Err(e) => return Err(CpError::io(format!("cannot listen on {a}"), e)),
        }
    }
    Ok(())
}

/// Takes the exclusive lock of a fleet directory, or refuses.
#[allow(clippy::incompatible_msrv)] // File::try_lock is stable since Rust 1.89
pub fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| CpError::io(format!("opening {}", path.display()), e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(CpError::AlreadyRunning(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(CpError::io(format!("locking {}", path.display()), e))
        }
    }
}

/// What the supervisor knows about the children.
#[derive(Debug, Default)]
struct Supervision {
    stopping: AtomicBool,
    exits: Mutex<BTreeMap<String, Option<ExitStatus>>>,
}

impl Supervision {
    fn exit_of(&self, id: &str) -> Option<Option<ExitStatus>> {
        self.exits.lock().ok().and_then(|m| m.get(id).copied())
    }
}

#[derive(Debug)]
struct ChildProc {
    id: String,
    pid: u32,
    stdin: Option<ChildStdin>,
    task: JoinHandle<()>,
    log: PathBuf,
}

/// A running fleet. Dropping it closes the children's stdin (so they exit); call
/// [`Fleet::stop`] to also wait for them.
#[derive(Debug)]
pub struct Fleet {
    dir: PathBuf,
    file: FleetFile,
    children: Vec<ChildProc>,
    sup: Arc<Supervision>,
    started_in: Duration,
    _lock: File,
}

/// Paths of a fleet directory.
#[derive(Debug, Clone)]
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
    fn ca(&self) -> PathBuf {
        self.p("ca.pem")
    }
    fn cert(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}.pem"))
    }
    fn key(&self, name: &str) -> PathBuf {
        self.p(&format!("tls/{name}-key.pem"))
    }
    fn config(&self, id: &str) -> PathBuf {
        self.p(&format!("config/{id}.toml"))
    }
    fn data(&self, id: &str) -> PathBuf {
        self.p(&format!("data/{id}"))
    }
    fn log(&self, id: &str) -> PathBuf {
        self.p(&format!("{id}.log"))
    }
    fn secrets(&self) -> PathBuf {
        self.p(SECRETS_DIR)
    }
    /// The control plane's own token (its admin API).
    fn control_plane_token(&self) -> PathBuf {
        self.secrets().join(CONTROL_PLANE_TOKEN_FILE)
    }
    fn map_key(&self) -> PathBuf {
        self.secrets().join(MAP_KEY_FILE)
    }
    /// A cell's token file of one kind.
    fn cell_token(&self, cell: &CellId, kind: CellToken) -> PathBuf {
        self.secrets()
            .join(cell.as_str())
            .join(format!("{}.token", kind.as_str()))
    }
}

/// The folder of a fleet directory that holds every token and the map key.
pub const SECRETS_DIR: &str = "secrets";
/// The control plane's token file in [`SECRETS_DIR`].
pub const CONTROL_PLANE_TOKEN_FILE: &str = "control-plane.token";
/// The control plane's map signing seed in [`SECRETS_DIR`].
pub const MAP_KEY_FILE: &str = "map-key";

/// The tokens every cell has its own of (`DIR/secrets/<cell>/<kind>.token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellToken {
    /// The auth-service's admin API and the app's migration interface.
    Admin,
    /// The auth-service's feed (read by the cell's edges).
    Feed,
    /// The edge key the app requires on `/api/*`.
    App,
    /// The edge key the auth-service requires before it believes the client IP or a cookie.
    Edge,
}

impl CellToken {
    pub const ALL: [CellToken; 4] = [
        CellToken::Admin,
        CellToken::Feed,
        CellToken::App,
        CellToken::Edge,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            CellToken::Admin => "admin",
            CellToken::Feed => "feed",
            CellToken::App => "app",
            CellToken::Edge => "edge",
        }
    }
}

/// Makes an owner-only (0700) folder, also when it exists with a wider mode.
fn mkdir(p: &Path) -> Result<()> {
    runtime::private_dir(p).map_err(|e| CpError::io(format!("creating {}", p.display()), e))
}

fn write_toml<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = toml::to_string(value).map_err(|e| CpError::Internal(format!("toml: {e}")))?;
    crate::secrets::write_atomic(path, text.as_bytes(), 0o644)
}

#[derive(Debug, Serialize)]
struct AuthServiceConfig<'a> {
    cell_id: &'a CellId,
    listen: SocketAddr,
    internal_listen: SocketAddr,
    issuer: &'a str,
    data_dir: PathBuf,
    kek_file: PathBuf,
    admin_token_file: PathBuf,
    feed_token_file: PathBuf,
    edge_token_file: PathBuf,
    tls_cert: PathBuf,
    tls_key: PathBuf,
    ca_cert: PathBuf,
    control_plane_url: &'a str,
    map_public_key: &'a str,
    map_poll_interval_ms: u64,
    session_lifetime_s: u64,
    key_rotation_interval_s: u64,
}

#[derive(Debug, Serialize)]
struct EdgeConfig<'a> {
    cell_id: &'a CellId,
    instance_id: &'a str,
    listen: SocketAddr,
    public_url: &'a str,
    auth_service_url: &'a str,
    feed_url: &'a str,
    app_url: &'a str,
    feed_token_file: PathBuf,
    app_token_file: PathBuf,
    edge_token_file: PathBuf,
    state_dir: PathBuf,
    tls_cert: PathBuf,
    tls_key: PathBuf,
    ca_cert: PathBuf,
    write_lease_ms: u64,
    feed_wait_ms: u64,
    session_lifetime_s: u64,
}

#[derive(Debug, Serialize)]
struct AppConfig<'a> {
    cell_id: &'a CellId,
    listen: SocketAddr,
    internal_listen: SocketAddr,
    tls_cert: PathBuf,
    tls_key: PathBuf,
    data_dir: PathBuf,
    app_token_file: PathBuf,
    admin_token_file: PathBuf,
}

/// One cell's planned addresses and admin token.
#[derive(Debug, Clone)]
struct CellPlan {
    n: u8,
    id: CellId,
    endpoint: String,
    /// The auth-service's internal listener (every route, admin included).
    auth_url: String,
    /// The auth-service's public listener (what the edge forwards sessions to).
    auth_public_url: String,
    /// The app's public listener (what the edge forwards `/api/*` to).
    app_url: String,
    /// The app's internal listener (the migration interface).
    app_internal_url: String,
    /// This cell's admin token.
    admin: Secret,
}

impl Fleet {
    /// Starts a fleet and returns once every edge answers `/readyz`; on failure everything it
    /// started is stopped again.
    pub async fn start(opts: FleetOptions) -> Result<Fleet> {
        let t0 = Instant::now();
        let deadline = t0 + opts.startup_timeout;
        for bin in [
            CONTROL_PLANE_BIN,
            AUTH_SERVICE_BIN,
            CELL_ENDPOINT_BIN,
            DEMO_APP_BIN,
        ] {
            let p = opts.bin_dir.join(bin);
            if !p.is_file() {
                return Err(CpError::Fleet(format!(
                    "{bin} was not found in {} (build it: cargo build --workspace --bins)",
                    opts.bin_dir.display()
                )));
            }
        }
        if opts.cells == 0 || opts.cells > 250 {
            return Err(CpError::Config("a fleet has 1..=250 cells".into()));
        }
        mkdir(&opts.dir)?;
        let dir = std::fs::canonicalize(&opts.dir)
            .map_err(|e| CpError::io(format!("resolving {}", opts.dir.display()), e))?;
        let lock = lock_dir(&dir)?;
        let ports = Ports {
            base: opts.port_base,
        };
        check_ports_free(&ports.all(opts.cells)?)?;
        let layout = Layout { dir: dir.clone() };
        // A fresh fleet every time: remove what a previous run generated.
        for sub in ["tls", "config", "data", "publish", SECRETS_DIR] {
            let p = layout.p(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p)
                    .map_err(|e| CpError::io(format!("removing {}", p.display()), e))?;
            }
        }
        // Also the map key: a fresh fleet's map versions start again at 1, so a map signed for
        // an earlier run must not verify against this one (no replay of an old, "newer" map).
        // And the migration journal: its migrations belong to the earlier fleet.
        // (`map-key`, `admin-token`, `feed-token` and `app-token` at the top are where earlier
        // versions kept the map key and the tokens every cell shared.)
        for f in [
            FLEET_FILE,
            "map-key",
            "admin-token",
            "feed-token",
            "app-token",
            sdk::cli::SESSION_FILE,
            sdk::cli::MAP_FILE,
            crate::migrate::JOURNAL_FILE,
            "migrations.db-wal",
            "migrations.db-shm",
        ] {
            let p = layout.p(f);
            if p.exists() {
                std::fs::remove_file(&p)
                    .map_err(|e| CpError::io(format!("removing {}", p.display()), e))?;
            }
        }
        for sub in ["tls", "config", "data", "publish", SECRETS_DIR] {
            mkdir(&layout.p(sub))?;
        }
        let sup = Arc::new(Supervision::default());
        let mut children = Vec::new();
        match Self::start_inner(&opts, &layout, ports, &sup, &mut children, deadline).await {
            Ok(file) => Ok(Fleet {
                dir,
                file,
                children,
                sup,
                started_in: t0.elapsed(),
                _lock: lock,
            }),
            Err(e) => {
                stop_children(&sup, &mut children).await;
                Err(e)
            }
        }
    }

    async fn start_inner(
        opts: &FleetOptions,
        layout: &Layout,
        ports: Ports,
        sup: &Arc<Supervision>,
        children: &mut Vec<ChildProc>,
        deadline: Instant,
    ) -> Result<FleetFile> {
        // Password hashing runs while the files are written and the processes start.
        let password = seed::demo_password();
        let pw = password.clone();
        let hashing = tokio::task::spawn_blocking(move || seed::hash_password(&pw));

        // CA and certificates.
        let ca = LocalCa::generate("Cellbind dev fleet CA")?;
        crate::secrets::write_atomic(&layout.ca(), ca.pem().as_bytes(), certs::CERT_FILE_MODE)?;
        ca.issue_to(
            "control-plane",
            &[Ports::cell_ip(1)],
            &layout.cert("control-plane"),
            &layout.key("control-plane"),
        )?;
        let mut cells = Vec::new();
        for n in 1..=opts.cells {
            let id = cell_id(n)?;
            ca.issue_to(
                id.as_str(),
                &[Ports::cell_ip(n)],
                &layout.cert(id.as_str()),
                &layout.key(id.as_str()),
            )?;
            // Tokens: each cell its own.
            mkdir(&layout.secrets().join(id.as_str()))?;
            let mut admin = None;
            for kind in CellToken::ALL {
                let token = random_token();
                write_private(&layout.cell_token(&id, kind), token.as_bytes())?;
                if kind == CellToken::Admin {
                    admin = Some(Secret::new(token.as_str()));
                }
            }
            let admin = admin.ok_or_else(|| CpError::Internal("no admin token was made".into()))?;
            cells.push(CellPlan {
                n,
                endpoint: https(ports.edge(n)?),
                auth_url: https(ports.auth_internal(n)?),
                auth_public_url: https(ports.auth(n)?),
                app_url: https(ports.app(n)?),
                app_internal_url: https(ports.app_internal(n)?),
                admin,
                id,
            });
        }

        // The control plane's own token and the map key.
        let cp_token = random_token();
        write_private(&layout.control_plane_token(), cp_token.as_bytes())?;
        let map_key_file = layout.map_key();
        let map_public_key = public_key_b64(&load_or_create_map_key(&map_key_file)?);

        // Placements.
        let cell_ids: Vec<CellId> = cells.iter().map(|c| c.id.clone()).collect();
        let plan = SeedPlan::new(&cell_ids, opts.contractors, opts.bucket_count)?;
        {
            let mut store = Store::open(&layout.data("control-plane"))?;
            let items: Vec<_> = plan
                .contractors
                .iter()
                .map(|(c, cell, _)| {
                    (
                        c.clone(),
                        Placement {
                            cell: cell.clone(),
                            generation: Generation::FIRST,
                        },
                    )
                })
                .collect();
            store.put_many(&items)?;
        }

        // Configurations.
        let cp_url = https(ports.control_plane()?);
        let cp_cfg = CpConfig {
            listen: ports.control_plane()?,
            data_dir: layout.data("control-plane"),
            map_key_file,
            publish_dir: layout.p("publish"),
            admin_token_file: layout.control_plane_token(),
            tls_cert: layout.cert("control-plane"),
            tls_key: layout.key("control-plane"),
            cells: cells
                .iter()
                .map(|c| CellConfig {
                    id: c.id.clone(),
                    endpoint: c.endpoint.clone(),
                    auth_service_url: c.auth_url.clone(),
                })
                .collect(),
            bucket_count: opts.bucket_count,
            publish_interval_ms: crate::config::DEFAULT_PUBLISH_INTERVAL_MS,
        };
        write_toml(&layout.config("control-plane"), &cp_cfg)?;
        for c in &cells {
            let id = c.id.as_str();
            write_toml(
                &layout.config(&format!("{id}-auth-service")),
                &AuthServiceConfig {
                    cell_id: &c.id,
                    listen: ports.auth(c.n)?,
                    internal_listen: ports.auth_internal(c.n)?,
                    issuer: &c.endpoint,
                    data_dir: layout.data(&format!("{id}/auth-service")),
                    kek_file: layout.data(&format!("{id}/auth-service/kek")),
                    admin_token_file: layout.cell_token(&c.id, CellToken::Admin),
                    feed_token_file: layout.cell_token(&c.id, CellToken::Feed),
                    edge_token_file: layout.cell_token(&c.id, CellToken::Edge),
                    tls_cert: layout.cert(id),
                    tls_key: layout.key(id),
                    ca_cert: layout.ca(),
                    control_plane_url: &cp_url,
                    map_public_key: &map_public_key,
                    map_poll_interval_ms: if opts.stalled_map_cell == Some(c.n) {
                        STALLED_MAP_POLL_INTERVAL_MS
                    } else {
                        MAP_POLL_INTERVAL_MS
                    },
                    session_lifetime_s: SESSION_LIFETIME_S,
                    key_rotation_interval_s: KEY_ROTATION_INTERVAL_S,
                },
            )?;
            write_toml(
                &layout.config(&format!("{id}-endpoint")),
                &EdgeConfig {
                    cell_id: &c.id,
                    instance_id: &format!("{id}-edge-1"),
                    listen: ports.edge(c.n)?,
                    public_url: &c.endpoint,
                    auth_service_url: &c.auth_public_url,
                    feed_url: &c.auth_url,
                    app_url: &c.app_url,
                    feed_token_file: layout.cell_token(&c.id, CellToken::Feed),
                    app_token_file: layout.cell_token(&c.id, CellToken::App),
                    edge_token_file: layout.cell_token(&c.id, CellToken::Edge),
                    state_dir: layout.data(&format!("{id}/endpoint")),
                    tls_cert: layout.cert(id),
                    tls_key: layout.key(id),
                    ca_cert: layout.ca(),
                    write_lease_ms: WRITE_LEASE_MS,
                    feed_wait_ms: FEED_WAIT_MS,
                    session_lifetime_s: SESSION_LIFETIME_S,
                },
            )?;
            write_toml(
                &layout.config(&format!("{id}-app")),
                &AppConfig {
                    cell_id: &c.id,
                    listen: ports.app(c.n)?,
                    internal_listen: ports.app_internal(c.n)?,
                    tls_cert: layout.cert(id),
                    tls_key: layout.key(id),
                    data_dir: layout.data(&format!("{id}/app")),
                    app_token_file: layout.cell_token(&c.id, CellToken::App),
                    admin_token_file: layout.cell_token(&c.id, CellToken::Admin),
                },
            )?;
            mkdir(&layout.data(id))?;
            mkdir(&layout.data(&format!("{id}/auth-service")))?;
            mkdir(&layout.data(&format!("{id}/endpoint")))?;
            mkdir(&layout.data(&format!("{id}/app")))?;
        }

        // Processes: control plane, auth-services and apps first.
        let client = client_trusting(ca.pem().as_bytes())?;
        let spawn = |children: &mut Vec<ChildProc>, id: String, bin: &str| -> Result<()> {
            let child = spawn_child(&opts.bin_dir.join(bin), layout, &id, sup)?;
            children.push(child);
            Ok(())
        };
        spawn(children, "control-plane".into(), CONTROL_PLANE_BIN)?;
        for c in &cells {
            spawn(children, format!("{}-auth-service", c.id), AUTH_SERVICE_BIN)?;
            spawn(children, format!("{}-app", c.id), DEMO_APP_BIN)?;
        }
        let mut probes = vec![probe(
            &client,
            format!("{cp_url}/healthz"),
            "control-plane".into(),
            sup,
            layout,
            deadline,
        )];
        for c in &cells {
            // Both listeners of each: the edge needs the public ones, seeding the internal.
            for (url, id) in [
                (&c.auth_url, format!("{}-auth-service", c.id)),
                (&c.auth_public_url, format!("{}-auth-service", c.id)),
                (&c.app_internal_url, format!("{}-app", c.id)),
                (&c.app_url, format!("{}-app", c.id)),
            ] {
                probes.push(probe(
                    &client,
                    format!("{url}/healthz"),
                    id,
                    sup,
                    layout,
                    deadline,
                ));
            }
        }
        futures::future::try_join_all(probes).await?;

        // Edges.
        for c in &cells {
            spawn(children, format!("{}-endpoint", c.id), CELL_ENDPOINT_BIN)?;
        }

        // Seed every cell while the edges start.
        let hash = hashing
            .await
            .map_err(|e| CpError::Internal(format!("hashing task: {e}")))??;
        let map_bytes = fetch_map(&client, &cp_url, deadline).await?;
        let seeds = cells
            .iter()
            .map(|c| seed_cell(&client, c, &plan, &hash, &map_bytes));
        futures::future::try_join_all(seeds).await?;

        let probes = cells.iter().map(|c| {
            probe(
                &client,
                format!("{}/readyz", c.endpoint),
                format!("{}-endpoint", c.id),
                sup,
                layout,
                deadline,
            )
        });
        futures::future::try_join_all(probes).await?;

        // The fleet file.
        let pid_of = |id: &str| {
            children
                .iter()
                .find(|c| c.id == id)
                .map(|c| c.pid)
                .unwrap_or(0)
        };
        let mut technicians = Vec::new();
        let mut dispatchers = Vec::new();
        for (ctr, cell, _) in &plan.contractors {
            let user = |login: &str| DemoUser {
                contractor_id: ctr.clone(),
                login: login.to_owned(),
                password: password.to_string(),
                cell_id: cell.clone(),
            };
            technicians.extend(TECHNICIANS.iter().map(|l| user(l)));
            dispatchers.extend(DISPATCHERS.iter().map(|l| user(l)));
        }
        let file = FleetFile {
            schema: fleet_file::FLEET_SCHEMA,
            ca_cert: layout.ca(),
            control_plane: Service {
                url: cp_url.clone(),
                pid: pid_of("control-plane"),
            },
            admin_token: cp_token.to_string(),
            admin_token_file: layout.control_plane_token(),
            map_public_key,
            cells: cells
                .iter()
                .map(|c| FleetCell {
                    id: c.id.clone(),
                    endpoint: c.endpoint.clone(),
                    endpoint_pid: pid_of(&format!("{}-endpoint", c.id)),
                    auth_service: Service {
                        url: c.auth_url.clone(),
                        pid: pid_of(&format!("{}-auth-service", c.id)),
                    },
                    auth_public_url: c.auth_public_url.clone(),
                    app_url: c.app_url.clone(),
                    app_internal_url: c.app_internal_url.clone(),
                    app_pid: pid_of(&format!("{}-app", c.id)),
                    admin_token: c.admin.expose().to_owned(),
                    admin_token_file: layout.cell_token(&c.id, CellToken::Admin),
                })
                .collect(),
            demo: Demo {
                technicians,
                dispatchers,
            },
        };
        file.save(&layout.p(FLEET_FILE))?;
        Ok(file)
    }

    /// The fleet's description (also in `DIR/fleet.json`).
    pub fn file(&self) -> &FleetFile {
        &self.file
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn fleet_file_path(&self) -> PathBuf {
        self.dir.join(FLEET_FILE)
    }

    /// How long the start took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Children that have exited so far: (id, status).
    pub fn exited(&self) -> Vec<(String, Option<ExitStatus>)> {
        self.sup
            .exits
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }

    /// Log file of a child (`DIR/<component>.log`).
    pub fn log_of(&self, id: &str) -> Option<&Path> {
        self.children
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.log.as_path())
    }

    /// Stops every child: closes its stdin, sends SIGTERM, and SIGKILLs what is left after
    /// [`STOP_GRACE_MS`]. Returns once every child has been reaped.
    pub async fn stop(mut self) {
        stop_children(&self.sup, &mut self.children).await;
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Dropping the stdin handles (below) makes the children exit: that is not a death to
        // report.
        self.sup.stopping.store(true, Ordering::SeqCst);
    }
}

async fn stop_children(sup: &Supervision, children: &mut Vec<ChildProc>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    sup.stopping.store(true, Ordering::SeqCst);
    for c in children.iter_mut() {
        c.stdin.take();
        if !c.task.is_finished()
            && let Ok(pid) = i32::try_from(c.pid)
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(STOP_GRACE_MS);
    for c in children.iter_mut() {
        if tokio::time::timeout_at(deadline, &mut c.task)
            .await
            .is_err()
        {
            // Not reaped yet, so the pid is still this child's.
            if let Ok(pid) = i32::try_from(c.pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = (&mut c.task).await;
        }
    }
    children.clear();
}

fn spawn_child(bin: &Path, layout: &Layout, id: &str, sup: &Arc<Supervision>) -> Result<ChildProc> {
    let log_path = layout.log(id);
    let log = File::create(&log_path)
        .map_err(|e| CpError::io(format!("creating {}", log_path.display()), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CpError::io("duplicating a log handle", e))?;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("--config")
        .arg(layout.config(id))
        .stdin(Stdio::piped())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .env(EXIT_ON_STDIN_EOF_ENV, "1")
        // The logs are files read by people and tests: no colour escapes in them.
        .env(NO_COLOR_ENV, "1")
        .kill_on_drop(true)
        // Its own process group: a terminal's Ctrl-C reaches only cellctl, which stops the
        // children in order.
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| CpError::io(format!("starting {}", bin.display()), e))?;
    let pid = child
        .id()
        .ok_or_else(|| CpError::Fleet(format!("{id} exited at once")))?;
    let stdin = child.stdin.take();
    if let Ok(mut m) = sup.exits.lock() {
        m.remove(id);
    }
    let sup2 = sup.clone();
    let id2 = id.to_owned();
    let task = tokio::spawn(async move {
        let status = child.wait().await.ok();
        if !sup2.stopping.load(Ordering::SeqCst) {
            let what = status.map_or_else(|| "unknown status".to_string(), |s| s.to_string());
            eprintln!("cellctl dev: {id2} (pid {pid}) exited: {what}; the rest keep running");
        }
        if let Ok(mut m) = sup2.exits.lock() {
            m.insert(id2, status);
        }
    });
    Ok(ChildProc {
        id: id.to_owned(),
        pid,
        stdin,
        task,
        log: log_path,
    })
}

/// Polls `url` until it answers 200, the child exits, or the deadline passes.
async fn probe(
    client: &reqwest::Client,
    url: String,
    id: String,
    sup: &Supervision,
    layout: &Layout,
    deadline: Instant,
) -> Result<()> {
    loop {
        if let Some(status) = sup.exit_of(&id) {
            let what = status.map_or_else(|| "unknown status".to_string(), |s| s.to_string());
            return Err(CpError::Fleet(format!(
                "{id} exited during start-up ({what}); see {}",
                layout.log(&id).display()
            )));
        }
        let last = match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(CpError::Fleet(format!(
                "{id} was not ready in time ({url}: {last}); see {}",
                layout.log(&id).display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
}

async fn fetch_map(client: &reqwest::Client, cp_url: &str, deadline: Instant) -> Result<Vec<u8>> {
    let url = format!("{cp_url}/v1/placement-map");
    loop {
        let r = client.get(&url).send().await?;
        if r.status().is_success() {
            return Ok(r.bytes().await?.to_vec());
        }
        if Instant::now() >= deadline {
            return Err(CpError::Fleet(format!("{url} answered {}", r.status())));
        }
        tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
}

/// Sends an admin request and returns the JSON answer, or an error naming the call.
pub async fn admin_call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &Secret,
    body: Option<Vec<u8>>,
) -> Result<serde_json::Value> {
    let mut req = client
        .request(method.clone(), url)
        .bearer_auth(token.expose());
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b);
    }
    let r = req
        .send()
        .await
        .map_err(|e| CpError::Http(format!("{method} {url}: {e}")))?;
    let status = r.status();
    let bytes = r.bytes().await?;
    if !status.is_success() {
        let detail = serde_json::from_slice::<protocol::ErrorBody>(&bytes)
            .map(|b| format!("{} {}", b.error, b.message))
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).chars().take(200).collect());
        return Err(CpError::Http(format!(
            "{method} {url} answered {status}: {detail}"
        )));
    }
    if bytes.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| CpError::Http(format!("{method} {url}: {e}")))
}

fn to_body<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| CpError::Internal(e.to_string()))
}

/// Users, ownership records, the app's contractors and the signed map for one cell, through
/// its internal listeners with its own admin token.
async fn seed_cell(
    client: &reqwest::Client,
    cell: &CellPlan,
    plan: &SeedPlan,
    hash: &str,
    map_bytes: &[u8],
) -> Result<()> {
    use reqwest::Method;
    let admin = &cell.admin;
    let mine: Vec<_> = plan.of_cell(&cell.id).collect();
    let users: Vec<_> = mine.iter().flat_map(|c| seed::users_of(c, hash)).collect();
    for batch in users.chunks(IMPORT_BATCH_USERS) {
        admin_call(
            client,
            Method::POST,
            &format!("{}/admin/v1/users/import", cell.auth_url),
            admin,
            Some(to_body(&json!({ "users": batch }))?),
        )
        .await?;
    }
    let records: BTreeMap<_, _> = mine
        .iter()
        .map(|c| {
            (
                c.as_str(),
                protocol::ownership::OwnershipRecord::Active {
                    r#gen: Generation::FIRST,
                },
            )
        })
        .collect();
    admin_call(
        client,
        Method::PUT,
        &format!("{}/admin/v1/ownership", cell.auth_url),
        admin,
        Some(to_body(&json!({ "records": records }))?),
    )
    .await?;
    let gens: BTreeMap<_, _> = mine
        .iter()
        .map(|c| (c.as_str(), Generation::FIRST))
        .collect();
    admin_call(
        client,
        Method::PUT,
        &format!("{}/internal/v1/contractors", cell.app_internal_url),
        admin,
        Some(to_body(&json!({ "contractors": gens }))?),
    )
    .await?;
    push_map(client, &cell.auth_url, admin, map_bytes).await
}

/// Pushes a signed map to an auth-service. Already holding that version (it polled the
/// control plane first) counts as success.
pub async fn push_map(
    client: &reqwest::Client,
    auth_url: &str,
    admin: &Secret,
    map_bytes: &[u8],
) -> Result<()> {
    let pushed = admin_call(
        client,
        reqwest::Method::PUT,
        &format!("{auth_url}/admin/v1/placement-map"),
        admin,
        Some(map_bytes.to_vec()),
    )
    .await;
    let Err(e) = pushed else { return Ok(()) };
    let offered: SignedMap =
        serde_json::from_slice(map_bytes).map_err(|e| CpError::Internal(e.to_string()))?;
    let held = client
        .get(format!("{auth_url}/v1/placement-map"))
        .send()
        .await?
        .json::<SignedMap>()
        .await;
    match held {
        Ok(h) if h.map.version >= offered.map.version => Ok(()),
        _ => Err(e),
    }
}
