//! Behaviour of the edge service driven in-process with `oneshot`: forwarding, ownership and
//! generation decisions, revocation, readiness, the write lease, rate limits, the feed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Query};
use axum::http::{Request, StatusCode};
use axum::routing::{any, get as get_route};
use cellbind_cell_endpoint::Edge;
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::state;
use cellbind_cell_endpoint::testing::upstream::Upstreams;
use cellbind_cell_endpoint::testing::{Outcome, StatusClass, Upstream};
use protocol::feed::{Change, FEED_SCHEMA, FeedBody, FeedEntry, FeedResponse, KeyStatus};
use protocol::ownership::OwnershipRecord;
use protocol::revocation::{Revocation, RevocationKind};
use protocol::{ContractorId, ErrorCode, Generation};

fn delta(since: u64, changes: Vec<Change>) -> FeedResponse {
    let entries: Vec<FeedEntry> = changes
        .into_iter()
        .enumerate()
        .map(|(i, change)| FeedEntry {
            seq: since + 1 + i as u64,
            change,
        })
        .collect();
    FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head: since + entries.len() as u64,
        issued_at: NOW,
        epoch: String::new(),
        body: FeedBody::Delta { entries },
    }
}

#[tokio::test]
async fn a_valid_session_is_forwarded_with_identity_headers_and_without_credentials() {
    let (edge, seen, _c) = edge();
    let c = claims(CTR, 1);
    let token = mint(&c);
    let req = Request::builder()
        .method("POST")
        .uri("/api/jobs/j-1/complete?x=1")
        .header("authorization", format!("Bearer {token}"))
        .header(
            "cookie",
            format!("theme=dark; __Host-cellbind_session={token}"),
        )
        .header("x-cellbind-generation", "999")
        .header("x-cellbind-subject", "c-1.admin")
        .header("x-cellbind-edge-key", "forged")
        .header("idempotency-key", "k-1")
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, body) = send(&edge, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (uri, h) = seen.last();
    assert_eq!(uri, "/api/jobs/j-1/complete?x=1");
    assert_eq!(h["x-cellbind-subject"], c.sub.as_str());
    assert_eq!(h["x-cellbind-contractor"], CTR);
    assert_eq!(h["x-cellbind-generation"], "1");
    assert_eq!(h["x-cellbind-session"], c.jti.as_str());
    assert_eq!(h["x-cellbind-edge-key"], "edge-key-for-tests");
    assert_eq!(h.get_all("x-cellbind-generation").iter().count(), 1);
    assert_eq!(h.get_all("x-cellbind-subject").iter().count(), 1);
    assert!(
        h.get("authorization").is_none(),
        "bearer token leaked to the app"
    );
    assert_eq!(
        h["cookie"], "theme=dark",
        "session cookie leaked to the app"
    );
    assert_eq!(h["idempotency-key"], "k-1");
    assert_eq!(
        edge.metrics().requests(app_answered(StatusClass::Success)),
        1
    );
}

#[tokio::test]
async fn the_session_cookie_alone_is_accepted() {
    let (edge, seen, _c) = edge();
    let req = Request::builder()
        .uri("/api/routes/today")
        .header("cookie", format!("__Host-cellbind_session={}", session()))
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = send(&edge, req).await;
    assert_eq!(status, StatusCode::OK);
    assert!(seen.last().1.get("cookie").is_none());
}

