//! Device-bound sessions (`crate::proof`) against fake cells: what every proof says, the nonce
//! and clock handling, the key's life with the session, and what is refused.

use std::sync::Arc;

use http::Method;
use protocol::dpop::{Proof, ProofKey, SoftwareP256Key, token_hash};
use protocol::time::{Clock as _, SystemClock};
use protocol::{ContractorId, ErrorCode, Jkt, Login, Password};

use super::*;
use crate::proof::{DeviceKey, DeviceKeyError, bound_key};
use crate::store::MemoryStore;
use crate::testing::{DAY, FakeCell, FakeFleet, NOW, Reply, bound_token, der_of, transfer_answer};

const SIGN_IN: &str = "POST /v1/sessions";
const RENEW: &str = "POST /v1/sessions/renew";
const TRANSFER: &str = "POST /v1/sessions/transfer";
const REBIND: &str = "POST /v1/sessions/rebind";
const ROUTES: &str = "GET /api/routes/today";

async fn sign_in(c: &Client) -> Result<SessionInfo, Error> {
    c.sign_in(
        &ContractorId::new("c-40711").unwrap(),
        &Login::new("ana").unwrap(),
        &Password::new("correct horse").unwrap(),
    )
    .await
}

/// `cell` binds every sign-in to the proof's key.
fn binds(cell: &FakeCell) {
    cell.always(
        SIGN_IN,
        Reply::json(
            201,
            cell.session_answer(NOW + 30 * DAY, "unbound.placeholder.x"),
        )
        .bound(),
    );
}

fn ok() -> Reply {
    Reply::json(200, serde_json::json!({"ok": true}))
}

/// The proofs of `cell`'s hits on `route`, in order (each verified).
fn proofs(cell: &FakeCell, route: &str) -> Vec<Proof> {
    cell.hits(route)
        .iter()
        .map(|h| h.proof().unwrap())
        .collect()
}

/// Asserts that `p` was made for `method url` with the session `token` (none: sign-in, rebind).
fn made_for(p: &Proof, method: &str, url: &str, token: Option<&str>) {
    let c = p.claims();
    assert_eq!((c.htm.as_str(), c.htu.as_str()), (method, url));
    assert_eq!(c.ath, token.map(token_hash), "ath of {method} {url}");
}

/// The real time: the fake cells' `Date` (the clients' fake clock is at `NOW`).
fn real_now() -> u64 {
    SystemClock.now()
}

/// A P-256 key held "in a keystore": it answers in DER.
#[derive(Debug)]
struct KeystoreKey(SoftwareP256Key);

impl KeystoreKey {
    fn new() -> Arc<Self> {
        Arc::new(Self(SoftwareP256Key::generate().unwrap()))
    }
    fn jkt(&self) -> Jkt {
        self.0.public().thumbprint()
    }
}

impl DeviceKey for KeystoreKey {
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
        Ok(self.0.public().clone())
    }
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
        Ok(der_of(&DeviceKey::sign(&self.0, message)?))
    }
}

