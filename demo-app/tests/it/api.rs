//! The demo app's HTTP behaviour, driven through its router.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cellbind_demo_app::store::Store;
use cellbind_demo_app::{AppState, RouteToday, internal_router, public_router};
use http_body_util::BodyExt as _;
use protocol::CellId;
use protocol::time::FakeClock;
use runtime::Secret;
use serde_json::{Value, json};
use std::sync::Arc;
use tower::ServiceExt as _;

const EDGE: &str = "edge-key-for-tests";
const INTERNAL: &str = "internal-token-for-tests";
const NOW: u64 = 1_795_000_000;

/// One app's two listeners, as the binary serves them.
#[derive(Clone)]
struct App {
    public: axum::Router,
    internal: axum::Router,
}

fn app() -> App {
    let state = AppState::new(
        CellId::new("cell-02").unwrap(),
        Store::open_in_memory().unwrap(),
        Secret::new(EDGE),
        Secret::new(INTERNAL),
        Arc::new(FakeClock::at(NOW)),
    );
    App {
        public: public_router(state.clone()),
        internal: internal_router(state),
    }
}

/// Sends `/internal/…` to the internal listener and everything else to the public one.
async fn send(app: &App, req: Request<Body>) -> (StatusCode, Value) {
    let to = if req.uri().path().starts_with("/internal/") {
        &app.internal
    } else {
        &app.public
    };
    send_to(to, req).await
}

async fn send_to(listener: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = listener.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, v)
}

fn api(method: &str, path: &str, ctr: &str, g: u64, key: Option<&str>) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("x-cellbind-edge-key", EDGE)
        .header("x-cellbind-contractor", ctr)
        .header("x-cellbind-subject", format!("{ctr}.tech-1"))
        .header("x-cellbind-generation", g.to_string())
        .header("x-cellbind-session", "AAAAAAAAAAAAAAAAAAAAAA");
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(Body::empty()).unwrap()
}

