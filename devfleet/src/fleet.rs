//! [`Fleet`]: starting a dev fleet (its files, then its processes, seeding and `fleet.json`)
//! and stopping it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleet_description::{
    CellManagement, Demo, DemoUser, FLEET_FILE, FLEET_SCHEMA, FleetCell, FleetFile,
    FleetManagement, JOURNAL_FILE, MAP_FILE, PostgresInfo, SESSION_FILE, Service, StoreKind,
    client_trusting,
};
use protocol::CellId;
use runtime::IoContext as _;

use crate::children::{ChildProc, Supervision, kill_child, probe, spawn_child, stop_children};
use crate::error::{FleetError, Result};
use crate::layout::{CellToken, Layout, SECRETS_DIR, lock_dir, mkdir};
pub use crate::options::{
    AUTH_SERVICE_BIN, CELL_ENDPOINT_BIN, CONTROL_PLANE_BIN, DATABASE_URL_FILE, DEFAULT_CELLS,
    DEFAULT_DIR, DEFAULT_STARTUP_TIMEOUT_MS, DEMO_APP_BIN, DEV_DB_MAX_CONNECTIONS, FEED_WAIT_MS,
    FleetOptions, KEK_FILE, KEY_ROTATION_INTERVAL_S, MAP_POLL_INTERVAL_MS, MAX_AUTH_REPLICAS,
    POSTGRES_DIR, SESSION_LIFETIME_S, STALLED_MAP_POLL_INTERVAL_MS, TEST_AUTH_REPLICAS_ENV,
    TEST_STORE_ENV, WRITE_LEASE_MS, app_id, auth_service_id, database_name, edge_id, test_bin_dir,
};
use crate::ports::{Ports, check_ports_free, https};
use crate::postgres::{self, PgServer};
use crate::prepare::{CONTROL_PLANE_ID, CellCerts, Prepared, write_files};
use crate::seed::{self, DISPATCHERS, TECHNICIANS};
use crate::seeding::{fetch_map, push_map, seed_cell};

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
    /// The CA (in memory only) and the addresses each cell's edge certificate names.
    certs: CellCerts,
    _lock: File,
}

/// A cell's edge TLS files in the fleet directory (each of the cell's other servers has its
/// own certificate and key: `DIR/tls/<child id>.pem`, `DIR/tls/<child id>-key.pem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellTlsFiles {
    /// The certificate chain the cell's edge serves (it reloads it on change).
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
        let Prepared {
            cells,
            cp_url,
            cp_token,
            map_public_key,
            plan,
            certs,
        } = write_files(opts, layout, ports, postgres)?;

        // Processes: control plane, auth-services and apps first.
        let client = client_trusting(certs.ca.pem().as_bytes())?;
        let spawn = |children: &mut Vec<ChildProc>, id: String, bin: &str| -> Result<()> {
            let child = spawn_child(&opts.bin_dir.join(bin), layout, &id, sup)?;
            children.push(child);
            Ok(())
        };
        spawn(children, CONTROL_PLANE_ID.into(), CONTROL_PLANE_BIN)?;
        for c in &cells {
            for r in &c.replicas {
                spawn(children, r.id.clone(), AUTH_SERVICE_BIN)?;
            }
            spawn(children, app_id(&c.id), DEMO_APP_BIN)?;
        }
        let mut probes = vec![probe(
            &client,
            format!("{cp_url}/healthz"),
            CONTROL_PLANE_ID.into(),
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
            listeners.push((&c.app_internal_url, app_id(&c.id)));
            listeners.push((&c.app_url, app_id(&c.id)));
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
            spawn(children, edge_id(&c.id), CELL_ENDPOINT_BIN)?;
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
                edge_id(&c.id),
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
            schema: FLEET_SCHEMA,
            ca_cert: layout.ca(),
            control_plane: Service {
                url: cp_url.clone(),
                pid: pid_of(CONTROL_PLANE_ID),
            },
            admin_token: cp_token.expose().to_owned(),
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
                    endpoint_pid: pid_of(&edge_id(&c.id)),
                    auth_service: Service {
                        url: c.auth_url.clone(),
                        pid: pid_of(&auth_service_id(&c.id, 0)),
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
                    app_pid: pid_of(&app_id(&c.id)),
                    admin_token: c.admin.expose().to_owned(),
                    admin_token_file: layout.cell_token(&c.id, CellToken::Admin),
                    app_internal_token: c.app_internal.expose().to_owned(),
                    app_internal_token_file: layout.cell_token(&c.id, CellToken::AppInternal),
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
        Ok((file, management, certs))
    }

    /// A cell's TLS files; `None` for a cell this fleet does not have.
    pub fn cell_tls_files(&self, cell: &CellId) -> Option<CellTlsFiles> {
        self.file.cells.iter().find(|c| &c.id == cell)?;
        let layout = Layout {
            dir: self.dir.clone(),
        };
        Some(CellTlsFiles {
            cert: layout.cert(&edge_id(cell)),
            key: layout.key(&edge_id(cell)),
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
        let own: Vec<u32> = self.children.iter().map(|c| c.pid).collect();
        stop_children(&self.sup, &mut self.children).await;
        // Servers a game day restarted are not children: `fleet.json` names them.
        let dir = self.dir.clone();
        let grace = Duration::from_millis(crate::children::STOP_GRACE_MS);
        let _ = tokio::task::spawn_blocking(move || {
            crate::children::stop_strays(&dir, &own, Some(grace));
        })
        .await;
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
        // A fleet dropped without `stop` (a test that panicked): the servers a game day
        // restarted have no stdin tied to this process, so kill them here.
        let own: Vec<u32> = self.children.iter().map(|c| c.pid).collect();
        if !own.is_empty() {
            crate::children::stop_strays(&self.dir, &own, None);
        }
    }
}
