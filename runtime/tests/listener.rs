//! The listener protections over real sockets (ATTACKS A29, A33): a protected HTTPS server on
//! loopback, clients bound to their own loopback addresses (all of 127/8 is loopback), every
//! wait a deadline on what the server does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use cellbind_runtime::listener::{Gate, Protection, Timeouts};
use prometheus_client::metrics::counter::Counter;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

/// A served protected listener.
struct Served {
    addr: SocketAddr,
    ca: CertificateDer<'static>,
    gate: Arc<Gate>,
    refused: Counter,
    /// Releases the requests waiting in `GET /wait`.
    release: Arc<tokio::sync::Notify>,
    /// Told when `POST /slow` begins to wait for its body.
    reading: Arc<tokio::sync::Notify>,
    handle: axum_server::Handle<SocketAddr>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

const HEADER: Duration = Duration::from_millis(400);
const BODY: Duration = Duration::from_millis(400);
const HANDSHAKE: Duration = Duration::from_millis(400);
const KEEP_ALIVE: Duration = Duration::from_millis(1_500);
/// What a close may take beyond its deadline (a loaded machine's scheduling).
const MARGIN: Duration = Duration::from_millis(700);

async fn serve(cap: usize) -> Served {
    cellbind_runtime::install_crypto_provider();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let tls = RustlsConfig::from_pem(
        leaf.pem().into_bytes(),
        leaf_key.serialize_pem().into_bytes(),
    )
    .await
    .unwrap();
    let refused = Counter::default();
    let protection = Protection {
        timeouts: Timeouts {
            header_read: HEADER,
            body_read: BODY,
            tls_handshake: HANDSHAKE,
            keep_alive: KEEP_ALIVE,
        },
        gate: Gate::new(cap, refused.clone()),
    };
    let release = Arc::new(tokio::sync::Notify::new());
    let r = release.clone();
    let reading = Arc::new(tokio::sync::Notify::new());
    let told = reading.clone();
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/echo", post(|b: Bytes| async move { b }))
        // Says when it waits for its body, reads it, then works longer than the body timeout.
        .route(
            "/slow",
            post(move |body: axum::body::Body| {
                let told = told.clone();
                async move {
                    told.notify_one();
                    let b = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                    tokio::time::sleep(BODY * 2).await;
                    b
                }
            }),
        )
        // Reads its body within its own deadline (the body timeout, as the edge's forwarder
        // does) and answers 418 when it passes.
        .route(
            "/own",
            post(|body: axum::body::Body| async move {
                match tokio::time::timeout(BODY, axum::body::to_bytes(body, 1 << 20)).await {
                    Ok(Ok(b)) => (http::StatusCode::OK, b),
                    _ => (http::StatusCode::IM_A_TEAPOT, Bytes::from_static(b"own")),
                }
            }),
        )
        .route(
            "/wait",
            get(move || {
                let r = r.clone();
                async move {
                    r.notified().await;
                    "released"
                }
            }),
        );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = cellbind_runtime::listener::https_server(listener, tls, &protection)
        .unwrap()
        .handle(handle.clone());
    tokio::spawn(server.serve(app.into_make_service()));
    Served {
        addr,
        ca: ca_cert.der().clone(),
        gate: protection.gate,
        refused,
        release,
        reading,
        handle,
    }
}

/// A TCP connection to `s` from `from` (a loopback address).
async fn tcp(s: &Served, from: &str) -> TcpStream {
    let from: IpAddr = from.parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(s.addr).await.unwrap()
}

/// A TLS connection to `s` from `from`, offering `alpn`; `Err` when the server closed it
/// during the handshake.
async fn tls(s: &Served, from: &str, alpn: &[u8]) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(s.ca.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            ServerName::try_from("127.0.0.1").unwrap(),
            tcp(s, from).await,
        )
        .await
}

