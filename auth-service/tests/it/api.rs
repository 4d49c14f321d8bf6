//! The HTTP API driven through the router with `oneshot`.

use std::collections::BTreeSet;

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use protocol::CellId;
use protocol::jwks::{Jwks, KeySet};
use protocol::token::{Expectations, SessionClaims};
use serde_json::{Value, json};

const DAY: u64 = 24 * 3600;

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

async fn jwks(f: &Fixture) -> (KeySet, Resp) {
    let r = f
        .call(Method::GET, "/.well-known/jwks.json", &[], Body::empty())
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let set = KeySet::from_jwks(&serde_json::from_value::<Jwks>(r.json.clone()).unwrap()).unwrap();
    (set, r)
}

#[tokio::test]
async fn sign_in_mints_exactly_the_designed_token() {
    let f = Fixture::new().await;
    f.seed("c-40711", "ana", "correct horse battery", 3).await;
    let r = f
        .sign_in("c-40711", "ana", "correct horse battery", "field")
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_eq!(
        keys_of(&r.json),
        [
            "session",
            "session_id",
            "cell_id",
            "endpoint",
            "generation",
            "expires_at",
            "subject",
            "device_token"
        ]
        .into_iter()
        .map(String::from)
        .collect()
    );
    assert!(
        r.headers.get("set-cookie").is_none(),
        "field clients get no cookie"
    );
    let token = r.json["session"].as_str().unwrap();
    let header = segment(token, 0);
    let (set, jr) = jwks(&f).await;
    let kid = header["kid"].as_str().unwrap();
    assert_eq!(
        header,
        json!({"alg": "EdDSA", "typ": "cellbind-session+jwt", "kid": kid})
    );
    assert!(set.contains(kid), "kid {kid} is in the JWKS");
    assert_eq!(
        jr.headers["cache-control"].to_str().unwrap(),
        "public, max-age=60"
    );
    let claims = segment(token, 1);
    assert_eq!(
        keys_of(&claims),
        [
            "iss",
            "aud",
            "sub",
            "ctr",
            "cell",
            "gen",
            "iat",
            "nbf",
            "exp",
            "auth_time",
            "jti",
            "cli"
        ]
        .into_iter()
        .map(String::from)
        .collect()
    );
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["aud"], CELL);
    assert_eq!(claims["cell"], CELL);
    assert_eq!(claims["sub"], "c-40711.ana");
    assert_eq!(claims["ctr"], "c-40711");
    assert_eq!(claims["gen"], 3);
    assert_eq!(claims["cli"], "field");
    assert_eq!(claims["iat"], T0);
    assert_eq!(claims["nbf"], T0);
    assert_eq!(claims["auth_time"], T0);
    assert_eq!(claims["exp"].as_u64().unwrap() - T0, 30 * DAY);
    let jti = claims["jti"].as_str().unwrap();
    assert_eq!(jti.len(), 22);
    assert!(
        jti.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(r.json["session_id"], jti);
    assert_eq!(r.json["subject"], "c-40711.ana");
    assert_eq!(r.json["generation"], 3);
    assert_eq!(r.json["cell_id"], CELL);
    assert_eq!(r.json["endpoint"], ISSUER);
    assert_eq!(r.json["expires_at"], claims["exp"]);
    // The strict verifier accepts it with this cell's keys.
    let cell = CellId::new(CELL).unwrap();
    let v = protocol::token::verify::<SessionClaims>(
        token,
        &set,
        &Expectations {
            issuer: ISSUER,
            audience: &cell,
            max_lifetime_s: 30 * DAY,
            leeway_s: 60,
        },
        T0 + 10,
        8192,
    )
    .unwrap();
    assert_eq!(v.kid.as_str(), kid);
    // Two sign-ins never share a jti.
    let r2 = f
        .sign_in("c-40711", "ana", "correct horse battery", "field")
        .await;
    assert_ne!(r2.json["session_id"], r.json["session_id"]);
}

