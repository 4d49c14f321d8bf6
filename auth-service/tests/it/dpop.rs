//! Device-bound sessions (`DPoP`, RFC 9449) at the auth-service: sign-in binds per the client
//! kind's mode (`[binding]`), a bound session is accepted on every session route only with a
//! valid proof by its key (straight to the service: its own verifier, nonces and replay set;
//! through the edge: the thumbprint the authenticated edge asserts), renewal keeps the key,
//! and the refusals carry the RFC 9449 challenge. Transfer and rebind of a bound session are
//! in `transfer.rs`.

use std::sync::Arc;

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use cellbind_auth_service::config::BindingMode;
use protocol::http::{X_DPOP_JKT, X_EDGE_KEY};
use serde_json::json;

const CTR: &str = "c-40711";
const PW: &str = "correct horse battery";
const SIGN_IN: &str = "/v1/sessions";
const CURRENT: &str = "/v1/sessions/current";
const RENEW: &str = "/v1/sessions/renew";
const TRANSFER: &str = "/v1/sessions/transfer";

fn sign_in_body(client: &str) -> Body {
    Body::from(
        json!({"contractor_id": CTR, "login": "ana", "password": PW, "client": client}).to_string(),
    )
}

/// A sign-in as a field client, with `headers` (a `DPoP` proof, the edge's headers).
async fn sign_in(f: &Fixture, headers: &[(&str, &str)]) -> Resp {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    f.call(Method::POST, SIGN_IN, &all, sign_in_body("field"))
        .await
}

