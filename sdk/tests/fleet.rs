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

use cellbind_sdk::{Client, Error, FileStore, MemoryStore, SessionStore, StoreSlot};
use devfleet::{DemoUser, Fleet, FleetFile, FleetOptions};
use http::Method;
use protocol::jwks::PublicKey;
use protocol::map::{MapError, SignedMap};
use protocol::time::FakeClock;
use protocol::token::SigningKey;
use protocol::{CellId, ContractorId, Kid, Login, Password};

const DEFAULT_PORT_BASE: u16 = 9840;
const ROUTES: &str = "/api/routes/today";
const DAY: u64 = 24 * 3600;
/// Longest wait for something the fleet propagates (revocations reach the edges through the
/// feed within seconds).
const PROPAGATION_DEADLINE: Duration = Duration::from_secs(30);

struct Ctx {
    file: FleetFile,
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
    let bins = &opts.bin_dir;
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
        file,
        dir,
        http,
        ca_pem,
        map_bytes,
        map,
        map_key,
        signer,
    };

    first_sign_in_with_the_built_in_map(&ctx).await;
    a_wrong_override_costs_one_hop(&ctx).await;
    cells_that_keep_disagreeing_fail_after_two_attempts(&ctx).await;
    an_older_map_offered_by_a_cell_is_refused(&ctx).await;
    renewal_in_the_window_gets_a_new_session(&ctx).await;
    a_revoked_session_is_typed_and_clears_the_store(&ctx).await;
    let (restorable, expected) = signed_in_file_store(&ctx).await;

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
