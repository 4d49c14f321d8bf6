//! Device-bound sessions at the edge (`runtime::dpop`, docs/THREAT-MODEL.md D-rows): a bound
//! session is served only with a DPoP proof by its key, made for this request, with this
//! instance's fresh nonce, once; the sign-in and session routes pass the proven thumbprint to
//! the auth-service and nothing a client wrote; one TLS connection verifies a key's signature
//! once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::support::*;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::any;
use cellbind_cell_endpoint::testing::tls;
use cellbind_cell_endpoint::{Edge, Settings};
use protocol::dpop::{ProofBuilder, ProofClaims, SoftwareP256Key, token_hash};
use protocol::token::{Confirmation, SessionClaims};

const API: &str = "/api/routes/today";

/// A bound session of [`CTR`] for `key`.
fn bound(key: &SoftwareP256Key) -> (SessionClaims, String) {
    let mut c = claims(CTR, 1);
    c.cnf = Some(Confirmation {
        jkt: key.public().thumbprint(),
    });
    let t = mint(&c);
    (c, t)
}

/// A proof by `key` for `method path` at this cell, for `token` (or none), with `nonce`.
fn proof(
    key: &SoftwareP256Key,
    method: &str,
    path: &str,
    token: Option<&str>,
    nonce: Option<&str>,
    iat: u64,
) -> String {
    let c = ProofClaims {
        jti: format!("{}", rand::random::<u128>()),
        htm: method.into(),
        htu: format!("{ISSUER}{path}"),
        iat,
        ath: token.map(token_hash),
        nonce: nonce.map(str::to_owned),
    };
    let b = ProofBuilder::new(key.public());
    let input = b.signing_input(&c).unwrap();
    let sig = key.sign(input.as_bytes()).unwrap();
    ProofBuilder::finish(input, &sig).unwrap()
}

fn with_proof(method: &str, path: &str, token: Option<&str>, proof: Option<&str>) -> Request<Body> {
    let mut r = req(method, path, token);
    if let Some(p) = proof {
        r.headers_mut().insert("dpop", p.parse().unwrap());
    }
    r
}

/// The nonce a first, nonce-less proof is answered with (how a client learns it).
async fn learn_nonce(edge: &Edge, key: &SoftwareP256Key, token: &str) -> String {
    let p = proof(key, "GET", API, Some(token), None, NOW);
    let (status, headers, body) = send(edge, with_proof("GET", API, Some(token), Some(&p))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "DPOP_NONCE_REQUIRED");
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .contains(r#"error="use_dpop_nonce""#),
        "{headers:?}"
    );
    headers["dpop-nonce"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_bound_session_is_served_only_with_a_fresh_proof_by_its_key() {
    let (edge, seen, clock) = edge();
    let key = SoftwareP256Key::generate().unwrap();
    let (_, token) = bound(&key);

    // No proof: refused, with the challenge and a nonce.
    let (status, headers, body) = send(&edge, get(API, Some(&token))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("DPOP_PROOF_MISSING"))
    );
    assert!(headers.contains_key("dpop-nonce"));
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("DPoP ")
    );

    let nonce = learn_nonce(&edge, &key, &token).await;
    let good = proof(&key, "GET", API, Some(&token), Some(&nonce), NOW);
    let (status, headers, _) = send(&edge, with_proof("GET", API, Some(&token), Some(&good))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers.contains_key("dpop-nonce"),
        "a served proof gets the current nonce"
    );
    // The app sees the identity, never the session or the proof.
    let (_, app_headers) = seen.last();
    assert!(!app_headers.contains_key("dpop"));
    assert!(!app_headers.contains_key("authorization"));
    assert_eq!(app_headers["x-cellbind-contractor"], CTR);

    // The same proof again, a second later: replayed.
    clock.advance(1);
    let (status, _, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&good))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("DPOP_PROOF_REPLAYED"))
    );
    // A minute later its nonce is still accepted (its step and the next), and so its jti is
    // still held: replayed again.
    clock.advance(59);
    let (status, _, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&good))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("DPOP_PROOF_REPLAYED"))
    );
    clock.set(NOW + 1);

    // Another key's proof for this session.
    let thief = SoftwareP256Key::generate().unwrap();
    let p = proof(&thief, "GET", API, Some(&token), Some(&nonce), NOW);
    let (_, _, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&p))).await;
    assert_eq!(body["error"], "DPOP_KEY_MISMATCH");

    // A proof for another method, URL or session.
    for (m, path, t) in [
        ("POST", API, token.as_str()),
        ("GET", "/api/customers", token.as_str()),
        ("GET", API, "another-token"),
    ] {
        let p = proof(&key, m, path, Some(t), Some(&nonce), NOW);
        let (status, _, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&p))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"], "DPOP_PROOF_INVALID", "{m} {path}");
    }

    // Ten minutes later the nonce is stale; the answer carries the new one.
    clock.advance(600);
    let (_, _, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&good))).await;
    assert_eq!(
        body["error"], "DPOP_NONCE_STALE",
        "the captured proof, ten minutes on"
    );
    let p = proof(&key, "GET", API, Some(&token), Some(&nonce), NOW + 601);
    let (_, headers, body) = send(&edge, with_proof("GET", API, Some(&token), Some(&p))).await;
    assert_eq!(body["error"], "DPOP_NONCE_STALE");
    let fresh = headers["dpop-nonce"].to_str().unwrap().to_owned();
    assert_ne!(fresh, nonce);
    let p = proof(&key, "GET", API, Some(&token), Some(&fresh), NOW + 601);
    let (status, _, _) = send(&edge, with_proof("GET", API, Some(&token), Some(&p))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seen.count(), 2);
}

