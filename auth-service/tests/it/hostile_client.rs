//! What a hostile client can and cannot reach (ATTACKS A24, A27, A30, A31): the edge is the
//! only caller whose client-IP header and session cookie are believed, the one credential rule
//! decides between a bearer and a cookie, the sign-in throttles cannot be turned into a lockout,
//! and the data folder is private.

use std::net::SocketAddr;

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

const EDGE_KEY: &str = "x-cellbind-edge-key";
const CLIENT_IP: &str = "x-cellbind-client-ip";

fn peer(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), 40_000)
}

fn sign_in_body(ctr: &str, login: &str, password: &str, client: &str) -> Body {
    Body::from(
        json!({"contractor_id": ctr, "login": login, "password": password, "client": client})
            .to_string(),
    )
}

/// A sign-in from socket peer `from` with extra headers.
async fn sign_in_from(
    f: &Fixture,
    from: &str,
    headers: &[(&str, &str)],
    (ctr, login, password): (&str, &str, &str),
) -> Resp {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    f.call_from(
        peer(from),
        Method::POST,
        "/v1/sessions",
        &all,
        sign_in_body(ctr, login, password, "field"),
    )
    .await
}

fn assert_rate_limited(r: &Resp) {
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"], "RATE_LIMITED");
    let ra: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(ra >= 1, "{ra}");
}

// ── A27: the client IP ─────────────────────────────────────────────────────────────────────