fn internal_req(method: &str, path: &str, body: Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {INTERNAL}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn seeded() -> App {
    let app = app();
    let (s, v) = send(
        &app,
        internal_req(
            "PUT",
            "/internal/v1/contractors",
            json!({"contractors": {"c-1": 1, "c-2": 5}}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["seeded"], 2);
    app
}

#[tokio::test]
async fn route_of_the_day_reflects_completions() {
    let app = seeded().await;
    let (s, v) = send(&app, api("GET", "/api/routes/today", "c-1", 1, None)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let route: RouteToday = serde_json::from_value(v).unwrap();
    assert_eq!(route.contractor_id.as_str(), "c-1");
    assert_eq!(route.generation.0, 1);
    assert!(route.jobs.len() >= 4);
    assert!(route.jobs.iter().all(|j| j.status == "pending"));
    let first = route.jobs[0].job_id.clone();

    let (s, v) = send(
        &app,
        api(
            "POST",
            &format!("/api/jobs/{first}/complete"),
            "c-1",
            1,
            Some("k-1"),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["replayed"], false);

    let (_, v) = send(&app, api("GET", "/api/routes/today", "c-1", 1, None)).await;
    let route: RouteToday = serde_json::from_value(v).unwrap();
    assert_eq!(route.jobs[0].status, "completed");
    assert_eq!(route.jobs[0].completed_at, Some(NOW));
    assert_eq!(route.jobs[1].status, "pending");
}

#[tokio::test]
async fn completion_is_applied_once_per_idempotency_key() {
    let app = seeded().await;
    let (s, first) = send(
        &app,
        api(
            "POST",
            "/api/jobs/any-job-7/complete",
            "c-1",
            1,
            Some("same"),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    for _ in 0..3 {
        let (s, again) = send(
            &app,
            api(
                "POST",
                "/api/jobs/any-job-7/complete",
                "c-1",
                1,
                Some("same"),
            ),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(again["replayed"], true);
        assert_eq!(again["completed_at"], first["completed_at"]);
    }
    // A different key is a different write.
    send(
        &app,
        api(
            "POST",
            "/api/jobs/any-job-7/complete",
            "c-1",
            1,
            Some("other"),
        ),
    )
    .await;
    let (s, v) = send(
        &app,
        internal_req(
            "GET",
            "/internal/v1/contractors/c-1/completions",
            json!(null),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let list = v["completions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    assert_eq!(list[0]["idempotency_key"], "same");
}

#[tokio::test]
async fn generation_fence_on_writes() {
    let app = seeded().await; // c-2 at generation 5
    let (s, v) = send(
        &app,
        api("POST", "/api/jobs/j/complete", "c-2", 4, Some("a")),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error"], "WRONG_CELL");
    let (s, v) = send(
        &app,
        api("POST", "/api/jobs/j/complete", "c-2", 6, Some("b")),
    )
    .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"], "CELL_STATE_STALE");
    let (s, v) = send(&app, api("POST", "/api/jobs/j/complete", "c-404", 1, None)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"], "CELL_STATE_STALE");
    // Nothing was applied by the refused writes.
    let (_, v) = send(
        &app,
        internal_req(
            "GET",
            "/internal/v1/contractors/c-2/completions",
            json!(null),
        ),
    )
    .await;
    assert_eq!(v["completions"].as_array().unwrap().len(), 0);
    // Frozen: reads served, writes refused with Retry-After.
    let (s, _) = send(
        &app,
        internal_req("POST", "/internal/v1/contractors/c-2/freeze", json!(null)),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let resp = app
        .public
        .clone()
        .oneshot(api("POST", "/api/jobs/j/complete", "c-2", 5, Some("c")))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(resp.headers()["retry-after"], "1");
    let (s, _) = send(&app, api("GET", "/api/routes/today", "c-2", 5, None)).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn api_requires_the_edge_key() {
    let app = seeded().await;
    for key in [None, Some("wrong"), Some("edge-key-for-tests-but-longer")] {
        let mut b = Request::builder()
            .uri("/api/routes/today")
            .header("x-cellbind-contractor", "c-1")
            .header("x-cellbind-subject", "c-1.tech-1")
            .header("x-cellbind-generation", "1");
        if let Some(k) = key {
            b = b.header("x-cellbind-edge-key", k);
        }
        let (s, v) = send(&app, b.body(Body::empty()).unwrap()).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{key:?}");
        assert_eq!(v["error"], "FORBIDDEN");
    }
}

/// A token the app does not hold: the cell's admin token (the auth-service's admin API).
const CELL_ADMIN: &str = "the-cells-admin-token";

#[tokio::test]
async fn internal_requires_the_apps_own_internal_token_and_refuses_the_cells_admin_token() {
    let app = app();
    for (token, what) in [
        (Some(EDGE), "the edge key"),
        (Some(CELL_ADMIN), "the cell's admin token"),
        (None, "no token"),
    ] {
        let mut b = Request::builder()
            .method("PUT")
            .uri("/internal/v1/contractors");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let req = b.body(Body::from(r#"{"contractors":{"c-1":1}}"#)).unwrap();
        let (s, v) = send(&app, req).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{what}: {v}");
        assert_eq!(v["error"], "FORBIDDEN", "{what}");
        assert!(
            v["message"].as_str().unwrap().contains("internal token"),
            "{what}: {v}"
        );
    }
    let (s, v) = send(
        &app,
        internal_req(
            "PUT",
            "/internal/v1/contractors",
            json!({"contractors": {"../x": 1}}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "INVALID_REQUEST");
}

#[tokio::test]
async fn migration_interface_moves_a_contractor_between_apps() {
    let src = seeded().await;
    let dst = app();
    send(
        &src,
        api("POST", "/api/jobs/j-1/complete", "c-1", 1, Some("k")),
    )
    .await;
    send(
        &src,
        internal_req("POST", "/internal/v1/contractors/c-1/freeze", json!(null)),
    )
    .await;
    let (s, doc) = send(
        &src,
        internal_req("GET", "/internal/v1/contractors/c-1/export", json!(null)),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = send(
        &dst,
        internal_req("POST", "/internal/v1/contractors/c-1/import", doc),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = send(
        &dst,
        internal_req(
            "POST",
            "/internal/v1/contractors/c-1/activate",
            json!({"generation": 2}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    send(
        &src,
        internal_req("POST", "/internal/v1/contractors/c-1/release", json!(null)),
    )
    .await;
    // The replay of the write applied at the source is recognised at the target.
    let (s, v) = send(
        &dst,
        api("POST", "/api/jobs/j-1/complete", "c-1", 2, Some("k")),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["replayed"], true);
    // The source refuses writes and reads for the released contractor.
    let (s, v) = send(
        &src,
        api("POST", "/api/jobs/j-2/complete", "c-1", 2, Some("z")),
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("WRONG_CELL"))
    );
    let (s, _) = send(&src, api("GET", "/api/routes/today", "c-1", 1, None)).await;
    assert_eq!(s, StatusCode::CONFLICT);
}

/// Every route of the internal listener, as (method, path).
const INTERNAL_ROUTES: [(&str, &str); 7] = [
    ("PUT", "/internal/v1/contractors"),
    ("GET", "/internal/v1/contractors/c-1/export"),
    ("POST", "/internal/v1/contractors/c-1/import"),
    ("POST", "/internal/v1/contractors/c-1/freeze"),
    ("POST", "/internal/v1/contractors/c-1/activate"),
    ("POST", "/internal/v1/contractors/c-1/release"),
    ("GET", "/internal/v1/contractors/c-1/completions"),
];

#[tokio::test]
async fn the_public_listener_answers_404_to_every_internal_route_even_with_the_internal_token() {
    let app = seeded().await;
    let bodies = [
        json!({"contractors": {"c-9": 1}}),
        json!({"generation": 7}),
        json!(null),
    ];
    let mut refused = 0;
    for (method, path) in INTERNAL_ROUTES {
        // The same path in other spellings a hostile client might try.
        let tail = path.trim_start_matches("/internal/");
        let forms = [
            path.to_owned(),
            format!("/api/../internal/{tail}"),
            format!("/api/..%2finternal/{tail}"),
            format!("//internal/{tail}"),
            format!("/INTERNAL/{tail}"),
            format!("{path}/"),
        ];
        for form in &forms {
            for body in &bodies {
                let req = Request::builder()
                    .method(method)
                    .uri(form.as_str())
                    .header("authorization", format!("Bearer {INTERNAL}"))
                    .header("x-cellbind-edge-key", EDGE)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap();
                let (s, v) = send_to(&app.public, req).await;
                assert_eq!(s, StatusCode::NOT_FOUND, "{method} {form}: {v}");
                assert_eq!(v["error"], "NOT_FOUND", "{method} {form}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, INTERNAL_ROUTES.len() * 6 * 3);
    // Nothing happened: c-1 still takes writes at generation 1 (not frozen, released or
    // re-activated), and c-9 was not seeded.
    let (s, v) = send(
        &app,
        api("POST", "/api/jobs/j/complete", "c-1", 1, Some("after")),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = send(&app, api("GET", "/api/routes/today", "c-9", 1, None)).await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("CELL_STATE_STALE"))
    );
    // The internal listener serves them with the internal token.
    let (s, v) = send_to(
        &app.internal,
        internal_req(
            "GET",
            "/internal/v1/contractors/c-1/completions",
            json!(null),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn the_internal_listener_does_not_serve_the_api_even_with_the_edge_key() {
    let app = seeded().await;
    for (method, path) in [
        ("GET", "/api/routes/today"),
        ("POST", "/api/jobs/j-1/complete"),
    ] {
        let (s, v) = send_to(&app.internal, api(method, path, "c-1", 1, Some("k"))).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {v}");
    }
    let (s, v) = send_to(
        &app.internal,
        internal_req(
            "GET",
            "/internal/v1/contractors/c-1/completions",
            json!(null),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["completions"].as_array().unwrap().len(), 0);
}

/// Every refusal is the typed error body: a method a route does not take (on both listeners)
/// and a body over the limit (not axum's empty `405` and plain-text `413`).
#[tokio::test]
async fn wrong_methods_and_oversized_bodies_are_typed_refusals() {
    let app = app();
    let (s, v) = send(&app, api("DELETE", "/api/routes/today", "c-1", 1, None)).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["error"], "INVALID_REQUEST");
    let (s, v) = send(
        &app,
        internal_req("DELETE", "/internal/v1/contractors", json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["error"], "INVALID_REQUEST");
    let huge = json!({"contractors": ["x".repeat(3 * 1024 * 1024)]});
    let (s, v) = send(&app, internal_req("PUT", "/internal/v1/contractors", huge)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"], "PAYLOAD_TOO_LARGE");
}
