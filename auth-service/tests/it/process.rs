//! The real binary over real TLS: restart after SIGKILL keeps users, keys, ownership and the
//! feed sequence; stdin EOF stops it when asked.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// Two distinct free ports (both held while the second is chosen).
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

struct Service {
    child: Child,
    /// The public listener's base URL.
    base: String,
    /// The internal listener's base URL.
    internal: String,
    client: reqwest::Client,
}

fn start(
    config: &std::path::Path,
    (base, internal): (&str, &str),
    ca_pem: &str,
    log: &std::path::Path,
) -> Service {
    let child = Command::new(env!("CARGO_BIN_EXE_cellbind-auth-service"))
        .arg("--config")
        .arg(config)
        .env("CELLBIND_EXIT_ON_STDIN_EOF", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    runtime::install_crypto_provider();
    let client = cellbind_auth_service::client_trusting(ca_pem.as_bytes()).unwrap();
    Service {
        child,
        base: base.to_owned(),
        internal: internal.to_owned(),
        client,
    }
}

impl Service {
    async fn wait_healthy(&mut self, log: &std::path::Path) {
        let until = Instant::now() + DEADLINE;
        loop {
            if let Ok(r) = self
                .client
                .get(format!("{}/healthz", self.base))
                .send()
                .await
                && r.status() == 200
            {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited with {status}: {}",
                    std::fs::read_to_string(log).unwrap()
                );
            }
            assert!(Instant::now() < until, "never became healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        // The admin API and the feed are served on the internal listener only.
        let base = if ["/admin/", "/internal/"]
            .iter()
            .any(|p| path.starts_with(p))
        {
            &self.internal
        } else {
            &self.base
        };
        let mut req = self.client.request(method, format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn sign_in(&self) -> (u16, Value) {
        self.send(
            reqwest::Method::POST,
            "/v1/sessions",
            None,
            Some(json!({"contractor_id":"c-40711","login":"ana","password":"pw-restart-1","client":"field"})),
        )
        .await
    }
}

#[tokio::test]
async fn restart_after_sigkill_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let tls = make_tls(dir.path());
    write_tokens(dir.path());
    let (port, internal_port) = free_ports();
    let cfg = dir.path().join("auth.toml");
    std::fs::write(
        &cfg,
        config_toml(
            dir.path(),
            &tls,
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{internal_port}"),
            "",
        ),
    )
    .unwrap();
    let base = format!("https://127.0.0.1:{port}");
    let internal = format!("https://127.0.0.1:{internal_port}");
    let log = dir.path().join("auth.log");

    let mut svc = start(&cfg, (&base, &internal), &tls.ca_pem, &log);
    svc.wait_healthy(&log).await;
    use reqwest::Method as M;
    // The admin API is not on the public listener, and the access log says what was reached
    // (never the query string).
    let r = svc
        .client
        .get(format!("{base}/admin/v1/status?secret-query=1"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let line = "listener=\"public\" method=GET path=/admin/v1/status status=404";
    let until = Instant::now() + DEADLINE;
    loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains(line) {
            assert!(!text.contains("secret-query"), "{text}");
            break;
        }
        assert!(Instant::now() < until, "no access line {line:?} in {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (s, _) = svc
        .send(M::POST, "/admin/v1/users", Some(ADMIN), Some(json!({"contractor_id":"c-40711","login":"ana","role":"technician","password":"pw-restart-1"})))
        .await;
    assert_eq!(s, 201);
    let (s, _) = svc
        .send(
            M::PUT,
            "/admin/v1/ownership/c-40711",
            Some(ADMIN),
            Some(json!({"state":"active","gen":7})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, _) = svc
        .send(M::POST, "/admin/v1/keys/rotate", Some(ADMIN), None)
        .await;
    assert_eq!(s, 200);
    let (s, first) = svc.sign_in().await;
    assert_eq!(s, 201, "{first}");
    let token = first["session"].as_str().unwrap().to_owned();
    let (_, keys_before) = svc.send(M::GET, "/admin/v1/keys", Some(ADMIN), None).await;
    let (_, status_before) = svc
        .send(M::GET, "/admin/v1/status", Some(ADMIN), None)
        .await;
    let seq_before = status_before["seq"].as_u64().unwrap();
    assert!(seq_before >= 6, "{status_before}");
    // The key-encryption key was created 0600 and the database holds no raw seeds in the clear.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("data/kek.bin"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    svc.child.kill().unwrap(); // SIGKILL
    svc.child.wait().unwrap();

    let mut svc = start(&cfg, (&base, &internal), &tls.ca_pem, &log);
    svc.wait_healthy(&log).await;
    let (_, keys_after) = svc.send(M::GET, "/admin/v1/keys", Some(ADMIN), None).await;
    assert_eq!(keys_after, keys_before, "same kids and statuses");
    let (_, status_after) = svc
        .send(M::GET, "/admin/v1/status", Some(ADMIN), None)
        .await;
    assert_eq!(status_after["seq"], seq_before, "feed sequence kept");
    assert_eq!(status_after["users"], 1);
    let (s, rec) = svc
        .send(M::GET, "/admin/v1/ownership/c-40711", Some(ADMIN), None)
        .await;
    assert_eq!((s, rec), (200, json!({"state":"active","gen":7})));
    let (s, cur) = svc
        .send(M::GET, "/v1/sessions/current", Some(&token), None)
        .await;
    assert_eq!(
        s, 200,
        "a session minted before the crash still verifies: {cur}"
    );
    let (s, again) = svc.sign_in().await;
    assert_eq!(s, 201);
    assert_eq!(again["generation"], 7);
    assert_eq!(
        segment(again["session"].as_str().unwrap(), 0)["kid"],
        segment(&token, 0)["kid"],
        "the same current key signs after the restart"
    );
    let (_, feed) = svc
        .send(
            M::GET,
            &format!("/internal/v1/feed?since={seq_before}&instance=e1"),
            Some(feed_for("e1")),
            None,
        )
        .await;
    assert_eq!(feed["body"]["kind"], "delta");
    assert_eq!(feed["head"], seq_before);

    // Closing stdin stops it.
    drop(svc.child.stdin.take());
    let until = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = svc.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < until, "did not exit on stdin EOF");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn in_process_tls_server_serves_its_three_listeners_and_refuses_untrusting_clients() {
    let f = Fixture::new().await;
    let public = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let internal = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let management = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (addr, internal_addr) = (public.local_addr().unwrap(), internal.local_addr().unwrap());
    let management_addr = management.local_addr().unwrap();
    let server = tokio::spawn(cellbind_auth_service::serve(
        f.state.clone(),
        public,
        internal,
        management,
    ));
    let client = cellbind_auth_service::client_trusting(f.tls.ca_pem.as_bytes()).unwrap();
    let until = Instant::now() + DEADLINE;
    let resp = loop {
        match client
            .get(format!("https://{addr}/.well-known/jwks.json"))
            .send()
            .await
        {
            Ok(r) => break r,
            Err(e) => {
                assert!(Instant::now() < until, "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "public, max-age=60");
    let jwks: Value = resp.json().await.unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);
    // Metrics exist on the management listener only (no token), with its health and
    // readiness; nothing else is served there.
    for a in [addr, internal_addr] {
        let r = client
            .get(format!("https://{a}/metrics"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "/metrics on {a}");
    }
    for (path, status) in [
        ("/metrics", 200),
        ("/healthz", 200),
        ("/readyz", 200),
        ("/admin/v1/status", 404),
        ("/v1/sessions/current", 404),
    ] {
        let r = client
            .get(format!("https://{management_addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{path} on the management listener");
        if path == "/metrics" {
            assert_eq!(
                r.headers()["content-type"],
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            );
            let text = r.text().await.unwrap();
            assert!(
                text.contains(r#"cellbind_auth_feed_head_seq{cell="cell-01"}"#),
                "{text}"
            );
        }
    }
    // The admin API and the feed exist on the internal listener only.
    for (path, token) in [
        ("/admin/v1/status", ADMIN),
        ("/internal/v1/feed?since=0&instance=t", feed_for("t")),
    ] {
        let on_public = client
            .get(format!("https://{addr}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(on_public.status(), 404, "{path} on the public listener");
        let on_internal = client
            .get(format!("https://{internal_addr}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(on_internal.status(), 200, "{path} on the internal listener");
    }
    // A client that does not trust this CA is refused at the handshake, on both listeners.
    let other = make_tls(tempfile::tempdir().unwrap().path());
    let stranger = cellbind_auth_service::client_trusting(other.ca_pem.as_bytes()).unwrap();
    for a in [addr, internal_addr, management_addr] {
        assert!(
            stranger
                .get(format!("https://{a}/healthz"))
                .send()
                .await
                .is_err()
        );
    }
    // Stopping the server stops every listener.
    server.abort();
    let _ = server.await;
    let until = Instant::now() + DEADLINE;
    for a in [addr, internal_addr, management_addr] {
        while std::net::TcpStream::connect(a).is_ok() {
            assert!(Instant::now() < until, "{a} still accepts after the stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn map_poller_fetches_over_tls_and_refuses_bad_maps() {
    use axum::http::StatusCode;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let f = Fixture::with_extra(&format!("control_plane_url = \"https://{addr}\"")).await;
    let served = std::sync::Arc::new(std::sync::Mutex::new(
        serde_json::to_value(signed_map(5, &[])).unwrap(),
    ));
    let s2 = served.clone();
    let app = axum::Router::new().route(
        "/v1/placement-map",
        axum::routing::get(move || {
            let v = s2.lock().unwrap().clone();
            async move { axum::Json(v) }
        }),
    );
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&f.tls.cert, &f.tls.key)
        .await
        .unwrap();
    listener.set_nonblocking(true).unwrap();
    let cp = tokio::spawn(
        axum_server::from_tcp_rustls(listener, tls)
            .unwrap()
            .serve(app.into_make_service()),
    );
    let ready = f
        .call(
            axum::http::Method::GET,
            "/readyz",
            &[],
            axum::body::Body::empty(),
        )
        .await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);

    let until = Instant::now() + DEADLINE;
    while let Err(e) = cellbind_auth_service::poll_once(&f.state).await {
        assert!(Instant::now() < until, "{e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.state.map_version(), Some(5));
    let ready = f
        .call(
            axum::http::Method::GET,
            "/readyz",
            &[],
            axum::body::Body::empty(),
        )
        .await;
    assert_eq!(ready.status, StatusCode::OK);
    let head = f.head().await;
    // polling the same map again changes nothing
    cellbind_auth_service::poll_once(&f.state).await.unwrap();
    assert_eq!(f.head().await, head);
    // an older map and a tampered one are refused and counted
    *served.lock().unwrap() = serde_json::to_value(signed_map(4, &[])).unwrap();
    assert!(cellbind_auth_service::poll_once(&f.state).await.is_err());
    let mut tampered = serde_json::to_value(signed_map(9, &[])).unwrap();
    tampered["map"]["version"] = json!(10);
    *served.lock().unwrap() = tampered;
    assert!(cellbind_auth_service::poll_once(&f.state).await.is_err());
    assert_eq!(f.state.map_version(), Some(5));
    assert_eq!(f.head().await, head);
    let m = f.metrics().await;
    for line in [
        r#"cellbind_auth_map_refused_total{cell="cell-01",reason="not_newer"} 1"#,
        r#"cellbind_auth_map_refused_total{cell="cell-01",reason="bad_signature"} 1"#,
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    // a newer one is accepted and enters the feed
    *served.lock().unwrap() = serde_json::to_value(signed_map(6, &[])).unwrap();
    cellbind_auth_service::poll_once(&f.state).await.unwrap();
    let delta = f.feed(head).await;
    assert_eq!(delta["body"]["entries"][0]["change"]["type"], "map");
    assert_eq!(delta["body"]["entries"][0]["change"]["map"]["version"], 6);
    cp.abort();
}