/// A sign-in with a proof of `device`, after learning the nonce from the challenge of a first
/// attempt without one (as a client does). Answers the session.
async fn bound_sign_in(f: &Fixture, device: &Device) -> String {
    let r = sign_in(f, &[("dpop", &device.proof("POST", SIGN_IN, None, None))]).await;
    assert_dpop_refused(&r, "DPOP_NONCE_REQUIRED", Some("use_dpop_nonce"));
    let nonce = dpop_nonce(&r);
    let r = sign_in(
        f,
        &[("dpop", &device.proof("POST", SIGN_IN, Some(&nonce), None))],
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    r.json["session"].as_str().unwrap().to_owned()
}

/// `method path` presenting `token`, with `extra` headers.
async fn with_session(
    f: &Fixture,
    method: Method,
    path: &str,
    token: &str,
    extra: &[(&str, &str)],
) -> Resp {
    let auth = format!("Bearer {token}");
    let mut headers = vec![("authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    f.call(method, path, &headers, Body::empty()).await
}

/// The headers of a request an authenticated edge forwards after it verified a proof by the
/// key of thumbprint `jkt`.
fn via_edge(jkt: &str) -> [(&str, &str); 2] {
    [(X_EDGE_KEY, EDGE), (X_DPOP_JKT, jkt)]
}

/// The current nonce of the fixture's service (any answer to a direct proof carries one).
async fn nonce(f: &Fixture, device: &Device) -> String {
    let r = f
        .call(
            Method::GET,
            "/healthz",
            &[("dpop", &device.proof("GET", "/healthz", None, None))],
            Body::empty(),
        )
        .await;
    dpop_nonce(&r)
}

#[tokio::test]
async fn a_sign_in_with_a_proof_is_bound_to_its_key_and_the_session_then_needs_it() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", PW, 3).await;
    let device = Device::new(ISSUER, &f.clock);
    let token = bound_sign_in(&f, &device).await;
    let claims = segment(&token, 1);
    assert_eq!(claims["cnf"], json!({"jkt": device.jkt()}), "{claims}");
    // The nonce refusal took no password check and is counted apart.
    let metrics = f.metrics().await;
    assert!(
        metrics.contains(r#"cellbind_auth_signins_total{cell="cell-01",outcome="dpop_refused"} 1"#),
        "{metrics}"
    );
    let checked = metrics
        .lines()
        .find(|l| l.starts_with("cellbind_auth_password_verifications_total"))
        .unwrap();
    assert!(checked.ends_with(" 1"), "{checked}");

    // The session is accepted with a proof by its key (`DPoP` scheme or `Bearer`), and the
    // answer offers the next nonce.
    let n = nonce(&f, &device).await;
    let proof = device.proof("GET", CURRENT, Some(&n), Some(&token));
    let auth = format!("DPoP {token}");
    let r = f
        .call(
            Method::GET,
            CURRENT,
            &[("authorization", &auth), ("dpop", &proof)],
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["cnf"]["jkt"], device.jkt());
    assert!(!dpop_nonce(&r).is_empty());
    // Not without one, nor with a proof for another session (its `ath`) or another URL.
    let r = with_session(&f, Method::GET, CURRENT, &token, &[]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    let other = device.proof("GET", CURRENT, Some(&n), Some("another.session.token"));
    let r = with_session(&f, Method::GET, CURRENT, &token, &[("dpop", &other)]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_INVALID", Some("invalid_dpop_proof"));
    let elsewhere = device.proof("GET", RENEW, Some(&n), Some(&token));
    let r = with_session(&f, Method::GET, CURRENT, &token, &[("dpop", &elsewhere)]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_INVALID", Some("invalid_dpop_proof"));
    // Two proofs in one request are refused.
    let a = device.proof("GET", CURRENT, Some(&n), Some(&token));
    let b = device.proof("GET", CURRENT, Some(&n), Some(&token));
    let r = with_session(
        &f,
        Method::GET,
        CURRENT,
        &token,
        &[("dpop", &a), ("dpop", &b)],
    )
    .await;
    assert_dpop_refused(&r, "DPOP_PROOF_INVALID", Some("invalid_dpop_proof"));
}

#[tokio::test]
async fn optional_binding_without_a_proof_mints_an_unbound_session_that_works_without_one() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", PW, 3).await;
    let r = sign_in(&f, &[]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(r.headers.get("dpop-nonce").is_none(), "no proof, no nonce");
    let token = r.json["session"].as_str().unwrap().to_owned();
    assert!(segment(&token, 1).get("cnf").is_none());
    let r = with_session(&f, Method::GET, CURRENT, &token, &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let r = with_session(&f, Method::POST, RENEW, &token, &[]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let renewed = r.json["session"].as_str().unwrap().to_owned();
    assert!(segment(&renewed, 1).get("cnf").is_none(), "renewed unbound");
    let r = with_session(&f, Method::DELETE, CURRENT, &renewed, &[]).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.json);
}

#[tokio::test]
async fn required_binding_refuses_a_sign_in_without_a_proof_and_off_ignores_one() {
    let f = Fixture::with_extra("[binding]\nfield = \"required\"").await;
    assert_eq!(f.config.binding.field, BindingMode::Required);
    f.seed(CTR, "ana", PW, 3).await;
    let r = sign_in(&f, &[]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    // A desk sign-in is not bound (`desk = "off"` by default) and needs no proof.
    let r = f
        .call(
            Method::POST,
            SIGN_IN,
            &[("content-type", "application/json")],
            sign_in_body("desk"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(
        segment(r.json["session"].as_str().unwrap(), 1)
            .get("cnf")
            .is_none()
    );
    // With a proof, bound.
    let device = Device::new(ISSUER, &f.clock);
    let token = bound_sign_in(&f, &device).await;
    assert_eq!(segment(&token, 1)["cnf"]["jkt"], device.jkt());

    // `off`: a proof (even a bad one) is ignored, the session is not bound.
    let off = Fixture::with_extra("[binding]\nfield = \"off\"").await;
    off.seed(CTR, "ana", PW, 3).await;
    let r = sign_in(&off, &[("dpop", "not-a-proof")]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(
        segment(r.json["session"].as_str().unwrap(), 1)
            .get("cnf")
            .is_none()
    );
    let device = Device::new(ISSUER, &off.clock);
    let n = nonce(&off, &device).await;
    let r = sign_in(
        &off,
        &[("dpop", &device.proof("POST", SIGN_IN, Some(&n), None))],
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(
        segment(r.json["session"].as_str().unwrap(), 1)
            .get("cnf")
            .is_none()
    );
}

#[tokio::test]
async fn a_bound_session_is_refused_on_every_route_without_a_fresh_proof_by_its_key() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", PW, 3).await;
    let device = Device::new(ISSUER, &f.clock);
    let thief = Device::new(ISSUER, &f.clock);
    let token = bound_sign_in(&f, &device).await;
    for (method, path) in [
        (Method::GET, CURRENT),
        (Method::POST, RENEW),
        (Method::POST, TRANSFER),
        (Method::DELETE, CURRENT),
    ] {
        let m = method.as_str();
        // No proof: the challenge carries the nonce to use.
        let r = with_session(&f, method.clone(), path, &token, &[]).await;
        assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
        let n = dpop_nonce(&r);
        // Another key's proof (a stolen session on another phone).
        let stolen = thief.proof(m, path, Some(&n), Some(&token));
        let r = with_session(&f, method.clone(), path, &token, &[("dpop", &stolen)]).await;
        assert_dpop_refused(&r, "DPOP_KEY_MISMATCH", Some("invalid_token"));
        // A nonce of a step long past.
        f.clock.advance(180);
        let late = device.proof(m, path, Some(&n), Some(&token));
        let r = with_session(&f, method.clone(), path, &token, &[("dpop", &late)]).await;
        assert_dpop_refused(&r, "DPOP_NONCE_STALE", Some("use_dpop_nonce"));
        let fresh = dpop_nonce(&r);
        assert_ne!(fresh, n, "a new nonce");
        if method == Method::DELETE {
            // Signed out with a proof by its key; then the session is gone.
            let proof = device.proof(m, path, Some(&fresh), Some(&token));
            let r = with_session(&f, method.clone(), path, &token, &[("dpop", &proof)]).await;
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.json);
            let r = with_session(&f, method.clone(), path, &token, &[("dpop", &proof)]).await;
            assert_eq!(r.json["error"], "SESSION_REVOKED", "{:?}", r.json);
            continue;
        }
        // Accepted once with a fresh proof by its key (a transfer then fails for its own
        // reason: nothing was released) ...
        let proof = device.proof(m, path, Some(&fresh), Some(&token));
        let r = with_session(&f, method.clone(), path, &token, &[("dpop", &proof)]).await;
        match path {
            TRANSFER => assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.json),
            RENEW => {
                assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
                // The renewed session is bound to the same key.
                let renewed = r.json["session"].as_str().unwrap();
                assert_eq!(segment(renewed, 1)["cnf"]["jkt"], device.jkt());
                let r = with_session(&f, Method::GET, CURRENT, renewed, &[]).await;
                assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
            }
            _ => assert_eq!(r.status, StatusCode::OK, "{:?}", r.json),
        }
        assert!(!dpop_nonce(&r).is_empty(), "{:?}", r.headers);
        // ... and never again.
        let r = with_session(&f, method.clone(), path, &token, &[("dpop", &proof)]).await;
        assert_dpop_refused(&r, "DPOP_PROOF_REPLAYED", Some("invalid_dpop_proof"));
    }
}

#[tokio::test]
async fn through_the_edge_the_asserted_key_is_trusted_and_without_the_edge_key_ignored() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", PW, 3).await;
    let device = Device::new(ISSUER, &f.clock);
    let jkt = device.jkt();
    let other = Device::new(ISSUER, &f.clock).jkt();
    // Through the edge (which verified the proof): bound, and no nonce of ours offered.
    let r = sign_in(&f, &[(X_EDGE_KEY, EDGE), (X_DPOP_JKT, &jkt)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(r.headers.get("dpop-nonce").is_none());
    let token = r.json["session"].as_str().unwrap().to_owned();
    assert_eq!(segment(&token, 1)["cnf"]["jkt"], jkt);
    // The same header straight to the service (no edge key, or a wrong one): ignored.
    for edge_key in [None, Some("not-the-edge-token")] {
        let mut headers = vec![(X_DPOP_JKT, jkt.as_str())];
        headers.extend(edge_key.map(|k| (X_EDGE_KEY, k)));
        let r = sign_in(&f, &headers).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
        assert!(
            segment(r.json["session"].as_str().unwrap(), 1)
                .get("cnf")
                .is_none()
        );
        let r = with_session(&f, Method::GET, CURRENT, &token, &headers).await;
        assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    }
    // The bound session through the edge: with its key's thumbprint accepted; another key's
    // or none refused, without a challenge of ours (the edge's nonces are its own).
    let r = with_session(&f, Method::GET, CURRENT, &token, &via_edge(&jkt)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let r = with_session(&f, Method::GET, CURRENT, &token, &via_edge(&other)).await;
    assert_dpop_refused(&r, "DPOP_KEY_MISMATCH", None);
    let r = with_session(&f, Method::POST, RENEW, &token, &[(X_EDGE_KEY, EDGE)]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", None);
    // A proof sent through the edge is the edge's to verify: its `DPoP` header alone proves
    // nothing here.
    let n = nonce(&f, &device).await;
    let proof = device.proof("POST", RENEW, Some(&n), Some(&token));
    let r = with_session(
        &f,
        Method::POST,
        RENEW,
        &token,
        &[(X_EDGE_KEY, EDGE), ("dpop", &proof)],
    )
    .await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", None);
    let r = with_session(&f, Method::POST, RENEW, &token, &via_edge(&jkt)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_eq!(
        segment(r.json["session"].as_str().unwrap(), 1)["cnf"]["jkt"],
        jkt
    );
    // An unreadable thumbprint from the edge is the edge's fault, not the client's.
    let r = with_session(
        &f,
        Method::GET,
        CURRENT,
        &token,
        &via_edge("not a thumbprint"),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{:?}", r.json);
}

#[tokio::test]
async fn an_unbound_session_renews_unbound_and_is_refused_once_its_kind_requires_binding() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", PW, 3).await;
    let r = sign_in(&f, &[]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let unbound = r.json["session"].as_str().unwrap().to_owned();
    // Renewal keeps `cnf`: a proof with an unbound session binds nothing.
    let device = Device::new(ISSUER, &f.clock);
    let n = nonce(&f, &device).await;
    let proof = device.proof("POST", RENEW, Some(&n), Some(&unbound));
    let r = with_session(&f, Method::POST, RENEW, &unbound, &[("dpop", &proof)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert!(
        segment(r.json["session"].as_str().unwrap(), 1)
            .get("cnf")
            .is_none()
    );

    // The cell now requires binding of field sessions (the same store, a new configuration):
    // an unbound field session is refused on every session route, as the edge refuses it, so
    // the client signs in again with a proof; a bound one and a desk one are served.
    let bound = bound_sign_in(&f, &device).await;
    let r = f
        .call(
            Method::POST,
            SIGN_IN,
            &[("content-type", "application/json")],
            sign_in_body("desk"),
        )
        .await;
    let desk = r.json["session"].as_str().unwrap().to_owned();
    let mut config = f.config.clone();
    config.binding.field = BindingMode::Required;
    let strict = cellbind_auth_service::open_with_clock(config, Arc::new(f.clock.clone()))
        .await
        .unwrap();
    let auth = format!("Bearer {unbound}");
    for (method, path) in [
        (Method::GET, CURRENT),
        (Method::POST, RENEW),
        (Method::POST, TRANSFER),
        (Method::DELETE, CURRENT),
    ] {
        let r = call(
            &strict,
            method,
            path,
            &[("authorization", &auth)],
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
        assert_eq!(r.json["error"], "SESSION_INVALID", "{:?}", r.json);
        assert!(r.json["message"].as_str().unwrap().contains("DPoP"));
    }
    let auth = format!("Bearer {desk}");
    let r = call(
        &strict,
        Method::GET,
        CURRENT,
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let auth = format!("Bearer {bound}");
    let r = call(
        &strict,
        Method::GET,
        CURRENT,
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    let proof = device.proof("GET", CURRENT, Some(&dpop_nonce(&r)), Some(&bound));
    let r = call(
        &strict,
        Method::GET,
        CURRENT,
        &[("authorization", &auth), ("dpop", &proof)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}

#[tokio::test]
async fn over_tls_a_device_learns_the_nonce_from_the_challenge_and_stays_bound() {
    let public = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let issuer = format!("https://{}", public.local_addr().unwrap());
    let f = Fixture::with_issuer(&issuer, "").await;
    f.seed(CTR, "ana", PW, 3).await;
    let served = Served::start(&f.state, public, &f.tls.ca_pem).await;
    let client = cellbind_auth_service::client_trusting(f.tls.ca_pem.as_bytes()).unwrap();
    let device = Device::new(&issuer, &f.clock);
    let body = json!({"contractor_id": CTR, "login": "ana", "password": PW, "client": "field"});
    let post = |proof: String| {
        client
            .post(format!("{issuer}{SIGN_IN}"))
            .header("content-type", "application/json")
            .header("dpop", proof)
            .body(body.to_string())
            .send()
    };
    let r = post(device.proof("POST", SIGN_IN, None, None))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let www = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(www.contains(r#"error="use_dpop_nonce""#), "{www}");
    let n = r.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    let error: serde_json::Value = r.json().await.unwrap();
    assert_eq!(error["error"], "DPOP_NONCE_REQUIRED");
    let r = post(device.proof("POST", SIGN_IN, Some(&n), None))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let n = r.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    let answer: serde_json::Value = r.json().await.unwrap();
    let token = answer["session"].as_str().unwrap().to_owned();
    assert_eq!(segment(&token, 1)["cnf"]["jkt"], device.jkt());
    let r = client
        .get(format!("{issuer}{CURRENT}"))
        .header("authorization", format!("DPoP {token}"))
        .header("dpop", device.proof("GET", CURRENT, Some(&n), Some(&token)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = client
        .get(format!("{issuer}{CURRENT}"))
        .header("authorization", format!("DPoP {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().contains_key("dpop-nonce"));
    served.stop().await;
}
