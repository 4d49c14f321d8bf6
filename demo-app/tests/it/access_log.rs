//! The access log: one line per request on either listener. The subscriber is this test's
//! thread's default only (the test runtime is single-threaded), so the other tests of the
//! binary, on their own threads, neither see it nor write into it.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use cellbind_demo_app::store::Store;
use cellbind_demo_app::{AppState, internal_router, public_router};
use protocol::CellId;
use protocol::time::FakeClock;
use runtime::Secret;
use tower::ServiceExt as _;

const EDGE: &str = "edge-key-for-tests";
const INTERNAL: &str = "internal-token-for-tests";

/// A `MakeWriter` that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn every_request_is_logged_with_its_listener_method_path_and_status_but_no_query() {
    let out = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(out.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    // With one live dispatcher, tracing takes a callsite's interest from whichever thread
    // reaches it first: another test's thread, with no subscriber, would turn the access log
    // off for this one too. A second live dispatcher makes it ask every subscriber.
    let _ask_every_subscriber = tracing::Dispatch::new(tracing_subscriber::registry());
    let _only_here = tracing::subscriber::set_default(subscriber);
    let state = AppState::new(
        CellId::new("cell-02").unwrap(),
        Store::open_in_memory().unwrap(),
        Secret::new(EDGE),
        Secret::new(INTERNAL),
        Arc::new(FakeClock::at(1_795_000_000)),
    );
    let (public, internal) = (public_router(state.clone()), internal_router(state));
    let send = |to: &axum::Router, method: &str, path: &str, body: &str| {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {INTERNAL}"))
            .header("x-cellbind-edge-key", EDGE)
            .header("x-cellbind-contractor", "c-1")
            .header("x-cellbind-subject", "c-1.tech-1")
            .header("x-cellbind-generation", "1")
            .body(Body::from(body.to_owned()))
            .unwrap();
        to.clone().oneshot(req)
    };
    let r = send(
        &internal,
        "PUT",
        "/internal/v1/contractors",
        r#"{"contractors":{"c-1":1}}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let r = send(&public, "GET", "/api/routes/today", "").await.unwrap();
    assert_eq!(r.status(), 200);
    let r = send(
        &public,
        "GET",
        "/internal/v1/contractors/c-1/export?secret=shh",
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" access:")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(
        lines[0].contains("listener=\"internal\"")
            && lines[0].contains("method=PUT")
            && lines[0].contains("path=/internal/v1/contractors ")
            && lines[0].contains("status=200"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("listener=\"public\"")
            && lines[1].contains("method=GET")
            && lines[1].contains("path=/api/routes/today ")
            && lines[1].contains("status=200"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("listener=\"public\"")
            && lines[2].contains("path=/internal/v1/contractors/c-1/export ")
            && lines[2].contains("status=404"),
        "{}",
        lines[2]
    );
    assert!(!log.contains("shh"), "the query string is never logged");
    assert!(
        !log.contains(INTERNAL) && !log.contains(EDGE),
        "no token is logged"
    );
}
