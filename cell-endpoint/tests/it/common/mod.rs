//! Shared fixtures for the in-process tests: a cell state built from a signing key made in
//! the test, tokens minted or hand-crafted with it, and a recording app.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use axum::routing::any;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::upstream::Upstreams;
use cellbind_cell_endpoint::{Edge, Settings};
use protocol::feed::{FeedKey, KeyStatus, Snapshot};
use protocol::map::{CellEntry, PlacementMap, SignedMap};
use protocol::ownership::OwnershipRecord;
use protocol::time::{FakeClock, SharedClock};
use protocol::token::{DEFAULT_SESSION_LIFETIME_S, SessionClaims, SigningKey};
use protocol::{CellId, ClientKind, ContractorId, Generation, Kid, SessionId, SubjectId};
use tower::ServiceExt as _;

pub const NOW: u64 = 1_790_000_000;
pub const CELL: &str = "cell-03";
pub const ISSUER: &str = "https://127.0.0.3:8443";
pub const OTHER_CELL: &str = "cell-04";
pub const OTHER_ENDPOINT: &str = "https://127.0.0.4:8443";
/// Active here at generation 1.
pub const CTR: &str = "c-40711";
/// In handoff here at generation 1.
pub const CTR_HANDOFF: &str = "c-50000";
/// Released here at generation 1 to cell-04 at generation 2.
pub const CTR_RELEASED: &str = "c-60000";
/// No record here; the map's override sends it to cell-04.
pub const CTR_ELSEWHERE: &str = "c-70000";
/// No record here; the map's override says this cell.
pub const CTR_NOWHERE: &str = "c-80000";

pub fn cell() -> CellId {
    CellId::new(CELL).unwrap()
}

pub fn key(kid: &str, seed: u8) -> SigningKey {
    SigningKey::from_seed(Kid::new(kid).unwrap(), &[seed; 32]).unwrap()
}

/// The cell's current signing key.
pub fn cell_key() -> SigningKey {
    key("k-2026-11", 7)
}

pub fn map_key() -> SigningKey {
    key("map-1", 99)
}

pub fn claims(ctr: &str, generation: u64) -> SessionClaims {
    SessionClaims {
        iss: ISSUER.into(),
        aud: cell(),
        sub: SubjectId::new(format!("{ctr}.tech1")).unwrap(),
        ctr: ContractorId::new(ctr).unwrap(),
        cell: cell(),
        generation: Generation(generation),
        iat: NOW,
        nbf: NOW,
        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
        auth_time: NOW,
        jti: SessionId::from_random(rand::random()),
        cli: ClientKind::Field,
        cnf: None,
    }
}

pub fn mint(c: &SessionClaims) -> String {
    cell_key().mint(c).unwrap().expose().to_owned()
}

pub fn session() -> String {
    mint(&claims(CTR, 1))
}

pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A compact JWS with exactly this header and payload text, signed with `k`.
pub fn craft(k: &SigningKey, header: &str, payload: &str) -> String {
    let input = format!("{}.{}", b64(header.as_bytes()), b64(payload.as_bytes()));
    let sig = k.sign_raw(input.as_bytes());
    format!("{input}.{}", b64(&sig))
}

