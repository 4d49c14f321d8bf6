//! Static stability on real processes: the real `cellbind-auth-service`, two (then three)
//! real `cellbind-cell-endpoint` instances, and a small TLS app in this process, all over
//! HTTPS from a test CA.
//!
//! The workspace binaries must be built before the tests (`cargo build --workspace --bins`,
//! as CI does); the test fails with that message if the auth-service binary is missing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;

const CELL: &str = "cell-03";
const CTR: &str = "c-40711";
const ADMIN_TOKEN: &str = "admin-token-for-the-static-stability-test";
const FEED_TOKEN: &str = "feed-token-for-the-static-stability-test";
const EDGE_TOKEN: &str = "edge-token-for-the-static-stability-test";
const APP_TOKEN: &str = "edge-key-for-the-static-stability-test";
const PASSWORD: &str = "correct horse battery staple";
/// Short write lease so the test sees it lapse quickly.
const LEASE_MS: u64 = 2_000;
const FEED_WAIT_MS: u64 = 300;
const NO_LIMITS: &[(&str, &str)] = &[
    ("CELLBIND_RATE_PER_IP_PER_S", "1000000"),
    ("CELLBIND_BURST_PER_IP", "1000000"),
    ("CELLBIND_RATE_PER_SUBJECT_PER_S", "1000000"),
    ("CELLBIND_BURST_PER_SUBJECT", "1000000"),
];

/// Requests the app saw: (method, path, headers).
type Seen = Arc<Mutex<Vec<(String, String, HeaderMap)>>>;

/// A TLS app in this process that requires the edge key and records requests.
async fn start_app(pki: &Pki) -> (SocketAddr, Seen, axum_server::Handle<SocketAddr>) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = Router::new().fallback(any(move |req: axum::extract::Request| {
        let s = s.clone();
        async move {
            let h = req.headers().clone();
            if h.get("x-cellbind-edge-key").and_then(|v| v.to_str().ok()) != Some(APP_TOKEN) {
                return (StatusCode::FORBIDDEN, "no edge key".to_owned());
            }
            s.lock().unwrap().push((
                req.method().to_string(),
                req.uri().path().to_owned(),
                h.clone(),
            ));
            let generation = h
                .get("x-cellbind-generation")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            (
                StatusCode::OK,
                format!("{{\"ok\":true,\"generation\":\"{generation}\"}}"),
            )
        }
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&pki.cert, &pki.key)
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, tls)
        .unwrap()
        .handle(handle.clone());
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    (addr, seen, handle)
}

struct Fleet {
    dir: PathBuf,
    pki: Pki,
    auth_port: u16,
    auth_public_port: u16,
    auth_config: PathBuf,
    auth: Option<Proc>,
    app_addr: SocketAddr,
    public_url: String,
    http: reqwest::Client,
    seen: Seen,
    _app: axum_server::Handle<SocketAddr>,
}

struct EdgeProc {
    url: String,
    /// Its management listener (`/metrics`).
    management_url: String,
    state_dir: PathBuf,
    _proc: Proc,
}

impl Fleet {
    async fn start(dir: &Path) -> Fleet {
        let auth_bin = workspace_bin("cellbind-auth-service");
        let pki = make_pki(dir, "fleet");
        write_secret(&dir.join("admin.token"), ADMIN_TOKEN);
        write_secret(&dir.join("feed.token"), FEED_TOKEN);
        write_secret(&dir.join("app.token"), APP_TOKEN);
        write_secret(&dir.join("edge.token"), EDGE_TOKEN);
        let (app_addr, seen, app_handle) = start_app(&pki).await;
        let auth_port = free_port();
        let auth_public_port = free_port();
        // Every edge instance of the cell answers for the same public URL (the issuer).
        let public_url = format!("https://127.0.0.1:{}", free_port());
        let auth_config = dir.join("auth.toml");
        std::fs::create_dir_all(dir.join("auth-data")).unwrap();
        std::fs::write(
            &auth_config,
            format!(
                r#"cell_id = "{CELL}"
listen = "127.0.0.1:{auth_public_port}"
internal_listen = "127.0.0.1:{auth_port}"
management_listen = "127.0.0.1:{auth_management_port}"
issuer = "{public_url}"
data_dir = "{d}/auth-data"
kek_file = "{d}/kek.bin"
admin_token_file = "{d}/admin.token"
feed_token_file = "{d}/feed.token"
edge_token_file = "{d}/edge.token"
tls_cert = "{cert}"
tls_key = "{key}"
ca_cert = "{ca}"
"#,
                d = dir.display(),
                cert = pki.cert.display(),
                key = pki.key.display(),
                ca = pki.ca.display(),
                auth_management_port = free_port(),
            ),
        )
        .unwrap();
        let mut fleet = Fleet {
            dir: dir.to_owned(),
            http: client(&pki.ca),
            pki,
            auth_port,
            auth_public_port,
            auth_config,
            auth: None,
            app_addr,
            public_url,
            seen,
            _app: app_handle,
        };
        fleet.start_auth(&auth_bin).await;
        fleet
    }

