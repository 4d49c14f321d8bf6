//! A hostile client against a real fleet (ATTACKS A23, A24, A27, A28, A29, A31), every probe
//! over real TLS to a cell's public endpoint (and, for A27, straight to its auth-service).
//! "Reached nothing" is read from the auth-service's and the app's own access logs: after the
//! probes, the only lines they gained are the edge's feed long-polls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cellbind_tests::{TestFleet, session_for};
use cellctl::migrate::{MigrateOptions, migrate};
use devfleet::{CellToken, DemoUser, FleetCell};
use http_body_util::Empty;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The non-canonical and non-allow-listed targets a client tries (ATTACKS A23).
const TARGETS: [&str; 16] = [
    "/v1/sessions/../../admin/v1/status",
    "/v1/sessions/%2e%2e/%2e%2e/admin/v1/status",
    "/v1/sessions/.%2e/.%2E/admin/v1/status",
    "/v1/sessions/./../admin/v1/status",
    "/v1/sessions/..%2f..%2fadmin%2fv1%2fstatus",
    "/v1/sessions/current/../../../internal/v1/feed?since=0&instance=x",
    "/v1/sessions/..;/..;/metrics",
    "/v1/sessions/%252e%252e/admin/v1/status",
    "//admin/v1/status",
    "/api/..%2finternal/v1/contractors/CTR/export",
    "/api/../internal/v1/contractors/CTR/export",
    "/api/%2e%2e/internal/v1/contractors/CTR/export",
    "/api/.%2e/internal/v1/contractors",
    "/api//..//internal/v1/contractors",
    "/admin/v1/status",
    "/internal/v1/feed?since=0&instance=probe",
];

fn roots(ca: &std::path::Path) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    roots
}

