//! The SDK against a real dev fleet (`devfleet::Fleet`: five cells, each an
//! auth-service, an edge and a demo app as OS processes, over TLS from a local CA).
//!
//! Needs the fleet's binaries next to this test's target directory (`cargo build --workspace`
//! builds them). One fleet serves every scenario, in order; the port base can be moved with
//! `CELLBIND_SDK_FLEET_PORT_BASE`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_sdk::{
    Client, DeviceKey, DeviceKeyError, Error, FileStore, MemoryStore, ProofKey, RequestEvent,
    RequestOutcome, SessionStore, StoreSlot,
};
use devfleet::{DemoUser, Fleet, FleetFile, FleetOptions};
use http::Method;
use protocol::dpop::SoftwareP256Key;
use protocol::jwks::PublicKey;
use protocol::map::{MapError, SignedMap};
use protocol::time::{Clock, FakeClock, SystemClock};
use protocol::token::SigningKey;
use protocol::{CellId, ContractorId, Jkt, Kid, Login, Password};

const DEFAULT_PORT_BASE: u16 = 9840;
const ROUTES: &str = "/api/routes/today";
const DAY: u64 = 24 * 3600;
/// Longest wait for something the fleet propagates (revocations reach the edges through the
/// feed within seconds).
const PROPAGATION_DEADLINE: Duration = Duration::from_secs(30);

struct Ctx {
    file: FleetFile,
    fleet_json: PathBuf,
    cellctl: PathBuf,
    /// Where each server's `/metrics` is.
    management: devfleet::FleetManagement,
    dir: PathBuf,
    http: reqwest::Client,
    ca_pem: Vec<u8>,
    map_bytes: Vec<u8>,
    map: SignedMap,
    map_key: PublicKey,
    signer: SigningKey,
}

impl Ctx {
    fn builder(&self, map: &[u8]) -> cellbind_sdk::ClientBuilder {
        Client::builder(map.to_vec(), self.map_key.clone()).extra_ca_pem(self.ca_pem.clone())
    }

    fn client(&self, store: Arc<dyn SessionStore>) -> Client {
        self.builder(&self.map_bytes).store(store).build().unwrap()
    }

    /// A map like the fleet's, with overrides, signed with the fleet's map key.
    fn map_with(&self, version: u64, overrides: &[(&ContractorId, &CellId)]) -> Vec<u8> {
        let mut m = self.map.map.clone();
        m.version = version;
        for (c, cell) in overrides {
            m.overrides.insert((*c).clone(), (*cell).clone());
        }
        m.sign(&self.signer).unwrap().to_json().unwrap()
    }

    /// A technician on `cell` whose contractor no earlier scenario used.
    fn tech_on(&self, cell: &CellId, skip: usize) -> DemoUser {
        let mut seen = std::collections::BTreeSet::new();
        self.file
            .demo
            .technicians
            .iter()
            .filter(|t| &t.cell_id == cell && seen.insert(t.contractor_id.clone()))
            .nth(skip)
            .cloned()
            .unwrap()
    }

    fn cell_ids(&self) -> Vec<CellId> {
        self.file.cells.iter().map(|c| c.id.clone()).collect()
    }