#[tokio::test]
async fn desk_sign_in_sets_the_host_cookie_and_current_reads_it_through_the_edge() {
    let f = Fixture::new().await;
    f.seed("c-1", "disp", "pw-desk-123", 1).await;
    let r = f.sign_in("c-1", "disp", "pw-desk-123", "desk").await;
    assert_eq!(r.status, StatusCode::CREATED);
    let token = r.json["session"].as_str().unwrap();
    let cookie = r.headers["set-cookie"].to_str().unwrap();
    assert_eq!(
        cookie,
        format!(
            "__Host-cellbind_session={token}; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            30 * DAY
        )
    );
    let c = format!("__Host-cellbind_session={token}");
    let cur = f
        .call(
            Method::GET,
            "/v1/sessions/current",
            &[("cookie", &c), ("x-cellbind-edge-key", EDGE)],
            Body::empty(),
        )
        .await;
    assert_eq!(cur.status, StatusCode::OK);
    assert_eq!(cur.json["cli"], "desk");
    assert_eq!(cur.json["jti"], r.json["session_id"]);
    // Straight to the auth-service (no edge key, or a wrong one), the cookie is not a
    // credential: the edge enforces the CSRF proof on cookie requests.
    for key in [None, Some("not-the-edge-token")] {
        let mut headers = vec![("cookie", c.as_str())];
        headers.extend(key.map(|k| ("x-cellbind-edge-key", k)));
        let cur = f
            .call(Method::GET, "/v1/sessions/current", &headers, Body::empty())
            .await;
        assert_eq!(cur.status, StatusCode::UNAUTHORIZED);
        assert_eq!(cur.json["error"], "SESSION_MISSING");
    }
}