#[tokio::test]
async fn sign_in_proves_a_new_key_and_every_request_of_the_bound_session_proves_it() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    // the edge has no nonce from this device yet: it asks for one
    cell.push(
        SIGN_IN,
        Reply::proof_refused(ErrorCode::DpopNonceRequired, "use_dpop_nonce", "n-1"),
    );
    cell.push(SIGN_IN, {
        let mut r = Reply::json(201, cell.session_answer(NOW + 30 * DAY, "x.y.z")).bound();
        r.headers.push(("dpop-nonce".into(), "n-2".into()));
        r
    });
    cell.always(ROUTES, ok().header("dpop-nonce", "n-3"));
    let (c, store) = f.client_mem(&f.map(1, &[]));
    let info = sign_in(&c).await.unwrap();

    let signs = proofs(cell, SIGN_IN);
    assert_eq!(signs.len(), 2, "one retry with the nonce");
    let url = format!("{}/v1/sessions", cell.endpoint);
    for p in &signs {
        made_for(p, "POST", &url, None);
    }
    assert_eq!(signs[0].claims().nonce, None);
    assert_eq!(signs[1].claims().nonce.as_deref(), Some("n-1"));
    assert_ne!(signs[0].claims().jti, signs[1].claims().jti);
    assert_eq!(signs[0].jkt(), signs[1].jkt());
    // the first proof has the device's time (nothing heard yet); then the cell's, from `Date`
    assert_eq!(signs[0].claims().iat, NOW);
    assert!(signs[1].claims().iat.abs_diff(real_now()) <= 5);
    assert_eq!(info.key_thumbprint.as_ref(), Some(signs[1].jkt()));

    c.send(Request::get("/api/routes/today").query("q", "a b"))
        .await
        .unwrap();
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    let hits = cell.hits(ROUTES);
    let token = hits[0].bearer().unwrap();
    assert_eq!(bound_key(&token).as_ref(), Some(signs[1].jkt()));
    let reads = proofs(cell, ROUTES);
    let url = format!("{}/api/routes/today", cell.endpoint);
    for (p, nonce) in reads.iter().zip(["n-2", "n-3"]) {
        made_for(p, "GET", &url, Some(&token));
        assert_eq!(p.jkt(), signs[1].jkt());
        assert_eq!(p.claims().nonce.as_deref(), Some(nonce));
        assert!(p.claims().iat.abs_diff(real_now()) <= 5);
    }
    assert_ne!(reads[0].claims().jti, reads[1].claims().jti);

    // the software key is stored with the session, and shown nowhere
    let blob = store.load(StoreSlot::Session).unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_str(&blob).unwrap();
    assert_eq!(v["schema"], 2);
    let key = v["device_key"].as_str().unwrap();
    for shown in [format!("{c:?}"), format!("{:?}", c.session())] {
        assert!(!shown.contains(&key[..24]), "{shown}");
    }
}

#[tokio::test]
async fn the_proofs_url_is_the_one_sent_without_its_query() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    // `{` and `}` are escaped by the URL standard: the cell sees (and checks) the escaped path
    let route = "GET /api/jobs/a%7Bb%7D";
    cell.always(route, ok());
    c.send(Request::get("/api/jobs/a{b}").query("x", "1"))
        .await
        .unwrap();
    let hits = cell.hits(route);
    assert_eq!(hits[0].query.as_deref(), Some("x=1"));
    let p = hits[0].proof().unwrap();
    assert_eq!(
        p.claims().htu,
        format!("{}/api/jobs/a%7Bb%7D", cell.endpoint)
    );
}

#[tokio::test]
async fn a_refused_nonce_is_retried_once_with_a_fresh_proof() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    cell.push(
        ROUTES,
        Reply::proof_refused(ErrorCode::DpopNonceStale, "use_dpop_nonce", "n-5"),
    );
    cell.always(ROUTES, ok());
    let r = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let p = proofs(cell, ROUTES);
    assert_eq!(p.len(), 2);
    assert_ne!(
        p[0].claims().jti,
        p[1].claims().jti,
        "never the same proof twice"
    );
    assert_eq!(p[1].claims().nonce.as_deref(), Some("n-5"));

    // once only: a second refusal is the caller's, and the session stays
    cell.push(
        ROUTES,
        Reply::proof_refused(ErrorCode::DpopNonceStale, "use_dpop_nonce", "n-6"),
    );
    cell.push(
        ROUTES,
        Reply::proof_refused(ErrorCode::DpopNonceRequired, "use_dpop_nonce", "n-7"),
    );
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rejected {
                code: ErrorCode::DpopNonceRequired,
                status: 401,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.ends_session() && e.is_proof_refusal());
    assert_eq!(cell.hits(ROUTES).len(), 4);
    assert!(c.session().is_some());
    assert!(store.load(StoreSlot::Session).unwrap().is_some());
    // the next request uses the last nonce it was given
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(
        proofs(cell, ROUTES)[4].claims().nonce.as_deref(),
        Some("n-7")
    );
}