    /// Sign-in attempts the auth-services have answered, per cell (replica 0's management
    /// listener).
    async fn sign_ins(&self) -> Vec<u64> {
        let mut out = vec![];
        for c in &self.file.cells {
            let management = &self.management.cell(&c.id).unwrap().auth_services[0];
            let text = self
                .http
                .get(format!("{management}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let n: u64 = text
                .lines()
                .filter(|l| l.starts_with("cellbind_auth_signins_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum();
            out.push(n);
        }
        out
    }

    /// An admin call to a cell's auth-service, with that cell's own admin token.
    async fn admin(
        &self,
        cell: &devfleet::FleetCell,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let url = format!("{}{path}", cell.auth_service.url);
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(&cell.admin_token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "{url}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }
}

fn delta(before: &[u64], after: &[u64]) -> Vec<u64> {
    before.iter().zip(after).map(|(b, a)| a - b).collect()
}

async fn sign_in(c: &Client, t: &DemoUser) -> Result<cellbind_sdk::SessionInfo, Error> {
    c.sign_in(
        &t.contractor_id,
        &Login::new(t.login.clone()).unwrap(),
        &Password::new(t.password.clone()).unwrap(),
    )
    .await
}

async fn route_of(c: &Client) -> serde_json::Value {
    let r = c.request(Method::GET, ROUTES, None).await.unwrap();
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_against_a_real_fleet() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let opts = FleetOptions::for_test(
        tmp.path().join("fleet"),
        "CELLBIND_SDK_FLEET_PORT_BASE",
        DEFAULT_PORT_BASE,
    )
    .unwrap();
    let bins = opts.bin_dir.clone();
    assert!(
        bins.join("cellbind-auth-service").exists() && bins.join("cellbind-cell-endpoint").exists(),
        "fleet binaries missing in {}: build the workspace first (cargo build --workspace)",
        bins.display()
    );
    let fleet = Fleet::start(opts).await.unwrap();
    let file = fleet.file().clone();
    let dir = fleet.dir().to_path_buf();
    let ca_pem = std::fs::read(&file.ca_cert).unwrap();
    let http = devfleet::client_trusting(&ca_pem).unwrap();
    let map_bytes = http
        .get(format!("{}/v1/placement-map", file.cells[0].endpoint))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let map_key = PublicKey::from_b64(&file.map_public_key).unwrap();
    let map = SignedMap::verify_bytes(&map_bytes, &map_key).unwrap();
    let seed: [u8; 32] = std::fs::read(dir.join("secrets/map-key"))
        .unwrap()
        .try_into()
        .unwrap();
    let signer = SigningKey::from_seed(Kid::new("cp-map").unwrap(), &seed).unwrap();
    assert_eq!(signer.public_key(), map_key);
    let ctx = Ctx {
        management: fleet.management().clone(),
        fleet_json: fleet.fleet_file_path(),
        cellctl: bins.join("cellctl"),
        file,
        dir,
        http,
        ca_pem,
        map_bytes,
        map,
        map_key,
        signer,
    };

    // Waits (60 to 120 s) for its nonce to go stale while the scenarios below run.
    let idle = idle_client_whose_nonce_goes_stale(&ctx).await;

    first_sign_in_with_the_built_in_map(&ctx).await;
    a_wrong_override_costs_one_hop(&ctx).await;
    cells_that_keep_disagreeing_fail_after_two_attempts(&ctx).await;
    an_older_map_offered_by_a_cell_is_refused(&ctx).await;
    renewal_in_the_window_gets_a_new_session(&ctx).await;
    a_revoked_session_is_typed_and_clears_the_store(&ctx).await;
    sign_in_binds_the_session_to_the_device_key(&ctx).await;
    a_copied_token_without_the_key_is_refused(&ctx).await;
    a_clock_ten_minutes_off_either_way_fails_nothing(&ctx).await;
    the_outbox_flushes_with_a_bound_session(&ctx).await;
    a_bound_session_follows_its_contractor_with_its_key(&ctx).await;
    an_unbound_session_keeps_working_in_optional_mode(&ctx).await;
    let (restorable, expected) = signed_in_file_store(&ctx).await;
    idle.await.unwrap();

    fleet.stop().await;
    restore_with_the_network_off(&ctx, &restorable, &expected).await;
    drop(ctx.dir);
}

async fn first_sign_in_with_the_built_in_map(ctx: &Ctx) {
    let cell = ctx.cell_ids()[3].clone();
    let t = ctx.tech_on(&cell, 0);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.client(store.clone());
    assert_eq!(
        c.cell_for(&t.contractor_id).unwrap().id,
        cell,
        "the fleet's map places it"
    );
    let before = ctx.sign_ins().await;
    let info = sign_in(&c, &t).await.unwrap();
    assert_eq!(info.cell_id, cell);
    let d = delta(&before, &ctx.sign_ins().await);
    assert_eq!(d.iter().sum::<u64>(), 1, "{d:?}");
    assert!(store.load(StoreSlot::Session).unwrap().is_some());
    let route = route_of(&c).await;
    assert_eq!(route["contractor_id"], t.contractor_id.as_str());
    let w = c
        .request(
            Method::POST,
            "/api/jobs/j-sdk-1/complete",
            Some(b"{}".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(w.status, 200, "{}", String::from_utf8_lossy(&w.body));
}

async fn a_wrong_override_costs_one_hop(ctx: &Ctx) {
    let ids = ctx.cell_ids();
    let owner = ids[1].clone();
    let wrong = ids[2].clone();
    let t = ctx.tech_on(&owner, 1);
    let map = ctx.map_with(ctx.map.map.version, &[(&t.contractor_id, &wrong)]);
    let c = ctx
        .builder(&map)
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    assert_eq!(c.cell_for(&t.contractor_id).unwrap().id, wrong);
    let before = ctx.sign_ins().await;
    let info = sign_in(&c, &t).await.unwrap();
    assert_eq!(info.cell_id, owner);
    let d = delta(&before, &ctx.sign_ins().await);
    assert_eq!(d[2], 1, "one attempt at the wrong cell: {d:?}");
    assert_eq!(d[1], 1, "one at the owner: {d:?}");
    assert_eq!(d.iter().sum::<u64>(), 2, "{d:?}");
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );
}

async fn cells_that_keep_disagreeing_fail_after_two_attempts(ctx: &Ctx) {
    let ids = ctx.cell_ids();
    let owner = ids[0].clone();
    let wrong = ids[4].clone();
    let elsewhere = ids[3].clone();
    let t = ctx.tech_on(&owner, 2);
    // the owner gives the contractor up towards a third cell, which knows nothing of it
    let cell = &ctx.file.cells[0];
    let path = format!("/admin/v1/ownership/{}", t.contractor_id);
    let rec = ctx.admin(cell, Method::GET, &path, None).await;
    let g = rec["gen"].as_u64().unwrap();
    ctx.admin(
        cell,
        Method::PUT,
        &path,
        Some(serde_json::json!({"state": "handoff", "gen": g})),
    )
    .await;
    ctx.admin(
        cell,
        Method::PUT,
        &path,
        Some(serde_json::json!({"state": "released", "gen": g, "successor": elsewhere.as_str(), "successor_gen": g + 1})),
    )
    .await;
    let map = ctx.map_with(ctx.map.map.version, &[(&t.contractor_id, &wrong)]);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.builder(&map).store(store.clone()).build().unwrap();
    let before = ctx.sign_ins().await;
    let e = sign_in(&c, &t).await.unwrap_err();
    match &e {
        Error::CellsDisagree {
            first,
            second,
            named_owner,
        } => {
            assert_eq!(first, &wrong);
            assert_eq!(second, &owner);
            assert_eq!(named_owner.as_ref(), Some(&elsewhere));
        }
        e => panic!("expected CellsDisagree, got {e:?}"),
    }
    let d = delta(&before, &ctx.sign_ins().await);
    assert_eq!(
        d.iter().sum::<u64>(),
        2,
        "exactly two sign-in attempts: {d:?}"
    );
    assert_eq!(d[3], 0, "the third cell is never asked: {d:?}");
    assert!(store.load(StoreSlot::Session).unwrap().is_none());
    assert!(c.session().is_none());
}

async fn an_older_map_offered_by_a_cell_is_refused(ctx: &Ctx) {
    let cell = ctx.cell_ids()[3].clone();
    let t = ctx.tech_on(&cell, 3);
    let held = ctx.map.map.version + 10;
    let c = ctx
        .builder(&ctx.map_with(held, &[]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    sign_in(&c, &t).await.unwrap();
    let e = c.refresh_map().await.unwrap_err();
    assert!(
        matches!(e, Error::MapRefused(MapError::NotNewer { held: h, .. }) if h == held),
        "{e:?}"
    );
    assert_eq!(c.map().map.version, held, "the newer map held is kept");
    // and a client holding an older map than the cell's takes the cell's
    let older = ctx.map.map.version - 1;
    if older > 0 {
        let c = ctx
            .builder(&ctx.map_with(older, &[]))
            .store(Arc::new(MemoryStore::new()))
            .build()
            .unwrap();
        sign_in(&c, &t).await.unwrap();
        let u = c.refresh_map().await.unwrap();
        assert_eq!(u.version, ctx.map.map.version);
    }
}

async fn renewal_in_the_window_gets_a_new_session(ctx: &Ctx) {
    let cell = ctx.cell_ids()[1].clone();
    let t = ctx.tech_on(&cell, 4);
    let now = protocol::time::Clock::now(&protocol::time::SystemClock);
    let clock = FakeClock::at(now);
    let store = Arc::new(MemoryStore::new());
    let c = ctx
        .builder(&ctx.map_bytes)
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let first = sign_in(&c, &t).await.unwrap();
    // the phone believes 24 days went by: inside the renewal window
    clock.advance(24 * DAY);
    route_of(&c).await;
    let renewed = c.session().unwrap();
    assert_ne!(
        renewed.session_id, first.session_id,
        "a renewal mints a new session"
    );
    assert!(renewed.expires_at >= first.expires_at);
    assert!(
        store
            .load(StoreSlot::Session)
            .unwrap()
            .unwrap()
            .contains(renewed.session_id.as_str())
    );
}

async fn a_revoked_session_is_typed_and_clears_the_store(ctx: &Ctx) {
    let cell = ctx.cell_ids()[4].clone();
    let t = ctx.tech_on(&cell, 0);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.client(store.clone());
    sign_in(&c, &t).await.unwrap();
    // the same session on a second device, which signs out (the cell revokes it)
    let other_store = Arc::new(MemoryStore::new());
    other_store
        .save(
            StoreSlot::Session,
            &store.load(StoreSlot::Session).unwrap().unwrap(),
        )
        .unwrap();
    let other = ctx.client(other_store);
    other.restore().unwrap().unwrap();
    assert_eq!(
        other.sign_out().await.unwrap().outcome,
        cellbind_sdk::SignOut::Revoked
    );
    let deadline = tokio::time::Instant::now() + PROPAGATION_DEADLINE;
    let err = loop {
        match c.request(Method::GET, ROUTES, None).await {
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the revocation never reached the edge"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::SessionRevoked), "{err:?}");
    assert!(
        store.load(StoreSlot::Session).unwrap().is_none(),
        "revoked clears the store"
    );
    assert!(c.session().is_none());
    assert!(matches!(
        c.request(Method::GET, ROUTES, None).await,
        Err(Error::NotSignedIn)
    ));
}

async fn signed_in_file_store(ctx: &Ctx) -> (PathBuf, cellbind_sdk::SessionInfo) {
    let cell = ctx.cell_ids()[2].clone();
    let t = ctx.tech_on(&cell, 0);
    let path = ctx.dir.join("sdk-session.json");
    let c = ctx.client(Arc::new(FileStore::new(&path)));
    let info = sign_in(&c, &t).await.unwrap();
    route_of(&c).await;
    (path, info)
}

async fn restore_with_the_network_off(
    ctx: &Ctx,
    path: &Path,
    expected: &cellbind_sdk::SessionInfo,
) {
    let c = ctx.client(Arc::new(FileStore::new(path)));
    assert_eq!(c.restore().unwrap().as_ref(), Some(expected));
    assert_eq!(c.session().as_ref(), Some(expected));
    let e = c.request(Method::GET, ROUTES, None).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Network {
                kind: cellbind_sdk::NetworkErrorKind::Connect,
                reached_cell: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        c.session().as_ref(),
        Some(expected),
        "a network error keeps the session"
    );
}

// --- device-bound sessions (DPoP) ---------------------------------------------------------------

/// The device's clock, `skew_s` seconds off the real one (a phone whose clock is wrong).
#[derive(Debug)]
struct SkewedClock(i64);

impl Clock for SkewedClock {
    fn now(&self) -> u64 {
        u64::try_from(i64::try_from(SystemClock.now()).unwrap() + self.0).unwrap()
    }
}

/// Every event the client reports.
#[derive(Debug, Default)]
struct Events(Mutex<Vec<RequestEvent>>);

impl cellbind_sdk::RequestObserver for Events {
    fn on_request(&self, event: &RequestEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

impl Events {
    fn take(&self) -> Vec<RequestEvent> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A P-256 key "in a platform keystore": it answers in DER.
#[derive(Debug)]
struct KeystoreKey(SoftwareP256Key);

impl DeviceKey for KeystoreKey {
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
        Ok(self.0.public().clone())
    }
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
        let fixed = self
            .0
            .sign(message)
            .map_err(|e| DeviceKeyError(e.to_string()))?;
        let int = |half: &[u8]| {
            let mut v: Vec<u8> = half.iter().copied().skip_while(|b| *b == 0).collect();
            if v.first().is_none_or(|b| *b >= 0x80) {
                v.insert(0, 0);
            }
            let mut out = vec![0x02, u8::try_from(v.len()).unwrap()];
            out.extend(v);
            out
        };
        let mut body = int(&fixed[..32]);
        body.extend(int(&fixed[32..]));
        let mut der = vec![0x30, u8::try_from(body.len()).unwrap()];
        der.extend(body);
        Ok(der)
    }
}

/// The stored session blob of `store`, as JSON.
fn stored(store: &MemoryStore) -> serde_json::Value {
    serde_json::from_str(&store.load(StoreSlot::Session).unwrap().unwrap()).unwrap()
}

/// The thumbprint of the software key the SDK stored beside the session.
fn stored_key(store: &MemoryStore) -> Jkt {
    let pkcs8 = URL_SAFE_NO_PAD
        .decode(stored(store)["device_key"].as_str().unwrap())
        .unwrap();
    SoftwareP256Key::from_pkcs8(&pkcs8)
        .unwrap()
        .public()
        .thumbprint()
}

async fn write(c: &Client, job: &str) {
    let w = c
        .request(
            Method::POST,
            &format!("/api/jobs/{job}/complete"),
            Some(b"{}".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(w.status, 200, "{}", String::from_utf8_lossy(&w.body));
}

async fn sign_in_binds_the_session_to_the_device_key(ctx: &Ctx) {
    let ids = ctx.cell_ids();
    // the SDK's own key
    let t = ctx.tech_on(&ids[0], 10);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.client(store.clone());
    let info = sign_in(&c, &t).await.unwrap();
    let jkt = stored_key(&store);
    assert_eq!(
        info.key_thumbprint.as_ref(),
        Some(&jkt),
        "bound to the stored key"
    );
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );
    write(&c, "j-sdk-bound-1").await;

    // the app's key (a keystore's DER signatures), never stored
    let t = ctx.tech_on(&ids[1], 10);
    let key = Arc::new(KeystoreKey(SoftwareP256Key::generate().unwrap()));
    let app_jkt = key.0.public().thumbprint();
    let app_store = Arc::new(MemoryStore::new());
    let c = ctx
        .builder(&ctx.map_bytes)
        .store(app_store.clone())
        .device_key(key.clone())
        .build()
        .unwrap();
    let info = sign_in(&c, &t).await.unwrap();
    assert_eq!(info.key_thumbprint, Some(app_jkt.clone()));
    assert!(stored(&app_store).get("device_key").is_none());
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );

    // renewal keeps the binding (the phone believes 24 days went by: its proofs' `iat` is
    // corrected once from the refusal's `Date`)
    let clock = FakeClock::at(SystemClock.now());
    let c = ctx
        .builder(&ctx.map_bytes)
        .store(app_store.clone())
        .device_key(key)
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    assert_eq!(c.restore().unwrap().as_ref(), Some(&info));
    clock.advance(24 * DAY);
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );
    let renewed = c.session().unwrap();
    assert_ne!(renewed.session_id, info.session_id, "renewed");
    assert_eq!(
        renewed.key_thumbprint,
        Some(app_jkt),
        "still bound to the key"
    );
    write(&c, "j-sdk-bound-2").await;
}

async fn a_copied_token_without_the_key_is_refused(ctx: &Ctx) {
    let cell = ctx.cell_ids()[2].clone();
    let t = ctx.tech_on(&cell, 10);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.client(store.clone());
    let info = sign_in(&c, &t).await.unwrap();
    let token = stored(&store)["session"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // the token alone, as a thief who copied it would send it
    let endpoint = &info.endpoint;
    let r = ctx
        .http
        .get(endpoint.join(ROUTES))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "DPOP_PROOF_MISSING", "{body}");
    // and the device that holds the key is served all along
    route_of(&c).await;
}

async fn a_clock_ten_minutes_off_either_way_fails_nothing(ctx: &Ctx) {
    let ids = ctx.cell_ids();
    for (i, skew) in [-600_i64, 600].into_iter().enumerate() {
        let events = Arc::new(Events::default());
        let mut failed = vec![];
        for (n, cell) in ids.iter().enumerate().take(3) {
            let t = ctx.tech_on(cell, 13 + i);
            let c = ctx
                .builder(&ctx.map_bytes)
                .store(Arc::new(MemoryStore::new()))
                .clock(Arc::new(SkewedClock(skew)))
                .observer(events.clone())
                .build()
                .unwrap();
            if let Err(e) = sign_in(&c, &t).await {
                failed.push(format!("sign-in at {cell}: {e}"));
                continue;
            }
            for _ in 0..2 {
                if let Err(e) = c.request(Method::GET, ROUTES, None).await {
                    failed.push(format!("read at {cell}: {e}"));
                }
            }
            let job = format!("/api/jobs/j-sdk-skew-{i}-{n}/complete");
            if let Err(e) = c.request(Method::POST, &job, Some(b"{}".to_vec())).await {
                failed.push(format!("write at {cell}: {e}"));
            }
        }
        assert!(failed.is_empty(), "clock {skew:+} s: {failed:?}");
        for e in events.take() {
            assert_eq!(
                e.outcome,
                RequestOutcome::Answered,
                "clock {skew:+} s: {e:?}"
            );
            // a sign-in's first proof has no nonce yet (one retry with it); everything after
            // it is right the first time: the cell's time comes from its `Date`
            let want = if e.path == "/v1/sessions" { 2 } else { 1 };
            assert_eq!(e.attempts, want, "clock {skew:+} s: {e:?}");
        }
    }
}

async fn the_outbox_flushes_with_a_bound_session(ctx: &Ctx) {
    let cell = ctx.cell_ids()[3].clone();
    let t = ctx.tech_on(&cell, 10);
    let c = ctx.client(Arc::new(MemoryStore::new()));
    assert!(sign_in(&c, &t).await.unwrap().key_thumbprint.is_some());
    let queued: Vec<_> = (0..5)
        .map(|i| {
            c.enqueue(
                cellbind_sdk::Request::post(format!("/api/jobs/j-sdk-outbox-{i}/complete"))
                    .json(b"{}".to_vec()),
            )
            .unwrap()
        })
        .collect();
    let report = c.flush().await.unwrap();
    assert_eq!(
        report
            .delivered
            .iter()
            .map(|d| d.write.id)
            .collect::<Vec<_>>(),
        queued.iter().map(|w| w.id).collect::<Vec<_>>(),
        "{report:?}"
    );
    assert!(
        report.rejected.is_empty() && report.remaining == 0,
        "{report:?}"
    );
    assert!(report.delivered.iter().all(|d| d.response.status == 200));
}

async fn a_bound_session_follows_its_contractor_with_its_key(ctx: &Ctx) {
    let ids = ctx.cell_ids();
    let (source, target) = (ids[4].clone(), ids[0].clone());
    let t = ctx.tech_on(&source, 10);
    let store = Arc::new(MemoryStore::new());
    let c = ctx.client(store.clone());
    let info = sign_in(&c, &t).await.unwrap();
    let jkt = info.key_thumbprint.clone().unwrap();
    let out = tokio::process::Command::new(&ctx.cellctl)
        .arg("migrate")
        .arg(t.contractor_id.as_str())
        .args(["--to", target.as_str(), "--fleet"])
        .arg(&ctx.fleet_json)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "cellctl migrate: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // WRONG_CELL at the source, transfer (proved), rebind at the target (proved by the key)
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );
    let now = c.session().unwrap();
    assert_eq!(now.cell_id, target);
    assert_eq!(
        now.key_thumbprint,
        Some(jkt.clone()),
        "the rebound session keeps the key"
    );
    assert_eq!(stored_key(&store), jkt);
    write(&c, "j-sdk-moved-1").await;
}

async fn an_unbound_session_keeps_working_in_optional_mode(ctx: &Ctx) {
    let cell_id = ctx.cell_ids()[1].clone();
    let t = ctx.tech_on(&cell_id, 12);
    let cell = ctx.file.cells.iter().find(|c| c.id == cell_id).unwrap();
    // a sign-in without a proof (an SDK from before device binding): an unbound session
    let r = ctx
        .http
        .post(format!("{}/v1/sessions", cell.endpoint))
        .json(&serde_json::json!({
            "contractor_id": t.contractor_id.as_str(),
            "login": t.login,
            "password": t.password,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let answer: serde_json::Value = r.json().await.unwrap();
    // ... stored by that SDK, in its schema
    let blob = serde_json::json!({
        "schema": 1,
        "session": {
            "token": answer["session"],
            "session_id": answer["session_id"],
            "contractor_id": t.contractor_id.as_str(),
            "subject": answer["subject"],
            "cell_id": answer["cell_id"],
            "endpoint": cell.endpoint,
            "generation": answer["generation"],
            "expires_at": answer["expires_at"],
        },
    });
    let store = Arc::new(MemoryStore::new());
    store.save(StoreSlot::Session, &blob.to_string()).unwrap();
    let clock = FakeClock::at(SystemClock.now());
    let c = ctx
        .builder(&ctx.map_bytes)
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let info = c.restore().unwrap().unwrap();
    assert_eq!(info.key_thumbprint, None, "unbound");
    assert_eq!(
        route_of(&c).await["contractor_id"],
        t.contractor_id.as_str()
    );
    write(&c, "j-sdk-unbound-1").await;
    // it renews (unbound still: the cell keeps what the session was) and keeps working
    clock.advance(24 * DAY);
    route_of(&c).await;
    let renewed = c.session().unwrap();
    assert_ne!(renewed.session_id, info.session_id);
    assert_eq!(renewed.key_thumbprint, None);
    let v = stored(&store);
    assert_eq!(v["schema"], 2);
    assert!(v.get("device_key").is_none());
    write(&c, "j-sdk-unbound-2").await;
}

/// A bound client that makes one request, then waits (without a request) until the nonce the
/// edge gave it is stale; its next request is refused once for the nonce and retried with the
/// one the refusal carried. Returns the waiting task.
async fn idle_client_whose_nonce_goes_stale(ctx: &Ctx) -> tokio::task::JoinHandle<()> {
    let cell = ctx.cell_ids()[2].clone();
    let t = ctx.tech_on(&cell, 11);
    let events = Arc::new(Events::default());
    let c = ctx
        .builder(&ctx.map_bytes)
        .store(Arc::new(MemoryStore::new()))
        .observer(events.clone())
        .build()
        .unwrap();
    sign_in(&c, &t).await.unwrap();
    route_of(&c).await;
    // the nonce is of the 60-s step of its answer, accepted in that step and the next
    let step = protocol::dpop::NONCE_STEP_S;
    let stale_at = (SystemClock.now() / step + 2) * step + 1;
    let contractor = t.contractor_id.clone();
    tokio::spawn(async move {
        let wait = stale_at.saturating_sub(SystemClock.now());
        tokio::time::sleep(Duration::from_secs(wait)).await;
        events.take();
        let r = c.request(Method::GET, ROUTES, None).await.unwrap();
        let route: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(route["contractor_id"], contractor.as_str());
        let e = events.take();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].attempts, 2, "refused once for the stale nonce: {e:?}");
        assert_eq!(e[0].outcome, RequestOutcome::Answered);
    })
}
