//! The private PostgreSQL server ([`PgServer`]): started (as the `postgres` user when the test
//! runs as root), a database made and queried, stopped with its temporary directories; every
//! database's own role reaches that database only, and nothing logs in without its password.

use devfleet::PgServer;

#[test]
fn a_private_server_starts_serves_a_database_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let pg = PgServer::start(&dir.path().join("postgres")).unwrap();
    assert!(pg.data_dir().join("PG_VERSION").is_file());
    // Unix socket only: the socket is in its folder.
    assert!(pg.socket_dir().join(".s.PGSQL.5432").exists());
    pg.create_database("cell_01").unwrap();
    assert_eq!(pg.psql("cell_01", "SELECT 1").unwrap().trim(), "1");
    // The database's own role, never the superuser, with its password.
    let url = pg.url("cell_01");
    assert!(url.starts_with("postgres://cell_01:"), "the URL's role");
    assert!(
        url.contains("@localhost/cell_01?host=/"),
        "the URL's database"
    );
    assert!(
        !url.starts_with(&format!("postgres://{}", devfleet::postgres::PG_USER)),
        "no superuser in the URL"
    );
    // A database name that would need quoting is refused, not run.
    assert!(pg.create_database("cell-01; DROP").is_err());
    // An SQL error is an error, with PostgreSQL's message.
    let err = pg.psql("cell_01", "SELECT nope").unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");

    let socket_dir = pg.socket_dir().to_path_buf();
    let data_dir = pg.data_dir().to_path_buf();
    pg.stop().unwrap();
    assert!(!socket_dir.join(".s.PGSQL.5432").exists());
    // Root's server lived in a temporary directory, removed at stop; an ordinary user's stays
    // in its folder (started again, it is not initialised twice).
    if data_dir.starts_with(dir.path()) {
        let again = PgServer::start(&dir.path().join("postgres")).unwrap();
        assert_eq!(again.psql("cell_01", "SELECT 2").unwrap().trim(), "2");
        drop(again);
    } else {
        assert!(!data_dir.exists(), "{}", data_dir.display());
    }
    assert!(dir.path().join("postgres/postgres.log").is_file());
}

#[test]
fn a_databases_own_role_reaches_that_database_only_and_nothing_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let pg = PgServer::start(&dir.path().join("postgres")).unwrap();
    pg.create_database("cell_01").unwrap();
    pg.create_database("cell_02").unwrap();
    let (one, two) = (pg.url("cell_01"), pg.url("cell_02"));
    assert_ne!(one, two);
    // Each role in its own database: it owns it (creates and reads its tables), and is no
    // superuser.
    for (url, role) in [(&one, "cell_01"), (&two, "cell_02")] {
        let out = pg
            .psql_url(
                url,
                "CREATE TABLE t (x int); INSERT INTO t VALUES (1); \
                 SELECT current_user || ' ' || (SELECT count(*) FROM t) || ' ' || \
                 (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
            )
            .unwrap();
        assert_eq!(out.trim(), format!("{role} 1 false"));
    }
    // cell_01's role (its user and password) at cell_02's database, and at the server's own.
    let mut refusals = Vec::new();
    for other in ["cell_02", "postgres", "template1"] {
        let url = one.replace("/cell_01?", &format!("/{other}?"));
        let e = pg.psql_url(&url, "SELECT 1").unwrap_err().to_string();
        assert!(e.contains("permission denied for database"), "{other}: {e}");
        refusals.push(format!("cell_01 -> {other}: refused"));
    }
    // Nobody logs in without a password: not a cell's role, not the superuser.
    for user in ["cell_01", "cellbind"] {
        let url = format!(
            "postgres://{user}@localhost/cell_01?host={}",
            pg.socket_dir().display()
        );
        let e = pg.psql_url(&url, "SELECT 1").unwrap_err().to_string();
        assert!(e.contains("password"), "{user} without a password: {e}");
        refusals.push(format!("{user} without a password: refused"));
    }
    // A wrong password for the right role.
    let wrong = one.replacen("postgres://cell_01:", "postgres://cell_01:x", 1);
    let e = pg.psql_url(&wrong, "SELECT 1").unwrap_err().to_string();
    assert!(e.contains("password authentication failed"), "{e}");
    refusals.push("cell_01 with a wrong password: refused".into());
    println!("postgres roles: {}", refusals.join("; "));
    // The superuser's password file is private.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("postgres/superuser.password"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_long_directory_gets_a_short_socket_path() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("a".repeat(60)).join("b".repeat(60));
    let pg = PgServer::start(&long).unwrap();
    let socket = pg.socket_dir().join(".s.PGSQL.5432");
    assert!(socket.as_os_str().len() < 107, "{}", socket.display());
    assert_eq!(pg.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    drop(pg); // stopped on drop
    assert!(!socket.exists());
}

/// Set for the child process of [`a_process_owned_server_stops_when_its_process_exits`]: the
/// folder its server goes in.
const HELPER_DIR_ENV: &str = "CELLBIND_DEVFLEET_PG_HELPER_DIR";

#[test]
fn a_process_owned_server_serves_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let pg = PgServer::start_for_process(&dir.path().join("pg"), 20).unwrap();
    pg.create_database("t_1").unwrap();
    assert_eq!(pg.psql("t_1", "SHOW max_connections").unwrap().trim(), "20");
    let socket = pg.socket_dir().join(".s.PGSQL.5432");
    assert!(socket.exists());
    pg.stop().unwrap();
    assert!(!socket.exists());
}

#[test]
fn a_process_owned_server_stops_when_its_process_exits() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "postgres::helper_starts_a_process_owned_server_and_exits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let socket = stdout
        .lines()
        .find_map(|l| l.split_once("socket=").map(|(_, s)| s.trim()))
        .unwrap_or_else(|| panic!("no socket line: {stdout}"));
    let socket = std::path::Path::new(socket).join(".s.PGSQL.5432");
    // The helper exited without stopping its server: the watchdog does, shortly after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server outlived its process"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Not a test of its own: the child process of the test above (does nothing without
/// [`HELPER_DIR_ENV`]).
#[test]
fn helper_starts_a_process_owned_server_and_exits() {
    let Some(dir) = std::env::var_os(HELPER_DIR_ENV) else {
        return;
    };
    static SERVER: std::sync::OnceLock<PgServer> = std::sync::OnceLock::new();
    let pg = SERVER.get_or_init(|| {
        PgServer::start_for_process(&std::path::Path::new(&dir).join("pg"), 10).unwrap()
    });
    assert_eq!(pg.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    println!("socket={}", pg.socket_dir().display());
    // Exits with the server still running and its `PgServer` never dropped.
    std::process::exit(0);
}
