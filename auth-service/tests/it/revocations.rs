//! Per-cell revocation through the admin API, in-process: the five kinds, retries answered
//! with the revocation in force, the audit log (kept after compaction, exported as JSON lines
//! or an array), the list of a subject's active sessions, and sign-in right after a "before"
//! revocation.

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

const DAY: u64 = 24 * 3600;

fn token_of(r: &Resp) -> String {
    r.json["session"].as_str().unwrap().to_owned()
}

async fn current(f: &Fixture, token: &str) -> Resp {
    f.with_session(Method::GET, "/v1/sessions/current", token)
        .await
}

async fn revoke(f: &Fixture, body: Value) -> Resp {
    f.admin(Method::POST, "/admin/v1/revocations", body).await
}

#[tokio::test]
async fn each_kind_revokes_what_it_names_and_nothing_else() {
    let f = Fixture::new().await;
    f.seed("c-1", "a", "pw-kinds-a", 1).await;
    f.seed("c-1", "b", "pw-kinds-b", 1).await;
    f.seed("c-2", "a", "pw-kinds-c", 1).await;
    let a1 = token_of(&f.sign_in("c-1", "a", "pw-kinds-a", "field").await);
    let a2 = token_of(&f.sign_in("c-1", "a", "pw-kinds-a", "desk").await);
    let b = token_of(&f.sign_in("c-1", "b", "pw-kinds-b", "field").await);
    let other = token_of(&f.sign_in("c-2", "a", "pw-kinds-c", "field").await);
    let jti = current(&f, &a1).await.json["jti"]
        .as_str()
        .unwrap()
        .to_owned();
    f.clock.advance(5);

    // One session: only that one.
    let r = revoke(
        &f,
        json!({"kind": "session", "jti": jti, "exp": T0 + 60, "reason": "stolen phone", "by": "ops"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["outcome"], "applied");
    // The cell keeps it until the session's recorded expiry, not the (too early) one asked for.
    assert_eq!(r.json["exp"], T0 + 30 * DAY);
    assert_eq!(current(&f, &a1).await.json["error"], "SESSION_REVOKED");
    assert_eq!(current(&f, &a2).await.status, StatusCode::OK);

    // A subject: both of its sessions, not its colleague's.
    let r = revoke(
        &f,
        json!({"kind": "subject", "sub": "c-1.a", "before": T0 + 6, "reason": "left", "by": "ops"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(current(&f, &a2).await.json["error"], "SESSION_REVOKED");
    assert_eq!(current(&f, &b).await.status, StatusCode::OK);

    // A contractor: everyone of it, not another contractor.
    let r = revoke(
        &f,
        json!({"kind": "contractor", "ctr": "c-1", "before": T0 + 6, "reason": "investigation", "by": "ops"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(current(&f, &b).await.json["error"], "SESSION_REVOKED");
    assert_eq!(current(&f, &other).await.status, StatusCode::OK);

    // The cell: everything issued before.
    let r = revoke(
        &f,
        json!({"kind": "cell", "before": T0 + 6, "reason": "compromise", "by": "ops"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(current(&f, &other).await.json["error"], "SESSION_REVOKED");
}

#[tokio::test]
async fn a_repeated_request_answers_the_revocation_in_force() {
    let f = Fixture::new().await;
    let body =
        json!({"kind": "contractor", "ctr": "c-77", "before": T0 + 1, "reason": "r", "by": "b"});
    let first = revoke(&f, body.clone()).await;
    assert_eq!(first.json["outcome"], "applied");
    assert_eq!(first.json["revoked"], true);
    let head = f.head().await;
    let again = revoke(&f, body).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json["outcome"], "already");
    assert_eq!(again.json["revoked"], false);
    assert_eq!(again.json["seq"], first.json["seq"]);
    assert_eq!(f.head().await, head, "nothing recorded twice");
}

#[tokio::test]
async fn key_revocations_go_through_the_key_ring() {
    let f = Fixture::new().await;
    f.seed("c-3", "t", "pw-key-1", 1).await;
    let old = token_of(&f.sign_in("c-3", "t", "pw-key-1", "field").await);
    let keys = f
        .admin(Method::GET, "/admin/v1/keys", Value::Null)
        .await
        .json;
    let kid_of = |status: &str| {
        keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["status"] == status)
            .unwrap()["kid"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (cur, next) = (kid_of("current"), kid_of("next"));
    let r = revoke(
        &f,
        json!({"kind": "key", "kid": cur, "reason": "leaked", "by": "security"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["outcome"], "applied");
    assert_eq!(current(&f, &old).await.json["error"], "SESSION_REVOKED");
    let fresh = token_of(&f.sign_in("c-3", "t", "pw-key-1", "field").await);
    let header = segment(&fresh, 0);
    assert_eq!(header["kid"], next.as_str(), "the next key signs at once");
    assert_eq!(current(&f, &fresh).await.status, StatusCode::OK);
    let again = revoke(
        &f,
        json!({"kind": "key", "kid": cur, "reason": "leaked", "by": "security"}),
    )
    .await;
    assert_eq!(again.json["outcome"], "already");
    assert_eq!(again.json["seq"], r.json["seq"]);
    let unknown = revoke(
        &f,
        json!({"kind": "key", "kid": "no-such-key", "reason": "x", "by": "y"}),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn refusals_bad_audit_text_far_future_and_no_token() {
    let f = Fixture::new().await;
    for body in [
        json!({"kind": "cell", "before": T0, "reason": "", "by": "ops"}),
        json!({"kind": "cell", "before": T0, "reason": "x", "by": "a\nb"}),
        json!({"kind": "cell", "before": T0 + 3600, "reason": "lock out", "by": "ops"}),
        json!({"kind": "planet", "reason": "x", "by": "y"}),
    ] {
        let r = revoke(&f, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.json);
    }
    let r = f
        .call_internal(
            Method::POST,
            "/admin/v1/revocations",
            &[("content-type", "application/json")],
            Body::from(json!({"kind": "cell", "before": T0, "reason": "x", "by": "y"}).to_string()),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        f.feed(0).await["body"]["snapshot"]["revocations"],
        json!([]),
        "nothing refused was recorded"
    );
}

#[tokio::test]
async fn the_audit_log_keeps_every_revocation_after_compaction() {
    let f = Fixture::with_extra("session_lifetime_s = 86400").await;
    f.seed("c-5", "t", "pw-audit-1", 1).await;
    let token = token_of(&f.sign_in("c-5", "t", "pw-audit-1", "field").await);
    assert_eq!(
        f.with_session(Method::DELETE, "/v1/sessions/current", &token)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    revoke(
        &f,
        json!({"kind": "subject", "sub": "c-5.t", "before": T0 + 1, "reason": "lost phone", "by": "dispatch-7"}),
    )
    .await;
    f.clock.set(T0 + 2 * DAY);
    assert_eq!(
        cellbind_auth_service::prune_revocations(&f.state)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        f.feed(0).await["body"]["snapshot"]["revocations"],
        json!([])
    );

    let r = f
        .admin(Method::GET, "/admin/v1/audit/revocations", Value::Null)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/x-ndjson");
    let lines: Vec<Value> = r
        .text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["kind"], &lines[0]["by"], &lines[0]["reason"]),
        (&json!("session"), &json!("self"), &json!("sign-out"))
    );
    assert_eq!(
        (
            &lines[1]["kind"],
            &lines[1]["by"],
            &lines[1]["reason"],
            &lines[1]["at"]
        ),
        (
            &json!("subject"),
            &json!("dispatch-7"),
            &json!("lost phone"),
            &json!(T0)
        )
    );
    let arr = f
        .admin(
            Method::GET,
            &format!(
                "/admin/v1/audit/revocations?format=json&after={}",
                lines[0]["seq"]
            ),
            Value::Null,
        )
        .await;
    assert_eq!(arr.json.as_array().unwrap().len(), 1);
    assert_eq!(arr.json[0], lines[1]);
    // ... and after a restart.
    let again = f.reopen().await;
    let r = call_on(
        &again,
        Listener::Internal,
        None,
        Method::GET,
        "/admin/v1/audit/revocations?format=json",
        &[("authorization", &format!("Bearer {ADMIN}"))],
        Body::empty(),
    )
    .await;
    assert_eq!(r.json.as_array().unwrap().len(), 2);
    let bad = f
        .admin(
            Method::GET,
            "/admin/v1/audit/revocations?format=xml",
            Value::Null,
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

async fn list_sessions(f: &Fixture) -> Vec<Value> {
    f.admin(
        Method::GET,
        "/admin/v1/subjects/c-6.t/sessions",
        Value::Null,
    )
    .await
    .json["sessions"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_subjects_active_sessions_are_listed_until_revoked_or_expired() {
    let f = Fixture::with_extra("session_lifetime_s = 86400").await;
    f.seed("c-6", "t", "pw-list-1", 4).await;
    let field = token_of(&f.sign_in("c-6", "t", "pw-list-1", "field").await);
    f.clock.advance(10);
    let desk = token_of(&f.sign_in("c-6", "t", "pw-list-1", "desk").await);
    let l = list_sessions(&f).await;
    assert_eq!(l.len(), 2);
    assert_eq!(l[0]["client"], "desk", "newest first");
    assert_eq!(l[1]["client"], "field");
    assert_eq!(l[1]["issued_at"], T0);
    assert_eq!(l[1]["generation"], 4);
    assert_eq!(l[1]["last_seen"], Value::Null);
    assert_eq!(l[0]["kid"], segment(&desk, 0)["kid"]);
    let jti = l[1]["session_id"].as_str().unwrap().to_owned();
    let rec = f
        .admin(
            Method::GET,
            &format!("/admin/v1/sessions/{jti}"),
            Value::Null,
        )
        .await;
    assert_eq!(rec.json["revoked"], false);
    f.with_session(Method::DELETE, "/v1/sessions/current", &field)
        .await;
    let l = list_sessions(&f).await;
    assert_eq!(l.len(), 1, "a signed-out session is no longer listed");
    let rec = f
        .admin(
            Method::GET,
            &format!("/admin/v1/sessions/{jti}"),
            Value::Null,
        )
        .await;
    assert_eq!(rec.json["revoked"], true);
    // A renewal is recorded too.
    f.clock.advance(10);
    let renewed = f
        .with_session(Method::POST, "/v1/sessions/renew", &desk)
        .await;
    assert_eq!(renewed.status, StatusCode::CREATED);
    assert_eq!(list_sessions(&f).await.len(), 2);
    f.clock.advance(2 * DAY);
    assert!(
        list_sessions(&f).await.is_empty(),
        "expired sessions are not listed"
    );
    assert_eq!(
        cellbind_auth_service::prune_minted(&f.state).await.unwrap(),
        3
    );
}

#[tokio::test]
async fn a_sign_in_right_after_a_before_revocation_is_not_revoked() {
    let f = Fixture::new().await;
    f.seed("c-8", "t", "pw-after-1", 1).await;
    let old = token_of(&f.sign_in("c-8", "t", "pw-after-1", "field").await);
    // `cellctl revoke subject` asks for before = now + 1 (the whole current second).
    revoke(
        &f,
        json!({"kind": "subject", "sub": "c-8.t", "before": T0 + 1, "reason": "r", "by": "b"}),
    )
    .await;
    assert_eq!(current(&f, &old).await.json["error"], "SESSION_REVOKED");
    let fresh = token_of(&f.sign_in("c-8", "t", "pw-after-1", "field").await);
    let c = current(&f, &fresh).await;
    assert_eq!(c.status, StatusCode::OK, "{:?}", c.json);
    assert_eq!(c.json["iat"], T0 + 1, "issued at the revocation's before");
}
