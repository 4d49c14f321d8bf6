//! Writing a fleet's files before any process starts: the CA and one certificate and key per
//! server, each cell's tokens, the control plane's token and map key, the seeded placements,
//! each cell's database and role (PostgreSQL fleets), and every server's configuration.

use protocol::{CellId, Generation};
use runtime::Secret;
use runtime::secret::{random_token, write_atomic, write_private};

use control_plane::config::{CellConfig, Config as CpConfig};
use control_plane::map_key::{load_or_create_map_key, public_key_b64};
use control_plane::store::{Placement, Store};

use crate::certs::{self, LocalCa};
use crate::configs::{AppConfig, AuthPostgres, AuthServiceConfig, EdgeConfig, Urls, write_toml};
use crate::error::Result;
use crate::layout::{
    CellPlan, CellToken, Layout, ReplicaPlan, edge_instance_id, mkdir, write_edge_feed_credential,
};
use crate::options::{
    DATABASE_URL_FILE, DEV_DB_MAX_CONNECTIONS, FEED_WAIT_MS, FleetOptions, KEK_FILE,
    MAP_POLL_INTERVAL_MS, SESSION_LIFETIME_S, STALLED_MAP_POLL_INTERVAL_MS, WRITE_LEASE_MS, app_id,
    auth_service_data, auth_service_id, database_name, edge_id,
};
use crate::ports::{Ports, cell_id, https};
use crate::postgres::PgServer;
use crate::seed::SeedPlan;
use fleet_description::StoreKind;

/// The child id (and TLS file name) of the control plane.
pub(crate) const CONTROL_PLANE_ID: &str = "control-plane";

/// The fleet's CA and the addresses each cell's edge certificate names, to issue more (a
/// certificate rotation).
#[derive(Debug)]
pub(crate) struct CellCerts {
    pub(crate) ca: LocalCa,
    pub(crate) ips: Vec<(CellId, Vec<std::net::IpAddr>)>,
}

/// What [`write_files`] made, for starting and seeding the processes.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) cells: Vec<CellPlan>,
    pub(crate) cp_url: String,
    /// The control plane's own token.
    pub(crate) cp_token: Secret,
    pub(crate) map_public_key: String,
    pub(crate) plan: SeedPlan,
    pub(crate) certs: CellCerts,
}

/// Issues the certificate and key of one server (its own key pair, from the fleet's CA) into
/// the fleet's `tls/` folder, named by its child id.
fn issue(ca: &LocalCa, layout: &Layout, id: &str, ips: &[std::net::IpAddr]) -> Result<()> {
    ca.issue_to(id, ips, &layout.cert(id), &layout.key(id))
}

