//! Test fixtures: fake cells over real TLS (a throw-away CA), signed maps, a fast client.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use protocol::map::{CellEntry, MAP_SCHEMA, PlacementMap, SignedMap, SpkiPin, TlsPins};
use protocol::time::FakeClock;
use protocol::token::SigningKey;
use protocol::{CellId, ContractorId, ErrorBody, ErrorCode, Kid, SessionId};
use tokio::sync::Semaphore;

use crate::{Client, ClientBuilder, MemoryStore, RetryPolicy, SessionStore};

pub const NOW: u64 = 1_800_000_000;
pub const DAY: u64 = 24 * 3600;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The answer waits for a permit of this semaphore.
    pub gate: Option<Arc<Semaphore>>,
    /// A session answer bound to the key of the request's DPoP proof: its `session` becomes a
    /// token whose payload names that key (`cnf.jkt`), as a binding cell's would.
    pub bind: bool,
}

impl Reply {
    pub fn json(status: u16, v: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![],
            body: serde_json::to_vec(&v).unwrap(),
            gate: None,
            bind: false,
        }
    }
    /// A DPoP refusal as an edge answers it: the code, the challenge and the next nonce.
    pub fn proof_refused(code: ErrorCode, challenge: &str, nonce: &str) -> Self {
        Self::error(code)
            .header(
                "www-authenticate",
                &format!(r#"DPoP error="{challenge}", algs="ES256 EdDSA""#),
            )
            .header("dpop-nonce", nonce)
    }
    /// This session answer, bound to the request's proof key ([`Reply::bind`]).
    pub fn bound(mut self) -> Self {
        self.bind = true;
        self
    }
    pub fn error(code: ErrorCode) -> Self {
        Self::json(
            code.status().as_u16(),
            serde_json::to_value(ErrorBody::new(code, "scripted")).unwrap(),
        )
    }
    pub fn wrong_cell(owner: &FakeCell) -> Self {
        Self::wrong_cell_at(owner.id.as_str(), &owner.endpoint)
    }
    pub fn wrong_cell_at(owner: &str, endpoint: &str) -> Self {
        Self::json(
            409,
            serde_json::to_value(ErrorBody::wrong_cell(
                CellId::new(owner).unwrap(),
                endpoint.to_owned(),
            ))
            .unwrap(),
        )
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn gated(mut self, gate: Arc<Semaphore>) -> Self {
        self.gate = Some(gate);
        self
    }
}

/// What a fake cell received.
#[derive(Debug, Clone)]
pub struct Hit {
    pub method: String,
    pub path: String,
    /// The raw query string, as sent.
    pub query: Option<String>,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Hit {
    pub fn bearer(&self) -> Option<String> {
        self.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned)
    }
    pub fn idempotency_key(&self) -> Option<String> {
        self.headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
    /// The request's DPoP proof, parsed and its signature verified (`None` without one).
    pub fn proof(&self) -> Option<protocol::dpop::Proof> {
        let raw = self.headers.get("dpop")?.to_str().unwrap();
        let p = protocol::dpop::parse(raw).unwrap();
        p.verify_signature().unwrap();
        Some(p)
    }
}

/// A token whose payload names `jkt` as its key (`cnf.jkt`), as a bound session's does (the
/// fake cells never verify tokens).
pub fn bound_token(jkt: &protocol::Jkt) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let payload = serde_json::json!({
        "jti": SessionId::from_random(rand::random()).as_str(),
        "cnf": {"jkt": jkt.as_str()},
    });
    format!("e30.{}.c2ln", b64.encode(payload.to_string()))
}

/// An ECDSA `r || s` signature in DER, as Android Keystore and the Secure Enclave return it.
pub fn der_of(fixed: &[u8]) -> Vec<u8> {
    fn int(half: &[u8]) -> Vec<u8> {
        let mut v: Vec<u8> = half.iter().copied().skip_while(|b| *b == 0).collect();
        if v.first().is_none_or(|b| *b >= 0x80) {
            v.insert(0, 0);
        }
        let mut out = vec![0x02, u8::try_from(v.len()).unwrap()];
        out.extend(v);
        out
    }
    let mut body = int(&fixed[..32]);
    body.extend(int(&fixed[32..]));
    let mut out = vec![0x30, u8::try_from(body.len()).unwrap()];
    out.extend(body);
    out
}

#[derive(Debug, Default)]
pub struct Script {
    /// Answers used once each, in order, per "METHOD /path".
    pub once: HashMap<String, VecDeque<Reply>>,
    /// Answer when no once-answer is left.
    pub always: HashMap<String, Reply>,
    pub hits: Vec<Hit>,
}

/// A fake cell: any request is recorded and answered from its script (404 otherwise).
#[derive(Debug, Clone)]
pub struct FakeCell {
    pub id: CellId,
    pub endpoint: String,
    pub script: Arc<Mutex<Script>>,
    pub handle: axum_server::Handle<SocketAddr>,
}

impl FakeCell {
    pub fn push(&self, route: &str, reply: Reply) {
        let mut s = self.script.lock().unwrap();
        s.once.entry(route.to_owned()).or_default().push_back(reply);
    }
    pub fn always(&self, route: &str, reply: Reply) {
        self.script
            .lock()
            .unwrap()
            .always
            .insert(route.to_owned(), reply);
    }
    pub fn hits(&self, route: &str) -> Vec<Hit> {
        self.script
            .lock()
            .unwrap()
            .hits
            .iter()
            .filter(|h| format!("{} {}", h.method, h.path) == route)
            .cloned()
            .collect()
    }
    pub fn all_hits(&self) -> usize {
        self.script.lock().unwrap().hits.len()
    }
    /// Answers sign-in (and renewals) with a fresh session of this cell.
    pub fn accept_sign_in(&self, expires_at: u64) {
        self.always(
            "POST /v1/sessions",
            Reply::json(201, self.session_answer(expires_at, "tok.sign.in")),
        );
    }
    pub fn session_answer(&self, expires_at: u64, token: &str) -> serde_json::Value {
        serde_json::json!({
            "session": token,
            "session_id": SessionId::from_random(rand::random()).as_str(),
            "cell_id": self.id.as_str(),
            "endpoint": self.endpoint,
            "generation": 3,
            "expires_at": expires_at,
            "subject": "c-40711.ana",
        })
    }
}

async fn handle(State(script): State<Arc<Mutex<Script>>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let route = format!("{} {}", parts.method, parts.uri.path());
    let reply = {
        let mut s = script.lock().unwrap();
        s.hits.push(Hit {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers.clone(),
            body,
        });
        let once = s.once.get_mut(&route).and_then(VecDeque::pop_front);
        once.or_else(|| s.always.get(&route).cloned())
    };
    let Some(reply) = reply else {
        return Response::builder()
            .status(404)
            .body(Body::from("no such route"))
            .unwrap();
    };
    if let Some(g) = &reply.gate {
        g.acquire().await.unwrap().forget();
    }
    let mut reply = reply;
    if reply.bind
        && let Some(raw) = parts.headers.get("dpop").and_then(|v| v.to_str().ok())
    {
        let jkt = protocol::dpop::parse(raw).unwrap().jkt().clone();
        let mut v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        v["session"] = bound_token(&jkt).into();
        reply.body = serde_json::to_vec(&v).unwrap();
    }
    let mut b = Response::builder()
        .status(reply.status)
        .header("content-type", "application/json");
    for (k, v) in &reply.headers {
        b = b.header(k, v);
    }
    b.body(Body::from(reply.body)).unwrap()
}

/// A few fake cells with one CA, and the control plane's map key.
#[derive(Debug)]
pub struct FakeFleet {
    pub ca_pem: String,
    pub cells: Vec<FakeCell>,
    pub map_key: SigningKey,
    pub clock: FakeClock,
    /// The pin of the certificate every fake cell serves.
    pub pin: SpkiPin,
}

impl FakeFleet {
    pub async fn start(n: usize) -> FakeFleet {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let pin = {
            use rcgen::PublicKeyData as _;
            SpkiPin::of_spki_der(&leaf_key.subject_public_key_info())
        };
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
            leaf.pem().into_bytes(),
            leaf_key.serialize_pem().into_bytes(),
        )
        .await
        .unwrap();
        let mut cells = vec![];
        for i in 1..=n {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let script = Arc::new(Mutex::new(Script::default()));
            let app = axum::Router::new()
                .fallback(handle)
                .with_state(script.clone());
            let handle = axum_server::Handle::new();
            let server = axum_server::from_tcp_rustls(listener, tls.clone())
                .unwrap()
                .handle(handle.clone());
            tokio::spawn(async move {
                let _ = server.serve(app.into_make_service()).await;
            });
            cells.push(FakeCell {
                id: CellId::new(format!("cell-0{i}")).unwrap(),
                endpoint: format!("https://127.0.0.1:{port}"),
                script,
                handle,
            });
        }
        FakeFleet {
            ca_pem: ca_cert.pem(),
            cells,
            map_key: SigningKey::from_seed(Kid::new("cp-test").unwrap(), &[7; 32]).unwrap(),
            clock: FakeClock::at(NOW),
            pin,
        }
    }

    /// The pins of the served certificate, as the fixture maps publish them.
    pub fn pins(&self) -> TlsPins {
        TlsPins {
            current: self.pin,
            next: None,
        }
    }

    /// A signed map like [`FakeFleet::map`] whose cells all have `pins`.
    pub fn map_with_pins(&self, version: u64, pins: TlsPins) -> SignedMap {
        let mut map = self.map(version, &[]).map;
        for c in &mut map.cells {
            c.tls_pins = Some(pins);
        }
        map.sign(&self.map_key).unwrap()
    }

    /// A signed map: every bucket on cell index 0, plus overrides.
    pub fn map(&self, version: u64, overrides: &[(&str, usize)]) -> SignedMap {
        PlacementMap {
            schema: MAP_SCHEMA,
            version,
            issued_at: NOW,
            cells: self
                .cells
                .iter()
                .map(|c| CellEntry {
                    id: c.id.clone(),
                    endpoint: c.endpoint.clone(),
                    tls_pins: Some(self.pins()),
                })
                .collect(),
            buckets: vec![0; 8],
            overrides: overrides
                .iter()
                .map(|(c, i)| (ContractorId::new(*c).unwrap(), self.cells[*i].id.clone()))
                .collect(),
        }
        .sign(&self.map_key)
        .unwrap()
    }

    pub fn builder(&self, map: &SignedMap) -> ClientBuilder {
        Client::builder(map.to_json().unwrap(), self.map_key.public_key())
            .extra_ca_pem(self.ca_pem.clone())
            .clock(Arc::new(self.clock.clone()))
            .retry_policy(fast_retries())
    }

    pub fn client(&self, map: &SignedMap, store: Arc<dyn SessionStore>) -> Client {
        self.builder(map).store(store).build().unwrap()
    }

    pub fn client_mem(&self, map: &SignedMap) -> (Client, Arc<MemoryStore>) {
        let store = Arc::new(MemoryStore::new());
        (self.client(map, store.clone()), store)
    }
}

pub fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        min_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(2),
    }
}

/// A source cell's answer to `POST /v1/sessions/transfer`: a ticket for `owner`.
pub fn transfer_answer(owner: &FakeCell) -> Reply {
    Reply::json(
        200,
        serde_json::json!({
            "ticket": "tic.ket.sig",
            "target_cell": owner.id.as_str(),
            "target_endpoint": owner.endpoint,
        }),
    )
}

/// Polls `cond` until it holds or `deadline` passes.
pub async fn eventually(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + deadline;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
