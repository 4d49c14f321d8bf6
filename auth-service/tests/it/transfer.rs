//! Session transfer and rebind between two (and three) in-process auth-services, the
//! contractor export/import of a migration, and the ticket attack table: replayed, expired,
//! forged, other-audience, wrong-generation, session-as-ticket and ticket-as-session
//! attempts are each refused with a typed error. The source cell is served over TLS on a
//! port of its own (its issuer and map endpoint), because the target asks it about every
//! ticket before it rebinds (ATTACKS A38).

use std::sync::Arc;

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use cellbind_auth_service::{AppState, Config};
use protocol::jwks::KeySet;
use protocol::token::{SigningKey, TicketClaims};
use protocol::{CellId, Kid, SessionId};
use serde_json::{Value, json};

const CTR: &str = "c-77";
const PW: &str = "correct horse battery";

/// Another cell sharing the fixture's clock, CA and tokens; called again for the same `n`, the
/// same cell restarted (its configuration, and so its store, is kept beside the fixture).
async fn peer(f: &Fixture, n: u8) -> AppState {
    let dir = f.dir.path().join(format!("cell-0{n}"));
    let saved = f.dir.path().join(format!("cell-0{n}.toml"));
    let toml = match std::fs::read_to_string(&saved) {
        Ok(toml) => toml,
        Err(_) => {
            std::fs::create_dir_all(&dir).unwrap();
            // A control plane URL gives the cell its HTTPS client for peer cells (never
            // polled here: these tests start no background tasks).
            let extra = "control_plane_url = \"https://127.0.0.1:9\"";
            let toml = config_toml(f.dir.path(), &f.tls, "127.0.0.1:0", "127.0.0.1:0", extra)
                .replace(CELL, &format!("cell-0{n}"))
                .replace(ISSUER, &format!("https://127.0.0.{n}:8443"))
                .replace(
                    &f.dir.path().join("data").display().to_string(),
                    &dir.display().to_string(),
                );
            std::fs::write(&saved, &toml).unwrap();
            toml
        }
    };
    let config = Config::from_toml(&toml).unwrap();
    cellbind_auth_service::open_with_clock(config, Arc::new(f.clock.clone()))
        .await
        .unwrap()
}

async fn admin(state: &AppState, method: Method, path: &str, body: Value) -> Resp {
    let auth = format!("Bearer {ADMIN}");
    let body = if body.is_null() {
        Body::empty()
    } else {
        Body::from(body.to_string())
    };
    call_on(
        state,
        Listener::Internal,
        None,
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body,
    )
    .await
}

/// The source cell (cell-01, the fixture) served over TLS, its issuer and map endpoint the
/// address it is served at.
async fn source() -> (Fixture, Served) {
    let public = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let issuer = format!("https://{}", public.local_addr().unwrap());
    let f = Fixture::with_issuer(&issuer, "").await;
    let served = Served::start(&f.state, public, &f.tls.ca_pem).await;
    (f, served)
}

/// The source's endpoint (its issuer).
fn source_endpoint(f: &Fixture) -> String {
    f.config.issuer.to_string()
}

/// Serves the source again on the port it was served at before.
async fn serve_again(f: &Fixture) -> Served {
    let addr = source_endpoint(f)
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    let public = std::net::TcpListener::bind(addr.as_str()).unwrap();
    Served::start(&f.state, public, &f.tls.ca_pem).await
}