#[tokio::test]
async fn a_proof_captured_at_one_edge_instance_is_refused_at_another() {
    let (a, _, _) = edge();
    let mut s = settings();
    s.instance_id = "edge-2".into();
    let (b, seen_b, _) = edge_with(s, None);
    let key = SoftwareP256Key::generate().unwrap();
    let (_, token) = bound(&key);
    let nonce = learn_nonce(&a, &key, &token).await;
    let p = proof(&key, "GET", API, Some(&token), Some(&nonce), NOW);
    let (status, _, body) = send(&b, with_proof("GET", API, Some(&token), Some(&p))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "DPOP_NONCE_REQUIRED");
    assert_eq!(seen_b.count(), 0);
}

#[tokio::test]
async fn unbound_sessions_follow_the_binding_mode_of_their_kind() {
    // optional (the default): an unbound session is served, a proof beside it is ignored.
    let (edge, _, _) = edge();
    let (status, _, _) = send(&edge, get(API, Some(&session()))).await;
    assert_eq!(status, StatusCode::OK);
    // required: refused, so that the client signs in again with its key.
    let mut s = settings();
    s.serving.binding.field = runtime::dpop::BindingMode::Required;
    let (edge, seen, _) = edge_with(s, None);
    let (status, _, body) = send(&edge, get(API, Some(&session()))).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("SESSION_INVALID"))
    );
    assert_eq!(seen.count(), 0);
    // …while a bound one is served there.
    let key = SoftwareP256Key::generate().unwrap();
    let (_, token) = bound(&key);
    let nonce = learn_nonce(&edge, &key, &token).await;
    let p = proof(&key, "GET", API, Some(&token), Some(&nonce), NOW);
    let (status, _, _) = send(&edge, with_proof("GET", API, Some(&token), Some(&p))).await;
    assert_eq!(status, StatusCode::OK);
}

/// What the recording auth-service was sent: each request's path and headers.
type AuthSeen = Arc<Mutex<Vec<(String, HeaderMap)>>>;

/// An auth-service that records what it was sent and answers 200.
fn recording_auth() -> (Router, AuthSeen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = Router::new().fallback(any(move |req: Request<Body>| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push((req.uri().path().to_owned(), req.headers().clone()));
            (StatusCode::OK, axum::Json(serde_json::json!({"ok": true})))
        }
    }));
    (app, seen)
}