#[tokio::test]
async fn spoofed_client_ip_headers_without_the_edge_key_are_throttled_as_one_client() {
    const BURST: usize = 40;
    let f = Fixture::with_extra(&format!(
        "signin_ip_burst = {BURST}\nsignin_ip_per_minute = 1"
    ))
    .await;
    // An unknown contractor answers 404 right after the per-IP bucket: no password hashing,
    // so 600 attempts stay cheap, and 404 means "got through the IP bucket".
    let nobody = ("c-nobody", "x", "pw-whatever");
    let (mut through, mut throttled) = (0, 0);
    for i in 0..600 {
        let spoofed = format!("198.18.{}.{}", i / 250, i % 250 + 1);
        let mut headers = vec![(CLIENT_IP, spoofed.as_str())];
        if i % 2 == 1 {
            headers.push((EDGE_KEY, "a-guessed-edge-key"));
        }
        let r = sign_in_from(&f, "192.0.2.50", &headers, nobody).await;
        match r.status {
            StatusCode::NOT_FOUND => through += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_rate_limited(&r);
                throttled += 1;
            }
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    assert_eq!(through, BURST, "exactly one client's burst got through");
    assert_eq!(throttled, 600 - BURST);

    // From the authenticated edge the header is believed: each reported address has its own
    // bucket, although every request comes from the same (exhausted) socket peer.
    for reported in ["203.0.113.1", "203.0.113.2"] {
        let headers = [(CLIENT_IP, reported), (EDGE_KEY, EDGE)];
        for _ in 0..BURST {
            let r = sign_in_from(&f, "192.0.2.50", &headers, nobody).await;
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
        }
        assert_rate_limited(&sign_in_from(&f, "192.0.2.50", &headers, nobody).await);
    }
    // The edge without a client-IP header: the socket peer counts (exhausted above).
    assert_rate_limited(&sign_in_from(&f, "192.0.2.50", &[(EDGE_KEY, EDGE)], nobody).await);
}

// ── A31: no lockout by a third party ───────────────────────────────────────────────────────

#[tokio::test]
async fn ten_wrong_passwords_from_one_address_do_not_lock_the_owner_out_at_another() {
    let f = Fixture::new().await;
    f.seed("c-31", "ana", "pw-the-owners", 1).await;
    let attacker = ("c-31", "ana", "pw-a-guess");
    for _ in 0..10 {
        let r = sign_in_from(&f, "198.51.100.1", &[], attacker).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    }
    let owner = sign_in_from(&f, "198.51.100.2", &[], ("c-31", "ana", "pw-the-owners")).await;
    assert_eq!(owner.status, StatusCode::CREATED, "{}", owner.text);
    // The attacker's address is throttled on this account, even with the right password.
    assert_rate_limited(&sign_in_from(&f, "198.51.100.1", &[], attacker).await);
    assert_rate_limited(
        &sign_in_from(&f, "198.51.100.1", &[], ("c-31", "ana", "pw-the-owners")).await,
    );
}

#[tokio::test]
async fn attempts_spread_over_many_addresses_hit_the_per_account_ceiling() {
    let f = Fixture::with_extra("signin_account_burst = 5\nsignin_account_per_hour = 1").await;
    f.seed("c-32", "bo", "pw-the-owners", 1).await;
    for n in 1..=5 {
        let r = sign_in_from(&f, &format!("198.51.100.{n}"), &[], ("c-32", "bo", "guess")).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    }
    // A sixth address: its own (account, IP) bucket is full, the account's ceiling is not.
    assert_rate_limited(&sign_in_from(&f, "198.51.100.6", &[], ("c-32", "bo", "guess")).await);
    // Another account is not affected.
    f.seed("c-32", "cy", "pw-cys-own", 1).await;
    let r = sign_in_from(&f, "198.51.100.6", &[], ("c-32", "cy", "pw-cys-own")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn zero_throttle_settings_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let tls = make_tls(dir.path());
    for key in [
        "signin_ip_burst",
        "signin_ip_per_minute",
        "signin_account_ip_burst",
        "signin_account_ip_per_minute",
        "signin_account_burst",
        "signin_account_per_hour",
    ] {
        let toml = config_toml(
            dir.path(),
            &tls,
            "127.0.0.1:0",
            "127.0.0.1:0",
            &format!("{key} = 0"),
        );
        let e = cellbind_auth_service::Config::from_toml(&toml).unwrap_err();
        assert!(e.to_string().contains("throttle"), "{key}: {e}");
    }
}

#[test]
fn the_management_listener_shares_no_address_with_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let tls = make_tls(dir.path());
    let ok = config_toml(dir.path(), &tls, "127.0.0.1:8445", "127.0.0.1:8446", "");
    let c = cellbind_auth_service::Config::from_toml(&ok).unwrap();
    assert_eq!(c.management_listen.to_string(), "127.0.0.1:0");
    for taken in ["127.0.0.1:8445", "127.0.0.1:8446"] {
        let toml = ok.replace("127.0.0.1:0", taken);
        let e = cellbind_auth_service::Config::from_toml(&toml).unwrap_err();
        assert!(
            e.to_string().contains("management_listen and"),
            "{taken}: {e}"
        );
    }
    let default = ok.replace("management_listen = \"127.0.0.1:0\"\n", "");
    let c = cellbind_auth_service::Config::from_toml(&default).unwrap();
    assert_eq!(c.management_listen.to_string(), "127.0.0.1:9102");
}

// ── A24: one credential rule ───────────────────────────────────────────────────────────────

/// A desk sign-in: (session token, subject).
async fn desk_session(f: &Fixture) -> (String, String) {
    let r = f.sign_in("c-24", "desk", "pw-desk-user", "desk").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    (
        r.json["session"].as_str().unwrap().to_owned(),
        r.json["subject"].as_str().unwrap().to_owned(),
    )
}

async fn sessions_of(f: &Fixture, subject: &str) -> usize {
    let r = f
        .admin(
            Method::GET,
            &format!("/admin/v1/subjects/{subject}/sessions"),
            Value::Null,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.json["sessions"].as_array().unwrap().len()
}

fn cookie(token: &str) -> String {
    format!("__Host-cellbind_session={token}")
}

/// The session token a `Set-Cookie` sets.
fn set_cookie_token(r: &Resp) -> String {
    let v = r.headers["set-cookie"].to_str().unwrap();
    let rest = v.strip_prefix("__Host-cellbind_session=").unwrap();
    let token = rest.split(';').next().unwrap();
    assert!(!token.is_empty(), "{v}");
    token.to_owned()
}

#[tokio::test]
async fn a_cookie_renewal_through_the_edge_answers_with_a_cookie_and_no_token_in_the_body() {
    let f = Fixture::new().await;
    f.seed("c-24", "desk", "pw-desk-user", 1).await;
    let (token, subject) = desk_session(&f).await;
    f.clock.advance(60);
    let c = cookie(&token);
    let r = f
        .call(
            Method::POST,
            "/v1/sessions/renew",
            &[("cookie", &c), (EDGE_KEY, EDGE)],
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let fresh = set_cookie_token(&r);
    assert_ne!(fresh, token);
    assert!(r.json.get("session").is_none(), "{}", r.text);
    assert!(
        !r.text.contains(&fresh),
        "the new token is nowhere in the body"
    );
    assert_eq!(r.json["session_id"], segment(&fresh, 1)["jti"]);
    assert_eq!(r.json["subject"], subject);
    assert_eq!(r.headers["cache-control"], "no-store");
    // The new cookie works (through the edge).
    let c = cookie(&fresh);
    let cur = f
        .call(
            Method::GET,
            "/v1/sessions/current",
            &[("cookie", &c), (EDGE_KEY, EDGE)],
            Body::empty(),
        )
        .await;
    assert_eq!(cur.status, StatusCode::OK, "{}", cur.text);
    assert_eq!(cur.json["jti"], r.json["session_id"]);
}

#[tokio::test]
async fn a_junk_authorization_header_beside_a_cookie_from_the_edge_leaves_the_cookie_in_charge() {
    let f = Fixture::new().await;
    f.seed("c-24", "desk", "pw-desk-user", 1).await;
    for junk in ["Basic dXNlcjpwYXNz", "Bearer junk", "Negotiate x"] {
        let (token, _) = desk_session(&f).await;
        let c = cookie(&token);
        let headers = [
            ("cookie", c.as_str()),
            ("authorization", junk),
            (EDGE_KEY, EDGE),
        ];
        let jti = segment(&token, 1)["jti"].clone();
        let cur = f
            .call(Method::GET, "/v1/sessions/current", &headers, Body::empty())
            .await;
        assert_eq!(cur.status, StatusCode::OK, "{junk}: {}", cur.text);
        assert_eq!(cur.json["jti"], jti, "{junk}");
        // Renewal is a cookie renewal: cookie out, no token in the body.
        let renewed = f
            .call(Method::POST, "/v1/sessions/renew", &headers, Body::empty())
            .await;
        assert_eq!(
            renewed.status,
            StatusCode::CREATED,
            "{junk}: {}",
            renewed.text
        );
        assert!(renewed.json.get("session").is_none(), "{junk}");
        assert!(
            !renewed.text.contains(&set_cookie_token(&renewed)),
            "{junk}"
        );
        // A cookie session is not transferred.
        let t = f
            .call(
                Method::POST,
                "/v1/sessions/transfer",
                &headers,
                Body::empty(),
            )
            .await;
        assert_eq!(t.status, StatusCode::FORBIDDEN, "{junk}: {}", t.text);
        assert!(
            t.json["message"]
                .as_str()
                .unwrap()
                .starts_with("cookie_session"),
            "{junk}: {}",
            t.text
        );
        // Sign-out ends the cookie's session.
        let out = f
            .call(
                Method::DELETE,
                "/v1/sessions/current",
                &headers,
                Body::empty(),
            )
            .await;
        assert_eq!(out.status, StatusCode::NO_CONTENT, "{junk}: {}", out.text);
        let after = f
            .call(Method::GET, "/v1/sessions/current", &headers, Body::empty())
            .await;
        assert_eq!(after.json["error"], "SESSION_REVOKED", "{junk}");
    }
}

#[tokio::test]
async fn a_session_cookie_without_the_edge_key_is_session_missing_and_mints_nothing() {
    let f = Fixture::new().await;
    f.seed("c-24", "desk", "pw-desk-user", 1).await;
    let (token, subject) = desk_session(&f).await;
    let c = cookie(&token);
    let head = f.head().await;
    let minted = sessions_of(&f, &subject).await;
    for key in [None, Some("a-guessed-edge-key"), Some("")] {
        let mut headers = vec![("cookie", c.as_str())];
        headers.extend(key.map(|k| (EDGE_KEY, k)));
        for (method, path) in [
            (Method::GET, "/v1/sessions/current"),
            (Method::POST, "/v1/sessions/renew"),
            (Method::POST, "/v1/sessions/transfer"),
            (Method::DELETE, "/v1/sessions/current"),
        ] {
            let r = f.call(method, path, &headers, Body::empty()).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{path} {key:?}: {}",
                r.text
            );
            assert_eq!(r.json["error"], "SESSION_MISSING", "{path} {key:?}");
            assert!(r.headers.get("set-cookie").is_none(), "{path} {key:?}");
        }
    }
    // Nothing minted, nothing revoked; the cookie still works through the edge.
    assert_eq!(sessions_of(&f, &subject).await, minted);
    assert_eq!(f.head().await, head);
    let cur = f
        .call(
            Method::GET,
            "/v1/sessions/current",
            &[("cookie", &c), (EDGE_KEY, EDGE)],
            Body::empty(),
        )
        .await;
    assert_eq!(cur.status, StatusCode::OK, "{}", cur.text);
}

#[tokio::test]
async fn a_valid_bearer_beside_a_cookie_wins_and_renews_as_a_bearer() {
    let f = Fixture::new().await;
    f.seed("c-24", "desk", "pw-desk-user", 1).await;
    let (cookie_token, _) = desk_session(&f).await;
    let bearer = f.sign_in("c-24", "desk", "pw-desk-user", "field").await;
    let bearer = bearer.json["session"].as_str().unwrap().to_owned();
    let c = cookie(&cookie_token);
    let auth = format!("Bearer {bearer}");
    let headers = [
        ("cookie", c.as_str()),
        ("authorization", auth.as_str()),
        (EDGE_KEY, EDGE),
    ];
    let cur = f
        .call(Method::GET, "/v1/sessions/current", &headers, Body::empty())
        .await;
    assert_eq!(cur.json["jti"], segment(&bearer, 1)["jti"]);
    let r = f
        .call(Method::POST, "/v1/sessions/renew", &headers, Body::empty())
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert!(
        r.json["session"].is_string(),
        "a bearer renewal carries the token"
    );
    assert_eq!(r.json["subject"], cur.json["sub"]);
}

#[tokio::test]
async fn the_admin_and_feed_guards_accept_exactly_one_bearer_header() {
    let f = Fixture::new().await;
    for (path, token) in [
        ("/admin/v1/status", ADMIN),
        ("/internal/v1/feed?since=0&instance=t", feed_for("t")),
    ] {
        let exact = format!("Bearer {token}");
        let r = f
            .call_internal(
                Method::GET,
                path,
                &[("authorization", &exact)],
                Body::empty(),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
        let lower = format!("bearer {token}");
        let upper = format!("BEARER {token}");
        let two_spaces = format!("Bearer  {token}");
        let refused: [&[(&str, &str)]; 4] = [
            &[("authorization", &lower)],
            &[("authorization", &upper)],
            &[("authorization", &two_spaces)],
            &[("authorization", &exact), ("authorization", &exact)],
        ];
        for headers in refused {
            let r = f
                .call_internal(Method::GET, path, headers, Body::empty())
                .await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{path} {headers:?}");
            assert_eq!(r.json["error"], "FORBIDDEN", "{path} {headers:?}");
        }
    }
}

#[tokio::test]
async fn the_public_listener_has_no_admin_feed_or_metrics_route() {
    let f = Fixture::new().await;
    let admin = format!("Bearer {ADMIN}");
    let feed = format!("Bearer {}", feed_for("t"));
    // Metrics are on neither listener, whatever token: only the management listener has them.
    for listener_call in [false, true] {
        let r = if listener_call {
            f.call_internal(
                Method::GET,
                "/metrics",
                &[("authorization", &admin)],
                Body::empty(),
            )
            .await
        } else {
            f.call(
                Method::GET,
                "/metrics",
                &[("authorization", &admin), (EDGE_KEY, EDGE)],
                Body::empty(),
            )
            .await
        };
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
        assert_eq!(r.json["error"], "NOT_FOUND");
    }
    let r = f.call_management(Method::GET, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("cellbind_auth_signins_total"), "{}", r.text);
    let r = f.call_management(Method::GET, "/admin/v1/status").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    for (method, path, auth) in [
        (Method::GET, "/admin/v1/status", &admin),
        (Method::POST, "/admin/v1/keys/rotate", &admin),
        (Method::GET, "/internal/v1/feed?since=0&instance=t", &feed),
    ] {
        let r = f
            .call(
                method.clone(),
                path,
                &[("authorization", auth), (EDGE_KEY, EDGE)],
                Body::empty(),
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.text);
        assert_eq!(r.json["error"], "NOT_FOUND");
        let r = f
            .call_internal(method, path, &[("authorization", auth)], Body::empty())
            .await;
        assert_eq!(r.status, StatusCode::OK, "{path} internally: {}", r.text);
    }
}

// ── A30: private files ─────────────────────────────────────────────────────────────────────

#[tokio::test]
async fn every_folder_under_the_data_dir_is_0700_and_every_file_0600() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let tls = make_tls(dir.path());
    write_tokens(dir.path());
    // A data folder that already exists with a wide mode is narrowed.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = cellbind_auth_service::Config::from_toml(&config_toml(
        dir.path(),
        &tls,
        "127.0.0.1:0",
        "127.0.0.1:0",
        "",
    ))
    .unwrap();
    let state = cellbind_auth_service::open(config).await.unwrap();
    // A write (a user and a rotation), so the WAL exists.
    let auth = format!("Bearer {ADMIN}");
    let r = call_on(
        &state,
        Listener::Internal,
        None,
        Method::POST,
        "/admin/v1/keys/rotate",
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let mut seen = Vec::new();
    let mut todo = vec![data.clone()];
    while let Some(d) = todo.pop() {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                let mode = meta.permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", e.path().display());
                seen.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    seen.sort();
    let expected: &[&str] = if config_toml_uses_postgres() {
        &["kek.bin"]
    } else {
        &["auth.db", "auth.db-wal", "kek.bin"]
    };
    for f in expected {
        assert!(seen.iter().any(|s| s == f), "{f} not among {seen:?}");
    }
}