#[tokio::test]
async fn a_device_clock_that_jumped_is_corrected_and_the_proof_made_once_more() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    cell.always(ROUTES, ok());
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    // the phone's clock moves two hours ahead after the offset was learned
    f.clock.advance(2 * 3600);
    cell.push(
        ROUTES,
        Reply::proof_refused(ErrorCode::DpopProofInvalid, "invalid_dpop_proof", "n-8"),
    );
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    let p = proofs(cell, ROUTES);
    assert_eq!(p.len(), 3);
    assert!(p[1].claims().iat.abs_diff(real_now() + 2 * 3600) <= 5);
    assert!(p[2].claims().iat.abs_diff(real_now()) <= 5, "corrected");
    // a proof refused with a right clock is not sent again
    cell.push(
        ROUTES,
        Reply::proof_refused(ErrorCode::DpopProofInvalid, "invalid_dpop_proof", "n-9"),
    );
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rejected {
                code: ErrorCode::DpopProofInvalid,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(cell.hits(ROUTES).len(), 4);
    assert!(c.session().is_some());
}

#[tokio::test]
async fn an_unbound_session_sends_no_proofs_and_a_version_1_blob_still_works() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    // a cell whose binding is `off`: the sign-in proof is ignored, the session unbound
    cell.accept_sign_in(NOW + 30 * DAY);
    cell.always(ROUTES, ok());
    let (c, store) = f.client_mem(&f.map(1, &[]));
    let info = sign_in(&c).await.unwrap();
    assert!(
        cell.hits(SIGN_IN)[0].proof().is_some(),
        "sign-in always proves"
    );
    assert_eq!(info.key_thumbprint, None);
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert!(cell.hits(ROUTES)[0].proof().is_none());
    // its key is kept with it all the same (a rebind binds its successor to it)
    let blob = store.load(StoreSlot::Session).unwrap().unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&blob).unwrap();
    assert!(v["device_key"].is_string());

    // a session stored by an SDK from before device binding
    v["schema"] = 1.into();
    v.as_object_mut().unwrap().remove("device_key");
    let old = Arc::new(MemoryStore::new());
    old.save(StoreSlot::Session, &v.to_string()).unwrap();
    let c = f.client(&f.map(1, &[]), old.clone());
    let restored = c.restore().unwrap().unwrap();
    assert_eq!(restored, info);
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    let hits = cell.hits(ROUTES);
    assert_eq!(hits.len(), 2);
    assert!(hits[1].proof().is_none());
    assert_eq!(hits[1].bearer().as_deref(), Some("tok.sign.in"));
}

#[tokio::test]
async fn renewal_transfer_and_rebind_keep_the_key() {
    let f = FakeFleet::start(2).await;
    let (a, b) = (&f.cells[0], &f.cells[1]);
    binds(a);
    let (c, store) = f.client_mem(&f.map(1, &[]));
    let first = sign_in(&c).await.unwrap();
    let jkt = first.key_thumbprint.clone().unwrap();
    let stored_key = |store: &MemoryStore| {
        let v: serde_json::Value =
            serde_json::from_str(&store.load(StoreSlot::Session).unwrap().unwrap()).unwrap();
        v["device_key"].as_str().unwrap().to_owned()
    };
    let key = stored_key(&store);

    // inside the renewal window
    f.clock.advance(24 * DAY);
    a.always(
        RENEW,
        Reply::json(201, a.session_answer(NOW + 54 * DAY, "x.y.z")).bound(),
    );
    a.always(ROUTES, Reply::wrong_cell(b));
    a.always(TRANSFER, transfer_answer(b));
    let mut moved = b.session_answer(NOW + 54 * DAY, "x.y.z");
    moved["generation"] = 4.into();
    b.always(REBIND, Reply::json(201, moved).bound());
    b.always(ROUTES, ok());
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();

    let renew = &proofs(a, RENEW)[0];
    let old_token = a.hits(RENEW)[0].bearer().unwrap();
    made_for(
        renew,
        "POST",
        &format!("{}/v1/sessions/renew", a.endpoint),
        Some(&old_token),
    );
    assert_eq!(renew.jkt(), &jkt);
    let renewed_token = a.hits(ROUTES)[0].bearer().unwrap();
    assert_ne!(renewed_token, old_token);
    assert_eq!(bound_key(&renewed_token), Some(jkt.clone()));
    made_for(
        &proofs(a, ROUTES)[0],
        "GET",
        &format!("{}/api/routes/today", a.endpoint),
        Some(&renewed_token),
    );
    let transfer = &proofs(a, TRANSFER)[0];
    made_for(
        transfer,
        "POST",
        &format!("{}/v1/sessions/transfer", a.endpoint),
        Some(&renewed_token),
    );
    let rebind = &proofs(b, REBIND)[0];
    made_for(
        rebind,
        "POST",
        &format!("{}/v1/sessions/rebind", b.endpoint),
        None,
    );
    assert_eq!((transfer.jkt(), rebind.jkt()), (&jkt, &jkt));
    let rebound_token = b.hits(ROUTES)[0].bearer().unwrap();
    made_for(
        &proofs(b, ROUTES)[0],
        "GET",
        &format!("{}/api/routes/today", b.endpoint),
        Some(&rebound_token),
    );
    assert_eq!(proofs(b, ROUTES)[0].jkt(), &jkt);
    let now = c.session().unwrap();
    assert_eq!(now.cell_id, b.id);
    assert_eq!(now.key_thumbprint, Some(jkt));
    assert_ne!(now.session_id, first.session_id);
    assert_eq!(
        stored_key(&store),
        key,
        "the same key, stored with each new session"
    );
}

