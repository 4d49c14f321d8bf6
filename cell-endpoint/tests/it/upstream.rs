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
use cellbind_cell_endpoint::upstream::{Target, UpstreamHttp, base_url, https_client};

/// Serves `app` over TLS with the test PKI's certificate; its base URL.
async fn serve(pki: &Pki, app: Router) -> reqwest::Url {
    serve_counting(pki, app).await.0
}

/// An upstream target (the edge's client) in front of `app` served over TLS.
async fn target_for(pki: &Pki, app: Router) -> Target {
    let base = serve(pki, app).await;
    Target::http(
        https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap(),
        vec![base],
    )
    .unwrap()
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
    let tls = cellbind_cell_endpoint::tls::load(&pki.cert, &pki.key)
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
    let target = Target::http(
        https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::Http1).unwrap(),
        vec![base],
    )
    .unwrap();
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
    let target = Target::http(
        https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap(),
        vec![base],
    )
    .unwrap();
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