/// Writes every file of the fleet (see the module doc). `postgres`: the fleet's server, on
/// which each cell gets its own database and role.
pub(crate) fn write_files(
    opts: &FleetOptions,
    layout: &Layout,
    ports: Ports,
    postgres: Option<&PgServer>,
) -> Result<Prepared> {
    // The CA, and one key pair and certificate per server: a server's key opens no other
    // server's connections.
    let ca = LocalCa::generate("Cellbind dev fleet CA")?;
    write_atomic(&layout.ca(), ca.pem().as_bytes(), certs::CERT_FILE_MODE)?;
    issue(&ca, layout, CONTROL_PLANE_ID, &[Ports::cell_ip(1)])?;
    let mut cells = Vec::new();
    let mut cell_ips = Vec::new();
    for n in 1..=opts.cells {
        let id = cell_id(n)?;
        let edge_ips = vec![Ports::cell_ip(n)];
        issue(&ca, layout, &edge_id(&id), &edge_ips)?;
        for r in 0..opts.auth_replicas {
            issue(
                &ca,
                layout,
                &auth_service_id(&id, r),
                &[Ports::replica_ip(n, r)],
            )?;
        }
        issue(&ca, layout, &app_id(&id), &[Ports::cell_ip(n)])?;
        // The control plane's copies of the edge's certificate (see `CellTlsFiles`): the
        // pinned one, and the next-certificate file, the same certificate until a rotation.
        for copy in [
            layout.pinned_cert(id.as_str()),
            layout.next_cert(id.as_str()),
        ] {
            std::fs::copy(layout.cert(&edge_id(&id)), &copy)
                .map_err(|e| runtime::IoError::new(format!("writing {}", copy.display()), e))?;
        }
        cell_ips.push((id.clone(), edge_ips));
        // Tokens: each cell its own, one per use.
        mkdir(&layout.secrets().join(id.as_str()))?;
        let mut admin = None;
        let mut app_internal = None;
        for kind in CellToken::ALL {
            let token = random_token();
            write_private(&layout.cell_token(&id, kind), token.as_bytes())?;
            match kind {
                CellToken::Admin => admin = Some(Secret::new(token.as_str())),
                CellToken::AppInternal => app_internal = Some(Secret::new(token.as_str())),
                CellToken::Feed | CellToken::App | CellToken::Edge => {}
            }
        }
        let (Some(admin), Some(app_internal)) = (admin, app_internal) else {
            return Err(crate::error::FleetError::Internal(
                "a cell's admin or app-internal token was not made".into(),
            ));
        };
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
            app_internal,
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
        let mut store = Store::open(&layout.data(CONTROL_PLANE_ID))?;
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
        data_dir: layout.data(CONTROL_PLANE_ID),
        map_key_file,
        publish_dir: layout.p("publish"),
        admin_token_file: layout.control_plane_token(),
        tls_cert: layout.cert(CONTROL_PLANE_ID),
        tls_key: layout.key(CONTROL_PLANE_ID),
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
    write_toml(&layout.config(CONTROL_PLANE_ID), &cp_cfg)?;
    for c in &cells {
        write_cell_configs(opts, layout, ports, postgres, c, &cp_url, &map_public_key)?;
    }
    Ok(Prepared {
        cells,
        cp_url,
        cp_token: Secret::new(cp_token.as_str()),
        map_public_key,
        plan,
        certs: CellCerts { ca, ips: cell_ips },
    })
}

/// One cell's server configurations and data folders (and, on PostgreSQL, its key-encryption
/// key, database and role).
fn write_cell_configs(
    opts: &FleetOptions,
    layout: &Layout,
    ports: Ports,
    postgres: Option<&PgServer>,
    c: &CellPlan,
    cp_url: &str,
    map_public_key: &str,
) -> Result<()> {
    let id = c.id.as_str();
    // SQLite: the auth-service makes its key-encryption key in its data directory.
    // PostgreSQL: one key per cell, made here, so every replica unseals the same keys; and the
    // cell's database, owned by the cell's own role, whose URL (with the role's password) is
    // the cell's secret.
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
                tls_cert: layout.cert(&replica.id),
                tls_key: layout.key(&replica.id),
                ca_cert: layout.ca(),
                control_plane_url: cp_url,
                map_public_key,
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
    let edge = edge_id(&c.id);
    let instance = edge_instance_id(&c.id, 1)?;
    let feed_credential = write_edge_feed_credential(&layout.dir, &c.id, &instance)?;
    write_toml(
        &layout.config(&edge),
        &EdgeConfig {
            cell_id: &c.id,
            instance_id: instance.as_str(),
            listen: ports.edge(c.n)?,
            management_listen: ports.edge_management(c.n)?,
            public_url: &c.endpoint,
            auth_service_url: Urls::of(c.replicas.iter().map(|r| r.public_url.clone()).collect()),
            feed_url: Urls::of(c.replicas.iter().map(|r| r.url.clone()).collect()),
            app_url: &c.app_url,
            feed_token_file: feed_credential,
            app_token_file: layout.cell_token(&c.id, CellToken::App),
            edge_token_file: layout.cell_token(&c.id, CellToken::Edge),
            state_dir: layout.data(&format!("{id}/endpoint")),
            tls_cert: layout.cert(&edge),
            tls_key: layout.key(&edge),
            ca_cert: layout.ca(),
            write_lease_ms: WRITE_LEASE_MS,
            feed_wait_ms: FEED_WAIT_MS,
            session_lifetime_s: SESSION_LIFETIME_S,
        },
    )?;
    let app = app_id(&c.id);
    write_toml(
        &layout.config(&app),
        &AppConfig {
            cell_id: &c.id,
            listeners: ports.app_listeners(c.n)?,
            tls_cert: layout.cert(&app),
            tls_key: layout.key(&app),
            data_dir: layout.data(&format!("{id}/app")),
            app_token_file: layout.cell_token(&c.id, CellToken::App),
            internal_token_file: layout.cell_token(&c.id, CellToken::AppInternal),
        },
    )?;
    mkdir(&layout.data(id))?;
    for r in 0..opts.auth_replicas {
        mkdir(&layout.data(&auth_service_data(&c.id, r)))?;
    }
    mkdir(&layout.data(&format!("{id}/endpoint")))?;
    mkdir(&layout.data(&format!("{id}/app")))?;
    Ok(())
}