fn connector(ca: &std::path::Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots(ca))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn socket_of(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

async fn tls(
    ca: &std::path::Path,
    endpoint: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let addr = socket_of(endpoint);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector(ca, alpn)
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .unwrap()
}

/// One HTTP/1.1 request with the target written byte for byte; the answer's status and text.
async fn h1(
    ca: &std::path::Path,
    endpoint: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut s = tls(ca, endpoint, &[b"http/1.1"]).await;
    let host = endpoint.trim_start_matches("https://");
    let mut head = format!("{method} {target} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("content-length: 0\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// One HTTP/2 request whose `:path` is the target byte for byte.
async fn h2(
    ca: &std::path::Path,
    endpoint: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Option<u16> {
    let s = tls(ca, endpoint, &[b"h2"]).await;
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let uri = http::Uri::builder()
        .scheme("https")
        .authority(endpoint.trim_start_matches("https://"))
        .path_and_query(target)
        .build()
        .ok()?;
    let mut req = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    Some(resp.status().as_u16())
}

/// The paths of the access-log lines in `text` (`... access: request listener=... path=/x ...`).
fn access_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("access") && l.contains(" path="))
        .filter_map(|l| {
            let rest = &l[l.find(" path=")? + 6..];
            Some(rest.split_whitespace().next()?.trim_matches('"').to_owned())
        })
        .collect()
}

/// Where each of the cell's upstream logs stands now.
struct LogMark {
    files: Vec<(String, std::path::PathBuf, u64)>,
}

impl LogMark {
    fn now(t: &TestFleet, cell: &FleetCell) -> LogMark {
        let files = ["auth-service", "app"]
            .iter()
            .map(|kind| {
                let id = format!("{}-{kind}", cell.id);
                let path = t.fleet.log_of(&id).expect("log of the process").to_owned();
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                (id, path, len)
            })
            .collect();
        LogMark { files }
    }

    /// The access-log paths each upstream logged since the mark.
    fn since(&self) -> Vec<(String, Vec<String>)> {
        self.files
            .iter()
            .map(|(id, path, from)| {
                let bytes = std::fs::read(path).unwrap();
                let new = String::from_utf8_lossy(&bytes[(*from as usize).min(bytes.len())..])
                    .into_owned();
                (id.clone(), access_paths(&new))
            })
            .collect()
    }
}

fn client_from(ca: &std::path::Path, ip: &str) -> reqwest::Client {
    let pem = std::fs::read(ca).unwrap();
    let certs = reqwest::Certificate::from_pem_bundle(&pem).unwrap();
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn tech_of(t: &TestFleet, cell: &FleetCell) -> DemoUser {
    t.file()
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id == cell.id && u.login == "tech-1")
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_client_reaches_nothing_it_should_not() {
    let t = TestFleet::start_exclusive().await;
    let ca = t.file().ca_cert.clone();
    let cell = t.file().cells[2].clone();
    let other = t.file().cells[0].clone();
    let tech = tech_of(&t, &cell);
    let s = session_for(&t, &tech).await;

    // ---- A23: non-canonical targets, over HTTP/1.1 and HTTP/2, with every key an attacker
    // might have stolen, reach neither the auth-service nor the app.
    let admin = t.cell(&cell.id).admin_token.clone();
    let feed = t.cell_token(&cell.id, CellToken::Feed);
    let app = t.cell_token(&cell.id, CellToken::App);
    let keys: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("authorization", format!("Bearer {admin}"))],
        vec![("authorization", format!("Bearer {feed}"))],
        vec![
            ("authorization", format!("Bearer {}", s.token)),
            ("x-cellbind-edge-key", app.clone()),
        ],
    ];
    let mark = LogMark::now(&t, &cell);
    let (mut h1_probes, mut h2_probes) = (0, 0);
    for target in TARGETS {
        let target = target.replace("CTR", tech.contractor_id.as_str());
        for k in &keys {
            let headers: Vec<(&str, &str)> = k.iter().map(|(a, b)| (*a, b.as_str())).collect();
            for method in ["GET", "POST"] {
                let (st, text) = h1(&ca, &cell.endpoint, method, &target, &headers).await;
                assert!(
                    st == 400 || st == 404,
                    "HTTP/1.1 {method} {target}: {st}\n{text}"
                );
                h1_probes += 1;
                if let Some(st) = h2(&ca, &cell.endpoint, method, &target, &headers).await {
                    assert!(st == 400 || st == 404, "HTTP/2 {method} {target}: {st}");
                    h2_probes += 1;
                }
            }
        }
    }
    // A control probe that is allowed goes through and is logged: the log check can fail.
    let (st, _) = h1(
        &ca,
        &cell.endpoint,
        "GET",
        "/v1/sessions/current",
        &[("authorization", &format!("Bearer {}", s.token))],
    )
    .await;
    assert_eq!(st, 200);
    let reached = mark.since();
    for (id, paths) in &reached {
        let unexpected: Vec<&String> = paths
            .iter()
            .filter(|p| *p != "/internal/v1/feed" && *p != "/v1/sessions/current")
            .collect();
        assert!(unexpected.is_empty(), "{id} was reached: {unexpected:?}");
    }
    let auth_paths = &reached[0].1;
    assert_eq!(
        auth_paths
            .iter()
            .filter(|p| *p == "/v1/sessions/current")
            .count(),
        1,
        "the control probe is in the auth-service's log: {auth_paths:?}"
    );
    println!(
        "A23: {} targets × {} key sets × 2 methods: {h1_probes} HTTP/1.1 and {h2_probes} HTTP/2 probes refused; upstream access-log lines since: {:?}",
        TARGETS.len(),
        keys.len(),
        reached
            .iter()
            .map(|(id, p)| format!("{id}: {} (feed polls and the control probe only)", p.len()))
            .collect::<Vec<_>>()
    );

    // ---- A24: a cookie + junk Authorization from another cell's origin mints nothing.
    let (st, v) = {
        let r = t
            .client
            .post(format!("{}/v1/sessions", cell.endpoint))
            .json(&serde_json::json!({
                "contractor_id": tech.contractor_id, "login": "dispatch-1",
                "password": tech.password, "client": "desk"
            }))
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    assert_eq!(st, 201, "{v}");
    let desk = v["session"].as_str().unwrap().to_owned();
    let mark = LogMark::now(&t, &cell);
    let mut refused = 0;
    for (method, path) in [
        (reqwest::Method::POST, "/v1/sessions/renew"),
        (reqwest::Method::DELETE, "/v1/sessions/current"),
        (reqwest::Method::POST, "/v1/sessions/transfer"),
    ] {
        for junk in ["Basic dXNlcjpwdw==", "Bearer junk", "Negotiate x"] {
            let r = t
                .client
                .request(method.clone(), format!("{}{path}", cell.endpoint))
                .header("cookie", format!("__Host-cellbind_session={desk}"))
                .header("authorization", junk)
                .header("origin", &other.endpoint)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 403, "{method} {path} {junk}");
            assert!(r.headers().get("access-control-allow-origin").is_none());
            refused += 1;
        }
    }
    for (id, paths) in mark.since() {
        assert!(
            paths.iter().all(|p| p == "/internal/v1/feed"),
            "{id} was reached: {paths:?}"
        );
    }
    println!(
        "A24: {refused} cookie + junk-Authorization requests from {} refused with 403, nothing reached the auth-service",
        other.id
    );

    // ---- A27: 600 sign-ins with a rotating spoofed client address are throttled as one
    // client, through the edge (X-Forwarded-For) and straight to the auth-service
    // (X-Cellbind-Client-Ip without the edge key).
    let unknown = "c-99999999";
    for (what, from, url, header) in [
        (
            "edge",
            "127.0.0.20",
            cell.endpoint.clone(),
            "x-forwarded-for",
        ),
        (
            "auth-service",
            "127.0.0.23",
            cell.auth_public_url.clone(),
            "x-cellbind-client-ip",
        ),
    ] {
        let spoofer = client_from(&ca, from);
        let mut limited = 0;
        let mut answered = 0;
        let started = Instant::now();
        for i in 0..600u32 {
            let r = spoofer
                .post(format!("{url}/v1/sessions"))
                .header(header, format!("198.18.{}.{}", i / 250, i % 250 + 1))
                .json(&serde_json::json!({
                    "contractor_id": unknown, "login": "x", "password": "y", "client": "field"
                }))
                .send()
                .await
                .unwrap();
            match r.status().as_u16() {
                429 => limited += 1,
                _ => answered += 1,
            }
        }
        let secs = started.elapsed().as_secs_f64();
        // One client's bucket: its burst (300) plus what refilled meanwhile (1200/min). Had
        // every spoofed address counted as its own client, all 600 would have been answered.
        let bound = 300.0 + 20.0 * secs + 10.0;
        println!(
            "A27 ({what}, from {from}): 600 sign-ins with rotating spoofed addresses in {secs:.1} s: {answered} answered, {limited} refused 429 (one client's bucket allows {bound:.0})"
        );
        assert!(
            f64::from(answered) <= bound,
            "{what}: {answered} got through"
        );
        assert!(limited > 0, "{what}: nothing throttled");
    }

    // ---- A31: ten wrong passwords from one address do not lock the owner out at another.
    let attacker = client_from(&ca, "127.0.0.21");
    let owner = client_from(&ca, "127.0.0.22");
    let body = |pw: &str| {
        serde_json::json!({
            "contractor_id": tech.contractor_id, "login": "tech-2", "password": pw, "client": "field"
        })
    };
    let mut wrong = vec![];
    for _ in 0..11 {
        let r = attacker
            .post(format!("{}/v1/sessions", cell.endpoint))
            .json(&body("wrong-password"))
            .send()
            .await
            .unwrap();
        wrong.push(r.status().as_u16());
    }
    assert_eq!(&wrong[..10], &[401; 10]);
    assert_eq!(wrong[10], 429, "the attacker's own bucket is empty");
    let r = owner
        .post(format!("{}/v1/sessions", cell.endpoint))
        .json(&body(&tech.password))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    println!("A31: 10 wrong passwords from 127.0.0.21 (then 429); the owner from 127.0.0.22: 201");

    // ---- A29: 60 connections that declare a 1 MiB body and send 1 KiB are answered and
    // closed within the body timeout; the edge's memory stays flat.
    let pid = cell.endpoint_pid;
    let rss_before = rss_kib(pid);
    let t0 = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..60 {
        let mut c = tls(&ca, &cell.endpoint, &[b"http/1.1"]).await;
        let head = format!(
            "POST /api/jobs/slow/complete HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 1048576\r\n\r\n",
            s.token
        );
        c.write_all(head.as_bytes()).await.unwrap();
        c.write_all(&[b'x'; 1024]).await.unwrap();
        conns.push(c);
    }
    let rss_held = rss_kib(pid);
    let mut answered = 0;
    for mut c in conns {
        let mut out = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "a slow connection stayed open");
        if String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408") {
            answered += 1;
        }
    }
    let took = t0.elapsed();
    let rss_after = rss_kib(pid);
    println!(
        "A29: 60 slow bodies: {answered} answered 408 and closed after {took:.1?}; edge RSS {rss_before} KiB before, {rss_held} KiB while held, {rss_after} KiB after"
    );
    assert_eq!(answered, 60);
    assert!(took < Duration::from_secs(25), "{took:?}");
    assert!(
        rss_held.saturating_sub(rss_before) < 32 * 1024,
        "the edge grew {} KiB holding 60 slow bodies",
        rss_held.saturating_sub(rss_before)
    );

    // ---- A28: one old session is transferred at most once: three transfers answer one
    // ticket, and it rebinds once.
    let fleet_path = t.fleet.fleet_file_path();
    let mut opts = MigrateOptions::new(tech.contractor_id.clone(), other.id.clone());
    opts.step_timeout = Duration::from_secs(30);
    migrate(&fleet_path, &opts, |_| {}).await.expect("migrated");
    let mut tickets = vec![];
    for _ in 0..3 {
        let r = t
            .client
            .post(format!("{}/v1/sessions/transfer", cell.endpoint))
            .bearer_auth(&s.token)
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(st, 200, "{v}");
        tickets.push(v["ticket"].as_str().unwrap().to_owned());
    }
    assert!(
        tickets.iter().all(|x| *x == tickets[0]),
        "one ticket per session"
    );
    let mut rebinds = vec![];
    for ticket in &tickets {
        let r = t
            .client
            .post(format!("{}/v1/sessions/rebind", other.endpoint))
            .json(&serde_json::json!({ "ticket": ticket }))
            .send()
            .await
            .unwrap();
        rebinds.push(r.status().as_u16());
    }
    assert_eq!(rebinds, [201, 403, 403]);
    println!("A28: three transfers of one session: one ticket; rebinds {rebinds:?}");
}
