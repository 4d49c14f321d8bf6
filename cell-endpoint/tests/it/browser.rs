//! Browser rules of the edge, in process: CORS for the fleet's origins only (never on session
//! answers), the CSRF proof on cookie-session writes, the CSRF cookie beside the session cookie,
//! and the desk's assets and cross-cell sign-in form.

use crate::common::*;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::IntoResponse as _;
use axum::routing::any;
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

fn preflight(origin: &str, path: &str) -> Request<Body> {
    Request::builder()
        .method("OPTIONS")
        .uri(path)
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn preflights_are_answered_for_fleet_origins_only() {
    let (edge, _seen, _c) = edge();
    let (status, h, _) = send(&edge, preflight(OTHER_ENDPOINT, "/api/jobs/j-1/complete")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(h["access-control-allow-origin"], OTHER_ENDPOINT);
    assert_eq!(h["access-control-allow-credentials"], "true");
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("x-cellbind-csrf")
    );
    let (status, h, body) = send(&edge, preflight(EVIL, "/api/jobs/j-1/complete")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(code(&body), "FORBIDDEN");
    assert!(h.get("access-control-allow-origin").is_none());
    // Session routes answer with tokens: never open to another origin, fleet or not
    // (ATTACKS A24).
    for path in [
        "/v1/sessions",
        "/v1/sessions/renew",
        "/v1/sessions/transfer",
        "/desk/sign-in",
    ] {
        let (status, h, _) = send(&edge, preflight(OTHER_ENDPOINT, path)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(h.get("access-control-allow-origin").is_none(), "{path}");
    }
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

/// A fake auth-service: signs in with a cookie, signs out clearing it, and records what each
/// request carried.
fn recording_auth() -> (Router, Seen) {
    let seen = Seen::default();
    let (s1, s2) = (seen.clone(), seen.clone());
    let auth = Router::new()
        .route(
            "/v1/sessions",
            any(move |req: Request<Body>| {
                let s = s1.clone();
                async move {
                    s.0.lock().unwrap().push((req.uri().to_string(), req.headers().clone()));
                    (
                        StatusCode::CREATED,
                        [(
                            "set-cookie",
                            "__Host-cellbind_session=abc; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000",
                        )],
                        "{}",
                    )
                }
            }),
        )
        .route(
            "/v1/sessions/current",
            any(move |req: Request<Body>| {
                let s = s2.clone();
                async move {
                    s.0.lock().unwrap().push((req.uri().to_string(), req.headers().clone()));
                    (
                        StatusCode::NO_CONTENT,
                        [(
                            "set-cookie",
                            "__Host-cellbind_session=; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
                        )],
                    )
                }
            }),
        );
    (auth, seen)
}

#[tokio::test]
async fn a_csrf_cookie_follows_the_session_cookie_in_and_out() {
    let (auth, auth_seen) = recording_auth();
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
    assert!(h.get("access-control-allow-origin").is_none());

    // Signing out (with its proof) clears both; only the session cookie travels upstream.
    let mut c = claims(CTR, 1);
    c.cli = ClientKind::Desk;
    let desk = mint(&c);
    let sign_out = Request::builder()
        .method("DELETE")
        .uri("/v1/sessions/current")
        .header("origin", ISSUER)
        .header(
            "cookie",
            format!("__Host-cellbind_session={desk}; __Host-cellbind_csrf={value}; theme=dark"),
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
    let (_, up) = auth_seen.last();
    assert_eq!(up["cookie"], format!("__Host-cellbind_session={desk}"));
    assert!(up.get("authorization").is_none());
    assert!(up.get("x-cellbind-csrf").is_none());
    assert!(up.get("x-cellbind-edge-key").is_some());
    let before = auth_seen.count();
    // Without the proof, sign-out is refused before it reaches the auth-service.
    let bare = Request::builder()
        .method("DELETE")
        .uri("/v1/sessions/current")
        .header("origin", ISSUER)
        .header("cookie", format!("__Host-cellbind_session={desk}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&edge, bare).await.0, StatusCode::FORBIDDEN);
    assert_eq!(auth_seen.count(), before);
    // A sign-in posted from outside the fleet is refused (login CSRF).
    let foreign = Request::builder()
        .method("POST")
        .uri("/v1/sessions")
        .header("origin", EVIL)
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(send(&edge, foreign).await.0, StatusCode::FORBIDDEN);
    assert_eq!(auth_seen.count(), before);
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
        assert!(csp.contains("connect-src 'self';"), "{csp}");
        assert!(
            csp.contains(&format!("form-action 'self' {ISSUER} {OTHER_ENDPOINT};")),
            "{csp}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "strict-origin");
    }
    let (status, h, _) = send(&edge, get("/desk", None)).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(h["location"], "/desk/");
}

fn desk_sign_in(origin: Option<&str>, body: &str) -> Request<Body> {
    let mut b = Request::builder()
        .method("POST")
        .uri("/desk/sign-in")
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(o) = origin {
        b = b.header("origin", o);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

/// A fake auth-service answering sign-in with `status` and `body`, recording what it got.
fn auth_answering(status: StatusCode, body: &'static str) -> (Router, Seen) {
    let seen = Seen::default();
    let s = seen.clone();
    let auth = Router::new().route(
        "/v1/sessions",
        any(move |req: Request<Body>| {
            let s = s.clone();
            async move {
                let (parts, body_in) = req.into_parts();
                let bytes = axum::body::to_bytes(body_in, 4096).await.unwrap();
                let mut h = parts.headers.clone();
                h.insert("x-test-body", String::from_utf8_lossy(&bytes).parse().unwrap());
                s.0.lock().unwrap().push((parts.uri.to_string(), h));
                let mut resp = (status, body).into_response();
                if status == StatusCode::CREATED {
                    resp.headers_mut().insert(
                        "set-cookie",
                        "__Host-cellbind_session=minted; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=600"
                            .parse()
                            .unwrap(),
                    );
                }
                resp
            }
        }),
    );
    (auth, seen)
}

#[tokio::test]
async fn the_desk_sign_in_form_sets_this_cells_cookies_without_showing_the_session() {
    let (auth, seen) = auth_answering(StatusCode::CREATED, r#"{"session":"minted"}"#);
    let (edge, _app, _c) = edge_with(settings(), Some(auth));
    let form = "contractor_id=c-40711&login=disp-1&password=p%40ss";
    let (status, h, body) = send(&edge, desk_sign_in(Some(OTHER_ENDPOINT), form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(h["location"], "/desk/");
    assert_eq!(
        body,
        serde_json::Value::Null,
        "no body, so no token a script could read"
    );
    assert!(h.get("access-control-allow-origin").is_none());
    let all = set_cookies(&h);
    assert!(
        cookie_named(&all, "__Host-cellbind_session")
            .unwrap()
            .contains("HttpOnly")
    );
    assert!(cookie_named(&all, "__Host-cellbind_csrf").is_some());
    let (_, up) = seen.last();
    let sent: serde_json::Value =
        serde_json::from_str(up["x-test-body"].to_str().unwrap()).unwrap();
    assert_eq!(sent["client"], "desk");
    assert_eq!(sent["contractor_id"], "c-40711");
    assert_eq!(sent["password"], "p@ss");
    assert!(up.get("x-cellbind-edge-key").is_some());

    // Refusals land on the desk with the code; nothing is set.
    for (status, answer, want) in [
        (
            StatusCode::UNAUTHORIZED,
            r#"{"error":"INVALID_CREDENTIALS","message":"x"}"#,
            "/desk/?error=INVALID_CREDENTIALS",
        ),
        (
            StatusCode::CONFLICT,
            r#"{"error":"WRONG_CELL","message":"x","owner_cell":"cell-01","owner_endpoint":"https://127.0.0.1:8443"}"#,
            "/desk/?error=CELLS_DISAGREE",
        ),
        (
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error":"RATE_LIMITED","message":"x"}"#,
            "/desk/?error=RATE_LIMITED",
        ),
    ] {
        let (auth, _) = auth_answering(status, answer);
        let (edge, _app, _c) = edge_with(settings(), Some(auth));
        let (s, h, _) = send(&edge, desk_sign_in(Some(ISSUER), form)).await;
        assert_eq!(s, StatusCode::SEE_OTHER);
        assert_eq!(h["location"], want);
        assert!(set_cookies(&h).is_empty());
    }
    // A malformed form, a form without an Origin, and one from outside the fleet.
    let before = seen.count();
    let (s, h, _) = send(
        &edge,
        desk_sign_in(Some(ISSUER), "contractor_id=../x&login=a&password=b"),
    )
    .await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/desk/?error=INVALID_REQUEST")
    );
    let (s, h, _) = send(&edge, desk_sign_in(None, form)).await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/desk/?error=FORBIDDEN")
    );
    let (s, h, _) = send(&edge, desk_sign_in(Some(EVIL), form)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(set_cookies(&h).is_empty());
    assert_eq!(
        seen.count(),
        before,
        "no refused form reached the auth-service"
    );
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
