//! Bad input, table-driven: every case gets a typed 4xx error body and changes nothing.

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    auth: Option<&'static str>,
    body: Vec<u8>,
    status: StatusCode,
    code: &'static str,
}

fn case(
    name: &'static str,
    method: Method,
    path: &str,
    auth: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.to_owned(),
        auth,
        body: body.into(),
        status: StatusCode::from_u16(status).unwrap(),
        code,
    }
}

async fn snapshot(f: &Fixture) -> (Value, Value, Value) {
    let feed = f.feed(0).await;
    let status = f
        .admin(Method::GET, "/admin/v1/status", Value::Null)
        .await
        .json;
    let keys = f
        .admin(Method::GET, "/admin/v1/keys", Value::Null)
        .await
        .json;
    // instances change with every feed call; compare the rest
    let mut status = status;
    status["instances"] = Value::Null;
    let mut feed = feed;
    feed["issued_at"] = Value::Null;
    (feed, status, keys)
}

#[tokio::test]
async fn bad_input_gets_typed_errors_and_changes_nothing() {
    let f = Fixture::new().await;
    f.seed("c-1", "ana", "pw-bad-input", 1).await;
    let before = snapshot(&f).await;
    let admin = Some(ADMIN);
    let mib = vec![b'a'; 1024 * 1024];
    let mut big_json =
        br#"{"contractor_id":"c-1","login":"ana","role":"technician","password":""#.to_vec();
    big_json.extend(std::iter::repeat_n(b'x', 1024 * 1024));
    big_json.extend(br#""}"#);
    let user = json!({"contractor_id": "c-2", "login": "x", "role": "technician", "password": "pw-123456"}).to_string();
    let cases = vec![
        case(
            "sign-in malformed JSON",
            Method::POST,
            "/v1/sessions",
            None,
            "{\"contractor_id\":",
            400,
            "INVALID_REQUEST",
        ),
        case(
            "sign-in missing password",
            Method::POST,
            "/v1/sessions",
            None,
            r#"{"contractor_id":"c-1","login":"ana"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "sign-in 1 MiB body",
            Method::POST,
            "/v1/sessions",
            None,
            mib.clone(),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        case(
            "sign-in non-UTF-8",
            Method::POST,
            "/v1/sessions",
            None,
            b"{\"contractor_id\":\"c-1\xff\xfe\",\"login\":\"ana\",\"password\":\"p\"}".to_vec(),
            400,
            "INVALID_REQUEST",
        ),
        case(
            "sign-in contractor with path characters",
            Method::POST,
            "/v1/sessions",
            None,
            r#"{"contractor_id":"c-1/../etc","login":"ana","password":"pw-bad-input"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "sign-in oversized password",
            Method::POST,
            "/v1/sessions",
            None,
            format!(
                r#"{{"contractor_id":"c-1","login":"ana","password":"{}"}}"#,
                "p".repeat(2000)
            ),
            400,
            "INVALID_REQUEST",
        ),
        case(
            "sign-in unknown client",
            Method::POST,
            "/v1/sessions",
            None,
            r#"{"contractor_id":"c-1","login":"ana","password":"pw-bad-input","client":"tv"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "admin user without token",
            Method::POST,
            "/admin/v1/users",
            None,
            user.clone(),
            403,
            "FORBIDDEN",
        ),
        case(
            "admin user with wrong token",
            Method::POST,
            "/admin/v1/users",
            Some("not-the-admin-token"),
            user.clone(),
            403,
            "FORBIDDEN",
        ),
        case(
            "admin user with the feed token",
            Method::POST,
            "/admin/v1/users",
            Some(feed_for("a")),
            user.clone(),
            403,
            "FORBIDDEN",
        ),
        case(
            "admin rotate without token",
            Method::POST,
            "/admin/v1/keys/rotate",
            None,
            "",
            403,
            "FORBIDDEN",
        ),
        case(
            "admin user malformed JSON",
            Method::POST,
            "/admin/v1/users",
            admin,
            "[1,2",
            400,
            "INVALID_REQUEST",
        ),
        case(
            "admin user missing role",
            Method::POST,
            "/admin/v1/users",
            admin,
            r#"{"contractor_id":"c-2","login":"x","password":"pw-123456"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "admin user with both password forms",
            Method::POST,
            "/admin/v1/users",
            admin,
            r#"{"contractor_id":"c-2","login":"x","role":"technician","password":"pw-123456","password_hash":"$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaA"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "admin user plaintext as hash",
            Method::POST,
            "/admin/v1/users",
            admin,
            r#"{"contractor_id":"c-2","login":"x","role":"technician","password_hash":"hunter2"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "admin user 1 MiB body",
            Method::POST,
            "/admin/v1/users",
            admin,
            big_json,
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        case(
            "admin user non-UTF-8",
            Method::POST,
            "/admin/v1/users",
            admin,
            b"{\"contractor_id\":\"c-\xc3\x28\"}".to_vec(),
            400,
            "INVALID_REQUEST",
        ),
        case(
            "ownership path characters",
            Method::PUT,
            "/admin/v1/ownership/c-1%2F..%2Fetc",
            admin,
            r#"{"state":"active","gen":9}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "ownership dotted path",
            Method::PUT,
            "/admin/v1/ownership/..",
            admin,
            r#"{"state":"active","gen":9}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "ownership unknown state",
            Method::PUT,
            "/admin/v1/ownership/c-1",
            admin,
            r#"{"state":"owned","gen":9}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "ownership generation down",
            Method::PUT,
            "/admin/v1/ownership/c-1",
            admin,
            r#"{"state":"active","gen":0}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "ownership without token",
            Method::PUT,
            "/admin/v1/ownership/c-1",
            None,
            r#"{"state":"active","gen":9}"#,
            403,
            "FORBIDDEN",
        ),
        case(
            "bulk ownership one refused",
            Method::PUT,
            "/admin/v1/ownership",
            admin,
            r#"{"records":{"c-8":{"state":"active","gen":1},"c-1":{"state":"active","gen":0}}}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "key revoke unknown kid",
            Method::POST,
            "/admin/v1/keys/k-nope/revoke",
            admin,
            r#"{"reason":"x","by":"y"}"#,
            404,
            "NOT_FOUND",
        ),
        case(
            "key revoke traversal kid",
            Method::POST,
            "/admin/v1/keys/..%2F..%2Fdev%2Fnull/revoke",
            admin,
            r#"{"reason":"x","by":"y"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "key revoke without reason",
            Method::POST,
            "/admin/v1/keys/k-nope/revoke",
            admin,
            r#"{"by":"y"}"#,
            400,
            "INVALID_REQUEST",
        ),
        case(
            "map not JSON",
            Method::PUT,
            "/admin/v1/placement-map",
            admin,
            "<html>",
            400,
            "INVALID_REQUEST",
        ),
        case(
            "map without token",
            Method::PUT,
            "/admin/v1/placement-map",
            None,
            "{}",
            403,
            "FORBIDDEN",
        ),
        case(
            "feed bad since",
            Method::GET,
            "/internal/v1/feed?since=-1&instance=a",
            Some(feed_for("a")),
            "",
            400,
            "INVALID_REQUEST",
        ),
        case(
            "feed bad instance",
            Method::GET,
            "/internal/v1/feed?since=0&instance=..%2Fx",
            Some(feed_for("a")),
            "",
            400,
            "INVALID_REQUEST",
        ),
        case(
            "current with a garbage bearer",
            Method::GET,
            "/v1/sessions/current",
            Some("a.b.c"),
            "",
            401,
            "SESSION_INVALID",
        ),
        case(
            "sign-out with a garbage bearer",
            Method::DELETE,
            "/v1/sessions/current",
            Some("a.b"),
            "",
            401,
            "SESSION_INVALID",
        ),
        case(
            "unknown route",
            Method::GET,
            "/v2/whatever",
            None,
            "",
            404,
            "NOT_FOUND",
        ),
    ];
    let total = cases.len();
    for c in cases {
        let auth = c.auth.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("authorization", a.as_str()));
        }
        let r = f
            .call_internal(c.method, &c.path, &headers, Body::from(c.body))
            .await;
        assert_eq!(r.status, c.status, "{}: {}", c.name, r.text);
        assert_eq!(r.json["error"], c.code, "{}: {}", c.name, r.text);
        assert!(r.json["message"].is_string(), "{}: {}", c.name, r.text);
    }
    eprintln!("{total} bad-input cases answered with typed errors");
    let after = snapshot(&f).await;
    assert_eq!(before.0, after.0, "feed unchanged");
    assert_eq!(
        before.1, after.1,
        "status (users, contractors, seq, kids) unchanged"
    );
    assert_eq!(before.2, after.2, "keys unchanged");
    // the user still signs in with the old password
    let r = f.sign_in("c-1", "ana", "pw-bad-input", "field").await;
    assert_eq!(r.status, StatusCode::CREATED);
}
