//! ATTACKS A33 (1,000 stalled connections per listener): from ONE source
//! address (127.0.0.200; all of 127/8 is loopback), 1,000 TLS connections that send half a
//! request head and stall, against every listener kind of a real dev fleet: the edge's public
//! and management listeners, the auth-service's public, internal and management ones, the
//! app's three, the control plane's and its management listener. Connections over the
//! listener's per-address cap are refused at once (and counted in its `connections_refused`
//! metric); the others are closed at the header timeout. Throughout, `GET /healthz` over a new
//! connection from ANOTHER address (to the listener under attack and to its server's
//! management listener) and `cellctl status` keep answering, and the edges keep syncing their
//! feed.
//!
//! The fleet is `cellctl dev` with one setting of its own: a 3 s header timeout
//! (`CELLBIND_HEADER_READ_TIMEOUT_MS`, read by every server) to keep the test short; the caps
//! are the production defaults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, bin_dir, fleet_slot, random_port_base, signal};
use devfleet::FleetManagement;
use devfleet::{FleetFile, Ports, check_ports_free};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpSocket;

/// The one address every stalled connection comes from.
const ATTACKER: &str = "127.0.0.200";
/// The address the probes come from.
const PROBER: &str = "127.0.0.201";
/// Stalled connections per listener.
const CONNECTIONS: usize = 1_000;
/// Connections being opened at once (the rest wait their turn; all are held together).
const OPENING_AT_ONCE: usize = 100;
/// The fleet's header timeout (set through its environment).
const HEADER_TIMEOUT: Duration = Duration::from_millis(3_000);
/// What a close may take beyond the header timeout on a loaded 2-core machine.
const CLOSE_MARGIN: Duration = Duration::from_millis(2_000);
/// A refusal is "at once" within this.
const AT_ONCE: Duration = Duration::from_millis(1_000);
/// How long the fleet may take to come up.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Between two probes of one kind.
const PROBE_EVERY: Duration = Duration::from_millis(200);
/// Between two `cellctl status` calls.
const STATUS_EVERY: Duration = Duration::from_millis(1_000);
/// The longest a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// One listener under attack.
struct Target {
    name: &'static str,
    url: String,
    cap: usize,
    /// The management listener of its server (its `/metrics`, its liveness probe).
    management: String,
    /// The metric prefix of its server and the listener's label.
    metric: (&'static str, &'static str),
}

/// What became of one stalled connection.
enum Fate {
    /// Closed before TLS completed, this long after the connect began.
    Refused(Duration),
    /// Closed by the server this long after the partial head was sent.
    Closed(Duration),
    /// Still open when the test stopped waiting.
    Open,
}

fn socket_of(url: &str) -> SocketAddr {
    url.trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

fn connector(ca: &Path) -> tokio_rustls::TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&std::fs::read(ca).unwrap()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Connections held open (client's view) and the most held at once.
#[derive(Default)]
struct Held {
    now: AtomicU64,
    peak: AtomicU64,
}

/// One stalled connection from [`ATTACKER`]: TLS, half a request head, then nothing.
/// `opening` (a slot among the connections being opened at once) is given back as soon as the
/// partial head is out or the connection was refused.
async fn stall(
    tls: tokio_rustls::TlsConnector,
    addr: SocketAddr,
    held: Arc<Held>,
    opening: tokio::sync::OwnedSemaphorePermit,
) -> Fate {
    let began = Instant::now();
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(ATTACKER.parse().unwrap(), 0))
        .unwrap();
    let Ok(tcp) = socket.connect(addr).await else {
        return Fate::Refused(began.elapsed());
    };
    let name = ServerName::IpAddress(addr.ip().into());
    let Ok(mut s) = tls.connect(name, tcp).await else {
        return Fate::Refused(began.elapsed());
    };
    if s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-stalled: ")
        .await
        .is_err()
    {
        return Fate::Refused(began.elapsed());
    }
    let sent = Instant::now();
    drop(opening);
    let now = held.now.fetch_add(1, Ordering::SeqCst) + 1;
    held.peak.fetch_max(now, Ordering::SeqCst);
    let mut buf = [0u8; 512];
    let waited = HEADER_TIMEOUT + CLOSE_MARGIN + Duration::from_secs(10);
    let fate = loop {
        match tokio::time::timeout_at((sent + waited).into(), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break Fate::Closed(sent.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => break Fate::Open,
        }
    };
    held.now.fetch_sub(1, Ordering::SeqCst);
    fate
}

/// The `connections_refused` count of `listener` in a `/metrics` text.
fn refused_in(metrics: &str, (prefix, listener): (&str, &str)) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!("{prefix}_connections_refused_total{{"))
                && l.contains(&format!("listener=\"{listener}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} connections_refused of {listener} in:\n{metrics}"))
}

/// The slowest of what the probes saw, and what failed.
#[derive(Default)]
struct Probes {
    healthz_max: Duration,
    healthz_count: u64,
    status_max: Duration,
    status_count: u64,
    state_age_max_s: u64,
    failures: Vec<String>,
}