/// Reads until the server closes the connection (`Some(text read, when)`), or `None` if it is
/// still open at `deadline`.
async fn closed_by<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    deadline: Instant,
) -> Option<(String, Instant)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Some((String::from_utf8_lossy(&out).into_owned(), Instant::now()));
            }
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// One HTTP/1.1 `GET` on an open connection; the answer's text up to its body `ok`.
async fn get_ok(c: &mut TlsStream<TcpStream>, path: &str) -> String {
    c.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&out).ends_with("ok") {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, c.read(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before the answer: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_partial_header_is_closed_at_the_header_timeout_while_others_are_served() {
    let s = serve(8).await;
    let mut stalled = tls(&s, "127.0.0.2", b"http/1.1").await.unwrap();
    let sent = Instant::now();
    stalled
        .write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    // Meanwhile another address is admitted and served.
    let mut other = tls(&s, "127.0.0.3", b"http/1.1").await.unwrap();
    assert!(get_ok(&mut other, "/ok").await.starts_with("HTTP/1.1 200"));
    let (_, at) = closed_by(&mut stalled, sent + HEADER + MARGIN)
        .await
        .expect("the stalled header was closed within the header timeout");
    println!("stalled header closed after {:?}", at - sent);
    assert!(
        at - sent >= HEADER - Duration::from_millis(50),
        "{:?}",
        at - sent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_before_tls_and_counted() {
    let s = serve(3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tls(&s, "127.0.0.4", b"http/1.1").await.unwrap());
    }
    let from: IpAddr = "127.0.0.4".parse().unwrap();
    assert_eq!(s.gate.open_from(from), 3);
    let t0 = Instant::now();
    assert!(
        tls(&s, "127.0.0.4", b"http/1.1").await.is_err(),
        "over the cap"
    );
    assert!(
        t0.elapsed() < HANDSHAKE,
        "refused at once: {:?}",
        t0.elapsed()
    );
    assert_eq!(s.refused.get(), 1);
    // Another address is not affected.
    let mut other = tls(&s, "127.0.0.5", b"http/1.1").await.unwrap();
    assert!(get_ok(&mut other, "/ok").await.starts_with("HTTP/1.1 200"));
    // A closed connection gives its slot back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.gate.open_from(from) > 2 {
        assert!(Instant::now() < deadline, "the slot was not given back");
        tokio::task::yield_now().await;
    }
    let mut again = tls(&s, "127.0.0.4", b"http/1.1").await.unwrap();
    assert!(get_ok(&mut again, "/ok").await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tcp_connection_is_closed_at_the_handshake_timeout() {
    let s = serve(8).await;
    let mut c = tcp(&s, "127.0.0.6").await;
    let t0 = Instant::now();
    let (_, at) = closed_by(&mut c, t0 + HANDSHAKE + MARGIN)
        .await
        .expect("closed within the handshake timeout");
    assert!(
        at - t0 >= HANDSHAKE - Duration::from_millis(50),
        "{:?}",
        at - t0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_waits_the_keep_alive_timeout_and_a_later_head_the_header_timeout()
 {
    let s = serve(8).await;
    // Idle after an answer: open past the header timeout, closed at the keep-alive timeout.
    let mut idle = tls(&s, "127.0.0.7", b"http/1.1").await.unwrap();
    get_ok(&mut idle, "/ok").await;
    let answered = Instant::now();
    assert!(
        closed_by(&mut idle, answered + HEADER + MARGIN)
            .await
            .is_none(),
        "an idle connection is not cut at the header timeout"
    );
    let (_, at) = closed_by(&mut idle, answered + KEEP_ALIVE + MARGIN)
        .await
        .expect("closed at the keep-alive timeout");
    println!("idle connection closed after {:?}", at - answered);
    assert!(at - answered >= KEEP_ALIVE - Duration::from_millis(50));
    // A second request's head, begun after an idle spell, has the header timeout from its
    // first byte.
    let mut c = tls(&s, "127.0.0.7", b"http/1.1").await.unwrap();
    get_ok(&mut c, "/ok").await;
    c.write_all(b"GET /ok HTTP/1.1\r\nhost:").await.unwrap();
    let begun = Instant::now();
    let (_, at) = closed_by(&mut c, begun + HEADER + MARGIN)
        .await
        .expect("a later partial head is closed at the header timeout");
    assert!(at - begun >= HEADER - Duration::from_millis(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_is_never_cut_by_a_read_deadline() {
    let s = serve(8).await;
    // A long-poll over HTTP/1.1, and beside it an idle connection: once the idle one is
    // closed (header and keep-alive timeouts have passed), the long-poll is still waiting.
    let mut poll = tls(&s, "127.0.0.8", b"http/1.1").await.unwrap();
    poll.write_all(b"GET /wait HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut idle = tls(&s, "127.0.0.9", b"http/1.1").await.unwrap();
    get_ok(&mut idle, "/ok").await;
    let t0 = Instant::now();
    closed_by(&mut idle, t0 + KEEP_ALIVE + MARGIN)
        .await
        .expect("the idle neighbour closed");
    s.release.notify_waiters();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), poll.read(&mut buf))
        .await
        .expect("the long-poll answered")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_is_answered_408_and_the_connection_closed() {
    let s = serve(8).await;
    let mut c = tls(&s, "127.0.0.10", b"http/1.1").await.unwrap();
    c.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nfirst bytes")
        .await
        .unwrap();
    let sent = Instant::now();
    let (text, at) = closed_by(&mut c, sent + BODY + MARGIN)
        .await
        .expect("answered and closed within the body timeout");
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"error\":\"INVALID_REQUEST\"") && text.contains("connection: close"),
        "{text}"
    );
    println!("slow body answered 408 and closed after {:?}", at - sent);
    // A body that arrives is read whole.
    let mut c = tls(&s, "127.0.0.10", b"http/1.1").await.unwrap();
    c.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ok"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_clock_stops_with_the_body_and_a_handlers_own_deadline_answers_first() {
    let s = serve(8).await;
    // The body arrives after the handler began to wait for it (its clock runs), then the
    // handler takes longer than the body timeout: the clock stopped with the body.
    let mut c = tls(&s, "127.0.0.13", b"http/1.1").await.unwrap();
    c.write_all(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n")
        .await
        .unwrap();
    s.reading.notified().await;
    c.write_all(b"ok").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ok"),
        "{text}"
    );
    // A handler with its own body deadline gives its own answer, not the listener's 408.
    let mut c = tls(&s, "127.0.0.13", b"http/1.1").await.unwrap();
    c.write_all(b"POST /own HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\npart")
        .await
        .unwrap();
    let sent = Instant::now();
    let n = tokio::time::timeout(BODY + MARGIN, c.read(&mut buf))
        .await
        .expect("answered within the body timeout")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 418"), "{text}");
    assert!(sent.elapsed() >= BODY - Duration::from_millis(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_must_send_its_first_request_in_time_and_may_then_idle() {
    let s = serve(8).await;
    // Silent after the handshake: closed at the header timeout.
    let mut silent = tls(&s, "127.0.0.11", b"h2").await.unwrap();
    let t0 = Instant::now();
    closed_by(&mut silent, t0 + HEADER + MARGIN)
        .await
        .expect("a silent HTTP/2 connection is closed at the header timeout");
    // One that asked something stays usable while idle: after an HTTP/1.1 neighbour was
    // closed at the keep-alive timeout, it still answers.
    let io = tls(&s, "127.0.0.12", b"h2").await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let get = || {
        http::Request::get(format!("https://127.0.0.1:{}/ok", s.addr.port()))
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap()
    };
    assert_eq!(send.send_request(get()).await.unwrap().status(), 200);
    let mut idle = tls(&s, "127.0.0.12", b"http/1.1").await.unwrap();
    get_ok(&mut idle, "/ok").await;
    let t0 = Instant::now();
    closed_by(&mut idle, t0 + KEEP_ALIVE + MARGIN)
        .await
        .expect("the HTTP/1.1 neighbour closed");
    assert_eq!(send.send_request(get()).await.unwrap().status(), 200);
}