    /// The auth-service's internal listener (feed, admin).
    fn auth_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.auth_port)
    }

    /// The auth-service's public listener (what the edge forwards sessions to).
    fn auth_public_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.auth_public_port)
    }

    async fn start_auth(&mut self, bin: &Path) {
        self.auth = Some(Proc::spawn(
            "auth-service",
            bin,
            &self.auth_config,
            &self.dir,
            &[],
        ));
        let url = format!("{}/healthz", self.auth_url());
        let http = self.http.clone();
        wait_for(
            "the auth-service to answer",
            Duration::from_secs(60),
            || {
                let http = http.clone();
                let url = url.clone();
                async move {
                    let ok = http.get(&url).send().await.ok()?.status().is_success();
                    ok.then_some(())
                }
            },
        )
        .await;
    }

    fn kill_auth(&mut self) {
        if let Some(mut p) = self.auth.take() {
            p.kill();
        }
    }

    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> serde_json::Value {
        let r = self
            .http
            .request(method, format!("{}{path}", self.auth_url()))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap_or(serde_json::Value::Null);
        assert!(status.is_success(), "admin {path}: {status} {v}");
        v
    }

    /// Starts an edge instance on a fresh port with `state_dir`.
    /// An edge with rate limits raised out of the way: this test is about availability from
    /// one client IP and two subjects (rate limits are tested in-process).
    async fn start_edge(&self, name: &str, state_dir: &Path, expect_ready: bool) -> EdgeProc {
        self.start_edge_with(name, state_dir, expect_ready, NO_LIMITS)
            .await
    }

    async fn start_edge_with(
        &self,
        name: &str,
        state_dir: &Path,
        expect_ready: bool,
        env: &[(&str, &str)],
    ) -> EdgeProc {
        // A port `free_port` found may be taken by a neighbour test before the edge binds it
        // (the edge then exits): start again on other ports.
        let mut attempt = 0;
        let (port, management_port, proc) = loop {
            attempt += 1;
            let port = free_port();
            let management_port = free_port();
            let config = self.dir.join(format!("{name}.toml"));
            // The instance's own feed credential, derived from the cell's feed secret.
            let credential = runtime::feed_credential::derive(
                &runtime::Secret::new(FEED_TOKEN),
                &protocol::CellId::new(CELL).unwrap(),
                &protocol::InstanceId::new(name).unwrap(),
            );
            write_secret(&self.dir.join(format!("{name}.feed")), credential.expose());
            std::fs::write(
                &config,
                format!(
                    r#"cell_id = "{CELL}"
instance_id = "{name}"
listen = "127.0.0.1:{port}"
management_listen = "127.0.0.1:{management_port}"
public_url = "{public}"
auth_service_url = "{auth_public}"
feed_url = "{auth}"
app_url = "https://{app}"
feed_token_file = "{d}/{name}.feed"
app_token_file = "{d}/app.token"
edge_token_file = "{d}/edge.token"
state_dir = "{state}"
tls_cert = "{cert}"
tls_key = "{key}"
ca_cert = "{ca}"
write_lease_ms = {LEASE_MS}
feed_wait_ms = {FEED_WAIT_MS}
"#,
                    public = self.public_url,
                    auth = self.auth_url(),
                    auth_public = self.auth_public_url(),
                    app = self.app_addr,
                    d = self.dir.display(),
                    state = state_dir.display(),
                    cert = self.pki.cert.display(),
                    key = self.pki.key.display(),
                    ca = self.pki.ca.display(),
                ),
            )
            .unwrap();
            let bin = PathBuf::from(env!("CARGO_BIN_EXE_cellbind-cell-endpoint"));
            let mut proc = Proc::spawn(name, &bin, &config, &self.dir, env);
            let listening = wait_for(
                &format!("{name} to listen or exit"),
                Duration::from_secs(30),
                || {
                    let exited = proc.child.try_wait().ok().flatten().is_some();
                    async move {
                        if exited {
                            return Some(false);
                        }
                        tokio::net::TcpStream::connect(("127.0.0.1", port))
                            .await
                            .ok()
                            .map(|_| true)
                    }
                },
            )
            .await;
            if listening {
                break (port, management_port, proc);
            }
            assert!(
                attempt < 5,
                "{name} exited at start {attempt} times (see {name}.log)"
            );
        };
        let url = format!("https://127.0.0.1:{port}");
        if expect_ready {
            let ready = format!("{url}/readyz");
            let http = self.http.clone();
            wait_for(
                &format!("{name} to be ready"),
                Duration::from_secs(60),
                || {
                    let http = http.clone();
                    let ready = ready.clone();
                    async move {
                        let ok = http.get(&ready).send().await.ok()?.status() == StatusCode::OK;
                        ok.then_some(())
                    }
                },
            )
            .await;
        }
        EdgeProc {
            url,
            management_url: format!("https://127.0.0.1:{management_port}"),
            state_dir: state_dir.to_owned(),
            _proc: proc,
        }
    }

    async fn sign_in(&self, edge: &EdgeProc, login: &str) -> String {
        let r = self
            .http
            .post(format!("{}/v1/sessions", edge.url))
            .json(&serde_json::json!({
                "contractor_id": CTR, "login": login, "password": PASSWORD, "client": "field"
            }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "sign-in: {v}");
        v["session"].as_str().unwrap().to_owned()
    }

    async fn call(
        &self,
        edge: &EdgeProc,
        method: reqwest::Method,
        token: &str,
    ) -> (StatusCode, serde_json::Value) {
        let path = if method == reqwest::Method::GET {
            "/api/routes/today"
        } else {
            "/api/jobs/j-1/complete"
        };
        let r = self
            .http
            .request(method, format!("{}{path}", edge.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    async fn seed(&self) {
        for login in ["tech1", "tech2"] {
            self.admin(
                reqwest::Method::POST,
                "/admin/v1/users",
                serde_json::json!({
                    "contractor_id": CTR, "login": login, "role": "technician", "password": PASSWORD
                }),
            )
            .await;
        }
        self.admin(
            reqwest::Method::PUT,
            &format!("/admin/v1/ownership/{CTR}"),
            serde_json::json!({"state": "active", "gen": 1}),
        )
        .await;
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

async fn metric(http: &reqwest::Client, edge: &EdgeProc, name: &str) -> f64 {
    let text = http
        .get(format!("{}/metrics", edge.management_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // `name{cell="…"} value`: the series of this edge's cell.
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (_, value) = rest.strip_prefix('{')?.split_once("} ")?;
            value.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("metric {name} missing:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_keep_serving_while_the_auth_service_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut fleet = Fleet::start(dir).await;
    fleet.seed().await;
    let edge1 = fleet
        .start_edge("edge-1", &dir.join("edge-1-state"), true)
        .await;
    let edge2 = fleet
        .start_edge("edge-2", &dir.join("edge-2-state"), true)
        .await;

    // Sessions are minted through the edge (forwarded to the auth-service).
    let s1 = fleet.sign_in(&edge1, "tech1").await;
    let s2 = fleet.sign_in(&edge2, "tech2").await;
    // Both edges serve both sessions, reads and writes, with the generation fence header.
    for e in [&edge1, &edge2] {
        for s in [&s1, &s2] {
            let (st, body) = fleet.call(e, reqwest::Method::GET, s).await;
            assert_eq!(st, StatusCode::OK, "{body}");
            assert_eq!(body["generation"], "1");
            assert_eq!(
                fleet.call(e, reqwest::Method::POST, s).await.0,
                StatusCode::OK
            );
        }
    }
    {
        let seen = fleet.seen.lock().unwrap();
        let (_, _, h) = seen.last().unwrap();
        assert!(h.get("authorization").is_none());
        assert_eq!(h["x-cellbind-contractor"], CTR);
    }
    // The disk copy exists before the outage.
    let state_file = edge1.state_dir.join("state.json");
    wait_for(
        "edge-1 to persist its state",
        Duration::from_secs(30),
        || {
            let f = state_file.clone();
            async move { f.exists().then_some(()) }
        },
    )
    .await;

    // Outage: SIGKILL the auth-service.
    fleet.kill_auth();
    let killed_at = Instant::now();

    // Sign-in fails fast with 503, not a hang.
    let t = Instant::now();
    let r = fleet
        .http
        .post(format!("{}/v1/sessions", edge1.url))
        .json(&serde_json::json!({"contractor_id": CTR, "login": "tech1", "password": PASSWORD, "client": "field"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().get("retry-after").is_some());
    assert!(t.elapsed() < Duration::from_secs(5));

    // Within the lease, writes still succeed.
    let (st, body) = fleet.call(&edge1, reqwest::Method::POST, &s1).await;
    assert!(
        st == StatusCode::OK || killed_at.elapsed() >= Duration::from_millis(LEASE_MS),
        "write within the lease refused: {st} {body}"
    );

    // Once the lease has lapsed, writes get 503 CELL_STATE_STALE (on both edges).
    for e in [&edge1, &edge2] {
        let body = wait_for("the write lease to lapse", Duration::from_secs(30), || {
            let f = &fleet;
            let s = s1.clone();
            async move {
                let (st, body) = f.call(e, reqwest::Method::POST, &s).await;
                (st == StatusCode::SERVICE_UNAVAILABLE).then_some(body)
            }
        })
        .await;
        assert_eq!(body["error"], "CELL_STATE_STALE");
    }
    // At least 1,000 reads through the edges, all served, going on until the outage is older
    // than the lease.
    let mut served = 0;
    let mut i = 0;
    while i < 1000 || killed_at.elapsed() <= Duration::from_millis(LEASE_MS) {
        i += 1;
        let e = if i % 2 == 0 { &edge1 } else { &edge2 };
        let s = if i % 3 == 0 { &s2 } else { &s1 };
        let (st, body) = fleet.call(e, reqwest::Method::GET, s).await;
        assert_eq!(st, StatusCode::OK, "read {i} during the outage: {body}");
        served += 1;
    }
    assert_eq!(served, i);
    println!(
        "static stability: {served}/{i} reads served with the auth-service down for {:.1} s (lease {LEASE_MS} ms)",
        killed_at.elapsed().as_secs_f64()
    );

    // A new edge instance started during the outage serves from a copy of edge-1's disk state.
    let copy = dir.join("edge-3-state");
    copy_dir(&edge1.state_dir, &copy);
    let edge3 = fleet.start_edge("edge-3", &copy, true).await;
    for s in [&s1, &s2] {
        let (st, body) = fleet.call(&edge3, reqwest::Method::GET, s).await;
        assert_eq!(st, StatusCode::OK, "new edge read: {body}");
    }
    // It never synced, so it cannot prove freshness: writes refused, never a 401.
    let (st, body) = fleet.call(&edge3, reqwest::Method::POST, &s1).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"], "CELL_STATE_STALE");

    // A new edge with no state at all answers 503 NOT_READY, never 401.
    let edge4 = fleet
        .start_edge("edge-4", &dir.join("edge-4-state"), false)
        .await;
    let body = wait_for("edge-4 to listen", Duration::from_secs(30), || {
        let f = &fleet;
        let e = &edge4;
        let s = s1.clone();
        async move {
            let r = f
                .http
                .get(format!("{}/api/routes/today", e.url))
                .bearer_auth(&s)
                .send()
                .await
                .ok()?;
            assert_ne!(r.status(), StatusCode::UNAUTHORIZED);
            (r.status() == StatusCode::SERVICE_UNAVAILABLE).then_some(())?;
            r.json::<serde_json::Value>().await.ok()
        }
    })
    .await;
    assert_eq!(body["error"], "NOT_READY");

    // The auth-service comes back: writes succeed again on every edge.
    fleet
        .start_auth(&workspace_bin("cellbind-auth-service"))
        .await;
    for e in [&edge1, &edge2, &edge3] {
        wait_for("writes to be served again", Duration::from_secs(90), || {
            let f = &fleet;
            let s = s1.clone();
            async move {
                let (st, _) = f.call(e, reqwest::Method::POST, &s).await;
                (st == StatusCode::OK).then_some(())
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_is_picked_up_and_an_unknown_kid_flood_costs_one_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fleet = Fleet::start(dir).await;
    fleet.seed().await;
    // The per-IP limit is raised so every flood request reaches validation (from one IP).
    let edge = fleet
        .start_edge_with("edge-r", &dir.join("edge-r-state"), true, NO_LIMITS)
        .await;
    let before = fleet.sign_in(&edge, "tech1").await;
    let kid_of = |t: &str| {
        let h = t.split('.').next().unwrap();
        let v: serde_json::Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, h).unwrap(),
        )
        .unwrap();
        v["kid"].as_str().unwrap().to_owned()
    };
    let rotated = fleet
        .admin(
            reqwest::Method::POST,
            "/admin/v1/keys/rotate",
            serde_json::json!({}),
        )
        .await;
    let after = fleet.sign_in(&edge, "tech1").await;
    assert_ne!(
        kid_of(&before),
        kid_of(&after),
        "rotation did not change the kid"
    );
    assert_eq!(rotated["current"], kid_of(&after));
    for s in [&before, &after] {
        let (st, body) = fleet.call(&edge, reqwest::Method::GET, s).await;
        assert_eq!(st, StatusCode::OK, "after rotation: {body}");
    }

    // 10,000 requests with random unknown kids.
    let fetches_before = metric(&fleet.http, &edge, "cellbind_edge_key_refetches_total").await;
    let started = Instant::now();
    let header_b64 = |kid: &str| {
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            format!(r#"{{"alg":"EdDSA","typ":"cellbind-session+jwt","kid":"{kid}"}}"#),
        )
    };
    let payload = after.split('.').nth(1).unwrap().to_owned();
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let http = fleet.http.clone();
        let url = format!("{}/api/routes/today", edge.url);
        let payload = payload.clone();
        let key = protocol::token::SigningKey::from_seed(
            protocol::Kid::new("k-attacker").unwrap(),
            &[3; 32],
        )
        .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut refused = 0u32;
            for i in 0..625 {
                let kid = format!("k-{worker}-{i}-{}", rand::random::<u64>());
                let input = format!("{}.{payload}", header_b64(&kid));
                let sig = key.sign_raw(input.as_bytes());
                let token = format!(
                    "{input}.{}",
                    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, sig)
                );
                let r = http.get(&url).bearer_auth(token).send().await.unwrap();
                let status = r.status();
                // The whole answer is read, as a client does: a response dropped before its
                // body arrives makes the client's HTTP/2 library reset the stream, and after
                // 1,024 such resets it closes the connection itself.
                let _ = r.bytes().await;
                if status == StatusCode::UNAUTHORIZED {
                    refused += 1;
                }
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let fetches =
        metric(&fleet.http, &edge, "cellbind_edge_key_refetches_total").await - fetches_before;
    let allowed = 1.0 + (elapsed.as_secs_f64() / 10.0).floor();
    println!(
        "unknown-kid flood over TLS: 10000 requests in {:.1} s, {refused} refused with 401, {fetches} key fetches (allowed {allowed})",
        elapsed.as_secs_f64()
    );
    if refused != 10_000 {
        let log = std::fs::read_to_string(dir.join("edge-r.log")).unwrap_or_default();
        panic!(
            "{refused} of 10000 refused with 401; edge log:\n{}",
            &log[..log.len().min(3000)]
        );
    }
    assert!(fetches >= 1.0 && fetches <= allowed, "{fetches} fetches");
    // Genuine sessions are unaffected.
    assert_eq!(
        fleet.call(&edge, reqwest::Method::GET, &after).await.0,
        StatusCode::OK
    );
}
