//! What a hostile client can reach through the edge (ATTACKS A23–A27, A29), in process with a
//! recording auth-service and app, then over real sockets for the connection-level rules
//! (slow bodies and headers, the per-address cap, PROXY protocol, conflicting hosts).
//! Each table row is one probe; every refused probe must reach neither upstream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use protocol::ClientKind;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

struct Rig {
    edge: cellbind_cell_endpoint::Edge,
    auth: Seen,
    app: Seen,
}

fn rig_with(s: cellbind_cell_endpoint::Settings) -> Rig {
    // The recording app doubles as a fake auth-service: every route 200, every request kept.
    let (auth, auth_seen) = recording_app();
    let (edge, app, _c) = edge_with(s, Some(auth));
    Rig {
        edge,
        auth: auth_seen,
        app,
    }
}

fn rig() -> Rig {
    rig_with(settings())
}

fn raw(method: &str, target: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(target);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

/// ATTACKS A23: every non-canonical form is refused before routing, for the session routes and
/// for `/api/*`, with an admin, feed or app key or with nothing.
#[tokio::test]
async fn non_canonical_targets_are_refused_before_routing_and_reach_nothing() {
    let r = rig();
    let token = session();
    let bearer = format!("Bearer {token}");
    let forms = [
        "/v1/sessions/../../admin/v1/status",
        "/v1/sessions/%2e%2e/%2e%2e/admin/v1/status",
        "/v1/sessions/.%2e/.%2E/admin/v1/status",
        "/v1/sessions/./../admin/v1/status",
        "/v1/sessions/..%2f..%2fadmin%2fv1%2fstatus",
        "/v1/sessions/current/../../../internal/v1/feed",
        "/v1/sessions/..;/..;/metrics",
        "/v1/sessions/%252e%252e/admin",
        "/v1/sessions/%5c..%5cadmin",
        "//admin/v1/status",
        "/api/..%2finternal/v1/contractors/c-40711/export",
        "/api/../internal/v1/contractors/c-40711/export",
        "/api/%2e%2e/internal/v1/contractors",
        "/api/./routes/today",
        "/api//routes/today",
        "/api/routes/today/..",
        "/api/x%00",
        "/api/x%zz",
        "https://127.0.0.9:8446/admin/v1/status",
        "http://127.0.0.3:8446/internal/v1/feed",
    ];
    let mut refused = 0;
    for target in forms {
        for auth in [None, Some(bearer.as_str()), Some("Bearer admin-token")] {
            let mut headers = vec![];
            if let Some(a) = auth {
                headers.push(("authorization", a));
            }
            for method in ["GET", "POST"] {
                let (status, _, body) = send(&r.edge, raw(method, target, &headers)).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {target}");
                assert_eq!(code(&body), "INVALID_REQUEST", "{method} {target}");
                refused += 1;
            }
        }
    }
    assert_eq!(r.auth.count(), 0, "nothing reached the auth-service");
    assert_eq!(r.app.count(), 0, "nothing reached the app");
    println!(
        "A23: {} target forms, {refused} probes, all refused with 400",
        forms.len()
    );
}

/// ATTACKS A23: only the allow-listed session routes are forwarded.
#[tokio::test]
async fn only_the_allow_listed_session_routes_are_forwarded() {
    let r = rig();
    for (method, target) in [
        ("GET", "/v1/sessions/admin"),
        ("GET", "/v1/sessions/current/x"),
        ("POST", "/v1/sessions/renew/x"),
        ("POST", "/v1/sessions/transfer/status/x"),
        ("GET", "/v1/sessionsx"),
        ("GET", "/admin/v1/status"),
        ("GET", "/internal/v1/feed"),
        ("GET", "/api"),
    ] {
        let (status, _, body) = send(&r.edge, raw(method, target, &[])).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {target}");
        assert_eq!(code(&body), "NOT_FOUND");
    }
    for (method, target) in [("PUT", "/v1/sessions"), ("GET", "/v1/sessions/renew")] {
        let (status, _, _) = send(&r.edge, raw(method, target, &[])).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {target}");
    }
    assert_eq!(r.auth.count(), 0);
    // The allowed ones are.
    let token = session();
    let bearer = format!("Bearer {token}");
    for (method, target) in [
        ("POST", "/v1/sessions"),
        ("GET", "/v1/sessions/current"),
        ("DELETE", "/v1/sessions/current"),
        ("POST", "/v1/sessions/renew"),
        ("POST", "/v1/sessions/transfer"),
        ("POST", "/v1/sessions/rebind"),
        ("POST", "/v1/sessions/transfer/status"),
    ] {
        let (status, _, _) =
            send(&r.edge, raw(method, target, &[("authorization", &bearer)])).await;
        assert_eq!(status, StatusCode::OK, "{method} {target}");
    }
    assert_eq!(r.auth.count(), 7);
}

fn desk_token() -> String {
    let mut c = claims(CTR, 1);
    c.cli = ClientKind::Desk;
    mint(&c)
}

/// ATTACKS A24: a cookie request stays a cookie request whatever junk `Authorization` it also
/// carries, so every unsafe one needs the CSRF proof, `/v1/sessions/*` included — from
/// another fleet cell's origin too.
#[tokio::test]
async fn a_junk_authorization_header_never_skips_the_csrf_proof() {
    let r = rig();
    let cookie = format!("__Host-cellbind_session={}", desk_token());
    let junk = [
        "Basic dXNlcjpwYXNz",
        "Bearer junk",
        "Bearer a.b.c",
        "Negotiate x",
        "bearer x",
        "Bearer ",
    ];
    let mut probes = 0;
    for (method, target) in [
        ("POST", "/v1/sessions/renew"),
        ("DELETE", "/v1/sessions/current"),
        ("POST", "/v1/sessions/transfer"),
        ("POST", "/api/jobs/j-1/complete"),
    ] {
        for origin in [ISSUER, OTHER_ENDPOINT] {
            for auth in junk {
                let req = raw(
                    method,
                    target,
                    &[
                        ("authorization", auth),
                        ("cookie", &cookie),
                        ("origin", origin),
                    ],
                );
                let (status, h, body) = send(&r.edge, req).await;
                assert_eq!(status, StatusCode::FORBIDDEN, "{method} {target} {auth:?}");
                assert_eq!(code(&body), "FORBIDDEN");
                if target.starts_with("/v1/sessions") {
                    assert!(h.get("access-control-allow-origin").is_none());
                }
                probes += 1;
            }
        }
    }
    assert_eq!(
        r.auth.count(),
        0,
        "nothing minted: nothing reached the auth-service"
    );
    assert_eq!(r.app.count(), 0);
    println!("A24: {probes} cookie + junk-Authorization probes refused with 403");

    // A valid bearer makes it a bearer request: the cookie is ignored and never forwarded.
    let bearer = format!("Bearer {}", session());
    let req = raw(
        "POST",
        "/v1/sessions/renew",
        &[("authorization", &bearer), ("cookie", &cookie)],
    );
    assert_eq!(send(&r.edge, req).await.0, StatusCode::OK);
    let (_, up) = r.auth.last();
    assert_eq!(up["authorization"], bearer);
    assert!(up.get("cookie").is_none());
    // A cookie request with its proof: only the session cookie travels.
    let req = raw(
        "POST",
        "/v1/sessions/renew",
        &[
            ("authorization", "Basic dXNlcjpwYXNz"),
            ("cookie", &format!("{cookie}; __Host-cellbind_csrf=p1")),
            ("x-cellbind-csrf", "p1"),
            ("origin", ISSUER),
        ],
    );
    assert_eq!(send(&r.edge, req).await.0, StatusCode::OK);
    let (_, up) = r.auth.last();
    assert!(up.get("authorization").is_none());
    assert_eq!(up["cookie"], cookie);
}

/// ATTACKS A25, A26: identity headers in every spelling, forwarding and override headers and
/// `Connection`-listed headers never reach either upstream; the edge's own values do.
#[tokio::test]
async fn identity_forwarding_and_override_headers_from_the_client_never_reach_an_upstream() {
    let r = rig();
    let token = session();
    let bearer = format!("Bearer {token}");
    let lies: [(&str, &str); 16] = [
        ("x-cellbind-contractor", "c-99999"),
        ("x_cellbind_contractor", "c-99999"),
        ("X_Cellbind_Subject", "root"),
        ("x-cellbind-generation", "999"),
        ("x_cellbind_edge_key", "guess"),
        ("x-cellbind-client-ip", "6.6.6.6"),
        ("x-forwarded-for", "6.6.6.6"),
        ("x_forwarded_for", "6.6.6.6"),
        ("forwarded", "for=6.6.6.6;proto=http"),
        ("x-real-ip", "6.6.6.6"),
        ("x-original-url", "/internal/v1/contractors/c-40711/export"),
        ("x-rewrite-url", "/internal/v1/contractors/c-40711/export"),
        ("x-http-method-override", "DELETE"),
        ("x-forwarded-host", "evil.example"),
        ("connection", "x-hop-secret"),
        ("x-hop-secret", "1"),
    ];
    for target in ["/api/routes/today", "/v1/sessions/current"] {
        let mut req = raw("GET", target, &[("authorization", &bearer)]);
        for (k, v) in lies {
            req.headers_mut().append(
                axum::http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        req.extensions_mut()
            .insert(ConnectInfo("192.0.2.7:5555".parse::<SocketAddr>().unwrap()));
        let (status, _, _) = send(&r.edge, req).await;
        assert_eq!(status, StatusCode::OK, "{target}");
        let seen = if target.starts_with("/api") {
            r.app.last().1
        } else {
            r.auth.last().1
        };
        for (k, v) in lies {
            let k = k.to_ascii_lowercase();
            if let Some(got) = seen.get(k.as_str()) {
                assert_ne!(got, v, "{target}: {k} passed through");
            }
            assert!(
                !seen.contains_key(k.replace('-', "_").as_str()),
                "{target}: {k} underscore spelling passed"
            );
        }
        assert!(seen.get("x-hop-secret").is_none());
        assert_eq!(seen["x-forwarded-for"], "192.0.2.7");
        assert_eq!(seen["x-forwarded-proto"], "https");
        assert!(seen.get("forwarded").is_none());
        assert!(seen.get("x-original-url").is_none());
        assert!(seen.get("x-http-method-override").is_none());
        if target.starts_with("/api") {
            assert_eq!(seen["x-cellbind-contractor"], CTR);
            assert_eq!(seen.get_all("x-cellbind-contractor").iter().count(), 1);
            assert_eq!(seen["x-cellbind-generation"], "1");
        } else {
            assert_eq!(seen["x-cellbind-client-ip"], "192.0.2.7");
        }
        let cellbind: Vec<&str> = seen
            .keys()
            .map(|k| k.as_str())
            .filter(|k| protocol::http::is_cellbind_header(k))
            .collect();
        let allowed = [
            "x-cellbind-subject",
            "x-cellbind-contractor",
            "x-cellbind-generation",
            "x-cellbind-session",
            "x-cellbind-edge-key",
            "x-cellbind-client-ip",
        ];
        assert!(cellbind.iter().all(|k| allowed.contains(k)), "{cellbind:?}");
    }
}

fn from(peer: &str, headers: &[(&str, &str)], target: &str, token: &str) -> Request<Body> {
    let mut req = raw("GET", target, headers);
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req.extensions_mut()
        .insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
    req
}

/// ATTACKS A27: forwarding headers name the client only when the peer is a trusted proxy;
/// the per-IP limit then counts the client, not the balancer.
#[tokio::test]
async fn the_client_address_comes_from_trusted_proxies_only() {
    let mut s = settings();
    s.trusted_proxies =
        cellbind_cell_endpoint::testing::TrustedProxies::parse(&["10.0.0.0/8".into()]).unwrap();
    s.serving.rate_per_ip_per_s = 1;
    s.serving.burst_per_ip = 3;
    s.serving.rate_per_subject_per_s = 1000;
    s.serving.burst_per_subject = 1000;
    let r = rig_with(s);
    let token = session();
    // An untrusted peer cannot dodge its bucket with rotating X-Forwarded-For values.
    let mut codes = vec![];
    for i in 0..6 {
        let xff = format!("198.51.100.{i}");
        let req = from(
            "192.0.2.7:1000",
            &[("x-forwarded-for", &xff)],
            "/api/x",
            &token,
        );
        codes.push(send(&r.edge, req).await.0.as_u16());
    }
    assert_eq!(codes, [200, 200, 200, 429, 429, 429]);
    assert_eq!(r.app.last().1["x-forwarded-for"], "192.0.2.7");
    // Behind a trusted balancer, each client has its own bucket.
    for i in 0..6 {
        let xff = format!("6.6.6.6, 203.0.113.{i}");
        let req = from(
            "10.1.1.1:1000",
            &[("x-forwarded-for", &xff)],
            "/api/x",
            &token,
        );
        assert_eq!(send(&r.edge, req).await.0, StatusCode::OK, "client {i}");
        assert_eq!(
            r.app.last().1["x-forwarded-for"],
            format!("203.0.113.{i}").as_str()
        );
    }
}

/// ATTACKS A29: a declared body that never arrives is answered 408 within the body timeout.
#[tokio::test]
async fn a_body_that_never_arrives_is_cut_off_at_the_body_timeout() {
    let mut s = settings();
    s.listeners.body_read_timeout_ms = 300;
    let r = rig_with(s);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(1);
    tx.send(Ok(bytes::Bytes::from(vec![b'x'; 1024])))
        .await
        .unwrap();
    let body = Body::from_stream(tokio_stream_from(rx));
    let req = Request::builder()
        .method("POST")
        .uri("/api/jobs/j-1/complete")
        .header("authorization", format!("Bearer {}", session()))
        .header("content-length", "1048576")
        .body(body)
        .unwrap();
    let t0 = Instant::now();
    let (status, _, body) = send(&r.edge, req).await;
    let took = t0.elapsed();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(code(&body), "INVALID_REQUEST");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(r.app.count(), 0);
    drop(tx);
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

// ---- Real sockets: the connection gate (per-address cap, PROXY v2) and slow requests. ----

struct Served {
    url: String,
    addr: SocketAddr,
    ca: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn serve(edge: cellbind_cell_endpoint::Edge) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::support::make_pki(dir.path(), "hostile");
    let tls = cellbind_cell_endpoint::testing::tls::load(&pki.cert, &pki.key)
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(cellbind_cell_endpoint::testing::tls::serve_listener(
        listener,
        tls,
        axum_server::Handle::new(),
        edge.connection_gate(),
        cellbind_cell_endpoint::app(edge),
    ));
    Served {
        url: format!("https://{addr}"),
        addr,
        ca: pki.ca,
        _dir: dir,
    }
}

fn tls_connector(ca: &std::path::Path) -> tokio_rustls::TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

use rustls::pki_types::pem::PemObject as _;

/// Opens a TLS connection (after `preamble` in clear, e.g. a PROXY header).
async fn connect(
    s: &Served,
    preamble: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut tcp = tokio::net::TcpStream::connect(s.addr).await?;
    tcp.write_all(preamble).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tls_connector(&s.ca).connect(name, tcp).await
}

/// Reads until the peer closes or `deadline`; returns what arrived and whether it closed.
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    deadline: Duration,
) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + deadline;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

/// ATTACKS A29: 60 connections that declare a 1 MiB body and send 1 KiB are answered and
/// closed within the body timeout; connections over the per-address cap are closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_are_closed_within_the_timeout_and_hoarded_connections_are_capped() {
    let mut s = settings();
    s.listeners.body_read_timeout_ms = 1500;
    s.listeners.header_read_timeout_ms = 1500;
    s.listeners.max_connections_per_ip = 40;
    s.serving.burst_per_ip = 10_000;
    s.serving.rate_per_ip_per_s = 10_000;
    s.serving.burst_per_subject = 10_000;
    s.serving.rate_per_subject_per_s = 10_000;
    let r = rig_with(s);
    let gate = r.edge.connection_gate();
    let served = serve(r.edge.clone()).await;
    let token = session();
    let head = format!(
        "POST /api/jobs/j-1/complete HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\ncontent-length: 1048576\r\n\r\n"
    );
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..60 {
        let head = head.clone();
        let served_addr = served.addr;
        let ca = served.ca.clone();
        tasks.push(tokio::spawn(async move {
            let s = Served {
                url: String::new(),
                addr: served_addr,
                ca,
                _dir: tempfile::tempdir().unwrap(),
            };
            let Ok(mut c) = connect(&s, b"").await else {
                return ("refused".to_owned(), true);
            };
            if c.write_all(head.as_bytes()).await.is_err()
                || c.write_all(&[b'x'; 1024]).await.is_err()
            {
                return ("refused".to_owned(), true);
            }
            read_until_closed(&mut c, Duration::from_secs(8)).await
        }));
    }
    let mut timed_out = 0;
    let mut refused = 0;
    for t in tasks {
        let (text, closed) = t.await.unwrap();
        assert!(closed, "a slow connection stayed open: {text}");
        if text.starts_with("HTTP/1.1 408") {
            timed_out += 1;
        } else {
            refused += 1;
        }
    }
    let took = t0.elapsed();
    println!(
        "A29: 60 slow-body connections: {timed_out} answered 408 and closed, {refused} refused at the cap (40), all closed in {took:?}"
    );
    assert_eq!(timed_out, 40);
    assert_eq!(refused, 20);
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(r.app.count(), 0);
    // Every slot is given back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.open_from("127.0.0.1".parse().unwrap()) > 0 {
        assert!(Instant::now() < deadline, "slots leaked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Headers that never finish are cut off too.
    let mut c = connect(&served, b"").await.unwrap();
    c.write_all(b"GET /api/routes/today HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let (_, closed) = read_until_closed(&mut c, Duration::from_secs(6)).await;
    assert!(closed, "a slowloris header stayed open");
    let _ = served.url;
}

fn proxy_v2(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (client, server),
    )
    .build()
    .unwrap()
}

/// ATTACKS A27: with `proxy_protocol`, a trusted proxy's PROXY v2 header names the client;
/// an untrusted peer's PROXY header is not read (its TLS fails), and a trusted peer without one
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v2_names_the_client_only_for_trusted_proxies() {
    let mut s = settings();
    s.trusted_proxies =
        cellbind_cell_endpoint::testing::TrustedProxies::parse(&["127.0.0.1/32".into()]).unwrap();
    s.serving.proxy_protocol = true;
    s.listeners.header_read_timeout_ms = 1000;
    let r = rig_with(s);
    let served = serve(r.edge.clone()).await;
    let token = session();
    let client: SocketAddr = "203.0.113.77:40000".parse().unwrap();
    let mut c = connect(&served, &proxy_v2(client, served.addr))
        .await
        .unwrap();
    c.write_all(
        format!(
            "GET /api/routes/today HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\nx-forwarded-for: 6.6.6.6\r\nconnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (text, _) = read_until_closed(&mut c, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(r.app.last().1["x-forwarded-for"], "203.0.113.77");
    // A trusted peer that does not speak PROXY protocol gets nowhere.
    assert!(connect(&served, b"").await.is_err());
}

#[allow(dead_code)]
fn unused(_: HeaderMap) {}

/// A request with more header lines than `tls::MAX_HEADERS` is refused (`431`) before anything
/// reads it; one at the limit is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_more_headers_than_the_limit_is_refused() {
    let r = rig();
    let served = serve(r.edge.clone()).await;
    let limit = cellbind_cell_endpoint::testing::tls::MAX_HEADERS;
    for (extra, expected) in [(limit - 1, "HTTP/1.1 200"), (limit, "HTTP/1.1 431")] {
        let mut head =
            String::from("GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
        // `host` and `connection` count too: `extra - 1` more reach the limit exactly.
        for i in 0..extra - 1 {
            head.push_str(&format!("x-filler-{i}: v\r\n"));
        }
        head.push_str("\r\n");
        let mut c = connect(&served, b"").await.unwrap();
        c.write_all(head.as_bytes()).await.unwrap();
        let (text, _) = read_until_closed(&mut c, Duration::from_secs(10)).await;
        assert!(
            text.starts_with(expected),
            "{} header lines: {text}",
            extra + 1
        );
    }
}

/// One HTTP/1.1 request written byte for byte on a fresh connection (`head` without its final
/// empty line); the answer's text.
async fn h1_raw(served: &Served, head: &str, token: &str) -> String {
    let mut c = connect(served, b"").await.unwrap();
    c.write_all(
        format!("{head}authorization: Bearer {token}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    read_until_closed(&mut c, Duration::from_secs(10)).await.0
}

/// ATTACKS A23: a request that names its host twice, or a `host` other than its HTTP/2
/// `:authority` or its HTTP/1.1 absolute-form target's authority, is refused `400
/// INVALID_REQUEST` before routing: one component would route by one name, the next by the
/// other. Nothing reaches an upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_hosts_are_refused_before_routing_over_http1_and_http2() {
    let r = rig();
    let served = serve(r.edge.clone()).await;
    let token = session();
    let me = ISSUER.trim_start_matches("https://");
    for head in [
        format!("GET /api/routes/today HTTP/1.1\r\nhost: {me}\r\nhost: evil.example\r\n"),
        format!("GET /api/routes/today HTTP/1.1\r\nhost: {me}\r\nhost: {me}\r\n"),
        format!("GET https://{me}/api/routes/today HTTP/1.1\r\nhost: evil.example\r\n"),
    ] {
        let text = h1_raw(&served, &head, &token).await;
        assert!(
            text.starts_with("HTTP/1.1 400") && text.contains("INVALID_REQUEST"),
            "{head:?}: {text}"
        );
    }
    assert_eq!(r.app.count(), 0, "a conflicting host reached the app");
    // One host, or an absolute-form target with its own host: served.
    for head in [
        format!("GET /api/routes/today HTTP/1.1\r\nhost: {me}\r\n"),
        format!("GET https://{me}/api/routes/today HTTP/1.1\r\nhost: {me}\r\n"),
    ] {
        let text = h1_raw(&served, &head, &token).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{head:?}: {text}");
    }
    assert_eq!(r.app.count(), 2);

    // HTTP/2: `host` beside a different `:authority`.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&std::fs::read(&served.ca).unwrap())
    {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let io = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for (host, expected) in [(Some("evil.example"), 400), (Some(me), 200), (None, 200)] {
        let mut req = http::Request::get(format!("https://{me}/api/routes/today"))
            .header("authorization", format!("Bearer {token}"));
        if let Some(h) = host {
            req = req.header("host", h);
        }
        let resp = send
            .send_request(
                req.body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), expected, "host {host:?}");
    }
    assert_eq!(r.app.count(), 4);
}

/// ATTACKS A27: with `proxy_protocol` on, no forwarding header is read. A `LOCAL` PROXY header
/// (a balancer's health check) names no client, so the client is the socket peer, never the
/// `X-Forwarded-For` the connection carries; the per-IP limit counts the peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_proxy_header_never_falls_back_to_the_clients_forwarding_header() {
    let mut s = settings();
    s.trusted_proxies =
        cellbind_cell_endpoint::testing::TrustedProxies::parse(&["127.0.0.1/32".into()]).unwrap();
    s.serving.proxy_protocol = true;
    s.listeners.header_read_timeout_ms = 1000;
    s.serving.burst_per_ip = 2;
    s.serving.rate_per_ip_per_s = 1;
    let r = rig_with(s);
    let served = serve(r.edge.clone()).await;
    let token = session();
    let local = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Local,
        ppp::v2::Protocol::Stream,
        (
            "203.0.113.50:4000".parse::<SocketAddr>().unwrap(),
            served.addr,
        ),
    )
    .build()
    .unwrap();
    let mut statuses = Vec::new();
    for i in 0..3 {
        let mut c = connect(&served, &local).await.unwrap();
        c.write_all(
            format!(
                "GET /api/routes/today HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\nx-forwarded-for: 198.51.100.{i}\r\nforwarded: for=198.51.100.{i}\r\nconnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let (text, _) = read_until_closed(&mut c, Duration::from_secs(5)).await;
        statuses.push(text.split(' ').nth(1).unwrap_or("").to_owned());
        if i == 0 {
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert_eq!(r.app.last().1["x-forwarded-for"], "127.0.0.1");
        }
    }
    // Three "clients" by their forwarding headers, one by the socket: its burst of two, then 429.
    assert_eq!(statuses, ["200", "200", "429"]);
}