/// The map every cell of these tests holds: cell-01 at the source's endpoint.
async fn put_map(state: &AppState, f: &Fixture) {
    let endpoint = source_endpoint(f);
    let map = signed_map_at(1, &[], &[("cell-01", endpoint.trim_end_matches('/'))]);
    let r = admin(
        state,
        Method::PUT,
        "/admin/v1/placement-map",
        serde_json::to_value(map).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}

/// Gives `target` the source's keys as its peer cache would hold them.
async fn seed_source_keys(target: &AppState, f: &Fixture) {
    target.seed_peer_keys(
        CellId::new(CELL).unwrap(),
        source_endpoint(f).trim_end_matches('/').parse().unwrap(),
        jwks_of(&f.state).await,
    );
}

async fn own(state: &AppState, record: Value) {
    let r = admin(
        state,
        Method::PUT,
        &format!("/admin/v1/ownership/{CTR}"),
        record,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}

async fn jwks_of(state: &AppState) -> KeySet {
    let r = call(
        state,
        Method::GET,
        "/.well-known/jwks.json",
        &[],
        Body::empty(),
    )
    .await;
    KeySet::from_json(r.text.as_bytes()).unwrap()
}

async fn transfer(state: &AppState, session: &str) -> Resp {
    let auth = format!("Bearer {session}");
    call(
        state,
        Method::POST,
        "/v1/sessions/transfer",
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await
}

async fn rebind(state: &AppState, ticket: &str) -> Resp {
    call(
        state,
        Method::POST,
        "/v1/sessions/rebind",
        &[("content-type", "application/json")],
        Body::from(json!({ "ticket": ticket }).to_string()),
    )
    .await
}

/// The source cell's current signing key (to mint tickets by hand).
fn source_key(f: &Fixture) -> std::sync::Arc<SigningKey> {
    f.state.current_signer().unwrap()
}

fn assert_refused(r: &Resp, reason: &str) {
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.json);
    assert_eq!(r.json["error"], "FORBIDDEN", "{:?}", r.json);
    let msg = r.json["message"].as_str().unwrap();
    assert!(msg.starts_with(reason), "{msg:?} is not {reason}");
}

/// Source cell-01 released `CTR` at gen 1 to cell-02 at gen 2; cell-02 holds the copied
/// credentials and is active at gen 2. Answers (target, a source session).
async fn migrated(f: &Fixture) -> (AppState, String) {
    migrated_as(f, None).await
}

/// [`migrated`], the source session signed in from `device` (bound to its key) when given.
async fn migrated_as(f: &Fixture, device: Option<&Device>) -> (AppState, String) {
    f.seed(CTR, "ana", PW, 1).await;
    put_map(&f.state, f).await;
    let r = match device {
        None => f.sign_in(CTR, "ana", PW, "field").await,
        Some(d) => {
            let body = json!({"contractor_id": CTR, "login": "ana", "password": PW}).to_string();
            let sign_in = |proof: String| {
                let body = body.clone();
                async move {
                    f.call(
                        Method::POST,
                        "/v1/sessions",
                        &[("content-type", "application/json"), ("dpop", &proof)],
                        Body::from(body),
                    )
                    .await
                }
            };
            let r = sign_in(d.proof("POST", "/v1/sessions", None, None)).await;
            assert_dpop_refused(&r, "DPOP_NONCE_REQUIRED", Some("use_dpop_nonce"));
            let nonce = dpop_nonce(&r);
            sign_in(d.proof("POST", "/v1/sessions", Some(&nonce), None)).await
        }
    };
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let session = r.json["session"].as_str().unwrap().to_owned();

    let target = peer(f, 2).await;
    put_map(&target, f).await;
    // The credentials travel with the contractor (hashes only), and so do its revocations.
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/revocations",
            json!({"kind": "subject", "sub": format!("{CTR}.bo"), "before": T0 - 10,
                   "reason": "lost phone", "by": "ops"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let export = f
        .admin(
            Method::GET,
            &format!("/admin/v1/contractors/{CTR}/export"),
            Value::Null,
        )
        .await;
    assert_eq!(export.status, StatusCode::OK, "{:?}", export.json);
    assert!(!export.text.contains(PW));
    assert_eq!(export.json["users"].as_array().unwrap().len(), 1);
    assert_eq!(export.json["revocations"].as_array().unwrap().len(), 1);
    for _ in 0..2 {
        let r = admin(
            &target,
            Method::POST,
            &format!("/admin/v1/contractors/{CTR}/import"),
            export.json.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    }
    assert_eq!(target.revocations().len(), 1, "imported once");

    own(&f.state, json!({"state": "handoff", "gen": 1})).await;
    own(&target, json!({"state": "active", "gen": 2})).await;
    own(
        &f.state,
        json!({"state": "released", "gen": 1, "successor": "cell-02", "successor_gen": 2}),
    )
    .await;
    seed_source_keys(&target, f).await;
    (target, session)
}

#[tokio::test]
async fn a_transferred_session_rebinds_once_at_the_new_generation() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let old = segment(&session, 1);

    let r = transfer(&f.state, &session).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["target_cell"], "cell-02");
    assert_eq!(r.json["target_endpoint"], "https://127.0.0.2:8443");
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    assert_eq!(segment(&ticket, 0)["typ"], "cellbind-transfer+jwt");
    let t = segment(&ticket, 1);
    assert_eq!(t["aud"], "cell-02");
    assert!(t["exp"].as_u64().unwrap() - t["iat"].as_u64().unwrap() <= 300);

    f.clock.advance(30);
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_eq!(r.json["cell_id"], "cell-02");
    assert_eq!(r.json["generation"], 2);
    let fresh = segment(r.json["session"].as_str().unwrap(), 1);
    assert_eq!(fresh["auth_time"], old["auth_time"], "auth_time kept");
    assert!(fresh["exp"].as_u64().unwrap() <= old["exp"].as_u64().unwrap());
    assert_eq!(fresh["sub"], old["sub"]);
    // The new session works at the target.
    let auth = format!("Bearer {}", r.json["session"].as_str().unwrap());
    let cur = call(
        &target,
        Method::GET,
        "/v1/sessions/current",
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_eq!(cur.status, StatusCode::OK, "{:?}", cur.json);

    // Replay: refused, also after a restart (the burn is durable).
    assert_refused(&rebind(&target, &ticket).await, "replayed");
    let restarted = peer(&f, 2).await;
    seed_source_keys(&restarted, &f).await;
    assert_refused(&rebind(&restarted, &ticket).await, "replayed");
}

/// A rebind at `target` with `headers` (a `DPoP` proof).
async fn rebind_with(target: &AppState, ticket: &str, headers: &[(&str, &str)]) -> Resp {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    call(
        target,
        Method::POST,
        "/v1/sessions/rebind",
        &all,
        Body::from(json!({ "ticket": ticket }).to_string()),
    )
    .await
}

#[tokio::test]
async fn a_bound_session_transfers_with_its_key_and_rebinds_only_with_a_proof_by_it() {
    let (f, _served) = source().await;
    let source_issuer = source_endpoint(&f);
    let device = Device::new(&source_issuer, &f.clock);
    let (target, session) = migrated_as(&f, Some(&device)).await;
    assert_eq!(segment(&session, 1)["cnf"]["jkt"], device.jkt());

    // At the source: the transfer needs a proof by the session's key.
    let r = transfer(&f.state, &session).await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    let proof = device.proof(
        "POST",
        "/v1/sessions/transfer",
        Some(&dpop_nonce(&r)),
        Some(&session),
    );
    let auth = format!("Bearer {session}");
    let r = call(
        &f.state,
        Method::POST,
        "/v1/sessions/transfer",
        &[("authorization", &auth), ("dpop", &proof)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    assert_eq!(segment(&ticket, 1)["jkt"], device.jkt(), "the key travels");

    // At the target (its own endpoint and nonces): without a proof, or with another key's,
    // refused, and the ticket is not used by the refusals.
    let thief = Device::new("https://127.0.0.2:8443", &f.clock);
    let r = rebind_with(&target, &ticket, &[]).await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    let nonce = dpop_nonce(&r);
    let stolen = thief.proof("POST", "/v1/sessions/rebind", Some(&nonce), None);
    let r = rebind_with(&target, &ticket, &[("dpop", &stolen)]).await;
    assert_dpop_refused(&r, "DPOP_KEY_MISMATCH", Some("invalid_token"));
    // The device's own key at the target's URL: rebound once, to the same key.
    let same_key = device.at("https://127.0.0.2:8443");
    let proof = same_key.proof("POST", "/v1/sessions/rebind", Some(&nonce), None);
    let r = rebind_with(&target, &ticket, &[("dpop", &proof)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_eq!(r.json["generation"], 2);
    assert!(!dpop_nonce(&r).is_empty());
    let fresh = r.json["session"].as_str().unwrap().to_owned();
    assert_eq!(segment(&fresh, 1)["cnf"]["jkt"], device.jkt());
    // The new session needs the key at the target too.
    let auth = format!("Bearer {fresh}");
    let r = call(
        &target,
        Method::GET,
        "/v1/sessions/current",
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await;
    assert_dpop_refused(&r, "DPOP_PROOF_MISSING", Some("invalid_dpop_proof"));
    let proof = same_key.proof(
        "GET",
        "/v1/sessions/current",
        Some(&dpop_nonce(&r)),
        Some(&fresh),
    );
    let r = call(
        &target,
        Method::GET,
        "/v1/sessions/current",
        &[("authorization", &auth), ("dpop", &proof)],
        Body::empty(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    // Single use holds: a second rebind with a valid proof is refused as replayed.
    let proof = same_key.proof("POST", "/v1/sessions/rebind", Some(&nonce), None);
    assert_refused(
        &rebind_with(&target, &ticket, &[("dpop", &proof)]).await,
        "replayed",
    );
}

#[tokio::test]
async fn an_unbound_ticket_rebinds_as_a_sign_in_would_bound_to_a_proved_key() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    assert!(segment(&ticket, 1).get("jkt").is_none());
    // A proof without the target's nonce is refused (nothing used), then accepted with it:
    // the new session is bound to its key (the target's field binding is `optional`).
    let device = Device::new("https://127.0.0.2:8443", &f.clock);
    let proof = device.proof("POST", "/v1/sessions/rebind", None, None);
    let r = rebind_with(&target, &ticket, &[("dpop", &proof)]).await;
    assert_dpop_refused(&r, "DPOP_NONCE_REQUIRED", Some("use_dpop_nonce"));
    let proof = device.proof("POST", "/v1/sessions/rebind", Some(&dpop_nonce(&r)), None);
    let r = rebind_with(&target, &ticket, &[("dpop", &proof)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let fresh = segment(r.json["session"].as_str().unwrap(), 1);
    assert_eq!(fresh["cnf"]["jkt"], device.jkt());
}

#[tokio::test]
async fn the_ticket_attack_table() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let ticket = |r: &Resp| r.json["ticket"].as_str().unwrap().to_owned();

    let good = ticket(&transfer(&f.state, &session).await);

    // Expired: a ticket of the source, older than five minutes (a session is transferred once,
    // so this one is minted with the source's key).
    let mut old: TicketClaims = serde_json::from_value(segment(&good, 1)).unwrap();
    old.iat -= 6 * 60;
    old.nbf = old.iat;
    old.exp = old.iat + 120;
    old.jti = SessionId::from_random([1; 16]);
    let expired = source_key(&f).mint(&old).unwrap();
    assert_refused(&rebind(&target, expired.expose()).await, "invalid_ticket");

    // Forged: a flipped signature byte; and a ticket signed by a key the source never published
    // under the source's kid.
    let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let sig = parts[2].clone();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    parts[2] = format!("{flipped}{}", &sig[1..]);
    assert_refused(&rebind(&target, &parts.join(".")).await, "invalid_ticket");
    let claims: TicketClaims = serde_json::from_value(segment(&good, 1)).unwrap();
    let kid = segment(&good, 0)["kid"].as_str().unwrap().to_owned();
    let rogue = SigningKey::from_seed(Kid::new(kid).unwrap(), &[9; 32]).unwrap();
    let forged = rogue.mint(&claims).unwrap();
    assert_refused(&rebind(&target, forged.expose()).await, "invalid_ticket");

    // Other audience: the cell-02 ticket presented at cell-03 (which knows the source's keys
    // and is even active at the new generation).
    let third = peer(&f, 3).await;
    put_map(&third, &f).await;
    own(&third, json!({"state": "active", "gen": 2})).await;
    seed_source_keys(&third, &f).await;
    assert_refused(&rebind(&third, &good).await, "invalid_ticket");

    // Session presented as a ticket.
    assert_refused(&rebind(&target, &session).await, "invalid_ticket");

    // Ticket presented as a session, at the source and at the target.
    for state in [&f.state, &target] {
        let auth = format!("Bearer {good}");
        let r = call(
            state,
            Method::GET,
            "/v1/sessions/current",
            &[("authorization", &auth)],
            Body::empty(),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
        assert_eq!(r.json["error"], "SESSION_INVALID");
        assert_eq!(
            transfer(state, &good).await.json["error"],
            "SESSION_INVALID",
            "a ticket does not buy a ticket"
        );
    }

    // Wrong generation: the contractor moved on at the target (gen 3) before the ticket came.
    own(&target, json!({"state": "active", "gen": 3})).await;
    assert_refused(&rebind(&target, &good).await, "wrong_generation");
}

#[tokio::test]
async fn a_source_that_did_not_release_at_the_session_generation_refuses() {
    let (f, _served) = source().await;
    f.seed(CTR, "ana", PW, 1).await;
    put_map(&f.state, &f).await;
    let r = f.sign_in(CTR, "ana", PW, "field").await;
    let session = r.json["session"].as_str().unwrap().to_owned();
    // Still active: nothing to transfer.
    assert_refused(&transfer(&f.state, &session).await, "not_released");
    // Handoff: not yet.
    own(&f.state, json!({"state": "handoff", "gen": 1})).await;
    assert_refused(&transfer(&f.state, &session).await, "not_released");
    // Moved away and back (active at 3 here): the gen-1 session cannot follow.
    own(
        &f.state,
        json!({"state": "released", "gen": 1, "successor": "cell-02", "successor_gen": 2}),
    )
    .await;
    own(&f.state, json!({"state": "active", "gen": 3})).await;
    assert_refused(&transfer(&f.state, &session).await, "not_released");
}

#[tokio::test]
async fn three_transfers_of_one_session_answer_one_ticket_that_rebinds_once() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    // A phone that lost the answer asks again, twice: the same ticket every time.
    let mut tickets = Vec::new();
    for _ in 0..3 {
        let r = transfer(&f.state, &session).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        tickets.push(r.json["ticket"].as_str().unwrap().to_owned());
        f.clock.advance(10);
    }
    assert_eq!(tickets[0], tickets[1]);
    assert_eq!(tickets[1], tickets[2]);
    let mut created = 0;
    for t in &tickets {
        let r = rebind(&target, t).await;
        if r.status == StatusCode::CREATED {
            created += 1;
        } else {
            assert_refused(&r, "replayed");
        }
    }
    assert_eq!(created, 1, "one session at the target, not three");
}

#[tokio::test]
async fn a_second_ticket_carrying_an_already_rebound_session_is_refused_as_replayed() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let first = r.json["ticket"].as_str().unwrap().to_owned();
    // A second, different ticket for the same session, signed with the source's key (what a
    // source without the one-ticket record, or a replica of it, would issue).
    let mut claims: TicketClaims = serde_json::from_value(segment(&first, 1)).unwrap();
    claims.jti = SessionId::from_random([2; 16]);
    let second = source_key(&f).mint(&claims).unwrap();
    assert_ne!(second.expose(), first);
    let r = rebind(&target, &first).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_refused(&rebind(&target, second.expose()).await, "replayed");
    // The session id stays burned after a restart of the target.
    let restarted = peer(&f, 2).await;
    seed_source_keys(&restarted, &f).await;
    let mut third = claims.clone();
    third.jti = SessionId::from_random([3; 16]);
    let third = source_key(&f).mint(&third).unwrap();
    assert_refused(&rebind(&restarted, third.expose()).await, "replayed");
}

#[tokio::test]
async fn a_transfer_after_the_ticket_lifetime_is_refused_as_already_transferred() {
    let (f, _served) = source().await;
    let (_target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let t = segment(r.json["ticket"].as_str().unwrap(), 1);
    let lifetime = t["exp"].as_u64().unwrap() - t["iat"].as_u64().unwrap();
    f.clock.advance(lifetime);
    assert_refused(&transfer(&f.state, &session).await, "already_transferred");
    // Also after a restart of the source (the record is durable).
    let restarted = f.reopen().await;
    assert_refused(&transfer(&restarted, &session).await, "already_transferred");
}

#[tokio::test]
async fn a_ticket_whose_session_was_revoked_at_the_target_is_refused() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    let t = segment(&ticket, 1);
    let r = admin(
        &target,
        Method::POST,
        "/admin/v1/revocations",
        json!({"kind": "session", "jti": t["sid"], "exp": t["sexp"],
               "reason": "stolen phone", "by": "ops"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
    assert_eq!(r.json["error"], "SESSION_REVOKED");
    assert!(r.json["session"].is_null(), "nothing minted");
}

/// `POST /v1/sessions/transfer/status` at the source, as a target asks it.
async fn status_at(state: &AppState, ticket: &str) -> Resp {
    call(
        state,
        Method::POST,
        "/v1/sessions/transfer/status",
        &[("content-type", "application/json")],
        Body::from(json!({ "ticket": ticket }).to_string()),
    )
    .await
}

// ── A38: a user's own sign-out at the source reaches a ticket in flight ────────────────────

#[tokio::test]
async fn a_ticket_taken_before_the_users_sign_out_at_the_source_is_refused_at_the_target() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    // The user signs out at the source (the cell that minted the session): recorded there
    // only, as a sign-out is; the target has never heard of it.
    let out = f
        .with_session(Method::DELETE, "/v1/sessions/current", &session)
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT, "{}", out.text);
    let before = target.revocations().len();

    let r = rebind(&target, &ticket).await;
    println!(
        "rebind after the sign-out at the source: {} {}",
        r.status, r.json["error"]
    );
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
    assert_eq!(r.json["error"], "SESSION_REVOKED");
    assert!(r.json["session"].is_null(), "nothing minted");
    assert_eq!(
        target.revocations().len(),
        before,
        "nothing written at the target"
    );
    // Also a retry of the same ticket.
    assert_eq!(
        rebind(&target, &ticket).await.json["error"],
        "SESSION_REVOKED"
    );
}

#[tokio::test]
async fn a_rebind_whose_source_does_not_answer_is_refused_as_retryable_and_burns_nothing() {
    let (f, served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    served.stop().await;

    let started = std::time::Instant::now();
    let r = rebind(&target, &ticket).await;
    println!(
        "rebind with the source down: {} {} in {:?}",
        r.status,
        r.json["error"],
        started.elapsed()
    );
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.json);
    assert_eq!(r.json["error"], "NOT_READY");
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    assert!(r.json["session"].is_null(), "nothing minted");

    // The source is back: the same ticket rebinds (it was not burned), once.
    let _served = serve_again(&f).await;
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    assert_refused(&rebind(&target, &ticket).await, "replayed");
}

#[tokio::test]
async fn the_source_answers_the_status_of_its_own_valid_tickets_only() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();

    let r = status_at(&f.state, &ticket).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json, json!({"session": "active"}));
    // Asking burns nothing: asked twice, and the ticket still rebinds.
    assert_eq!(status_at(&f.state, &ticket).await.json["session"], "active");

    // Not its tickets, not tickets at all: refused as invalid_ticket.
    assert_refused(&status_at(&target, &ticket).await, "invalid_ticket");
    assert_refused(&status_at(&f.state, &session).await, "invalid_ticket");
    assert_refused(&status_at(&f.state, "a.b.c").await, "invalid_ticket");
    let mut forged: TicketClaims = serde_json::from_value(segment(&ticket, 1)).unwrap();
    forged.jti = SessionId::from_random([5; 16]);
    let kid = segment(&ticket, 0)["kid"].as_str().unwrap().to_owned();
    let rogue = SigningKey::from_seed(Kid::new(kid).unwrap(), &[9; 32]).unwrap();
    assert_refused(
        &status_at(&f.state, rogue.mint(&forged).unwrap().expose()).await,
        "invalid_ticket",
    );
    let mut expired: TicketClaims = serde_json::from_value(segment(&ticket, 1)).unwrap();
    expired.iat -= 10 * 60;
    expired.nbf = expired.iat;
    expired.exp = expired.iat + 120;
    assert_refused(
        &status_at(&f.state, source_key(&f).mint(&expired).unwrap().expose()).await,
        "invalid_ticket",
    );
    // A body that is not `{ticket}`.
    let r = call(
        &f.state,
        Method::POST,
        "/v1/sessions/transfer/status",
        &[("content-type", "application/json")],
        Body::from(json!({"ticket": ticket, "more": 1}).to_string()),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.json);

    // An operator's revocation of the user at the source only: revoked.
    let t = segment(&ticket, 1);
    let r = f
        .admin(
            Method::POST,
            "/admin/v1/revocations",
            json!({"kind": "subject", "sub": t["sub"], "before": T0 + 1,
                   "reason": "left the company", "by": "ops"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        status_at(&f.state, &ticket).await.json["session"],
        "revoked"
    );
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.json["error"], "SESSION_REVOKED", "{:?}", r.json);
}

#[tokio::test]
async fn a_sign_out_recorded_by_another_replica_of_the_source_is_seen() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    // The sign-out goes to another replica over the same store (with SQLite: a second state
    // over the same database, which is how a replica sees another's commits).
    let other = Fixture::replica_of(&f).await;
    let out = other
        .with_session(Method::DELETE, "/v1/sessions/current", &session)
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT, "{}", out.text);
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.json["error"], "SESSION_REVOKED", "{:?}", r.json);
}

/// ATTACKS A36 across a move: the rebind gives the device a token of its new cell (the old
/// cell's is keyed with another KEK), so it is a known device there from the start.
#[tokio::test]
async fn a_rebind_gives_the_device_a_token_its_new_cell_knows() {
    let (f, _served) = source().await;
    let (target, session) = migrated(&f).await;
    let r = transfer(&f.state, &session).await;
    let ticket = r.json["ticket"].as_str().unwrap().to_owned();
    let r = rebind(&target, &ticket).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
    let device = r.json["device_token"].as_str().unwrap().to_owned();
    let sign_in_from = |from: &'static str, pw: &'static str, device: Option<String>| {
        let target = target.clone();
        async move {
            let mut body =
                json!({"contractor_id": CTR, "login": "ana", "password": pw, "client": "field"});
            if let Some(d) = device {
                body["device_token"] = d.into();
            }
            call_on(
                &target,
                Listener::Public,
                Some(std::net::SocketAddr::new(from.parse().unwrap(), 40_000)),
                Method::POST,
                "/v1/sessions",
                &[("content-type", "application/json")],
                Body::from(body.to_string()),
            )
            .await
        }
    };
    for a in [
        "203.0.113.1",
        "203.0.113.2",
        "203.0.113.3",
        "203.0.113.4",
        "203.0.113.5",
        "203.0.113.6",
    ] {
        for _ in 0..10 {
            sign_in_from(a, "a-guess", None).await;
        }
    }
    let r = sign_in_from("198.51.100.9", PW, None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    let r = sign_in_from("198.51.100.9", PW, Some(device)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}