pub fn header_json(kid: &str) -> String {
    format!(r#"{{"alg":"EdDSA","typ":"cellbind-session+jwt","kid":"{kid}"}}"#)
}

pub fn feed_key(k: &SigningKey, status: KeyStatus) -> FeedKey {
    FeedKey {
        kid: k.kid().clone(),
        x: b64(&k.public_bytes()),
        status,
        created_at: NOW - 3600,
    }
}

/// Pins that no certificate here has: the edge serves the map, it does not check pins.
fn any_pins() -> protocol::map::TlsPins {
    protocol::map::TlsPins {
        current: protocol::map::SpkiPin::from_sha256([7; 32]),
        next: None,
    }
}

pub fn signed_map(version: u64) -> SignedMap {
    let overrides = BTreeMap::from([
        (
            ContractorId::new(CTR_ELSEWHERE).unwrap(),
            CellId::new(OTHER_CELL).unwrap(),
        ),
        (ContractorId::new(CTR_NOWHERE).unwrap(), cell()),
    ]);
    PlacementMap {
        schema: protocol::map::MAP_SCHEMA,
        version,
        issued_at: NOW - 60,
        cells: vec![
            CellEntry {
                id: cell(),
                endpoint: ISSUER.into(),
                tls_pins: Some(any_pins()),
            },
            CellEntry {
                id: CellId::new(OTHER_CELL).unwrap(),
                endpoint: OTHER_ENDPOINT.into(),
                tls_pins: Some(any_pins()),
            },
        ],
        buckets: vec![0, 1],
        overrides,
    }
    .sign(&map_key())
    .unwrap()
}

pub fn snapshot() -> Snapshot {
    let ownership = BTreeMap::from([
        (
            ContractorId::new(CTR).unwrap(),
            OwnershipRecord::Active {
                generation: Generation(1),
            },
        ),
        (
            ContractorId::new(CTR_HANDOFF).unwrap(),
            OwnershipRecord::Handoff {
                generation: Generation(1),
            },
        ),
        (
            ContractorId::new(CTR_RELEASED).unwrap(),
            OwnershipRecord::Released {
                generation: Generation(1),
                successor: CellId::new(OTHER_CELL).unwrap(),
                successor_gen: Generation(2),
            },
        ),
    ]);
    Snapshot {
        keys: vec![feed_key(&cell_key(), KeyStatus::Current)],
        ownership,
        revocations: vec![],
        map: Some(signed_map(1)),
    }
}

pub fn state() -> CellState {
    CellState::from_snapshot(cell(), 10, 10, NOW, snapshot()).unwrap()
}

/// What the recording app saw.
#[derive(Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<(String, HeaderMap)>>>);

impl Seen {
    pub fn last(&self) -> (String, HeaderMap) {
        self.0.lock().unwrap().last().cloned().unwrap()
    }
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// An app that records each request and answers 200 `{"ok":true}`.
pub fn recording_app() -> (Router, Seen) {
    let seen = Seen::default();
    let s = seen.clone();
    let app = Router::new().fallback(any(move |req: Request<Body>| {
        let s = s.clone();
        async move {
            s.0.lock()
                .unwrap()
                .push((req.uri().to_string(), req.headers().clone()));
            (StatusCode::OK, axum::Json(serde_json::json!({"ok": true})))
        }
    }));
    (app, seen)
}

pub fn settings() -> Settings {
    Settings::new(cell(), ISSUER)
}

pub fn clock() -> (SharedClock, FakeClock) {
    let c = FakeClock::at(NOW);
    (Arc::new(c.clone()), c)
}

/// An edge holding [`state`], lease current, with a recording app and no auth-service.
pub fn edge() -> (Edge, Seen, FakeClock) {
    edge_with(settings(), None)
}

pub fn edge_with(settings: Settings, auth: Option<Router>) -> (Edge, Seen, FakeClock) {
    let (app, seen) = recording_app();
    let (shared, fake) = clock();
    let edge = Edge::new(settings, shared, Upstreams::local(auth, Some(app)));
    edge.install(state());
    edge.mark_synced();
    (edge, seen, fake)
}

pub fn get(path: &str, token: Option<&str>) -> Request<Body> {
    req("GET", path, token)
}

pub fn req(method: &str, path: &str, token: Option<&str>) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(Body::empty()).unwrap()
}

/// Sends one request through the whole edge service.
pub async fn send(edge: &Edge, req: Request<Body>) -> (StatusCode, HeaderMap, serde_json::Value) {
    let resp: Response<Body> = cellbind_cell_endpoint::app(edge.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, headers, json)
}

/// The error code of an answer.
pub fn code(v: &serde_json::Value) -> &str {
    v["error"].as_str().unwrap_or("")
}
