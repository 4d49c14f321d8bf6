//! [`Fleet`]: starting a dev fleet (files, processes, seeding, `fleet.json`) and stopping it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use control_plane::config::{CellConfig, Config as CpConfig, DEFAULT_BUCKET_COUNT};
use control_plane::map_key::{load_or_create_map_key, public_key_b64};
use control_plane::store::{Placement, Store};
use protocol::{CellId, Generation};
use runtime::secret::{random_token, write_atomic, write_private};
use runtime::{IoContext as _, Secret};

use crate::certs::{self, LocalCa, client_trusting};
use crate::children::{ChildProc, Supervision, kill_child, probe, spawn_child, stop_children};
use crate::configs::{AppConfig, AuthPostgres, AuthServiceConfig, EdgeConfig, Urls, write_toml};
use crate::error::{FleetError, Result};
use crate::fleet_file::{
    self, CellManagement, Demo, DemoUser, FLEET_FILE, FleetCell, FleetFile, FleetManagement,
    JOURNAL_FILE, MAP_FILE, PostgresInfo, SESSION_FILE, Service, StoreKind,
};
use crate::layout::{CellPlan, CellToken, Layout, ReplicaPlan, SECRETS_DIR, lock_dir, mkdir};
use crate::ports::{DEFAULT_PORT_BASE, Ports, cell_id, check_ports_free, https};
use crate::postgres::{self, PgServer};
use crate::seed::{self, DISPATCHERS, SeedPlan, TECHNICIANS};
use crate::seeding::{fetch_map, push_map, seed_cell};

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
    fn check(&self) -> Result<()> {
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

/// The data directory (relative to `DIR/data`) of cell `cell`'s auth-service replica `r`.
fn auth_service_data(cell: &CellId, r: u8) -> String {
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

/// A running fleet. Dropping it closes the children's stdin (so they exit) and stops its
/// PostgreSQL server, if any; call [`Fleet::stop`] to also wait for the children.
#[derive(Debug)]
pub struct Fleet {
    dir: PathBuf,
    file: FleetFile,
    /// Where each server's management listener is (also in `fleet.json`).
    management: FleetManagement,
    children: Vec<ChildProc>,
    /// Declared after `children`: dropped (stopped) after them.
    postgres: Option<PgServer>,
    sup: Arc<Supervision>,
    started_in: Duration,
    /// The CA (in memory only) and the addresses each cell's certificate names.
    certs: CellCerts,
    _lock: File,
}

/// The fleet's CA and what it issued to the cells, to issue more (a certificate rotation).
#[derive(Debug)]
struct CellCerts {
    ca: LocalCa,
    ips: Vec<(CellId, Vec<std::net::IpAddr>)>,
}

/// A cell's TLS files in the fleet directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellTlsFiles {
    /// The certificate chain every server of the cell serves (the edge reloads it on change).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The control plane's `tls_cert_file` of the cell (pinned as `current`): its own copy of
    /// the served certificate, as an operator installs it beside the control plane, so that a
    /// certificate the edge starts serving is not pinned by itself.
    pub pinned_cert: PathBuf,
    /// The control plane's `tls_next_cert_file` of the cell: holds the served certificate
    /// (no next pin) until a rotation writes the next one here.
    pub next_cert: PathBuf,
}

impl Fleet {
    /// Starts a fleet and returns once every edge answers `/readyz`; on failure everything it
    /// started is stopped again.
    pub async fn start(opts: FleetOptions) -> Result<Fleet> {
        let t0 = Instant::now();
        let deadline = t0 + opts.startup_timeout;
        opts.check()?;
        for bin in [
            CONTROL_PLANE_BIN,
            AUTH_SERVICE_BIN,
            CELL_ENDPOINT_BIN,
            DEMO_APP_BIN,
        ] {
            let p = opts.bin_dir.join(bin);
            if !p.is_file() {
                return Err(FleetError::Fleet(format!(
                    "{bin} was not found in {} (build it: cargo build --workspace --bins)",
                    opts.bin_dir.display()
                )));
            }
        }
        mkdir(&opts.dir)?;
        let dir = std::fs::canonicalize(&opts.dir)
            .with_context(|| format!("resolving {}", opts.dir.display()))?;
        let lock = lock_dir(&dir)?;
        let ports = Ports {
            base: opts.port_base,
        };
        check_ports_free(&ports.all_with_replicas(opts.cells, opts.auth_replicas)?)?;
        let layout = Layout { dir: dir.clone() };
        // A PostgreSQL server an earlier run left behind (it was killed) goes first.
        if let Ok(old) = FleetFile::load(&layout.p(FLEET_FILE))
            && let Some(pg) = &old.postgres
        {
            postgres::stop_leftover(&pg.data_dir, &pg.socket_dir);
        }
        // A fresh fleet every time: remove what a previous run generated.
        for sub in [
            "tls",
            "config",
            "data",
            "publish",
            POSTGRES_DIR,
            SECRETS_DIR,
        ] {
            let p = layout.p(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).with_context(|| format!("removing {}", p.display()))?;
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
            SESSION_FILE,
            MAP_FILE,
            JOURNAL_FILE,
            &format!("{JOURNAL_FILE}-wal"),
            &format!("{JOURNAL_FILE}-shm"),
        ] {
            let p = layout.p(f);
            if p.exists() {
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
        for sub in ["tls", "config", "data", "publish", SECRETS_DIR] {
            mkdir(&layout.p(sub))?;
        }
        // The private PostgreSQL server, before anything else starts: the start-up deadline
        // counts from when it is up.
        let (postgres, deadline) = match opts.store {
            StoreKind::Sqlite => (None, deadline),
            StoreKind::Postgres => {
                let pg_dir = layout.p(POSTGRES_DIR);
                let connections = u32::from(opts.cells)
                    * u32::from(opts.auth_replicas)
                    * (DEV_DB_MAX_CONNECTIONS + 2)
                    + 10;
                // Owned by this process, like the children: it stops even if this process is
                // killed.
                let pg = tokio::task::spawn_blocking(move || {
                    PgServer::start_for_process(&pg_dir, connections)
                })
                .await
                .map_err(|e| FleetError::Internal(format!("PostgreSQL start task: {e}")))??;
                (Some(pg), Instant::now() + opts.startup_timeout)
            }
        };
        let sup = Arc::new(Supervision::default());
        let mut children = Vec::new();
        let started = Self::start_inner(
            &opts,
            &layout,
            ports,
            postgres.as_ref(),
            &sup,
            &mut children,
            deadline,
        )
        .await;
        match started {
            Ok((file, management, certs)) => Ok(Fleet {
                dir,
                file,
                management,
                children,
                postgres,
                sup,
                started_in: t0.elapsed(),
                certs,
                _lock: lock,
            }),
            Err(e) => {
                stop_children(&sup, &mut children).await;
                stop_postgres(postgres).await;
                Err(e)
            }
        }
    }

    async fn start_inner(
        opts: &FleetOptions,
        layout: &Layout,
        ports: Ports,
        postgres: Option<&PgServer>,
        sup: &Arc<Supervision>,
        children: &mut Vec<ChildProc>,
        deadline: Instant,
    ) -> Result<(FleetFile, FleetManagement, CellCerts)> {
        // Password hashing runs while the files are written and the processes start.
        let password = seed::demo_password();
        let pw = password.clone();
        let hashing = tokio::task::spawn_blocking(move || seed::hash_password(&pw));

        // CA and certificates.
        let ca = LocalCa::generate("Cellbind dev fleet CA")?;
        write_atomic(&layout.ca(), ca.pem().as_bytes(), certs::CERT_FILE_MODE)?;
        ca.issue_to(
            "control-plane",
            &[Ports::cell_ip(1)],
            &layout.cert("control-plane"),
            &layout.key("control-plane"),
        )?;
        let mut cells = Vec::new();
        let mut cell_ips = Vec::new();
        for n in 1..=opts.cells {
            let id = cell_id(n)?;
            // One certificate per cell, for every replica's address.
            let ips: Vec<_> = (0..opts.auth_replicas)
                .map(|r| Ports::replica_ip(n, r))
                .collect();
            ca.issue_to(
                id.as_str(),
                &ips,
                &layout.cert(id.as_str()),
                &layout.key(id.as_str()),
            )?;
            // The control plane's copies (see `CellTlsFiles`): the pinned certificate, and the
            // next-certificate file, the same certificate until a rotation.
            for copy in [
                layout.pinned_cert(id.as_str()),
                layout.next_cert(id.as_str()),
            ] {
                std::fs::copy(layout.cert(id.as_str()), &copy)
                    .with_context(|| format!("writing {}", copy.display()))?;
            }
            cell_ips.push((id.clone(), ips));
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
            let admin =
                admin.ok_or_else(|| FleetError::Internal("no admin token was made".into()))?;
            let mut replicas = Vec::new();
            for r in 0..opts.auth_replicas {
                let l = ports.replica_listeners(n, r)?;
                replicas.push(ReplicaPlan {
                    id: auth_service_id(&id, r),
                    url: https(l.internal_listen),
                    public_url: https(l.listen),
                });
            }
            cells.push(CellPlan {
                n,
                endpoint: https(ports.edge(n)?),
                auth_url: https(ports.auth_internal(n)?),
                auth_public_url: https(ports.auth(n)?),
                replicas,
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
        let map_public_key = public_key_b64(&load_or_create_map_key(&map_key_file)?.public_key());

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
            management_listen: ports.control_plane_management()?,
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
                    tls_cert_file: layout.pinned_cert(c.id.as_str()),
                    tls_next_cert_file: Some(layout.next_cert(c.id.as_str())),
                })
                .collect(),
            bucket_count: opts.bucket_count,
            publish_interval_ms: control_plane::config::DEFAULT_PUBLISH_INTERVAL_MS,
            log_format: Default::default(),
            listeners: Default::default(),
        };
        write_toml(&layout.config("control-plane"), &cp_cfg)?;
        for c in &cells {
            let id = c.id.as_str();
            // SQLite: the auth-service makes its key-encryption key in its data directory.
            // PostgreSQL: one key per cell, made here, so every replica unseals the same keys;
            // and the cell's database with its URL file.
            let (kek_file, database_url_file) = match postgres {
                None => (layout.data(&format!("{id}/auth-service/kek")), None),
                Some(pg) => {
                    let kek = layout.secrets().join(id).join(KEK_FILE);
                    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
                    rand::Rng::fill_bytes(&mut rand::rng(), bytes.as_mut());
                    write_private(&kek, bytes.as_ref())?;
                    let db = database_name(&c.id);
                    pg.create_database(&db)?;
                    let url_file = layout.secrets().join(id).join(DATABASE_URL_FILE);
                    write_private(&url_file, pg.url(&db).as_bytes())?;
                    (kek, Some(url_file))
                }
            };
            for (r, replica) in (0u8..).zip(&c.replicas) {
                write_toml(
                    &layout.config(&replica.id),
                    &AuthServiceConfig {
                        cell_id: &c.id,
                        listeners: ports.replica_listeners(c.n, r)?,
                        issuer: &c.endpoint,
                        data_dir: layout.data(&auth_service_data(&c.id, r)),
                        kek_file: kek_file.clone(),
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
                        key_rotation_interval_s: opts.key_rotation_interval_s,
                        postgres: database_url_file.as_ref().map(|f| AuthPostgres {
                            store: StoreKind::Postgres.as_str(),
                            database_url_file: f.clone(),
                            database_max_connections: DEV_DB_MAX_CONNECTIONS,
                            replica_id: format!("{id}-r{r}"),
                        }),
                    },
                )?;
            }
            write_toml(
                &layout.config(&format!("{id}-endpoint")),
                &EdgeConfig {
                    cell_id: &c.id,
                    instance_id: &format!("{id}-edge-1"),
                    listen: ports.edge(c.n)?,
                    management_listen: ports.edge_management(c.n)?,
                    public_url: &c.endpoint,
                    auth_service_url: Urls::of(
                        c.replicas.iter().map(|r| r.public_url.clone()).collect(),
                    ),
                    feed_url: Urls::of(c.replicas.iter().map(|r| r.url.clone()).collect()),
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
                    listeners: ports.app_listeners(c.n)?,
                    tls_cert: layout.cert(id),
                    tls_key: layout.key(id),
                    data_dir: layout.data(&format!("{id}/app")),
                    app_token_file: layout.cell_token(&c.id, CellToken::App),
                    admin_token_file: layout.cell_token(&c.id, CellToken::Admin),
                },
            )?;
            mkdir(&layout.data(id))?;
            for r in 0..opts.auth_replicas {
                mkdir(&layout.data(&auth_service_data(&c.id, r)))?;
            }
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
            for r in &c.replicas {
                spawn(children, r.id.clone(), AUTH_SERVICE_BIN)?;
            }
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
            let mut listeners = Vec::new();
            for r in &c.replicas {
                listeners.push((&r.url, r.id.clone()));
                listeners.push((&r.public_url, r.id.clone()));
            }
            listeners.push((&c.app_internal_url, format!("{}-app", c.id)));
            listeners.push((&c.app_url, format!("{}-app", c.id)));
            for (url, id) in listeners {
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
            .map_err(|e| FleetError::Internal(format!("hashing task: {e}")))??;
        let map_bytes = fetch_map(&client, &cp_url, deadline).await?;
        let seeds = cells
            .iter()
            .map(|c| seed_cell(&client, c, &plan, &hash, &map_bytes));
        futures::future::try_join_all(seeds).await?;
        // Seeding went through replica 0; the map goes to every other replica too, so none
        // waits for its first poll.
        let pushes = cells.iter().flat_map(|c| {
            c.replicas
                .iter()
                .skip(1)
                .map(|r| push_map(&client, &r.url, &c.admin, &map_bytes))
        });
        futures::future::try_join_all(pushes).await?;

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
            store: opts.store,
            postgres: postgres.map(|pg| PostgresInfo {
                socket_dir: pg.socket_dir().to_path_buf(),
                data_dir: pg.data_dir().to_path_buf(),
            }),
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
                    auth_services: c
                        .replicas
                        .iter()
                        .map(|r| Service {
                            url: r.url.clone(),
                            pid: pid_of(&r.id),
                        })
                        .collect(),
                    auth_public_urls: c.replicas.iter().map(|r| r.public_url.clone()).collect(),
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
        let management = FleetManagement {
            control_plane: https(ports.control_plane_management()?),
            cells: cells
                .iter()
                .map(|c| {
                    Ok(CellManagement {
                        id: c.id.clone(),
                        edges: vec![https(ports.edge_management(c.n)?)],
                        auth_services: (0..opts.auth_replicas)
                            .map(|r| Ok(https(ports.replica_listeners(c.n, r)?.management_listen)))
                            .collect::<Result<_>>()?,
                        app: https(ports.app_listeners(c.n)?.management_listen),
                    })
                })
                .collect::<Result<_>>()?,
        };
        file.save_with(&layout.p(FLEET_FILE), &management)?;
        Ok((file, management, CellCerts { ca, ips: cell_ips }))
    }

    /// A cell's TLS files; `None` for a cell this fleet does not have.
    pub fn cell_tls_files(&self, cell: &CellId) -> Option<CellTlsFiles> {
        self.file.cells.iter().find(|c| &c.id == cell)?;
        let layout = Layout {
            dir: self.dir.clone(),
        };
        Some(CellTlsFiles {
            cert: layout.cert(cell.as_str()),
            key: layout.key(cell.as_str()),
            pinned_cert: layout.pinned_cert(cell.as_str()),
            next_cert: layout.next_cert(cell.as_str()),
        })
    }

    /// A new certificate (PEM) and key (PEM) for `cell` from the fleet's CA, for the same
    /// addresses as the one it serves: what a certificate rotation installs.
    pub fn issue_cell_certificate(
        &self,
        cell: &CellId,
    ) -> Result<(String, zeroize::Zeroizing<String>)> {
        let (_, ips) = self
            .certs
            .ips
            .iter()
            .find(|(id, _)| id == cell)
            .ok_or_else(|| FleetError::Fleet(format!("the fleet has no cell {cell}")))?;
        self.certs.ca.issue(cell.as_str(), ips)
    }

    /// The fleet's description (also in `DIR/fleet.json`).
    pub fn file(&self) -> &FleetFile {
        &self.file
    }

    /// Each server's management listener (`/healthz`, `/readyz`, `/metrics`; also in
    /// `DIR/fleet.json`).
    pub fn management(&self) -> &FleetManagement {
        &self.management
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

    /// The private PostgreSQL server, when the fleet's store is PostgreSQL (tests: `psql`, e.g.
    /// to terminate one replica's connections).
    pub fn postgres(&self) -> Option<&PgServer> {
        self.postgres.as_ref()
    }

    /// The ids of the fleet's children (`control-plane`, `<cell>-auth-service`,
    /// `<cell>-auth-service-r<r>`, `<cell>-app`, `<cell>-endpoint`), in start order.
    pub fn child_ids(&self) -> Vec<String> {
        self.children.iter().map(|c| c.id.clone()).collect()
    }

    /// The pid of a child, by its id.
    pub fn pid_of(&self, id: &str) -> Option<u32> {
        self.children.iter().find(|c| c.id == id).map(|c| c.pid)
    }

    /// SIGKILLs one child by its id (game days). Its death is reported like any other and it
    /// is left dead; an unknown id is an error.
    pub fn kill(&self, id: &str) -> Result<()> {
        let child = self
            .children
            .iter()
            .find(|c| c.id == id)
            .ok_or_else(|| FleetError::Fleet(format!("the fleet has no child {id:?}")))?;
        kill_child(child)
    }

    /// Stops every child: closes its stdin, sends SIGTERM, and SIGKILLs what is left after
    /// [`STOP_GRACE_MS`]. Returns once every child has been reaped; then stops the PostgreSQL
    /// server, if any.
    pub async fn stop(mut self) {
        stop_children(&self.sup, &mut self.children).await;
        stop_postgres(self.postgres.take()).await;
    }
}

/// Stops a PostgreSQL server off the async threads; a failure is reported on stderr.
async fn stop_postgres(pg: Option<PgServer>) {
    let Some(pg) = pg else { return };
    match tokio::task::spawn_blocking(move || pg.stop()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("cellctl dev: stopping PostgreSQL: {e}"),
        Err(e) => eprintln!("cellctl dev: stopping PostgreSQL: {e}"),
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Dropping the stdin handles (below) makes the children exit: that is not a death to
        // report.
        self.sup.stopping.store(true, Ordering::SeqCst);
    }
}