#[tokio::test]
async fn restore_takes_the_stored_or_the_apps_key_and_never_a_session_no_key_proves() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    cell.always(ROUTES, ok());
    let map = f.map(1, &[]);

    // the SDK's own key comes back from the store
    let (c, store) = f.client_mem(&map);
    let info = sign_in(&c).await.unwrap();
    let again = f.client(&map, store.clone());
    assert_eq!(again.restore().unwrap(), Some(info.clone()));
    again
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(
        proofs(cell, ROUTES)[0].jkt(),
        info.key_thumbprint.as_ref().unwrap()
    );

    // the app's key (DER signatures) is never stored; a client with it restores the session
    let key = KeystoreKey::new();
    let app_store = Arc::new(MemoryStore::new());
    let c = f
        .builder(&map)
        .store(app_store.clone())
        .device_key(key.clone())
        .build()
        .unwrap();
    let info = sign_in(&c).await.unwrap();
    assert_eq!(info.key_thumbprint, Some(key.jkt()));
    let blob = app_store.load(StoreSlot::Session).unwrap().unwrap();
    assert!(!blob.contains("device_key"), "{blob}");
    let again = f
        .builder(&map)
        .store(app_store.clone())
        .device_key(key.clone())
        .build()
        .unwrap();
    assert_eq!(again.restore().unwrap(), Some(info));
    again
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(proofs(cell, ROUTES)[1].jkt(), &key.jkt());

    // another key (the keystore's was lost), or none: nothing to restore, the blob stays
    for builder in [
        f.builder(&map).device_key(KeystoreKey::new()),
        f.builder(&map),
    ] {
        let c = builder.store(app_store.clone()).build().unwrap();
        assert_eq!(c.restore().unwrap(), None);
        assert!(c.session().is_none());
        assert_eq!(
            app_store.load(StoreSlot::Session).unwrap(),
            Some(blob.clone())
        );
    }
    // a bound session whose stored key is gone
    let mut v: serde_json::Value =
        serde_json::from_str(&store.load(StoreSlot::Session).unwrap().unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("device_key");
    let keyless = Arc::new(MemoryStore::new());
    keyless.save(StoreSlot::Session, &v.to_string()).unwrap();
    assert_eq!(f.client(&map, keyless).restore().unwrap(), None);
}

#[tokio::test]
async fn a_session_this_device_cannot_prove_ends_and_sign_out_says_so() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    for code in [ErrorCode::DpopKeyMismatch, ErrorCode::DpopProofMissing] {
        let (c, store) = f.client_mem(&f.map(1, &[]));
        sign_in(&c).await.unwrap();
        let before = cell.hits(ROUTES).len();
        cell.push(ROUTES, Reply::error(code));
        let e = c
            .request(Method::GET, "/api/routes/today", None)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Rejected { code: c, .. } if *c == code),
            "{e:?}"
        );
        assert!(e.ends_session());
        assert_eq!(cell.hits(ROUTES).len(), before + 1, "not retried");
        assert!(c.session().is_none());
        assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    }
    // a sign-out the cell refuses for the proof is local only: the session lives on there
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    cell.push(
        "DELETE /v1/sessions/current",
        Reply::error(ErrorCode::DpopKeyMismatch),
    );
    let out = c.sign_out().await.unwrap();
    assert!(matches!(out.outcome, SignOut::LocalOnly { .. }), "{out:?}");
    let p = proofs(cell, "DELETE /v1/sessions/current");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].claims().htm, "DELETE");
}

