//! Browser rules of the edge, in process: CORS for the fleet's origins only, the CSRF proof on
//! cookie-session writes, the CSRF cookie beside the session cookie, and the desk's assets and
//! session hand-over.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::any;
use common::*;
use protocol::ClientKind;

const EVIL: &str = "https://evil.example";

fn set_cookies(h: &HeaderMap) -> Vec<String> {
    h.get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

fn cookie_named<'a>(all: &'a [String], name: &str) -> Option<&'a String> {
    all.iter().find(|c| c.starts_with(&format!("{name}=")))
}

fn preflight(origin: &str) -> Request<Body> {
    Request::builder()
        .method("OPTIONS")
        .uri("/v1/sessions")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn preflights_are_answered_for_fleet_origins_only() {
    let (edge, _seen, _c) = edge();
    let (status, h, _) = send(&edge, preflight(OTHER_ENDPOINT)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(h["access-control-allow-origin"], OTHER_ENDPOINT);
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("x-cellbind-csrf")
    );
    let (status, h, body) = send(&edge, preflight(EVIL)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(code(&body), "FORBIDDEN");
    assert!(h.get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn answers_to_a_fleet_origin_carry_cors_with_credentials_and_others_do_not() {
    let (edge, _seen, _c) = edge();
    let read = |origin: &str| {
        let mut r = get("/api/routes/today", Some(&session()));
        r.headers_mut().insert("origin", origin.parse().unwrap());
        r
    };
    let (status, h, _) = send(&edge, read(OTHER_ENDPOINT)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["access-control-allow-origin"], OTHER_ENDPOINT);
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert_eq!(h["access-control-expose-headers"], "retry-after");
    let (_, h, _) = send(&edge, read(EVIL)).await;
    assert!(h.get("access-control-allow-origin").is_none());
    let (_, h, _) = send(&edge, read(ISSUER)).await;
    assert!(h.get("access-control-allow-origin").is_none());
}

fn cookie_post(token: &str, extra: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder()
        .method("POST")
        .uri("/api/jobs/j-1/complete")
        .header(
            "cookie",
            format!("__Host-cellbind_session={token}; __Host-cellbind_csrf=proof-123"),
        );
    for (k, v) in extra {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn cookie_writes_need_the_csrf_proof_and_a_fleet_origin() {
    let (edge, seen, _c) = edge();
    let token = session();
    let refused: [&[(&str, &str)]; 5] = [
        &[("origin", ISSUER)],
        &[("origin", ISSUER), ("x-cellbind-csrf", "proof-124")],
        &[("origin", EVIL), ("x-cellbind-csrf", "proof-123")],
        &[("x-cellbind-csrf", "proof-123")],
        &[("origin", "null"), ("x-cellbind-csrf", "proof-123")],
    ];
    for extra in refused {
        let (status, h, body) = send(&edge, cookie_post(&token, extra)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{extra:?}");
        assert_eq!(code(&body), "FORBIDDEN");
        assert!(h.get("access-control-allow-origin").is_none());
    }
    assert_eq!(seen.count(), 0, "nothing refused reached the app");
    for extra in [
        &[("origin", ISSUER), ("x-cellbind-csrf", "proof-123")][..],
        &[("origin", OTHER_ENDPOINT), ("x-cellbind-csrf", "proof-123")],
        &[
            ("sec-fetch-site", "same-origin"),
            ("x-cellbind-csrf", "proof-123"),
        ],
    ] {
        let (status, _, _) = send(&edge, cookie_post(&token, extra)).await;
        assert_eq!(status, StatusCode::OK, "{extra:?}");
    }
    assert_eq!(seen.count(), 3);
    // A bearer request carries no ambient credential: no proof needed.
    let r = req("POST", "/api/jobs/j-2/complete", Some(&token));
    assert_eq!(send(&edge, r).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_csrf_cookie_follows_the_session_cookie_in_and_out() {
    let auth = Router::new()
        .route(
            "/v1/sessions",
            any(|| async {
                (
                    StatusCode::CREATED,
                    [(
                        "set-cookie",
                        "__Host-cellbind_session=abc; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000",
                    )],
                    "{}",
                )
            }),
        )
        .route(
            "/v1/sessions/current",
            any(|| async {
                (
                    StatusCode::NO_CONTENT,
                    [(
                        "set-cookie",
                        "__Host-cellbind_session=; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
                    )],
                )
            }),
        );
    let (edge, _seen, _c) = edge_with(settings(), Some(auth));
    let sign_in = Request::builder()
        .method("POST")
        .uri("/v1/sessions")
        .header("origin", ISSUER)
        .body(Body::from("{}"))
        .unwrap();
    let (status, h, _) = send(&edge, sign_in).await;
    assert_eq!(status, StatusCode::CREATED);
    let all = set_cookies(&h);
    let csrf = cookie_named(&all, "__Host-cellbind_csrf").expect("a CSRF cookie");
    assert!(csrf.ends_with("; Secure; SameSite=Strict; Path=/; Max-Age=2592000"));
    assert!(!csrf.contains("HttpOnly"));
    let value = &csrf["__Host-cellbind_csrf=".len()..csrf.find(';').unwrap()];
    assert_eq!(value.len(), 22);

    // Signing out (with its proof) clears both.
    let sign_out = Request::builder()
        .method("DELETE")
        .uri("/v1/sessions/current")
        .header("origin", ISSUER)
        .header(
            "cookie",
            format!("__Host-cellbind_session=abc; __Host-cellbind_csrf={value}"),
        )
        .header("x-cellbind-csrf", value)
        .body(Body::empty())
        .unwrap();
    let (status, h, _) = send(&edge, sign_out).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let all = set_cookies(&h);
    assert!(
        cookie_named(&all, "__Host-cellbind_csrf")
            .unwrap()
            .contains("Max-Age=0")
    );
    // Without the proof, sign-out is refused before it reaches the auth-service.
    let bare = Request::builder()
        .method("DELETE")
        .uri("/v1/sessions/current")
        .header("origin", ISSUER)
        .header("cookie", "__Host-cellbind_session=abc")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&edge, bare).await.0, StatusCode::FORBIDDEN);
    // A sign-in posted from outside the fleet is refused (login CSRF).
    let foreign = Request::builder()
        .method("POST")
        .uri("/v1/sessions")
        .header("origin", EVIL)
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(send(&edge, foreign).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_desk_is_served_with_its_security_headers() {
    let (edge, _seen, _c) = edge();
    for (path, kind) in [
        ("/desk/", "text/html"),
        ("/desk/app.js", "text/javascript"),
        ("/desk/app.css", "text/css"),
    ] {
        let (status, h, _) = send(&edge, get(path, None)).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(h["content-type"].to_str().unwrap().starts_with(kind));
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self';"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(
            csp.contains(&format!("connect-src 'self' {ISSUER} {OTHER_ENDPOINT};")),
            "{csp}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "strict-origin");
    }
    let (status, h, _) = send(&edge, get("/desk", None)).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(h["location"], "/desk/");
}

fn adopt(origin: &str, body: String) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/desk/session")
        .header("origin", origin)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn a_desk_session_handed_over_by_a_fleet_page_becomes_this_cells_cookie() {
    let (edge, _seen, _c) = edge();
    let mut c = claims(CTR, 1);
    c.cli = ClientKind::Desk;
    let desk = mint(&c);
    let (status, h, _) = send(&edge, adopt(OTHER_ENDPOINT, format!("session={desk}"))).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(h["location"], "/desk/");
    let all = set_cookies(&h);
    let cookie = cookie_named(&all, "__Host-cellbind_session").expect("session cookie");
    assert_eq!(
        cookie,
        &format!(
            "__Host-cellbind_session={desk}; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            c.exp - NOW
        )
    );
    assert!(cookie_named(&all, "__Host-cellbind_csrf").is_some());

    // A field session, garbage, or a revoked-looking token: back to the desk with the code.
    let field = session();
    for (body, want) in [
        (format!("session={field}"), "/desk/?error=INVALID_REQUEST"),
        ("session=a.b.c".to_owned(), "/desk/?error=SESSION_INVALID"),
        ("nothing".to_owned(), "/desk/?error=INVALID_REQUEST"),
    ] {
        let (status, h, _) = send(&edge, adopt(ISSUER, body)).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert_eq!(h["location"], want);
        assert!(set_cookies(&h).is_empty());
    }
    // Posted from outside the fleet: refused outright.
    let (status, h, _) = send(&edge, adopt(EVIL, format!("session={desk}"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(set_cookies(&h).is_empty());
}

#[tokio::test]
async fn a_refused_cookie_session_is_cleared_and_a_good_one_is_kept() {
    let (edge, _seen, _c) = edge();
    let read = |token: &str| {
        Request::builder()
            .uri("/api/routes/today")
            .header("cookie", format!("__Host-cellbind_session={token}"))
            .body(Body::empty())
            .unwrap()
    };
    let (status, h, body) = send(&edge, read("a.b.c")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "SESSION_INVALID");
    let all = set_cookies(&h);
    assert!(
        cookie_named(&all, "__Host-cellbind_session")
            .unwrap()
            .contains("Max-Age=0")
    );
    assert!(
        cookie_named(&all, "__Host-cellbind_csrf")
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, h, _) = send(&edge, read(&session())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(set_cookies(&h).is_empty());
    // A bearer request never touches the cookies.
    let (status, h, _) = send(&edge, get("/api/routes/today", Some("a.b.c"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(set_cookies(&h).is_empty());
}