#[tokio::test]
async fn same_answer_for_unknown_user_wrong_password_and_disabled_user() {
    let f = Fixture::new().await;
    f.seed("c-2", "bob", "right-password", 1).await;
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/users",
            json!({"contractor_id": "c-2", "login": "off", "role": "dispatcher", "password": "right-password", "status": "disabled"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let mut bodies = Vec::new();
    for (login, pw) in [
        ("nobody", "right-password"),
        ("bob", "wrong-password"),
        ("off", "right-password"),
    ] {
        let r = f.sign_in("c-2", login, pw, "field").await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{login}");
        bodies.push(r.text);
    }
    assert!(bodies.iter().all(|b| b == &bodies[0]), "{bodies:?}");
    assert!(bodies[0].contains("\"INVALID_CREDENTIALS\""));
    let m = f.metrics().await;
    assert!(
        m.contains(
            r#"cellbind_auth_signins_total{cell="cell-01",outcome="invalid_credentials"} 3"#
        ),
        "{m}"
    );
    // each failure cost exactly one argon2 verification, the unknown user included
    assert!(
        m.contains(r#"cellbind_auth_password_verifications_total{cell="cell-01"} 3"#),
        "{m}"
    );
}

#[tokio::test]
async fn users_are_listed_without_hashes_and_changed_one_field_at_a_time() {
    let f = Fixture::new().await;
    f.seed("c-3", "tech-1", "first-password", 1).await;
    let r = f
        .admin(Method::GET, "/admin/v1/contractors/c-3/users", Value::Null)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["users"][0]["subject"], "c-3.tech-1");
    assert_eq!(r.json["users"][0]["status"], "active");
    assert!(!r.text.contains("argon2"), "{}", r.text);
    // Disabled: sign-in refused; the same change again changes nothing.
    for changed in [true, false] {
        let r = f
            .admin(
                Method::PATCH,
                "/admin/v1/subjects/c-3.tech-1",
                json!({"status": "disabled"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json["changed"], changed);
    }
    let r = f.sign_in("c-3", "tech-1", "first-password", "field").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // A new password and active again: the old password is refused, the new one signs in.
    let r = f
        .admin(
            Method::PATCH,
            "/admin/v1/subjects/c-3.tech-1",
            json!({"status": "active", "password": "second-password"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        f.sign_in("c-3", "tech-1", "first-password", "field")
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        f.sign_in("c-3", "tech-1", "second-password", "field")
            .await
            .status,
        StatusCode::CREATED
    );
    // Unknown user: 404; an empty change or an unknown member: 400, nothing changed.
    let r = f
        .admin(
            Method::PATCH,
            "/admin/v1/subjects/c-3.nobody",
            json!({"status": "disabled"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    for body in [json!({}), json!({"status": "disabled", "admin": true})] {
        let r = f
            .admin(Method::PATCH, "/admin/v1/subjects/c-3.tech-1", body)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    }
    let r = f
        .admin(Method::GET, "/admin/v1/contractors/c-3/users", Value::Null)
        .await;
    assert_eq!(r.json["users"][0]["status"], "active");
    let r = f
        .admin(Method::GET, "/admin/v1/contractors/c-4/users", Value::Null)
        .await;
    assert_eq!(r.json["users"], json!([]));
}

#[tokio::test]
async fn ownership_decides_sign_in() {
    let f = Fixture::new().await;
    f.seed("c-10", "t", "pw-owned-1", 4).await;
    // handoff → 409 HANDOFF_IN_PROGRESS with Retry-After
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership/c-10",
            json!({"state": "handoff", "gen": 4}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = f.sign_in("c-10", "t", "pw-owned-1", "field").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.json["error"], "HANDOFF_IN_PROGRESS");
    assert_eq!(r.headers["retry-after"], "1");
    // no map yet: released names the successor without an endpoint
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership/c-10",
            json!({"state": "released", "gen": 4, "successor": "cell-03", "successor_gen": 5}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = f.sign_in("c-10", "t", "pw-owned-1", "field").await;
    assert_eq!(r.json["error"], "WRONG_CELL");
    assert_eq!(r.json["owner_cell"], "cell-03");
    // with a map: the successor's endpoint; unknown contractors resolved through the map
    let put = f
        .admin(
            Method::PUT,
            "/admin/v1/placement-map",
            serde_json::to_value(signed_map(1, &[("c-77", "cell-01")])).unwrap(),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{:?}", put.json);
    let r = f.sign_in("c-10", "t", "pw-owned-1", "field").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.json["owner_cell"], "cell-03");
    assert_eq!(r.json["owner_endpoint"], "https://127.0.0.3:8443");
    let r = f.sign_in("c-999", "t", "whatever-pw", "field").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.json["owner_cell"], "cell-02");
    assert_eq!(r.json["owner_endpoint"], "https://127.0.0.2:8443");
    // the map names this cell but there is no record: unknown
    let r = f.sign_in("c-77", "t", "whatever-pw", "field").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"], "UNKNOWN_CONTRACTOR");
    // refused transition: generation going down changes nothing
    let head = f.head().await;
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership/c-10",
            json!({"state": "active", "gen": 3}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json["error"], "INVALID_REQUEST");
    assert_eq!(f.head().await, head);
    let g = f
        .admin(Method::GET, "/admin/v1/ownership/c-10", Value::Null)
        .await;
    assert_eq!(g.json["state"], "released");
    // moved back at a higher generation: sign-in works at that generation
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership/c-10",
            json!({"state": "active", "gen": 6}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = f.sign_in("c-10", "t", "pw-owned-1", "field").await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.json["generation"], 6);
}

#[tokio::test]
async fn no_map_and_no_record_is_unknown_contractor() {
    let f = Fixture::new().await;
    let r = f.sign_in("c-5", "x", "pw-xxxxxx", "field").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json["error"], "UNKNOWN_CONTRACTOR");
}

#[tokio::test]
async fn throttles_answer_429_with_retry_after() {
    let f = Fixture::with_extra(
        "signin_account_ip_burst = 3\nsignin_account_ip_per_minute = 1\nsignin_ip_burst = 5\nsignin_ip_per_minute = 1",
    )
    .await;
    f.seed("c-3", "eve", "pw-throttle", 1).await;
    for _ in 0..3 {
        let r = f.sign_in("c-3", "eve", "wrong-guess", "field").await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    let r = f.sign_in("c-3", "eve", "pw-throttle", "field").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.json["error"], "RATE_LIMITED");
    let ra: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&ra), "{ra}");
    // another account from the same (edge-reported) IP: 5th attempt overall passes, 6th is throttled
    let ip = [
        ("content-type", "application/json"),
        ("x-cellbind-edge-key", EDGE),
        ("x-cellbind-client-ip", "203.0.113.9"),
    ];
    let body = |i: usize| {
        Body::from(json!({"contractor_id":"c-3","login":format!("other{i}"),"password":"pw-1234","client":"field"}).to_string())
    };
    let mut statuses = Vec::new();
    for i in 0..6 {
        statuses.push(
            f.call(Method::POST, "/v1/sessions", &ip, body(i))
                .await
                .status,
        );
    }
    assert_eq!(statuses[..5], [StatusCode::UNAUTHORIZED; 5]);
    assert_eq!(statuses[5], StatusCode::TOO_MANY_REQUESTS);
    // a different client IP is not affected
    let other = [
        ("content-type", "application/json"),
        ("x-cellbind-edge-key", EDGE),
        ("x-cellbind-client-ip", "203.0.113.10"),
    ];
    assert_eq!(
        f.call(Method::POST, "/v1/sessions", &other, body(9))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn sign_out_revokes_into_the_feed_and_clears_the_cookie() {
    let f = Fixture::new().await;
    f.seed("c-4", "t", "pw-signout", 1).await;
    let r = f.sign_in("c-4", "t", "pw-signout", "field").await;
    let token = r.json["session"].as_str().unwrap().to_owned();
    let jti = r.json["session_id"].as_str().unwrap().to_owned();
    let head = f.head().await;
    let d = f
        .with_session(Method::DELETE, "/v1/sessions/current", &token)
        .await;
    assert_eq!(d.status, StatusCode::NO_CONTENT);
    assert!(
        d.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let cur = f
        .with_session(Method::GET, "/v1/sessions/current", &token)
        .await;
    assert_eq!(cur.status, StatusCode::UNAUTHORIZED);
    assert_eq!(cur.json["error"], "SESSION_REVOKED");
    let delta = f.feed(head).await;
    let entries = &delta["body"]["entries"];
    assert_eq!(entries.as_array().unwrap().len(), 1, "{delta}");
    let change = &entries[0]["change"];
    assert_eq!(change["type"], "revocation");
    assert_eq!(change["kind"], "session");
    assert_eq!(change["jti"], jti);
    assert_eq!(change["by"], "self");
    assert_eq!(entries[0]["seq"], head + 1);
    assert_eq!(change["seq"], head + 1);
    // no session at all
    let none = f
        .call(Method::GET, "/v1/sessions/current", &[], Body::empty())
        .await;
    assert_eq!(none.json["error"], "SESSION_MISSING");
}

#[tokio::test]
async fn renew_keeps_auth_time_and_is_capped_at_ninety_days() {
    let f = Fixture::new().await;
    f.seed("c-6", "t", "pw-renew-1", 2).await;
    let mut token = f.sign_in("c-6", "t", "pw-renew-1", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut last_exp = 0;
    for step in 1..=3u64 {
        f.clock.advance(25 * DAY);
        let r = f
            .with_session(Method::POST, "/v1/sessions/renew", &token)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "step {step}: {:?}", r.json);
        token = r.json["session"].as_str().unwrap().to_owned();
        let c = segment(&token, 1);
        assert_eq!(c["auth_time"], T0, "auth_time kept");
        assert_eq!(c["iat"], T0 + step * 25 * DAY);
        let exp = c["exp"].as_u64().unwrap();
        let expect = (T0 + step * 25 * DAY + 30 * DAY).min(T0 + 90 * DAY);
        assert_eq!(exp, expect, "step {step}");
        last_exp = exp;
    }
    assert_eq!(last_exp, T0 + 90 * DAY);
    // past the absolute lifetime: no renewal
    f.clock.set(T0 + 90 * DAY - 1);
    let r = f
        .with_session(Method::POST, "/v1/sessions/renew", &token)
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let t2 = r.json["session"].as_str().unwrap().to_owned();
    assert_eq!(segment(&t2, 1)["exp"], T0 + 90 * DAY);
    f.clock.set(T0 + 90 * DAY + 61);
    let r = f
        .with_session(Method::POST, "/v1/sessions/renew", &t2)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json["error"], "SESSION_EXPIRED");
}

#[tokio::test]
async fn rotation_keeps_old_sessions_valid_and_revocation_removes_the_key() {
    let f = Fixture::new().await;
    f.seed("c-7", "t", "pw-rotate-1", 1).await;
    let old = f.sign_in("c-7", "t", "pw-rotate-1", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let old_kid = segment(&old, 0)["kid"].as_str().unwrap().to_owned();
    let keys = f.admin(Method::GET, "/admin/v1/keys", Value::Null).await;
    let next_kid = keys.json["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["status"] == "next")
        .unwrap()["kid"]
        .as_str()
        .unwrap()
        .to_owned();
    let (set, _) = jwks(&f).await;
    assert!(set.contains(&next_kid), "next is pre-published");

    let rot = f
        .admin(Method::POST, "/admin/v1/keys/rotate", Value::Null)
        .await;
    assert_eq!(rot.status, StatusCode::OK);
    assert_eq!(rot.json["current"], next_kid);
    assert_eq!(rot.json["retired"], json!([old_kid]));
    let new = f.sign_in("c-7", "t", "pw-rotate-1", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(segment(&new, 0)["kid"], next_kid);
    let (set, _) = jwks(&f).await;
    assert!(set.contains(&old_kid) && set.contains(&next_kid));
    assert_eq!(set.len(), 3);
    let keys = f.admin(Method::GET, "/admin/v1/keys", Value::Null).await;
    let status_of = |kid: &str| {
        keys.json["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid)
            .map(|k| k["status"].clone())
    };
    assert_eq!(status_of(&old_kid), Some(json!("retired")));
    let cur = f
        .with_session(Method::GET, "/v1/sessions/current", &old)
        .await;
    assert_eq!(cur.status, StatusCode::OK, "a retired key still verifies");

    let head = f.head().await;
    let rv = f
        .admin(
            Method::POST,
            &format!("/admin/v1/keys/{old_kid}/revoke"),
            json!({"reason": "compromised", "by": "ops"}),
        )
        .await;
    assert_eq!(rv.status, StatusCode::OK, "{:?}", rv.json);
    let (set, _) = jwks(&f).await;
    assert!(!set.contains(&old_kid), "revoked key left the JWKS");
    assert!(set.contains(&next_kid));
    let cur = f
        .with_session(Method::GET, "/v1/sessions/current", &old)
        .await;
    assert_eq!(cur.status, StatusCode::UNAUTHORIZED);
    assert_eq!(cur.json["error"], "SESSION_REVOKED");
    assert_eq!(
        f.with_session(Method::GET, "/v1/sessions/current", &new)
            .await
            .status,
        StatusCode::OK
    );
    let delta = f.feed(head).await;
    let types: Vec<&str> = delta["body"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["change"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["key_removed", "revocation"]);
    assert_eq!(delta["body"]["entries"][1]["change"]["kind"], "key");
    assert_eq!(delta["body"]["entries"][1]["change"]["kid"], old_kid);
    // revoking the current key promotes the next one: sign-in keeps working
    let rv = f
        .admin(
            Method::POST,
            &format!("/admin/v1/keys/{next_kid}/revoke"),
            json!({"reason": "drill", "by": "ops"}),
        )
        .await;
    assert_eq!(rv.status, StatusCode::OK);
    let again = f.sign_in("c-7", "t", "pw-rotate-1", "field").await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_ne!(
        segment(again.json["session"].as_str().unwrap(), 0)["kid"],
        next_kid
    );
}

#[tokio::test]
async fn scheduled_rotation_and_retired_key_expiry() {
    let f =
        Fixture::with_extra("key_rotation_interval_s = 86400\nsession_lifetime_s = 172800").await;
    let cur0 = f.state.current_signer().unwrap().kid().clone();
    assert!(
        cellbind_auth_service::tick_keys(&f.state)
            .await
            .unwrap()
            .is_none(),
        "not due yet"
    );
    f.clock.advance(86_400);
    let r = cellbind_auth_service::tick_keys(&f.state)
        .await
        .unwrap()
        .expect("rotated when due");
    assert_eq!(r.retired, vec![cur0.clone()]);
    let (set, _) = jwks(&f).await;
    assert!(set.contains(cur0.as_str()));
    // once every session it signed has expired (lifetime + leeway), the retired key leaves
    f.clock.advance(172_800 + 60);
    cellbind_auth_service::tick_keys(&f.state).await.unwrap();
    let (set, _) = jwks(&f).await;
    assert!(!set.contains(cur0.as_str()));
}

#[tokio::test]
async fn feed_delta_snapshot_long_poll_and_status() {
    let f = Fixture::new().await;
    let snap = f.feed(0).await;
    assert_eq!(snap["schema"], 1);
    assert_eq!(snap["cell"], CELL);
    assert_eq!(snap["body"]["kind"], "snapshot");
    assert_eq!(
        snap["body"]["snapshot"]["keys"].as_array().unwrap().len(),
        2
    );
    let head = snap["head"].as_u64().unwrap();
    assert_eq!(head, 2, "the first current and next key");
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership",
            json!({"records": {"c-1": {"state":"active","gen":1}, "c-2": {"state":"active","gen":1}}}),
        )
        .await;
    assert_eq!(r.json["seq"], head + 2);
    let delta = f.feed(head).await;
    assert_eq!(delta["body"]["kind"], "delta");
    assert_eq!(delta["body"]["entries"].as_array().unwrap().len(), 2);
    let parsed: protocol::feed::FeedResponse = serde_json::from_value(delta).unwrap();
    assert!(!parsed.epoch.is_empty(), "the feed names its epoch");
    let epoch = parsed.epoch.clone();
    parsed
        .check_applicable(&CellId::new(CELL).unwrap(), head, &epoch)
        .unwrap();
    // a long-poll at the head wakes up on the next change
    let head = head + 2;
    let state = f.state.clone();
    let poll = tokio::spawn(async move {
        let auth = format!("Bearer {}", feed_for("edge-a"));
        call_on(
            &state,
            Listener::Internal,
            None,
            Method::GET,
            &format!("/internal/v1/feed?since={head}&instance=edge-a&wait_ms=20000"),
            &[("authorization", &auth)],
            Body::empty(),
        )
        .await
    });
    // wait until the poller is registered, then change something
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s = f.admin(Method::GET, "/admin/v1/status", Value::Null).await;
        if s.json["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == "edge-a")
        {
            assert_eq!(
                s.json["instances"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|i| i["id"] == "edge-a")
                    .unwrap()["applied_seq"],
                head
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "poller never registered"
        );
        tokio::task::yield_now().await;
    }
    f.admin(
        Method::PUT,
        "/admin/v1/ownership/c-3",
        json!({"state":"active","gen":1}),
    )
    .await;
    let woke = tokio::time::timeout(std::time::Duration::from_secs(10), poll)
        .await
        .expect("long-poll woke before its 20 s wait")
        .unwrap();
    assert_eq!(woke.json["head"], head + 1);
    assert_eq!(
        woke.json["body"]["entries"][0]["change"]["contractor"],
        "c-3"
    );
    // status
    let s = f.admin(Method::GET, "/admin/v1/status", Value::Null).await;
    assert_eq!(s.json["cell_id"], CELL);
    assert_eq!(s.json["seq"], head + 1);
    assert_eq!(s.json["contractors"], 3);
    assert_eq!(s.json["kids"].as_array().unwrap().len(), 2);
    // a since beyond the head gets a snapshot
    assert_eq!(f.feed(head + 100).await["body"]["kind"], "snapshot");
    // feed token required
    let r = f
        .call_internal(
            Method::GET,
            "/internal/v1/feed?since=0&instance=x",
            &[],
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = f
        .call_internal(
            Method::GET,
            "/internal/v1/feed?since=0&instance=x",
            &[("authorization", &format!("Bearer {ADMIN}"))],
            Body::empty(),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "the admin token is not the feed token"
    );
}

#[tokio::test]
async fn placement_map_push_verifies_signature_and_version() {
    let f = Fixture::new().await;
    let r = f
        .call(Method::GET, "/v1/placement-map", &[], Body::empty())
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let v2 = signed_map(2, &[]);
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/placement-map",
            serde_json::to_value(&v2).unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let head = f.head().await;
    let got = f
        .call(Method::GET, "/v1/placement-map", &[], Body::empty())
        .await;
    assert_eq!(got.json, serde_json::to_value(&v2).unwrap());
    // older, same version, tampered, other key: all 400, nothing changes
    let mut tampered = serde_json::to_value(signed_map(3, &[])).unwrap();
    tampered["map"]["cells"][0]["endpoint"] = json!("https://evil.example:8443");
    let other_key =
        protocol::token::SigningKey::from_seed(protocol::Kid::new("x").unwrap(), &[7; 32]).unwrap();
    let mut foreign = signed_map(4, &[]).map;
    foreign.version = 4;
    let foreign = foreign.sign(&other_key).unwrap();
    for bad in [
        serde_json::to_value(signed_map(1, &[])).unwrap(),
        serde_json::to_value(&v2).unwrap(),
        tampered,
        serde_json::to_value(foreign).unwrap(),
    ] {
        let r = f.admin(Method::PUT, "/admin/v1/placement-map", bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.json["error"], "INVALID_REQUEST");
    }
    assert_eq!(f.head().await, head);
    let m = f.metrics().await;
    for line in [
        r#"cellbind_auth_map_refused_total{cell="cell-01",reason="bad_signature"} 2"#,
        r#"cellbind_auth_map_refused_total{cell="cell-01",reason="not_newer"} 1"#,
        r#"cellbind_auth_map_version{cell="cell-01"} 2"#,
    ] {
        assert!(m.lines().any(|l| l == line), "{line} in\n{m}");
    }
    let snap = f.feed(0).await;
    assert_eq!(snap["body"]["snapshot"]["map"]["map"]["version"], 2);
}

#[tokio::test]
async fn health_and_readiness() {
    let f = Fixture::new().await;
    assert_eq!(
        f.call(Method::GET, "/healthz", &[], Body::empty())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        f.call(Method::GET, "/readyz", &[], Body::empty())
            .await
            .status,
        StatusCode::OK
    );
    // with a control plane configured, not ready until a map is held
    let g = Fixture::with_extra("control_plane_url = \"https://127.0.0.1:1\"").await;
    let r = g.call(Method::GET, "/readyz", &[], Body::empty()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json["error"], "NOT_READY");
    g.admin(
        Method::PUT,
        "/admin/v1/placement-map",
        serde_json::to_value(signed_map(1, &[])).unwrap(),
    )
    .await;
    assert_eq!(
        g.call(Method::GET, "/readyz", &[], Body::empty())
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn bulk_import_of_precomputed_hashes_and_state_survives_reopen() {
    let f = Fixture::new().await;
    let rng = ring::rand::SystemRandom::new();
    let phc = cellbind_auth_service::passwords::hash(
        &protocol::Password::new("demo-pass-1").unwrap(),
        &rng,
    )
    .unwrap();
    let users: Vec<Value> = (0..7000)
        .map(|i| json!({"contractor_id": format!("c-{}", i / 3), "login": format!("tech{i}"), "role": "technician", "password_hash": phc}))
        .collect();
    let started = std::time::Instant::now();
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/users/import",
            json!({"users": users}),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["imported"], 7000);
    eprintln!("imported 7000 users in {took:?}");
    // weak hashes are refused, and nothing of that import is stored
    let weak = phc.replace("m=19456", "m=1024");
    let r = f
        .admin(Method::POST, "/admin/v1/users/import", json!({"users": [
            {"contractor_id": "c-9000", "login": "a", "role": "technician", "password": "fine-pass"},
            {"contractor_id": "c-9000", "login": "b", "role": "technician", "password_hash": weak}]}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    f.admin(
        Method::PUT,
        "/admin/v1/ownership/c-5",
        json!({"state":"active","gen":1}),
    )
    .await;
    let r = f.sign_in("c-5", "tech15", "demo-pass-1", "field").await;
    assert_eq!(r.status, StatusCode::CREATED);
    let s = f.admin(Method::GET, "/admin/v1/status", Value::Null).await;
    assert_eq!(s.json["users"], 7000);
    let kids = f.state.key_set().kids().cloned().collect::<Vec<_>>();
    let head = f.head().await;
    // reopen the same directory: same keys, ownership, head, users
    let again = f.reopen().await;
    assert_eq!(again.key_set().kids().cloned().collect::<Vec<_>>(), kids);
    assert_eq!(again.feed_head(), head);
    assert!(
        again
            .ownership_of(&protocol::ContractorId::new("c-5").unwrap())
            .is_some()
    );
    assert_eq!(again.user_count(), 7000);
}

#[tokio::test]
async fn admin_revocations_of_a_subject_reach_the_feed_and_the_session_check() {
    let f = Fixture::new().await;
    f.seed("c-8", "t", "pw-revoke-1", 1).await;
    let token = f.sign_in("c-8", "t", "pw-revoke-1", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    f.clock.advance(10);
    let head = f.head().await;
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/revocations",
            json!({"kind": "subject", "sub": "c-8.t", "before": T0 + 5, "reason": "lost phone", "by": "dispatch"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["seq"], head + 1);
    let cur = f
        .with_session(Method::GET, "/v1/sessions/current", &token)
        .await;
    assert_eq!(cur.json["error"], "SESSION_REVOKED");
    let again = f.sign_in("c-8", "t", "pw-revoke-1", "field").await;
    let fresh = again.json["session"].as_str().unwrap();
    assert_eq!(
        f.with_session(Method::GET, "/v1/sessions/current", fresh)
            .await
            .status,
        StatusCode::OK
    );
    let delta = f.feed(head).await;
    let c = &delta["body"]["entries"][0]["change"];
    assert_eq!(
        (c["type"].as_str(), c["kind"].as_str(), c["reason"].as_str()),
        (Some("revocation"), Some("subject"), Some("lost phone"))
    );
    let snap = f.feed(0).await;
    assert_eq!(
        snap["body"]["snapshot"]["revocations"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_session_from_another_key_set_is_invalid_here() {
    let a = Fixture::new().await;
    let b = Fixture::new().await;
    b.seed("c-9", "t", "pw-other-cell", 1).await;
    let foreign = b.sign_in("c-9", "t", "pw-other-cell", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    // Same issuer and cell id in the claims, but signed by keys this service never published.
    let r = a
        .with_session(Method::GET, "/v1/sessions/current", &foreign)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json["error"], "SESSION_INVALID");
    let r = a
        .with_session(Method::POST, "/v1/sessions/renew", &foreign)
        .await;
    assert_eq!(r.json["error"], "SESSION_INVALID");
    // A token with one altered claim fails the signature.
    let mut parts: Vec<String> = foreign.split('.').map(String::from).collect();
    let mut claims = segment(&foreign, 1);
    claims["gen"] = json!(99);
    use base64::Engine as _;
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    let r = b
        .with_session(Method::GET, "/v1/sessions/current", &parts.join("."))
        .await;
    assert_eq!(r.json["error"], "SESSION_INVALID");
}

#[tokio::test]
async fn revocations_are_dropped_once_nothing_they_match_can_be_valid() {
    let f = Fixture::with_extra("session_lifetime_s = 86400").await;
    f.seed("c-11", "t", "pw-prune-1", 1).await;
    let token = f.sign_in("c-11", "t", "pw-prune-1", "field").await.json["session"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        f.with_session(Method::DELETE, "/v1/sessions/current", &token)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    f.clock.advance(3600);
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/revocations",
            json!({"kind": "contractor", "ctr": "c-11", "before": T0 + 3600, "reason": "reset", "by": "ops"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let count = |v: &Value| {
        v["body"]["snapshot"]["revocations"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(
        cellbind_auth_service::prune_revocations(&f.state)
            .await
            .unwrap(),
        0,
        "still matching live sessions"
    );
    assert_eq!(count(&f.feed(0).await), 2);
    // the signed-out session expired at T0 + 1 day: its revocation goes after the leeway
    f.clock.set(T0 + 86_400 + 60);
    assert_eq!(
        cellbind_auth_service::prune_revocations(&f.state)
            .await
            .unwrap(),
        1
    );
    let snap = f.feed(0).await;
    assert_eq!(count(&snap), 1);
    assert_eq!(
        snap["body"]["snapshot"]["revocations"][0]["kind"],
        "contractor"
    );
    // the contractor revocation goes one lifetime after its "before"
    f.clock.set(T0 + 3600 + 86_400 + 60);
    assert_eq!(
        cellbind_auth_service::prune_revocations(&f.state)
            .await
            .unwrap(),
        1
    );
    assert_eq!(count(&f.feed(0).await), 0);
    // and it stays gone after a restart
    assert!(f.reopen().await.revocations().is_empty());
}

/// A method a route does not take is `405 INVALID_REQUEST`, as the edge answers it, with
/// axum's `Allow`.
#[tokio::test]
async fn a_wrong_method_is_405_with_the_typed_body() {
    let f = Fixture::new().await;
    let r = f
        .call(Method::DELETE, "/v1/sessions/renew", &[], Body::empty())
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.json["error"], "INVALID_REQUEST");
    let r = f.admin(Method::DELETE, "/admin/v1/status", json!({})).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.json["error"], "INVALID_REQUEST");
}