#[tokio::test]
async fn outbox_writes_of_a_bound_session_carry_a_fresh_proof_at_every_attempt() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    let info = sign_in(&c).await.unwrap();
    let (one, two) = ("POST /api/jobs/j-1/complete", "POST /api/jobs/j-2/complete");
    cell.push(one, Reply::json(503, serde_json::json!({})));
    cell.always(one, ok());
    // a proof refused twice for its nonce: the write is kept, not dropped
    for n in ["n-a", "n-b"] {
        cell.push(
            two,
            Reply::proof_refused(ErrorCode::DpopNonceStale, "use_dpop_nonce", n),
        );
    }
    cell.always(two, ok());
    let w1 = c
        .enqueue(Request::post("/api/jobs/j-1/complete").json(b"{}".to_vec()))
        .unwrap();
    let w2 = c
        .enqueue(Request::post("/api/jobs/j-2/complete").json(b"{}".to_vec()))
        .unwrap();
    let report = c.flush().await.unwrap();
    assert_eq!(report.delivered.len(), 1, "{report:?}");
    assert_eq!(report.delivered[0].write.id, w1.id);
    assert_eq!(report.remaining, 1);
    assert!(
        report.rejected.is_empty() && !report.session_ended,
        "{report:?}"
    );
    let report = c.flush().await.unwrap();
    assert_eq!(report.delivered[0].write.id, w2.id, "{report:?}");

    let mut jtis = std::collections::HashSet::new();
    for (route, attempts) in [(one, 2), (two, 3)] {
        let hits = cell.hits(route);
        assert_eq!(hits.len(), attempts, "{route}");
        let key = hits[0].idempotency_key();
        for h in &hits {
            assert_eq!(h.idempotency_key(), key, "the same write");
            let p = h.proof().unwrap();
            assert_eq!(Some(p.jkt()), info.key_thumbprint.as_ref());
            assert_eq!(p.claims().ath, h.bearer().as_deref().map(token_hash));
            assert!(jtis.insert(p.claims().jti.clone()), "a proof sent twice");
        }
    }
}

/// A key whose keystore refuses to sign.
#[derive(Debug)]
struct LockedKey(SoftwareP256Key);

impl DeviceKey for LockedKey {
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
        Ok(self.0.public().clone())
    }
    fn sign(&self, _: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
        Err(DeviceKeyError("user authentication required".into()))
    }
}

/// A key whose public key cannot be read.
#[derive(Debug)]
struct NoPublicKey;

impl DeviceKey for NoPublicKey {
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
        Err(DeviceKeyError("keystore unavailable".into()))
    }
    fn sign(&self, _: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
        Ok(vec![])
    }
}

#[tokio::test]
async fn a_failing_device_key_sends_nothing_and_a_session_bound_elsewhere_is_refused() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    binds(cell);
    let map = f.map(1, &[]);
    assert!(matches!(
        f.builder(&map).device_key(Arc::new(NoPublicKey)).build(),
        Err(Error::DeviceKey(m)) if m.contains("keystore unavailable")
    ));
    let locked = Arc::new(LockedKey(SoftwareP256Key::generate().unwrap()));
    let c = f.builder(&map).device_key(locked).build().unwrap();
    let e = sign_in(&c).await.unwrap_err();
    assert!(
        matches!(&e, Error::DeviceKey(m) if m.contains("authentication")),
        "{e:?}"
    );
    assert_eq!(cell.all_hits(), 0, "nothing sent");
    assert!(c.session().is_none());

    // a cell that bound the session to some other key
    let other = SoftwareP256Key::generate().unwrap().public().thumbprint();
    let mut answer = cell.session_answer(NOW + 30 * DAY, "x");
    answer["session"] = bound_token(&other).into();
    cell.push(SIGN_IN, Reply::json(201, answer));
    let (c, store) = f.client_mem(&map);
    assert!(matches!(sign_in(&c).await, Err(Error::InvalidResponse(_))));
    assert!(c.session().is_none());
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
}
