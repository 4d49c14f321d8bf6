//! A fleet on PostgreSQL with two auth-service replicas per cell: each replica on its own
//! address with its own configuration, all answering; the edge given every replica; one
//! replica killed while the other keeps serving. And the options no fleet can run.
//!
//! The real-process test needs the workspace's binaries: `cargo build --workspace --bins`.

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use devfleet::{Fleet, FleetError, FleetOptions, StoreKind, auth_service_id};

const DEFAULT_PORT_BASE: u16 = 11840;

#[tokio::test]
async fn sqlite_serves_one_replica_only() {
    let dir = tempfile::tempdir().unwrap();
    let bins = tempfile::tempdir().unwrap();
    let opts = FleetOptions::new(dir.path(), bins.path()).auth_replicas(2);
    let err = Fleet::start(opts).await.unwrap_err();
    assert!(matches!(err, FleetError::Config(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "configuration: SQLite serves one replica; use --store postgres"
    );
    for n in [0, 5] {
        let opts = FleetOptions::new(dir.path(), bins.path())
            .store(StoreKind::Postgres)
            .auth_replicas(n);
        let err = Fleet::start(opts).await.unwrap_err();
        assert!(
            err.to_string().contains("1..=4 auth-service replicas"),
            "{err}"
        );
    }
}

#[test]
fn replicas_listen_on_their_own_address_with_the_ports_of_replica_0() {
    let ports = devfleet::Ports { base: 8440 };
    let r0 = ports.replica_listeners(3, 0).unwrap();
    let r1 = ports.replica_listeners(3, 1).unwrap();
    assert_eq!(r0.listen, ports.auth(3).unwrap());
    assert_eq!(r0.internal_listen, ports.auth_internal(3).unwrap());
    assert_eq!(r1.listen.to_string(), "127.0.1.3:8444");
    assert_eq!(r1.internal_listen.to_string(), "127.0.1.3:8446");
    assert_eq!(r1.management_listen.to_string(), "127.0.1.3:8442");
    let all = ports.all_with_replicas(5, 4).unwrap();
    assert_eq!(all.len(), 2 + 5 * (5 + 4 * 3));
    let distinct: std::collections::BTreeSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "no address is used twice");
    assert_eq!(
        ports.all_with_replicas(5, 1).unwrap(),
        ports.all(5).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_fleet_runs_two_auth_service_replicas_per_cell() {
    runtime::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = FleetOptions::for_test(
        tmp.path().join("fleet"),
        "CELLBIND_DEVFLEET_FLEET_PORT_BASE",
        DEFAULT_PORT_BASE,
    )
    .unwrap()
    .store(StoreKind::Postgres)
    .auth_replicas(2);
    opts.cells = 2;
    assert!(
        opts.bin_dir.join("cellbind-auth-service").exists(),
        "fleet binaries missing in {}: build them first (cargo build --workspace --bins)",
        opts.bin_dir.display()
    );
    let fleet = Fleet::start(opts).await.unwrap();
    let file = fleet.file().clone();
    let client = devfleet::client_trusting_file(&file.ca_cert).unwrap();

    // fleet.json: the store, the server, two replicas per cell, replica 0 first.
    let reread = devfleet::FleetFile::load(&fleet.fleet_file_path()).unwrap();
    assert_eq!(reread, file);
    assert_eq!(file.store, StoreKind::Postgres);
    let pg_info = file.postgres.clone().unwrap();
    let pg = fleet.postgres().unwrap();
    assert_eq!(pg_info.socket_dir, pg.socket_dir());
    assert_eq!(file.cells.len(), 2);
    for (i, c) in file.cells.iter().enumerate() {
        let n = i + 1;
        assert_eq!(c.auth_services.len(), 2, "{c:?}");
        assert_eq!(c.auth_public_urls.len(), 2, "{c:?}");
        assert_eq!(c.auth_services[0], c.auth_service);
        assert_eq!(c.auth_public_urls[0], c.auth_public_url);
        assert!(
            c.auth_services[1].url.contains(&format!("127.0.1.{n}:")),
            "{c:?}"
        );
        assert_ne!(c.auth_services[0].pid, c.auth_services[1].pid);
        for s in &c.auth_services {
            assert_ne!(s.pid, 0);
            let r = client
                .get(format!("{}/healthz", s.url))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{}", s.url);
        }
        for url in &c.auth_public_urls {
            let r = client.get(format!("{url}/healthz")).send().await.unwrap();
            assert_eq!(r.status(), 200, "{url}");
        }
        // Each replica has its own management listener, recorded in fleet.json.
        let managed = devfleet::FleetManagement::load(&fleet.fleet_file_path()).unwrap();
        assert_eq!(&managed, fleet.management());
        let m = managed.cell(&c.id).unwrap();
        assert_eq!(m.auth_services.len(), 2, "{m:?}");
        assert!(
            m.auth_services[1].contains(&format!("127.0.1.{n}:")),
            "{m:?}"
        );
        for url in &m.auth_services {
            let r = client.get(format!("{url}/metrics")).send().await.unwrap();
            assert_eq!(r.status(), 200, "{url}");
        }
        for r in 0..2 {
            assert_eq!(
                fleet.pid_of(&auth_service_id(&c.id, r)),
                Some(c.auth_services[usize::from(r)].pid)
            );
        }
        // The cell's database URL is a secret file; every replica names it, with its own id.
        let url_file = fleet.dir().join(format!("secrets/{}/database.url", c.id));
        let mode = std::fs::metadata(&url_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let url = std::fs::read_to_string(&url_file).unwrap();
        assert_eq!(url, pg.url(&devfleet::database_name(&c.id)));
        for r in 0..2u8 {
            let cfg = config(&fleet, &auth_service_id(&c.id, r));
            assert_eq!(cfg["store"].as_str(), Some("postgres"));
            assert_eq!(
                cfg["database_url_file"].as_str(),
                Some(url_file.to_str().unwrap())
            );
            assert_eq!(
                cfg["replica_id"].as_str(),
                Some(format!("{}-r{r}", c.id).as_str())
            );
            assert_eq!(
                cfg["kek_file"].as_str().unwrap(),
                fleet
                    .dir()
                    .join(format!("secrets/{}/kek", c.id))
                    .to_str()
                    .unwrap()
            );
        }
        // The edge is given every replica, public and internal.
        let edge = config(&fleet, &format!("{}-endpoint", c.id));
        let urls = |key: &str| -> Vec<String> {
            edge[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(urls("auth_service_url"), c.auth_public_urls);
        let internal: Vec<_> = c.auth_services.iter().map(|s| s.url.clone()).collect();
        assert_eq!(urls("feed_url"), internal);
    }
    assert_eq!(file.pids().len(), 1 + 2 * 4);
    // One database per cell on the fleet's own server.
    let dbs = pg
        .psql(
            "postgres",
            "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE datname LIKE 'cell_%'",
        )
        .unwrap();
    assert_eq!(dbs.trim(), "cell_01,cell_02");
    // Each owned by the cell's own role, which reaches no other cell's database; no
    // auth-service's URL names the superuser.
    let owners = pg
        .psql(
            "postgres",
            "SELECT string_agg(datname || '=' || pg_get_userbyid(datdba), ',' ORDER BY datname) \
             FROM pg_database WHERE datname LIKE 'cell_%'",
        )
        .unwrap();
    assert_eq!(owners.trim(), "cell_01=cell_01,cell_02=cell_02");
    let url_of = |cell: &str| {
        std::fs::read_to_string(fleet.dir().join(format!("secrets/{cell}/database.url"))).unwrap()
    };
    for (own, other) in [("cell-01", "cell_02"), ("cell-02", "cell_01")] {
        let url = url_of(own);
        assert!(
            !url.starts_with(&format!("postgres://{}", devfleet::postgres::PG_USER)),
            "{own}'s URL names the superuser"
        );
        let at_other = url.replace(
            &format!("/{}?", own.replace('-', "_")),
            &format!("/{other}?"),
        );
        let e = pg.psql_url(&at_other, "SELECT 1").unwrap_err().to_string();
        assert!(
            e.contains("permission denied for database"),
            "{own} at {other}: {e}"
        );
        println!("postgres fleet: {own}'s role at {other}: refused");
    }

    // A replica killed: the other keeps serving, and the edge stays ready.
    let cell = &file.cells[0];
    let victim = auth_service_id(&cell.id, 1);
    fleet.kill(&victim).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fleet.exited().iter().any(|(id, _)| *id == victim) {
        assert!(Instant::now() < deadline, "{victim} did not die");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(fleet.kill("no-such-child").is_err());
    let r = client
        .get(format!("{}/healthz", cell.auth_service.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .get(format!("{}/readyz", cell.endpoint))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let socket = pg.socket_dir().join(".s.PGSQL.5432");
    assert!(socket.exists());
    fleet.stop().await;
    assert!(!socket.exists(), "PostgreSQL stops with the fleet");
}

/// A child's configuration file, parsed.
fn config(fleet: &Fleet, id: &str) -> toml::Table {
    let text = std::fs::read_to_string(fleet.dir().join(format!("config/{id}.toml"))).unwrap();
    text.parse().unwrap()
}
