//! The upstream client is a reverse proxy's, over real TLS sockets: it follows no redirect,
//! adds no header of its own, and ends an answer whose body stalls past the exchange's
//! deadline instead of holding the client's connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use cellbind_cell_endpoint::config::UpstreamHttp;
use cellbind_cell_endpoint::testing::upstream::{SendError, Target, base_url, https_client};

/// Serves `app` over TLS with the test PKI's certificate; its base URL.
async fn serve(pki: &Pki, app: Router) -> reqwest::Url {
    serve_counting(pki, app).await.0
}

/// The edge's client to `base`, trusting the test CA and offering `http`.
fn target_at(pki: &Pki, base: reqwest::Url, http: UpstreamHttp) -> Target {
    Target::http(
        https_client(&pki.ca, Duration::from_secs(2), http).unwrap(),
        vec![base],
    )
    .unwrap()
}

/// An upstream target (the edge's client) in front of `app` served over TLS.
async fn target_for(pki: &Pki, app: Router) -> Target {
    let base = serve(pki, app).await;
    target_at(pki, base, UpstreamHttp::default())
}

fn get_request(
    path: &str,
    headers: &[(&'static str, &'static str)],
) -> http::Request<bytes::Bytes> {
    let mut b = http::Request::builder().method("GET").uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(bytes::Bytes::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_redirect_reaches_the_client_unfollowed() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-redirect");
    let followed = Arc::new(AtomicUsize::new(0));
    let f = followed.clone();
    let app = Router::new()
        .route(
            "/api/old",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/api/new")]) }),
        )
        .route(
            "/api/new",
            get(move || {
                f.fetch_add(1, Ordering::SeqCst);
                async { "followed" }
            }),
        );
    let target = target_for(&pki, app).await;
    let resp = target
        .send(get_request("/api/old", &[]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(resp.headers()[header::LOCATION], "/api/new");
    assert_eq!(
        followed.load(Ordering::SeqCst),
        0,
        "the edge followed the redirect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_sees_only_the_headers_the_edge_sent_and_host() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-headers");
    let app = Router::new().route(
        "/api/echo",
        get(|h: HeaderMap| async move {
            let mut names: Vec<String> = h.keys().map(|k| k.as_str().to_owned()).collect();
            names.sort();
            names.join(",")
        }),
    );
    let target = target_for(&pki, app).await;
    let resp = target
        .send(
            get_request("/api/echo", &[("x-cellbind-subject", "u-1")]),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
    // No `accept`, `user-agent` or `accept-encoding` of the client library's own.
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        "host,x-cellbind-subject"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_body_that_stalls_ends_with_an_error_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-stall");
    let app = Router::new().route(
        "/api/stall",
        get(|| async {
            // One chunk, then nothing, ever (a wedged app).
            let first = futures::stream::iter([Ok::<_, std::io::Error>(
                bytes::Bytes::from_static(b"{\"partial\":"),
            )]);
            let body = futures::StreamExt::chain(first, futures::stream::pending());
            Body::from_stream(body)
        }),
    );
    let target = target_for(&pki, app).await;
    let resp = target
        .send(get_request("/api/stall", &[]), Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        axum::body::to_bytes(resp.into_body(), 4096),
    )
    .await
    .expect("the stalled answer ended by the exchange's deadline, not held open");
    assert!(read.is_err(), "a truncated answer must end with an error");
}

/// Serves `app` over TLS, recording the source port of every connection it accepts.
async fn serve_counting(pki: &Pki, app: Router) -> (reqwest::Url, Arc<std::sync::Mutex<Vec<u16>>>) {
    use axum::extract::ConnectInfo;
    let seen = Arc::new(std::sync::Mutex::new(Vec::<u16>::new()));
    let s = seen.clone();
    let app = app.layer(axum::middleware::from_fn(
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>,
              req: axum::extract::Request,
              next: axum::middleware::Next| {
            let s = s.clone();
            {
                let mut ports = s.lock().unwrap();
                if !ports.contains(&peer.port()) {
                    ports.push(peer.port());
                }
            }
            next.run(req)
        },
    ));
    let tls = cellbind_cell_endpoint::testing::tls::load(&pki.cert, &pki.key)
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = axum_server::from_tcp_rustls(listener, tls).unwrap();
    tokio::spawn(async move {
        let _ = server
            .serve(app.into_make_service_with_connect_info::<SocketAddr>())
            .await;
    });
    let e = protocol::Endpoint::parse(&format!("https://{addr}")).unwrap();
    (base_url("test", &e).unwrap(), seen)
}

/// Drops the answer of `/api/big` before its end, then reads `/api/small`'s answer whole.
async fn drop_an_answer_then_read_the_next(target: &Target) {
    let resp = target
        .send(get_request("/api/big", &[]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);
    let resp = target
        .send(get_request("/api/small", &[]), Duration::from_secs(5))
        .await
        .unwrap();
    let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
    assert_eq!(&body[..], b"ok");
}

// One thread, as each of the edge's serving threads: its idle connections are its own.
#[tokio::test(flavor = "current_thread")]
async fn http1_answers_read_to_the_end_leave_their_connection_to_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-reuse");
    let big = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    let app = Router::new()
        .route("/api/small", get(|| async { "ok" }))
        .route("/api/big", get(move || async move { big.clone() }));
    let (base, seen) = serve_counting(&pki, app).await;
    let target = target_at(&pki, base, UpstreamHttp::Http1);
    for _ in 0..5 {
        let resp = target
            .send(get_request("/api/small", &[]), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
        assert_eq!(&body[..], b"ok");
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "five requests one after the other on one kept-alive connection"
    );

    // An answer dropped before its end leaves unread bytes on its connection: that one is
    // closed, and the next request gets a new connection and a whole answer.
    drop_an_answer_then_read_the_next(&target).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "{:?}", seen.lock().unwrap());
}

// One thread, as each of the edge's serving threads: its HTTP/2 connection is its own.
#[tokio::test(flavor = "current_thread")]
async fn over_http2_a_thread_sends_all_its_requests_on_one_connection_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-h2");
    let big = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    // Every request waits until 16 are in the app at the same time: only requests sent side
    // by side (multiplexed) can all be answered.
    let gate = Arc::new(tokio::sync::Barrier::new(16));
    let app = Router::new()
        .route(
            "/api/together",
            get(move |req: axum::extract::Request| {
                let gate = gate.clone();
                async move {
                    gate.wait().await;
                    format!("{:?}", req.version())
                }
            }),
        )
        .route("/api/small", get(|| async { "ok" }))
        .route("/api/big", get(move || async move { big.clone() }));
    let (base, seen) = serve_counting(&pki, app).await;
    let target = target_at(&pki, base, UpstreamHttp::default());
    // The first request makes the connection; the 16 after it share it.
    let resp = target
        .send(get_request("/api/small", &[]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let together = (0..16).map(|_| async {
        let resp = target
            .send(get_request("/api/together", &[]), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        axum::body::to_bytes(resp.into_body(), 4096).await.unwrap()
    });
    let answers =
        tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(together))
            .await
            .expect("16 requests in flight at once on the thread's connection");
    for body in answers {
        assert_eq!(&body[..], b"HTTP/2.0");
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "17 requests of one thread on one HTTP/2 connection"
    );

    // An answer dropped before its end ends its stream, not the connection: the next
    // request goes on the same connection and gets a whole answer.
    drop_an_answer_then_read_the_next(&target).await;
    assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
}

/// An HTTP/2 upstream written frame by frame, as one going away: its first connection reads a
/// request's HEADERS and answers GOAWAY counting no stream (the request was not processed,
/// RFC 9113 §6.8) — or, `counting_it`, a GOAWAY counting that stream (it may have been
/// processed) and then the connection ends unanswered; later connections answer each request
/// `200`, empty, once its stream ends. Its base URL, and how many connections it took and
/// requests it answered.
async fn serve_h2_going_away(
    pki: &Pki,
    counting_it: bool,
) -> (reqwest::Url, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    const HEADERS: u8 = 0x1;
    const DATA: u8 = 0x0;
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const GOAWAY: u8 = 0x7;
    const END_STREAM: u8 = 0x1;
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }
    let config = cellbind_cell_endpoint::testing::tls::load(&pki.cert, &pki.key)
        .await
        .unwrap()
        .get_inner();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (connections, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, a) = (connections.clone(), answered.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            let (acceptor, answered) = (acceptor.clone(), a.clone());
            tokio::spawn(async move {
                let mut io = acceptor.accept(tcp).await.unwrap();
                assert_eq!(io.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
                let mut preface = [0u8; 24];
                io.read_exact(&mut preface).await.unwrap();
                assert_eq!(&preface[..], PREFACE);
                io.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
                // Until the client closes: frames read whole, answered as they come.
                loop {
                    let mut head = [0u8; 9];
                    if io.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    let len = usize::from(head[0]) << 16
                        | usize::from(head[1]) << 8
                        | usize::from(head[2]);
                    let (kind, flags) = (head[3], head[4]);
                    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                    let mut payload = vec![0u8; len];
                    if io.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    let reply = match kind {
                        SETTINGS if flags & 0x1 == 0 => frame(SETTINGS, 0x1, 0, &[]),
                        PING if flags & 0x1 == 0 => frame(PING, 0x1, 0, &payload),
                        HEADERS if first && counting_it => {
                            // Last stream id this one, NO_ERROR: then the connection ends.
                            let mut last = stream.to_be_bytes().to_vec();
                            last.extend_from_slice(&[0; 4]);
                            let _ = io.write_all(&frame(GOAWAY, 0, 0, &last)).await;
                            let _ = io.flush().await;
                            return;
                        }
                        HEADERS if first => {
                            // Last stream id 0, NO_ERROR: no stream of the client was processed.
                            frame(GOAWAY, 0, 0, &[0; 8])
                        }
                        HEADERS | DATA if !first && flags & END_STREAM != 0 => {
                            answered.fetch_add(1, Ordering::SeqCst);
                            // `:status: 200` (static table index 8), END_HEADERS | END_STREAM.
                            frame(HEADERS, 0x4 | END_STREAM, stream, &[0x88])
                        }
                        _ => continue,
                    };
                    if io.write_all(&reply).await.is_err() || io.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let e = protocol::Endpoint::parse(&format!("https://{addr}")).unwrap();
    (base_url("test", &e).unwrap(), connections, answered)
}

// An upstream going away (a rolling restart) may refuse streams it never started: such a
// request is sent again on a new connection, whatever its method, and the client never sees
// the refusal. Without the resend the POST below would be a 502.
#[tokio::test(flavor = "current_thread")]
async fn a_request_an_http2_upstream_refused_unprocessed_is_sent_again_on_a_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-goaway");
    let (base, connections, answered) = serve_h2_going_away(&pki, false).await;
    let target = target_at(&pki, base, UpstreamHttp::default());
    let resp = tokio::time::timeout(
        Duration::from_secs(20),
        target.send(post_completion(), Duration::from_secs(5)),
    )
    .await
    .expect("answered")
    .expect("the refused request was sent again");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert_eq!(answered.load(Ordering::SeqCst), 1, "processed once");
    // The next request goes on the new connection.
    let resp = target
        .send(get_request("/api/small", &[]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert_eq!(answered.load(Ordering::SeqCst), 2);
}

fn post_completion() -> http::Request<bytes::Bytes> {
    http::Request::builder()
        .method("POST")
        .uri("/api/jobs/j-1/complete")
        .header("content-type", "application/json")
        .body(bytes::Bytes::from_static(b"{\"idempotency_key\":\"k-1\"}"))
        .unwrap()
}

// The other side of the rule: a stream the GOAWAY counted may have been processed, and a
// `POST` cut by the closing connection is never sent again (a 502 for the client to retry
// with its idempotency key, never a second completion the edge made up).
#[tokio::test(flavor = "current_thread")]
async fn a_request_an_http2_upstream_may_have_processed_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "upstream-goaway-counted");
    let (base, connections, answered) = serve_h2_going_away(&pki, true).await;
    let target = target_at(&pki, base, UpstreamHttp::default());
    let sent = tokio::time::timeout(
        Duration::from_secs(20),
        target.send(post_completion(), Duration::from_secs(5)),
    )
    .await
    .expect("answered");
    assert!(
        matches!(sent, Err(SendError::Unreachable)),
        "{:?}",
        sent.map(|r| r.status())
    );
    assert_eq!(connections.load(Ordering::SeqCst), 1, "not sent again");
    assert_eq!(answered.load(Ordering::SeqCst), 0);
}