/// `GET /healthz` over a new connection from [`PROBER`] to each of `urls` every
/// [`PROBE_EVERY`], and `cellctl status` every [`STATUS_EVERY`], until `stop`.
async fn probe(
    ca: std::path::PathBuf,
    fleet: std::path::PathBuf,
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
) -> Probes {
    let fresh = runtime::tls::client_trusting(&std::fs::read(&ca).unwrap())
        .unwrap()
        .local_address(PROBER.parse::<IpAddr>().unwrap())
        .pool_max_idle_per_host(0)
        .timeout(PROBE_TIMEOUT)
        .build()
        .unwrap();
    let mut p = Probes::default();
    let mut next_status = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        for url in &urls {
            let t0 = Instant::now();
            match fresh.get(format!("{url}/healthz")).send().await {
                Ok(r) if r.status() == 200 => {}
                Ok(r) => p.failures.push(format!("{url}/healthz: {}", r.status())),
                Err(e) => p.failures.push(format!("{url}/healthz: {e}")),
            }
            p.healthz_max = p.healthz_max.max(t0.elapsed());
            p.healthz_count += 1;
        }
        if Instant::now() >= next_status {
            let t0 = Instant::now();
            match cellctl::status::status(&fleet).await {
                Ok(report) => {
                    if !report.control_plane.reachable {
                        p.failures
                            .push("cellctl status: control plane unreachable".into());
                    }
                    for c in &report.cells {
                        if !c.reachable || !c.endpoint_ready {
                            p.failures
                                .push(format!("cellctl status: {} not ready: {:?}", c.id, c.error));
                        }
                        for i in &c.instances {
                            p.state_age_max_s = p.state_age_max_s.max(i.state_age_s);
                        }
                    }
                }
                Err(e) => p.failures.push(format!("cellctl status: {e}")),
            }
            p.status_max = p.status_max.max(t0.elapsed());
            p.status_count += 1;
            next_status = Instant::now() + STATUS_EVERY;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    p
}

/// Starts `cellctl dev` in `dir` with the short header timeout; returns once it printed that
/// the fleet is up.
async fn start_fleet(dir: &Path, stderr: &Path) -> tokio::process::Child {
    let base = (0..20)
        .map(|_| random_port_base())
        .find(|b| check_ports_free(&Ports { base: *b }.all(5).unwrap()).is_ok())
        .expect("a free port base");
    let mut child = tokio::process::Command::new(bin_dir().join("cellctl"))
        .args(["dev", "--dir"])
        .arg(dir)
        .args(["--port-base", &base.to_string()])
        .env(
            "CELLBIND_HEADER_READ_TIMEOUT_MS",
            HEADER_TIMEOUT.as_millis().to_string(),
        )
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("Press Ctrl-C") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        ready,
        Ok(true),
        "cellctl dev did not come up: {}",
        std::fs::read_to_string(stderr).unwrap_or_default()
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_stalled_connections_from_one_address_starve_no_listener() {
    let _slot = fleet_slot(Slot::Exclusive).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut fleet_process = start_fleet(&dir, &tmp.path().join("cellctl.stderr")).await;
    let fleet_path = dir.join("fleet.json");
    let f = FleetFile::load(&fleet_path).unwrap();
    let m = FleetManagement::load(&fleet_path).unwrap();
    let cell = &f.cells[0];
    let cm = m.cell(&cell.id).unwrap();
    let internal = runtime::listener::config::DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP;
    let management = runtime::listener::config::DEFAULT_MANAGEMENT_MAX_CONNECTIONS_PER_IP;
    let edge = cell_endpoint::config::DEFAULT_MAX_CONNECTIONS_PER_IP;
    let (edge_m, auth_m, app_m) = (
        cm.edges[0].clone(),
        cm.auth_services[0].clone(),
        cm.app.clone(),
    );
    let t = |name, url: &str, cap, management: &str, metric| Target {
        name,
        url: url.trim_end_matches('/').to_owned(),
        cap,
        management: management.to_owned(),
        metric,
    };
    let targets = [
        t(
            "edge public",
            &cell.endpoint,
            edge,
            &edge_m,
            ("cellbind_edge", "public"),
        ),
        t(
            "edge management",
            &edge_m,
            management,
            &edge_m,
            ("cellbind_edge", "management"),
        ),
        t(
            "auth-service public",
            &cell.auth_public_url,
            internal,
            &auth_m,
            ("cellbind_auth", "public"),
        ),
        t(
            "auth-service internal",
            &cell.auth_service.url,
            internal,
            &auth_m,
            ("cellbind_auth", "internal"),
        ),
        t(
            "auth-service management",
            &auth_m,
            management,
            &auth_m,
            ("cellbind_auth", "management"),
        ),
        t(
            "app public",
            &cell.app_url,
            internal,
            &app_m,
            ("cellbind_app", "public"),
        ),
        t(
            "app internal",
            &cell.app_internal_url,
            internal,
            &app_m,
            ("cellbind_app", "internal"),
        ),
        t(
            "app management",
            &app_m,
            management,
            &app_m,
            ("cellbind_app", "management"),
        ),
        t(
            "control plane",
            &f.control_plane.url,
            internal,
            &m.control_plane,
            ("cellbind_control_plane", "public"),
        ),
        t(
            "control-plane management",
            &m.control_plane,
            management,
            &m.control_plane,
            ("cellbind_control_plane", "management"),
        ),
    ];
    let metrics_client = runtime::tls::client_trusting(&std::fs::read(&f.ca_cert).unwrap())
        .unwrap()
        .local_address(PROBER.parse::<IpAddr>().unwrap())
        .timeout(PROBE_TIMEOUT)
        .build()
        .unwrap();
    let metrics = |url: String| {
        let c = metrics_client.clone();
        async move {
            c.get(format!("{url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let tls = connector(&f.ca_cert);
    let mut report = Vec::new();
    for target in &targets {
        let before = refused_in(&metrics(target.management.clone()).await, target.metric);
        let stop = Arc::new(AtomicBool::new(false));
        let prober = tokio::spawn(probe(
            f.ca_cert.clone(),
            fleet_path.clone(),
            vec![target.url.clone(), target.management.clone()],
            stop.clone(),
        ));
        let addr = socket_of(&target.url);
        let held = Arc::new(Held::default());
        let opening = Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
        let started = Instant::now();
        let mut attacks = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let permit = opening.clone().acquire_owned().await.unwrap();
            attacks.push(tokio::spawn(stall(tls.clone(), addr, held.clone(), permit)));
        }
        let opened_in = started.elapsed();
        let mut fates = Vec::with_capacity(CONNECTIONS);
        for a in attacks {
            fates.push(a.await.unwrap());
        }
        stop.store(true, Ordering::SeqCst);
        let probes = prober.await.unwrap();
        let after = refused_in(&metrics(target.management.clone()).await, target.metric);

        let refused: Vec<Duration> = fates
            .iter()
            .filter_map(|f| match f {
                Fate::Refused(d) => Some(*d),
                _ => None,
            })
            .collect();
        let closed: Vec<Duration> = fates
            .iter()
            .filter_map(|f| match f {
                Fate::Closed(d) => Some(*d),
                _ => None,
            })
            .collect();
        let still_open = fates.iter().filter(|f| matches!(f, Fate::Open)).count();
        let slowest_refusal = refused.iter().max().copied().unwrap_or_default();
        let slowest_close = closed.iter().max().copied().unwrap_or_default();
        println!(
            "A33 {:<26} cap {:>3}: {:>4} refused at once (slowest {:>4} ms, counted by the server: {}), \
             {:>4} closed by the header timeout (slowest {:>4} ms after the partial head), {} still open; \
             {} opened in {:.1} s (peak {} open); /healthz x{} max {} ms, cellctl status x{} max {} ms, \
             edge state age max {} s",
            target.name,
            target.cap,
            refused.len(),
            slowest_refusal.as_millis(),
            after - before,
            closed.len(),
            slowest_close.as_millis(),
            still_open,
            CONNECTIONS,
            opened_in.as_secs_f64(),
            held.peak.load(Ordering::SeqCst),
            probes.healthz_count,
            probes.healthz_max.as_millis(),
            probes.status_count,
            probes.status_max.as_millis(),
            probes.state_age_max_s,
        );
        report.push((
            target.name,
            refused.len(),
            closed.len(),
            still_open,
            slowest_refusal,
            slowest_close,
            probes,
            after - before,
        ));
    }
    signal(
        fleet_process.id().unwrap(),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = tokio::time::timeout(Duration::from_secs(30), fleet_process.wait()).await;

    let mut failures = Vec::new();
    for (
        target,
        (name, refused, closed, still_open, slowest_refusal, slowest_close, probes, counted),
    ) in targets.iter().zip(&report)
    {
        let mut fail = |why: String| failures.push(format!("{name}: {why}"));
        if *still_open > 0 {
            fail(format!(
                "{still_open} stalled connections were never closed"
            ));
        }
        if refused + closed != CONNECTIONS {
            fail(format!(
                "{refused} refused + {closed} closed != {CONNECTIONS}"
            ));
        }
        if *closed < target.cap.min(CONNECTIONS) {
            fail(format!(
                "only {closed} admitted, below the cap {}",
                target.cap
            ));
        }
        if target.cap < CONNECTIONS && *refused == 0 {
            fail(format!("nothing refused over the cap {}", target.cap));
        }
        if *counted != *refused as u64 {
            fail(format!(
                "{refused} refusals seen, {counted} counted by the server"
            ));
        }
        if *slowest_refusal > AT_ONCE {
            fail(format!("a refusal took {slowest_refusal:?}"));
        }
        if *slowest_close > HEADER_TIMEOUT + CLOSE_MARGIN {
            fail(format!(
                "a stalled connection was closed only after {slowest_close:?}"
            ));
        }
        if !probes.failures.is_empty() {
            fail(format!("probes failed: {:?}", probes.failures));
        }
        if probes.healthz_count == 0 || probes.status_count == 0 {
            fail("no probe ran during the attack".into());
        }
        if probes.state_age_max_s * 1000 >= cell_endpoint::config::DEFAULT_WRITE_LEASE_MS {
            fail(format!(
                "an edge's state went {} s without a sync",
                probes.state_age_max_s
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
