//! Helpers of the end-to-end tests: start a real fleet (exactly what `cellctl dev` runs) in a
//! temporary directory on a random port base, and talk to it over TLS trusting only its CA.
//!
//! The fleet's binaries must be built first: `cargo build --workspace --bins`.
//!
//! All end-to-end tests are modules of one test binary, so the tests share the machine: every
//! test that runs a fleet holds a [`FleetSlot`] for as long as its fleet lives. Light tests share the slot with each other;
//! the game days and other tests that measure windows, latencies or deadlines take it alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support: failing loudly is its job

use std::path::PathBuf;
use std::time::{Duration, Instant};

use devfleet::{CellToken, FleetError};
use devfleet::{DemoUser, Fleet, FleetCell, FleetFile, FleetOptions, client_trusting_file};
use protocol::map::SignedMap;
use rand::RngExt as _;
use serde_json::Value;

/// How a test shares the machine with the other fleet tests of the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Runs beside other `Shared` tests (as the tests of one file always did).
    Shared,
    /// Runs with no other fleet test: for the game days and for tests that measure windows,
    /// latencies or deadlines, which a neighbour's load would distort.
    Exclusive,
}

/// The machine's fleet slots: shared tests take a read guard, exclusive ones the write guard.
/// The lock is fair, so a waiting exclusive test is not starved by a stream of shared ones.
/// It is a runtime-independent tokio lock: each `#[tokio::test]` has its own runtime.
static FLEET_SLOTS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A held fleet slot; released when dropped. A test holds at most one (taking a second one
/// could wait forever behind a queued exclusive test).
#[derive(Debug)]
pub enum FleetSlot {
    Shared(tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(tokio::sync::RwLockWriteGuard<'static, ()>),
}

/// Waits for a fleet slot of the given kind.
pub async fn fleet_slot(slot: Slot) -> FleetSlot {
    match slot {
        Slot::Shared => FleetSlot::Shared(FLEET_SLOTS.read().await),
        Slot::Exclusive => FleetSlot::Exclusive(FLEET_SLOTS.write().await),
    }
}

/// Lowest random port base.
pub const PORT_BASE_MIN: u16 = 20_000;
/// Highest random port base: below Linux's default ephemeral range (32768–60999), so an
/// outgoing connection's local port is never a fleet's listening port.
pub const PORT_BASE_MAX: u16 = 32_000;
/// Attempts at finding free ports.
pub const PORT_ATTEMPTS: usize = 8;

/// The directory holding the workspace's binaries (the target profile directory).
pub fn bin_dir() -> PathBuf {
    let dir = devfleet::test_bin_dir().expect("the target directory");
    for bin in [
        "cellctl",
        "cellbind-control-plane",
        "cellbind-auth-service",
        "cellbind-cell-endpoint",
        "cellbind-demo-app",
    ] {
        assert!(
            dir.join(bin).is_file(),
            "{bin} is not built in {}: run `cargo build --workspace --bins` first",
            dir.display()
        );
    }
    dir
}

/// A random port base in [`PORT_BASE_MIN`], [`PORT_BASE_MAX`].
pub fn random_port_base() -> u16 {
    rand::rng().random_range(PORT_BASE_MIN..PORT_BASE_MAX)
}

/// A random port base whose five-cell dev fleet's ports are all free now (for a `cellctl dev`
/// the test starts itself).
pub fn free_port_base() -> u16 {
    for _ in 0..20 {
        let b = random_port_base();
        let ports = devfleet::Ports { base: b }
            .all(5)
            .expect("a five-cell fleet's ports");
        if devfleet::check_ports_free(&ports).is_ok() {
            return b;
        }
    }
    panic!("no free port base");
}

/// Builds the release tarball of the suite's debug binaries (`scripts/package --profile debug
/// --no-build`) into `dir` and unpacks it there, as an operator receives it; answers the
/// unpacked directory.
pub fn package_and_unpack(dir: &std::path::Path) -> PathBuf {
    bin_dir();
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(workspace.join("scripts/package"))
        .args(["--profile", "debug", "--no-build", "--out"])
        .arg(dir.join("package"))
        .output()
        .expect("scripts/package runs");
    assert!(
        out.status.success(),
        "scripts/package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tarball = PathBuf::from(stdout.lines().next().unwrap_or_default().trim());
    let unpacked = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .status()
        .expect("tar runs");
    assert!(unpacked.success(), "tar -xzf {}", tarball.display());
    let name = tarball
        .file_name()
        .and_then(|n| n.to_str())
        .expect("the tarball's name");
    dir.join(name.trim_end_matches(".tar.gz"))
        .canonicalize()
        .expect("the unpacked tarball")
}

/// A running fleet in its own temporary directory, holding its test's [`FleetSlot`].
#[derive(Debug)]
pub struct TestFleet {
    pub fleet: Fleet,
    pub dir: tempfile::TempDir,
    pub client: reqwest::Client,
    /// Declared last: released after the fleet is dropped.
    pub slot: FleetSlot,
}

impl TestFleet {
    /// Starts a fleet in a shared slot; retries with another port base when an address is
    /// taken.
    pub async fn start() -> TestFleet {
        Self::start_in(Slot::Shared, |o| o).await
    }

    /// [`TestFleet::start`] in an exclusive slot.
    pub async fn start_exclusive() -> TestFleet {
        Self::start_in(Slot::Exclusive, |o| o).await
    }

    /// [`TestFleet::start`] with options changed by `tweak`.
    pub async fn start_with(tweak: impl Fn(FleetOptions) -> FleetOptions) -> TestFleet {
        Self::start_in(Slot::Shared, tweak).await
    }

    /// Waits for a slot of the kind `slot`, then starts a fleet with options changed by
    /// `tweak`.
    pub async fn start_in(slot: Slot, tweak: impl Fn(FleetOptions) -> FleetOptions) -> TestFleet {
        let asked = Instant::now();
        let kind = slot;
        let slot = fleet_slot(slot).await;
        println!(
            "fleet slot ({kind:?}) taken after {:.1} s",
            asked.elapsed().as_secs_f64()
        );
        let bins = bin_dir();
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::tempdir().expect("temp dir");
            // The store and the replicas per cell from `CELLBIND_TEST_STORE` and
            // `CELLBIND_TEST_AUTH_REPLICAS` (the suite runs once on SQLite, once on PostgreSQL
            // with two replicas per cell).
            let opts = FleetOptions::new(dir.path().join("fleet"), &bins)
                .port_base(random_port_base())
                .with_test_env()
                .expect("the test fleet's environment");
            let opts = tweak(opts);
            match Fleet::start(opts).await {
                Ok(fleet) => {
                    let client = client_trusting_file(&fleet.file().ca_cert).expect("CA client");
                    return TestFleet {
                        fleet,
                        dir,
                        client,
                        slot,
                    };
                }
                Err(FleetError::AddrInUse(a)) => last = Some(a.to_string()),
                Err(FleetError::ChildAddrInUse { id, .. }) => last = Some(id),
                Err(e) => panic!("the fleet did not start: {e}"),
            }
        }
        panic!("no free port base found (last taken: {last:?})");
    }

    pub fn file(&self) -> &FleetFile {
        self.fleet.file()
    }

    pub fn cell(&self, id: &protocol::CellId) -> &FleetCell {
        self.file().cell(id).expect("cell in fleet.json")
    }

    /// `n` technicians of each cell, the map's override contractors first.
    pub fn sample_per_cell(&self, n: usize, overrides: &[String]) -> Vec<DemoUser> {
        let mut out = Vec::new();
        for cell in &self.file().cells {
            let mut mine: Vec<&DemoUser> = self
                .file()
                .demo
                .technicians
                .iter()
                .filter(|u| u.cell_id == cell.id && u.login == "tech-1")
                .collect();
            mine.sort_by_key(|u| !overrides.contains(&u.contractor_id.to_string()));
            out.extend(mine.into_iter().take(n).cloned());
        }
        out
    }

    /// The feed credential of edge instance `instance` of `cell` (minted from the cell's feed
    /// secret, `runtime::feed_credential`), as an edge of that instance would present it.
    pub fn edge_feed_credential(&self, cell: &protocol::CellId, instance: &str) -> String {
        let instance = protocol::InstanceId::new(instance).unwrap();
        let path = devfleet::write_edge_feed_credential(self.fleet.dir(), cell, &instance)
            .unwrap_or_else(|e| panic!("minting the feed credential of {instance}: {e}"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// One of a cell's own tokens, as the fleet wrote it ([`devfleet::cell_token_file`]).
    pub fn cell_token(&self, cell: &protocol::CellId, kind: CellToken) -> String {
        let path = devfleet::cell_token_file(self.fleet.dir(), cell, kind);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// The signed map held by a cell (through its public endpoint), verified.
    pub async fn map_at(&self, endpoint: &str) -> SignedMap {
        let bytes = self
            .client
            .get(format!("{endpoint}/v1/placement-map"))
            .send()
            .await
            .expect("map request")
            .bytes()
            .await
            .expect("map body");
        let key = protocol::map_key::parse(&self.file().map_public_key).expect("map key");
        SignedMap::verify_bytes(&bytes, &key).expect("the served map verifies")
    }
}

/// `POST /v1/sessions` at `endpoint`: (status, body).
pub async fn sign_in(client: &reqwest::Client, endpoint: &str, user: &DemoUser) -> (u16, Value) {
    sign_in_as(
        client,
        endpoint,
        user.contractor_id.as_str(),
        &user.login,
        &user.password,
    )
    .await
}

pub async fn sign_in_as(
    client: &reqwest::Client,
    endpoint: &str,
    contractor: &str,
    login: &str,
    password: &str,
) -> (u16, Value) {
    let r = client
        .post(format!("{endpoint}/v1/sessions"))
        .json(&serde_json::json!({
            "contractor_id": contractor, "login": login, "password": password, "client": "field"
        }))
        .send()
        .await
        .expect("sign-in request");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// `GET url` with a bearer token (an admin token, a feed credential): its JSON answer, which
/// must be a `T` (panics otherwise).
pub async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    bearer: &str,
) -> T {
    client
        .get(url)
        .bearer_auth(bearer)
        .send()
        .await
        .expect("GET request")
        .json()
        .await
        .expect("a JSON answer of the expected shape")
}

/// `POST url` with a JSON body and, when given, a bearer session: (status, body or null).
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut req = client.post(url).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.expect("POST request");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// A signed-in technician.
#[derive(Debug, Clone)]
pub struct Session {
    pub user: DemoUser,
    pub endpoint: String,
    pub token: String,
}

/// Runs the auth-service binary with the configuration of `cell`'s first replica and `args`
/// (`backup --out F`, `restore --from F`); answers its JSON summary (panics on failure).
pub fn auth_service_command(t: &TestFleet, cell: &protocol::CellId, args: &[&str]) -> Value {
    let config = t
        .fleet
        .dir()
        .join("config")
        .join(format!("{}.toml", devfleet::auth_service_id(cell, 0)));
    let out = std::process::Command::new(bin_dir().join("cellbind-auth-service"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .output()
        .expect("run cellbind-auth-service");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON summary")
}

/// Signs in at the user's own cell and returns the session (panics otherwise).
pub async fn session_for(t: &TestFleet, user: &DemoUser) -> Session {
    let endpoint = t.cell(&user.cell_id).endpoint.clone();
    let (s, v) = sign_in(&t.client, &endpoint, user).await;
    assert_eq!(
        s, 201,
        "sign-in of {}/{} at its owner: {v}",
        user.contractor_id, user.login
    );
    Session {
        user: user.clone(),
        endpoint,
        token: v["session"]
            .as_str()
            .expect("session in the answer")
            .to_owned(),
    }
}

/// `GET {endpoint}/v1/sessions/current` with a session: what its cell says of it (`jti`,
/// `exp`, …).
pub async fn current_session(client: &reqwest::Client, s: &Session) -> Value {
    client
        .get(format!("{}/v1/sessions/current", s.endpoint))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("current-session request")
        .json()
        .await
        .expect("current-session body")
}

/// `GET {endpoint}/api/routes/today` with a session: the status.
pub async fn route_load(client: &reqwest::Client, endpoint: &str, token: &str) -> u16 {
    match client
        .get(format!("{endpoint}/api/routes/today"))
        .bearer_auth(token)
        .send()
        .await
    {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// Waits until `GET {endpoint}/api/routes/today` with `token` answers `want`; answers how long
/// that took (panics after `limit`).
pub async fn route_status_within(
    client: &reqwest::Client,
    endpoint: &str,
    token: &str,
    want: u16,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        if route_load(client, endpoint, token).await == want {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "not {want} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `POST {endpoint}/api/jobs/{job}/complete` with a session and an idempotency key.
pub async fn complete(
    client: &reqwest::Client,
    endpoint: &str,
    token: &str,
    job: &str,
    key: &str,
) -> (u16, Value) {
    match client
        .post(format!("{endpoint}/api/jobs/{job}/complete"))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .send()
        .await
    {
        Ok(r) => {
            let s = r.status().as_u16();
            (s, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}

/// Whether a process is gone (no such pid, or a zombie nobody has reaped yet).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub async fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Sends a signal to a pid.
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let pid = i32::try_from(pid).expect("pid fits i32");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}