#[tokio::test]
async fn session_routes_need_the_proof_and_pass_only_the_proven_thumbprint() {
    let (auth, auth_seen) = recording_auth();
    let (edge, _, _) = edge_with(settings(), Some(auth));
    let key = SoftwareP256Key::generate().unwrap();
    let jkt = key.public().thumbprint();
    let (_, token) = bound(&key);
    let nonce = learn_nonce(&edge, &key, &token).await;

    // renew, transfer and sign-out of a bound session without a proof never reach the
    // auth-service.
    for (m, path) in [
        ("POST", "/v1/sessions/renew"),
        ("POST", "/v1/sessions/transfer"),
        ("DELETE", "/v1/sessions/current"),
    ] {
        let (status, _, body) = send(&edge, req(m, path, Some(&token))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{m} {path}");
        assert_eq!(body["error"], "DPOP_PROOF_MISSING", "{m} {path}");
    }
    assert!(auth_seen.lock().unwrap().is_empty());

    // With the proof: forwarded with the thumbprint the edge verified.
    let p = proof(
        &key,
        "POST",
        "/v1/sessions/renew",
        Some(&token),
        Some(&nonce),
        NOW,
    );
    let mut r = with_proof("POST", "/v1/sessions/renew", Some(&token), Some(&p));
    // A thumbprint a client writes itself never travels.
    r.headers_mut()
        .insert("x-cellbind-dpop-jkt", "forged".parse().unwrap());
    let (status, _, _) = send(&edge, r).await;
    assert_eq!(status, StatusCode::OK);
    let (path, h) = auth_seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(path, "/v1/sessions/renew");
    assert_eq!(h["x-cellbind-dpop-jkt"], jkt.as_str());
    assert!(!h.contains_key("dpop"));

    // Sign-in: a proof without a session; its key's thumbprint travels.
    let p = proof(&key, "POST", "/v1/sessions", None, Some(&nonce), NOW);
    let mut r = with_proof("POST", "/v1/sessions", None, Some(&p));
    *r.body_mut() = Body::from("{}");
    let (status, _, _) = send(&edge, r).await;
    assert_eq!(status, StatusCode::OK);
    let (_, h) = auth_seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(h["x-cellbind-dpop-jkt"], jkt.as_str());
    // A sign-in with a bad proof is refused at the edge.
    let (status, _, body) = send(
        &edge,
        with_proof("POST", "/v1/sessions", None, Some("x.y.z")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "DPOP_PROOF_INVALID");
    // Without a proof a sign-in goes on unbound (the auth-service applies the mode).
    let (status, _, _) = send(&edge, req("POST", "/v1/sessions", None)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, h) = auth_seen.lock().unwrap().last().cloned().unwrap();
    assert!(!h.contains_key("x-cellbind-dpop-jkt"));
}

/// Over a real TLS connection, a key's signature is verified once: later proofs by the same
/// key on the same connection are checked for everything but the signature; a new connection
/// verifies again; with `dpop_verify_per_request` every proof is verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_verifies_a_keys_signature_once() {
    for per_request in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let pki = make_pki(dir.path(), "dpop");
        let mut s: Settings = settings();
        s.serving.dpop_verify_per_request = per_request;
        let (edge, _, _) = edge_with(s, None);
        let config = tls::load(&pki.cert, &pki.key).await.unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let handle = axum_server::Handle::new();
        let server = tokio::spawn(tls::serve_listener(
            listener,
            config,
            handle.clone(),
            edge.connection_gate(),
            cellbind_cell_endpoint::app(edge.clone()),
        ));
        let key = SoftwareP256Key::generate().unwrap();
        let (_, token) = bound(&key);
        let http = client(&pki.ca);
        let mut nonce: Option<String> = None;
        let mut served = 0;
        for _ in 0..12 {
            let p = proof(&key, "GET", API, Some(&token), nonce.as_deref(), NOW);
            let r = http
                .get(format!("{url}{API}"))
                .bearer_auth(&token)
                .header("dpop", p)
                .send()
                .await
                .unwrap();
            if let Some(n) = r.headers().get("dpop-nonce") {
                nonce = Some(n.to_str().unwrap().to_owned());
            }
            if r.status() == StatusCode::OK {
                served += 1;
            }
        }
        assert_eq!(
            served, 11,
            "the first proof learns the nonce, the rest are served"
        );
        let (verified, remembered) = edge.metrics().dpop_proof_counts();
        if per_request {
            assert_eq!((verified, remembered), (11, 0));
        } else {
            assert_eq!((verified, remembered), (1, 10));
        }
        handle.graceful_shutdown(Some(Duration::from_secs(1)));
        let _ = server.await;
    }
}