#[tokio::test]
async fn missing_session_is_401_session_missing() {
    let (edge, seen, _c) = edge();
    let (status, _, body) = send(&edge, get("/api/routes/today", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_MISSING");
    assert_eq!(seen.count(), 0);
    assert_eq!(
        edge.metrics()
            .requests(Outcome::Refused(ErrorCode::SessionMissing)),
        1
    );
}

#[tokio::test]
async fn ownership_and_generation_decide_every_request() {
    let (edge, seen, _c) = edge();
    let cases: Vec<(&str, u64, &str, StatusCode, &str)> = vec![
        (CTR, 1, "GET", StatusCode::OK, ""),
        (CTR, 1, "POST", StatusCode::OK, ""),
        (CTR_HANDOFF, 1, "GET", StatusCode::OK, ""),
        (
            CTR_HANDOFF,
            1,
            "POST",
            StatusCode::CONFLICT,
            "HANDOFF_IN_PROGRESS",
        ),
        (CTR_RELEASED, 1, "GET", StatusCode::CONFLICT, "WRONG_CELL"),
        (CTR_ELSEWHERE, 1, "GET", StatusCode::CONFLICT, "WRONG_CELL"),
        (
            CTR_NOWHERE,
            1,
            "GET",
            StatusCode::NOT_FOUND,
            "UNKNOWN_CONTRACTOR",
        ),
        (
            CTR,
            2,
            "GET",
            StatusCode::SERVICE_UNAVAILABLE,
            "CELL_STATE_STALE",
        ),
    ];
    for (ctr, g, method, want, want_code) in cases {
        let (status, headers, body) =
            send(&edge, req(method, "/api/x", Some(&mint(&claims(ctr, g))))).await;
        assert_eq!(status, want, "{ctr} gen {g} {method}: {body}");
        if !want_code.is_empty() {
            assert_eq!(code(&body), want_code, "{ctr} {method}");
        }
        match want_code {
            "WRONG_CELL" => {
                assert_eq!(body["owner_cell"], OTHER_CELL);
                assert_eq!(body["owner_endpoint"], OTHER_ENDPOINT);
            }
            "HANDOFF_IN_PROGRESS" | "CELL_STATE_STALE" => {
                assert!(headers.get("retry-after").is_some());
            }
            _ => {}
        }
    }
    assert_eq!(seen.count(), 3);
}

#[tokio::test]
async fn a_session_older_than_the_owners_generation_is_sent_to_sign_in_here() {
    let (edge, _seen, _c) = edge();
    edge.apply_feed(
        10,
        delta(
            10,
            vec![Change::Ownership {
                contractor: ContractorId::new(CTR).unwrap(),
                record: OwnershipRecord::Active {
                    generation: Generation(3),
                },
            }],
        ),
    )
    .unwrap();
    let (status, _, body) = send(&edge, get("/api/x", Some(&session()))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(code(&body), "WRONG_CELL");
    assert_eq!(body["owner_cell"], CELL);
    assert_eq!(body["owner_endpoint"], ISSUER);
}

/// The revocation of the session `c` by its own sign-out, as feed entry 11.
fn sign_out(c: &protocol::token::SessionClaims) -> Revocation {
    Revocation {
        seq: 11,
        kind: RevocationKind::Session {
            jti: c.jti.clone(),
            exp: c.exp,
        },
        at: NOW,
        by: "self".into(),
        reason: "sign-out".into(),
        seal: None,
        handed_back: None,
        withdrawn: None,
    }
}

#[tokio::test]
async fn revocation_is_checked_on_every_request_even_for_a_cached_token() {
    let (edge, seen, _c) = edge();
    let c = claims(CTR, 1);
    let token = mint(&c);
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    edge.apply_feed(10, delta(10, vec![Change::Revocation(sign_out(&c))]))
        .unwrap();
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_REVOKED");
    // Another session of the same user still works.
    assert_eq!(
        send(&edge, get("/api/x", Some(&session()))).await.0,
        StatusCode::OK
    );
    assert_eq!(seen.count(), 2);
}

#[tokio::test]
async fn a_removed_key_stops_its_cached_sessions() {
    let (edge, _seen, _c) = edge();
    let token = session();
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    let next = key("k-next", 8);
    edge.apply_feed(
        10,
        delta(
            10,
            vec![
                Change::Key(feed_key(&next, KeyStatus::Current)),
                Change::KeyRemoved {
                    kid: cell_key().kid().clone(),
                },
            ],
        ),
    )
    .unwrap();
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_INVALID");
}

#[tokio::test]
async fn expiry_applies_to_cached_tokens() {
    let (edge, _seen, clock) = edge();
    let token = session();
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    clock.set(NOW + protocol::token::DEFAULT_SESSION_LIFETIME_S + 61);
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_EXPIRED");
}

#[tokio::test]
async fn with_no_state_the_edge_is_not_ready_and_never_answers_401() {
    let (app, seen) = recording_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(None, Some(app)));
    for token in [Some(session()), None, Some("garbage".to_owned())] {
        let (status, headers, body) = send(&edge, get("/api/x", token.as_deref())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(code(&body), "NOT_READY");
        assert!(headers.get("retry-after").is_some());
    }
    assert_eq!(
        send(&edge, get("/readyz", None)).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        send(&edge, get("/.well-known/jwks.json", None)).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(send(&edge, get("/healthz", None)).await.0, StatusCode::OK);
    assert_eq!(seen.count(), 0);
    edge.install(state());
    assert_eq!(send(&edge, get("/readyz", None)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn writes_need_a_current_lease_reads_do_not() {
    let (app, seen) = recording_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(None, Some(app)));
    // Loaded (e.g. from disk) but never synced: the lease is not current.
    edge.install(state());
    let token = session();
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    let (status, headers, body) = send(&edge, req("POST", "/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&body), "CELL_STATE_STALE");
    assert!(headers.get("retry-after").is_some());
    edge.mark_synced();
    assert_eq!(
        send(&edge, req("POST", "/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    assert_eq!(seen.count(), 2);

    // Lease 0 = off: writes are served without any sync.
    let mut s = settings();
    s.serving.write_lease_ms = 0;
    let (app, _seen) = recording_app();
    let (shared, _fake) = clock();
    let off = Edge::new(s, shared, Upstreams::local(None, Some(app)));
    off.install(state());
    assert_eq!(
        send(&off, req("POST", "/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_lease_lapses_with_time() {
    let mut s = settings();
    s.serving.write_lease_ms = 50;
    s.serving.rate_per_subject_per_s = 1_000_000;
    s.serving.burst_per_subject = 1_000_000;
    let (edge, _seen, _c) = edge_with(s, None);
    let token = session();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = send(&edge, req("POST", "/api/x", Some(&token))).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(code(&body), "CELL_STATE_STALE");
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(std::time::Instant::now() < deadline, "lease never lapsed");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn upstreams_down_fail_fast_with_the_right_codes() {
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(None, None));
    edge.install(state());
    edge.mark_synced();
    let (status, headers, body) = send(&edge, req("POST", "/v1/sessions", None)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&body), "UPSTREAM_UNAVAILABLE");
    assert!(headers.get("retry-after").is_some());
    let (status, _, body) = send(&edge, get("/api/x", Some(&session()))).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(code(&body), "UPSTREAM_UNAVAILABLE");
    // Both count, each against its upstream: the auth-service's and the app's.
    for up in [Upstream::Auth, Upstream::App] {
        assert_eq!(
            edge.metrics().requests(Outcome::UpstreamUnavailable(up)),
            1,
            "{up:?}"
        );
    }
}

#[tokio::test]
async fn sign_in_is_forwarded_with_the_edges_client_address_and_no_credentials() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    let auth = Router::new().route(
        "/v1/sessions",
        any(move |req: Request<Body>| {
            let s = s.clone();
            async move {
                *s.lock().unwrap() = Some(req.headers().clone());
                (
                    StatusCode::CREATED,
                    [(
                        "set-cookie",
                        "__Host-cellbind_session=abc; Secure; HttpOnly; SameSite=Strict; Path=/",
                    )],
                    "{}",
                )
            }
        }),
    );
    let (edge, _seen, _c) = edge_with(settings(), Some(auth));
    let mut r = Request::builder()
        .method("POST")
        .uri("/v1/sessions")
        .header("content-type", "application/json")
        .header("x-cellbind-client-ip", "6.6.6.6")
        .header("authorization", "Bearer abc")
        .body(Body::from("{}"))
        .unwrap();
    r.extensions_mut()
        .insert(ConnectInfo("192.0.2.7:5555".parse::<SocketAddr>().unwrap()));
    let resp = tower::ServiceExt::oneshot(cellbind_cell_endpoint::app(edge), r)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    assert!(
        resp.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .starts_with("__Host-cellbind_session=abc")
    );
    let h = seen.lock().unwrap().clone().unwrap();
    assert_eq!(h["x-cellbind-client-ip"], "192.0.2.7");
    assert_eq!(h.get_all("x-cellbind-client-ip").iter().count(), 1);
    // Sign-in takes no session: no credential travels, and the edge vouches for the address.
    assert!(h.get("authorization").is_none());
    assert_eq!(
        h["x-cellbind-edge-key"],
        cellbind_cell_endpoint::testing::upstream::LOCAL_EDGE_TOKEN
    );
    assert_eq!(h["x-forwarded-for"], "192.0.2.7");
}

#[tokio::test]
async fn per_ip_and_per_subject_rate_limits_answer_429_with_retry_after() {
    let mut s = settings();
    s.serving.rate_per_ip_per_s = 1;
    s.serving.burst_per_ip = 3;
    s.serving.rate_per_subject_per_s = 1;
    s.serving.burst_per_subject = 2;
    let (edge, _seen, _c) = edge_with(s, None);
    let from = |ip: &str, token: &str| {
        let mut r = get("/api/x", Some(token));
        r.extensions_mut().insert(ConnectInfo(
            format!("{ip}:1000").parse::<SocketAddr>().unwrap(),
        ));
        r
    };
    let a = session();
    let b = mint(&claims(CTR, 1));
    // Per subject: two for subject c-40711.tech1, the third is refused.
    assert_eq!(send(&edge, from("192.0.2.1", &a)).await.0, StatusCode::OK);
    assert_eq!(send(&edge, from("192.0.2.2", &a)).await.0, StatusCode::OK);
    let (status, headers, body) = send(&edge, from("192.0.2.3", &b)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(code(&body), "RATE_LIMITED");
    assert!(
        headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    // Per IP: 192.0.2.9 gets three, then 429 before any validation.
    let other = mint(&claims(CTR_HANDOFF, 1));
    for _ in 0..3 {
        let _ = send(&edge, from("192.0.2.9", &other)).await;
    }
    let (status, headers, body) = send(&edge, from("192.0.2.9", "not-even-a-token")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(code(&body), "RATE_LIMITED");
    assert!(headers.get("retry-after").is_some());
    assert!(edge.metrics().requests(Outcome::RateLimited) >= 2);
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let mut s = settings();
    s.serving.max_body_bytes = 1024;
    let (edge, seen, _c) = edge_with(s, None);
    let r = Request::builder()
        .method("POST")
        .uri("/api/x")
        .header("authorization", format!("Bearer {}", session()))
        .body(Body::from(vec![b'x'; 4096]))
        .unwrap();
    let (status, _, body) = send(&edge, r).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&body), "PAYLOAD_TOO_LARGE");
    assert_eq!(seen.count(), 0);
}

/// A request the app answered with a status of `class`.
fn app_answered(class: StatusClass) -> Outcome {
    Outcome::Forwarded {
        upstream: Upstream::App,
        class,
    }
}

#[tokio::test]
async fn jwks_map_and_metrics_come_from_the_held_state() {
    let (edge, _seen, _c) = edge();
    let (status, headers, body) = send(&edge, get("/.well-known/jwks.json", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["cache-control"], "public, max-age=60");
    assert_eq!(body["keys"][0]["kid"], cell_key().kid().as_str());
    assert_eq!(body["keys"][0]["crv"], "Ed25519");
    let (status, _, body) = send(&edge, get("/v1/placement-map", None)).await;
    assert_eq!(status, StatusCode::OK);
    let m: protocol::map::SignedMap = serde_json::from_value(body).unwrap();
    m.verify(&map_key().public_key()).unwrap();
    let _ = send(&edge, get("/api/x", Some(&session()))).await;
    // The public listener has no /metrics: it answers 404 like any unknown route (counted as
    // a refusal).
    let (status, _, body) = send(&edge, get("/metrics", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "NOT_FOUND");
    // The management listener serves them.
    let management = runtime::management::router(Arc::new(
        cellbind_cell_endpoint::testing::Management(edge.clone()),
    ));
    let resp = tower::ServiceExt::oneshot(management, get("/metrics", None))
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        runtime::management::OPENMETRICS_CONTENT_TYPE
    );
    let text = String::from_utf8(
        axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    for line in [
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="forwarded",upstream="app",class="2xx",synthetic="false"} 1"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="refused",code="NOT_FOUND",synthetic="false"} 1"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="local",synthetic="false"} 2"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="local",synthetic="true"} 0"#,
        r#"cellbind_edge_request_duration_seconds_count{cell="cell-03",outcome="forwarded",synthetic="false"} 1"#,
        r#"cellbind_edge_state_age_seconds{cell="cell-03",part="keys"} 0"#,
        r#"cellbind_edge_feed_lag{cell="cell-03",instance="edge-1"} 0"#,
        r#"cellbind_edge_validation_seconds_count{cell="cell-03"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert!(
        text.contains(r#"cellbind_edge_map_version{cell="cell-03"} "#)
            && !text.contains(r#"cellbind_edge_map_version{cell="cell-03"} 0"#),
        "{text}"
    );
}

#[tokio::test]
async fn synthetic_traffic_is_counted_apart_by_its_contractor_or_a_sign_ins_header() {
    // An auth-service that answers every session route, recording what it saw.
    let seen_auth = Arc::new(std::sync::Mutex::new(Vec::<axum::http::HeaderMap>::new()));
    let s = seen_auth.clone();
    let auth = Router::new().fallback(any(move |req: Request<Body>| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(req.headers().clone());
            (StatusCode::CREATED, "{}")
        }
    }));
    let (app, seen) = recording_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(Some(auth), Some(app)));
    // A game day's contractors beside the real ones: one active here, one in handoff.
    const SYNTHETIC: &str = "c-synthetic-gd-1";
    const SYNTHETIC_HANDOFF: &str = "c-synthetic-gd-2";
    let mut snap = snapshot();
    snap.ownership.insert(
        ContractorId::new(SYNTHETIC).unwrap(),
        OwnershipRecord::Active {
            generation: Generation(1),
        },
    );
    snap.ownership.insert(
        ContractorId::new(SYNTHETIC_HANDOFF).unwrap(),
        OwnershipRecord::Handoff {
            generation: Generation(1),
        },
    );
    edge.install(CellState::from_snapshot(cell(), 10, 10, NOW, snap).unwrap());
    edge.mark_synced();
    let synthetic = mint(&claims(SYNTHETIC, 1));
    let real = session();
    let says = |mut r: Request<Body>| {
        r.headers_mut()
            .insert("x-cellbind-synthetic", "1".parse().unwrap());
        r
    };

    // `/api/*`: by the session's contractor, whatever the request says.
    assert_eq!(
        send(&edge, get("/api/x", Some(&synthetic))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&edge, get("/api/x", Some(&real))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&edge, says(get("/api/x", Some(&real)))).await.0,
        StatusCode::OK
    );
    assert_eq!(seen.count(), 3);
    // A refusal of a verified synthetic session is synthetic too (a write of a game day's
    // contractor in handoff); one of a token never verified is not, header or no header.
    let handoff = mint(&claims(SYNTHETIC_HANDOFF, 1));
    let (status, _, body) = send(&edge, req("POST", "/api/x", Some(&handoff))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "HANDOFF_IN_PROGRESS")
    );
    let (status, _, body) = send(&edge, says(get("/api/x", Some("not-a-token")))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "SESSION_INVALID")
    );

    // Session routes: a sign-in (no session) by the header; a session's route by its
    // contractor.
    let sign_in = || req("POST", "/v1/sessions", None);
    assert_eq!(send(&edge, says(sign_in())).await.0, StatusCode::CREATED);
    assert_eq!(send(&edge, sign_in()).await.0, StatusCode::CREATED);
    let current = |t: &str| get("/v1/sessions/current", Some(t));
    assert_eq!(
        send(&edge, current(&synthetic)).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&edge, says(current(&real))).await.0,
        StatusCode::CREATED
    );
    // The header is the edge's (`x-cellbind-*`): it never reaches an upstream.
    let auth_saw = seen_auth.lock().unwrap().clone();
    assert_eq!(auth_saw.len(), 4);
    assert!(
        auth_saw
            .iter()
            .all(|h| h.get("x-cellbind-synthetic").is_none())
    );
    assert!(seen.last().1.get("x-cellbind-synthetic").is_none());

    let m = edge.metrics();
    let app_ok = app_answered(StatusClass::Success);
    let auth_ok = Outcome::Forwarded {
        upstream: Upstream::Auth,
        class: StatusClass::Success,
    };
    assert_eq!(m.requests_of(app_ok, true), 1);
    assert_eq!(m.requests_of(app_ok, false), 2);
    let handoff = Outcome::Refused(ErrorCode::HandoffInProgress);
    assert_eq!(
        (m.requests_of(handoff, true), m.requests_of(handoff, false)),
        (1, 0)
    );
    let invalid = Outcome::Refused(ErrorCode::SessionInvalid);
    assert_eq!(
        (m.requests_of(invalid, true), m.requests_of(invalid, false)),
        (0, 1)
    );
    assert_eq!(m.requests_of(auth_ok, true), 2);
    assert_eq!(m.requests_of(auth_ok, false), 2);
    let text = m.encode();
    for line in [
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="forwarded",upstream="app",class="2xx",synthetic="true"} 1"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="forwarded",upstream="app",class="2xx",synthetic="false"} 2"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="forwarded",upstream="auth",class="2xx",synthetic="true"} 2"#,
        r#"cellbind_edge_requests_total{cell="cell-03",outcome="refused",code="HANDOFF_IN_PROGRESS",synthetic="true"} 1"#,
        r#"cellbind_edge_request_duration_seconds_count{cell="cell-03",outcome="forwarded",synthetic="true"} 3"#,
        r#"cellbind_edge_request_duration_seconds_count{cell="cell-03",outcome="forwarded",synthetic="false"} 4"#,
        r#"cellbind_edge_request_duration_seconds_count{cell="cell-03",outcome="refused",synthetic="true"} 1"#,
        r#"cellbind_edge_request_duration_seconds_count{cell="cell-03",outcome="refused",synthetic="false"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

#[tokio::test]
async fn refused_feed_documents_keep_the_last_known_good_state() {
    let (edge, _seen, _c) = edge();
    let before = edge.current().unwrap();
    // A gap.
    let mut gap = delta(
        12,
        vec![Change::KeyRemoved {
            kid: cell_key().kid().clone(),
        }],
    );
    gap.head = 13;
    assert!(edge.apply_feed(10, gap).is_err());
    // Another cell's feed.
    let mut wrong = delta(10, vec![]);
    wrong.cell = protocol::CellId::new(OTHER_CELL).unwrap();
    assert!(edge.apply_feed(10, wrong).is_err());
    // A small-order Ed25519 point (the identity) as a key.
    let mut bad = feed_key(&key("k-bad", 9), KeyStatus::Next);
    let mut identity = [0u8; 32];
    identity[0] = 1;
    bad.x = b64(&identity);
    assert!(
        edge.apply_feed(10, delta(10, vec![Change::Key(bad)]))
            .is_err()
    );
    // A rollback snapshot.
    let old = FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head: 3,
        issued_at: NOW,
        epoch: String::new(),
        body: FeedBody::Snapshot {
            snapshot: Box::new(protocol::feed::Snapshot::default()),
        },
    };
    assert!(edge.apply_feed(0, old).is_err());
    assert_eq!(edge.metrics().feed_rejected_count(), 4);
    let after = edge.current().unwrap();
    assert!(Arc::ptr_eq(&before, &after), "the held state changed");
    assert_eq!(
        send(&edge, get("/api/x", Some(&session()))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn state_survives_a_restart_through_the_disk_copy() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (edge, _seen, _c) = edge();
    let next = edge
        .apply_feed(
            10,
            delta(
                10,
                vec![Change::Ownership {
                    contractor: ContractorId::new(CTR_NOWHERE).unwrap(),
                    record: OwnershipRecord::Active {
                        generation: Generation(1),
                    },
                }],
            ),
        )
        .unwrap()
        .changed
        .unwrap();
    state::persist(dir.path(), &next).unwrap();
    let path = state::state_path(dir.path());
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(raw["schema"], state::STATE_SCHEMA);
    assert_eq!(raw["cell"], CELL);
    assert_eq!(raw["seq"], 11);

    let loaded = state::load(dir.path(), &cell()).unwrap().unwrap();
    let (app, _seen) = recording_app();
    let (shared, _fake) = clock();
    let fresh = Edge::new(settings(), shared, Upstreams::local(None, Some(app)));
    fresh.install(loaded);
    let t = mint(&claims(CTR_NOWHERE, 1));
    assert_eq!(
        send(&fresh, get("/api/x", Some(&t))).await.0,
        StatusCode::OK
    );

    assert!(state::load(dir.path(), &protocol::CellId::new(OTHER_CELL).unwrap()).is_err());
    let mut wrong_schema = raw.clone();
    wrong_schema["schema"] = serde_json::json!(99);
    std::fs::write(&path, wrong_schema.to_string()).unwrap();
    assert!(state::load(dir.path(), &cell()).is_err());
    std::fs::remove_file(&path).unwrap();
    assert!(state::load(dir.path(), &cell()).unwrap().is_none());
}

/// A feed served in-process: counts calls; after `rotate` it answers the new key.
fn fake_feed(rotated: Arc<std::sync::atomic::AtomicBool>, calls: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        protocol::feed::FEED_PATH,
        get_route(
            move |Query(q): Query<std::collections::HashMap<String, String>>| {
                let rotated = rotated.clone();
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let since: u64 = q.get("since").and_then(|s| s.parse().ok()).unwrap_or(0);
                    let changes = if rotated.load(Ordering::SeqCst) {
                        vec![
                            Change::Key(feed_key(&key("k-rotated", 21), KeyStatus::Current)),
                            Change::Key(feed_key(&cell_key(), KeyStatus::Retired)),
                        ]
                    } else {
                        vec![]
                    };
                    axum::Json(delta(since, changes))
                }
            },
        ),
    )
}

#[tokio::test]
async fn a_rotated_key_is_accepted_without_restart() {
    let rotated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (edge, _seen, _c) = edge_with(settings(), Some(fake_feed(rotated.clone(), calls.clone())));
    rotated.store(true, Ordering::SeqCst);
    let t = key("k-rotated", 21).mint(&claims(CTR, 1)).unwrap();
    let (status, _, body) = send(&edge, get("/api/x", Some(t.expose()))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(edge.metrics().key_refetch_count(), 1);
    // The old key is retired, still verifying its sessions.
    assert_eq!(
        send(&edge, get("/api/x", Some(&session()))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_unknown_kid_flood_costs_at_most_one_fetch_per_cooldown() {
    let rotated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (edge, seen, _c) = edge_with(settings(), Some(fake_feed(rotated, calls.clone())));
    let app = cellbind_cell_endpoint::app(edge.clone());
    let mut refused = 0;
    for chunk in 0..100 {
        let mut batch = Vec::new();
        for i in 0..100 {
            let kid = format!("k-{chunk}-{i}-{}", rand::random::<u32>());
            let t = key(&kid, 5).mint(&claims(CTR, 1)).unwrap();
            let app = app.clone();
            batch.push(tokio::spawn(async move {
                tower::ServiceExt::oneshot(app, get("/api/x", Some(t.expose())))
                    .await
                    .unwrap()
                    .status()
            }));
        }
        for h in batch {
            if h.await.unwrap() == StatusCode::UNAUTHORIZED {
                refused += 1;
            }
        }
    }
    println!(
        "unknown-kid flood: 10000 requests, {refused} refused with 401, {} key fetches",
        calls.load(Ordering::SeqCst)
    );
    assert_eq!(refused, 10_000);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(edge.metrics().key_refetch_count(), 1);
    assert_eq!(seen.count(), 0);
}

#[test]
fn a_snapshot_builds_the_whole_view() {
    let s = CellState::from_snapshot(cell(), 5, 7, NOW, snapshot()).unwrap();
    assert!(s.has_kid(cell_key().kid()));
    assert_eq!(
        s.endpoint_of(&protocol::CellId::new(OTHER_CELL).unwrap()),
        OTHER_ENDPOINT
    );
    assert_eq!(s.head - s.seq, 2);
}

#[tokio::test]
async fn cookie_sessions_need_the_cells_own_origin_for_writes() {
    let (edge, seen, _c) = edge();
    let token = session();
    let post = |extra: Option<(&str, &str)>| {
        let mut b = Request::builder()
            .method("POST")
            .uri("/api/jobs/j-1/complete")
            .header(
                "cookie",
                format!("__Host-cellbind_session={token}; __Host-cellbind_csrf=p"),
            )
            .header("x-cellbind-csrf", "p");
        if let Some((k, v)) = extra {
            b = b.header(k, v);
        }
        b.body(Body::empty()).unwrap()
    };
    let (status, _, body) = send(&edge, post(None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(code(&body), "FORBIDDEN");
    let (status, _, _) = send(&edge, post(Some(("origin", "https://evil.example")))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(seen.count(), 0);
    assert_eq!(
        send(&edge, post(Some(("origin", ISSUER)))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&edge, post(Some(("sec-fetch-site", "same-origin"))))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(seen.count(), 2);
}

#[tokio::test]
async fn a_state_without_keys_is_not_ready_rather_than_401() {
    let (app, _seen) = recording_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(None, Some(app)));
    let mut snap = snapshot();
    snap.keys.clear();
    edge.install(CellState::from_snapshot(cell(), 1, 1, NOW, snap).unwrap());
    let (status, _, body) = send(&edge, get("/api/x", Some(&session()))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&body), "NOT_READY");
}

/// A cached session that passed every check of the installed view skips the view's checks
/// while that view stays (`ServedUnder`); a view installed anew, whatever path installs it,
/// is checked anew: a release, a revocation and a removed key all bite on the next request.
#[tokio::test]
async fn a_view_installed_anew_is_checked_anew_for_cached_sessions() {
    let (edge, seen, _c) = edge();
    let c = claims(CTR, 1);
    let token = mint(&c);
    for _ in 0..2 {
        assert_eq!(
            send(&edge, get("/api/x", Some(&token))).await.0,
            StatusCode::OK
        );
    }
    // Each install is a new stamp; a clone of an installed view is not installed.
    let first = edge.current().unwrap();
    assert_ne!(first.stamp(), 0);
    assert_eq!(first.as_ref().clone().stamp(), 0);

    let mut released = snapshot();
    released.ownership.insert(
        ContractorId::new(CTR).unwrap(),
        OwnershipRecord::Released {
            generation: Generation(1),
            successor: protocol::CellId::new(OTHER_CELL).unwrap(),
            successor_gen: Generation(2),
        },
    );
    edge.install(CellState::from_snapshot(cell(), 11, 11, NOW, released).unwrap());
    assert!(edge.current().unwrap().stamp() > first.stamp());
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(code(&body), "WRONG_CELL");

    // Back to the first content, installed again: served (and remembered) again.
    edge.install(state());
    for _ in 0..2 {
        assert_eq!(
            send(&edge, get("/api/x", Some(&token))).await.0,
            StatusCode::OK
        );
    }
    let mut revoked = snapshot();
    revoked.revocations.push(sign_out(&c));
    edge.install(CellState::from_snapshot(cell(), 11, 11, NOW, revoked).unwrap());
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_REVOKED");

    edge.install(state());
    assert_eq!(
        send(&edge, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    let mut keyless = snapshot();
    keyless.keys = vec![feed_key(&key("k-next", 8), KeyStatus::Current)];
    edge.install(CellState::from_snapshot(cell(), 11, 11, NOW, keyless).unwrap());
    let (status, _, _) = send(&edge, get("/api/x", Some(&token))).await;
    assert_ne!(status, StatusCode::OK);
    assert_eq!(seen.count(), 5);
}

/// An edge whose verified-token cache has `capacity` entries and whose rate limits do not
/// bite (many sessions of one subject, each requested a few times).
fn edge_caching(capacity: usize) -> (Edge, Seen, protocol::time::FakeClock) {
    let mut s = settings();
    s.serving.token_cache_capacity = capacity;
    s.serving.rate_per_subject_per_s = u32::MAX;
    s.serving.burst_per_subject = u32::MAX;
    edge_with(s, None)
}

/// Sessions up to a quarter of the bound are all held (each in the emptier of its two
/// buckets, so none is pushed out by another), and a held session is served from the cache.
#[tokio::test]
async fn the_token_cache_holds_every_session_well_under_its_bound() {
    let (edge, seen, _c) = edge_caching(4_096);
    let tokens: Vec<String> = (0..1_024).map(|_| session()).collect();
    for t in &tokens {
        assert_eq!(send(&edge, get("/api/x", Some(t))).await.0, StatusCode::OK);
    }
    assert_eq!(edge.token_cache().len(), 1_024);
    assert_eq!(edge.token_cache().slots(), 4_096);
    for t in &tokens {
        assert_eq!(send(&edge, get("/api/x", Some(t))).await.0, StatusCode::OK);
    }
    // Every second request was a hit: nothing more was inserted.
    assert_eq!(edge.token_cache().len(), 1_024);
    assert_eq!(seen.count(), 2_048);
}

/// More live sessions than the cache holds: every one is still served (a session pushed out
/// costs only a signature check), the cache never holds more than its slots, and a session
/// past its expiry leaves the cache on its next request.
#[tokio::test]
async fn more_sessions_than_the_token_cache_holds_are_all_served() {
    let (edge, seen, clock) = edge_caching(64);
    assert_eq!(edge.token_cache().slots(), 64);
    let tokens: Vec<String> = (0..200).map(|_| session()).collect();
    for round in 0..3 {
        for t in &tokens {
            assert_eq!(
                send(&edge, get("/api/x", Some(t))).await.0,
                StatusCode::OK,
                "round {round}"
            );
        }
        assert!(edge.token_cache().len() <= 64);
    }
    assert_eq!(seen.count(), 600);

    let held = edge.token_cache().len();
    assert!(held > 0);
    clock.advance(protocol::token::DEFAULT_SESSION_LIFETIME_S + protocol::token::LEEWAY_S + 1);
    for t in &tokens {
        let (status, _, body) = send(&edge, get("/api/x", Some(t))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(code(&body), "SESSION_EXPIRED");
    }
    assert_eq!(edge.token_cache().len(), 0);
}
