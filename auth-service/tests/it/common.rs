//! Test fixtures: a throwaway CA and certificate, token files, a config, and a oneshot driver.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method, Request, StatusCode};
pub use cellbind_auth_service::Listener;
use cellbind_auth_service::{AppState, Config};
use http_body_util::BodyExt as _;
use protocol::map::{CellEntry, MAP_SCHEMA, PlacementMap, SignedMap};
use protocol::time::FakeClock;
use protocol::token::SigningKey;
use protocol::{CellId, ContractorId, Kid};
use serde_json::{Value, json};
use tower::ServiceExt as _;

pub const ADMIN: &str = "admin-token-for-tests-0123456789";
/// The cell's feed secret (the auth-service's `feed_token_file`); edges present credentials
/// derived from it ([`feed_for`]).
pub const FEED_SECRET: &str = "feed-token-for-tests-0123456789";
pub const EDGE: &str = "edge-token-for-tests-0123456789";
pub const CELL: &str = "cell-01";
pub const ISSUER: &str = "https://127.0.0.1:8443";
/// Start of the fake clock (2026-01-01).
pub const T0: u64 = 1_767_225_600;

/// The feed credential of edge instance `instance` of this cell (`runtime::feed_credential`).
pub fn feed_for(instance: &str) -> &'static str {
    let c = runtime::feed_credential::derive(
        &runtime::Secret::new(FEED_SECRET),
        &CellId::new(CELL).unwrap(),
        &protocol::InstanceId::new(instance).unwrap(),
    );
    Box::leak(c.expose().to_owned().into_boxed_str())
}

pub struct Tls {
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A CA and a leaf for 127.0.0.1, written into `dir`.
pub fn make_tls(dir: &Path) -> Tls {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cellbind test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let tls = Tls {
        ca_pem: ca_cert.pem(),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        ca: dir.join("ca.pem"),
    };
    std::fs::write(&tls.cert, leaf.pem()).unwrap();
    runtime::secret::write_private(&tls.key, leaf_key.serialize_pem().as_bytes()).unwrap();
    std::fs::write(&tls.ca, &tls.ca_pem).unwrap();
    tls
}

/// The control plane's map key used in tests.
pub fn map_key() -> SigningKey {
    SigningKey::from_seed(Kid::new("map-1").unwrap(), &[42; 32]).unwrap()
}

pub fn map_key_b64() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(map_key().public_bytes())
}

/// A signed map with cells 01..=03; every bucket on cell-02 except overrides.
pub fn signed_map(version: u64, overrides: &[(&str, &str)]) -> SignedMap {
    signed_map_at(version, overrides, &[])
}

/// [`signed_map`] with some cells' endpoints replaced: `(cell, endpoint)`.
pub fn signed_map_at(
    version: u64,
    overrides: &[(&str, &str)],
    endpoints: &[(&str, &str)],
) -> SignedMap {
    let endpoint = |n: u8| {
        let id = format!("cell-0{n}");
        endpoints.iter().find(|(c, _)| *c == id).map_or_else(
            || format!("https://127.0.0.{n}:8443"),
            |(_, e)| (*e).to_owned(),
        )
    };
    PlacementMap {
        schema: MAP_SCHEMA,
        version,
        issued_at: T0,
        cells: (1..=3)
            .map(|n| CellEntry {
                id: CellId::new(format!("cell-0{n}")).unwrap(),
                endpoint: endpoint(n),
                // The auth-service serves the map; it does not check pins.
                tls_pins: Some(protocol::map::TlsPins {
                    current: protocol::map::SpkiPin::from_sha256([n; 32]),
                    next: None,
                }),
            })
            .collect(),
        buckets: vec![1; 16],
        overrides: overrides
            .iter()
            .map(|(c, cell)| (ContractorId::new(*c).unwrap(), CellId::new(*cell).unwrap()))
            .collect(),
    }
    .sign(&map_key())
    .unwrap()
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    pub config: Config,
    pub clock: FakeClock,
    pub state: AppState,
}

/// Writes the admin, feed and edge token files into `dir` (0600: a server refuses a secret
/// file others can read).
pub fn write_tokens(dir: &Path) {
    let write = |name: &str, text: &str| {
        runtime::secret::write_private(&dir.join(name), text.as_bytes()).unwrap();
    };
    write("admin.token", &format!("{ADMIN}\n"));
    write("feed.token", FEED_SECRET);
    write("edge.token", EDGE);
}

/// The suite's store: SQLite, or with `CELLBIND_TEST_STORE=postgres` a fresh database per
/// fixture on one private PostgreSQL server for the whole test binary.
pub fn store_toml(dir: &Path) -> String {
    static SERVER: std::sync::OnceLock<(devfleet::PgServer, tempfile::TempDir)> =
        std::sync::OnceLock::new();
    static NEXT_DB: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    match std::env::var(devfleet::TEST_STORE_ENV).as_deref() {
        Ok("postgres") => {
            let (server, _) = SERVER.get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let server = devfleet::PgServer::start_for_process(dir.path(), 400)
                    .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"));
                (server, dir)
            });
            let db = format!(
                "it_{}",
                NEXT_DB.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            server.create_database(&db).unwrap();
            let url_file = dir.join(format!("postgres-{db}.url"));
            runtime::secret::write_private(&url_file, server.url(&db).as_bytes()).unwrap();
            format!(
                "store = \"postgres\"\ndatabase_url_file = \"{}\"\ndatabase_max_connections = 4\n",
                url_file.display()
            )
        }
        Ok("sqlite") | Err(_) => String::new(),
        Ok(other) => panic!("{}={other}: sqlite or postgres", devfleet::TEST_STORE_ENV),
    }
}

/// Whether the suite runs on PostgreSQL (see [`store_toml`]).
pub fn config_toml_uses_postgres() -> bool {
    std::env::var(devfleet::TEST_STORE_ENV).as_deref() == Ok("postgres")
}

pub fn config_toml(dir: &Path, tls: &Tls, listen: &str, internal: &str, extra: &str) -> String {
    let store = store_toml(dir);
    format!(
        r#"
cell_id = "{CELL}"
listen = "{listen}"
internal_listen = "{internal}"
management_listen = "127.0.0.1:0"
issuer = "{ISSUER}"
data_dir = "{data}"
kek_file = "{data}/kek.bin"
admin_token_file = "{dir}/admin.token"
feed_token_file = "{dir}/feed.token"
edge_token_file = "{dir}/edge.token"
tls_cert = "{cert}"
tls_key = "{key}"
ca_cert = "{ca}"
map_public_key = "{mk}"
{store}
{extra}
"#,
        data = dir.join("data").display(),
        dir = dir.display(),
        cert = tls.cert.display(),
        key = tls.key.display(),
        ca = tls.ca.display(),
        mk = map_key_b64(),
    )
}

impl Fixture {
    pub async fn new() -> Fixture {
        Self::with_extra("").await
    }

    pub async fn with_extra(extra: &str) -> Fixture {
        Self::build(ISSUER, extra, None).await
    }

    /// A fixture whose cell (cell-01) has the issuer (public endpoint) `issuer`.
    pub async fn with_issuer(issuer: &str, extra: &str) -> Fixture {
        Self::build(issuer, extra, None).await
    }

    /// A cell with a database of its own but `other`'s key-encryption key: the same cell
    /// rebuilt on a new machine (a restore there needs the key the backup was taken with).
    pub async fn sharing_kek_of(other: &Fixture) -> Fixture {
        Self::build(ISSUER, "", Some(&other.config.kek_file)).await
    }

    async fn build(issuer: &str, extra: &str, kek: Option<&Path>) -> Fixture {
        runtime::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let tls = make_tls(dir.path());
        write_tokens(dir.path());
        if let Some(kek) = kek {
            use std::os::unix::fs::PermissionsExt as _;
            let data = dir.path().join("data");
            std::fs::create_dir_all(&data).unwrap();
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::copy(kek, data.join("kek.bin")).unwrap();
        }
        let toml = config_toml(dir.path(), &tls, "127.0.0.1:0", "127.0.0.1:0", extra)
            .replace(ISSUER, issuer);
        let config = Config::from_toml(&toml).unwrap();
        let clock = FakeClock::at(T0);
        let state = cellbind_auth_service::open_with_clock(config.clone(), Arc::new(clock.clone()))
            .await
            .unwrap();
        Fixture {
            dir,
            tls,
            config,
            clock,
            state,
        }
    }

    /// Another replica of `other`'s cell: a second state over the same store and clock.
    pub async fn replica_of(other: &Fixture) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let tls = make_tls(dir.path());
        let state = other.reopen().await;
        Fixture {
            dir,
            tls,
            config: other.config.clone(),
            clock: other.clock.clone(),
            state,
        }
    }

    /// Reopens the same data directory (a restart in-process).
    pub async fn reopen(&self) -> AppState {
        cellbind_auth_service::open_with_clock(self.config.clone(), Arc::new(self.clock.clone()))
            .await
            .unwrap()
    }

    /// A request on the PUBLIC listener (no socket peer recorded).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> Resp {
        call(&self.state, method, path, headers, body).await
    }

    /// A request on the INTERNAL listener (every route).
    pub async fn call_internal(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> Resp {
        call_on(
            &self.state,
            Listener::Internal,
            None,
            method,
            path,
            headers,
            body,
        )
        .await
    }

    /// A request on the MANAGEMENT listener (`/healthz`, `/readyz`, `/metrics`).
    pub async fn call_management(&self, method: Method, path: &str) -> Resp {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let router = cellbind_auth_service::management_router(self.state.clone());
        answer(router.oneshot(req).await.unwrap()).await
    }

    /// The management listener's `/metrics` text.
    pub async fn metrics(&self) -> String {
        let r = self.call_management(Method::GET, "/metrics").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.text
    }

    /// A request on the PUBLIC listener from socket peer `peer`.
    pub async fn call_from(
        &self,
        peer: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> Resp {
        call_on(
            &self.state,
            Listener::Public,
            Some(peer),
            method,
            path,
            headers,
            body,
        )
        .await
    }

    pub async fn admin(&self, method: Method, path: &str, body: Value) -> Resp {
        let auth = format!("Bearer {ADMIN}");
        let body = if body.is_null() {
            Body::empty()
        } else {
            Body::from(body.to_string())
        };
        self.call_internal(
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

    pub async fn feed(&self, since: u64) -> Value {
        let auth = format!("Bearer {}", feed_for("test-1"));
        let r = self
            .call_internal(
                Method::GET,
                &format!("/internal/v1/feed?since={since}&instance=test-1"),
                &[("authorization", &auth)],
                Body::empty(),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        r.json
    }

    pub async fn head(&self) -> u64 {
        self.feed(0).await["head"].as_u64().unwrap()
    }

    /// Adds a user with a password and makes its contractor active at `gen`.
    pub async fn seed(&self, ctr: &str, login: &str, password: &str, generation: u64) {
        let r = self
            .admin(
                Method::POST,
                "/admin/v1/users",
                json!({"contractor_id": ctr, "login": login, "role": "technician", "password": password}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json);
        let r = self
            .admin(
                Method::PUT,
                &format!("/admin/v1/ownership/{ctr}"),
                json!({"state": "active", "gen": generation}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    }

    pub async fn sign_in(&self, ctr: &str, login: &str, password: &str, client: &str) -> Resp {
        self.call(
            Method::POST,
            "/v1/sessions",
            &[("content-type", "application/json")],
            Body::from(
                json!({"contractor_id": ctr, "login": login, "password": password, "client": client})
                    .to_string(),
            ),
        )
        .await
    }

    pub async fn with_session(&self, method: Method, path: &str, token: &str) -> Resp {
        let auth = format!("Bearer {token}");
        self.call(method, path, &[("authorization", &auth)], Body::empty())
            .await
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
    pub text: String,
}

/// A request on the PUBLIC listener.
pub async fn call(
    state: &AppState,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Resp {
    call_on(state, Listener::Public, None, method, path, headers, body).await
}

/// A request on one listener, with the socket peer the server would have recorded.
pub async fn call_on(
    state: &AppState,
    listener: Listener,
    peer: Option<SocketAddr>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Resp {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(body).unwrap();
    if let Some(p) = peer {
        req.extensions_mut().insert(ConnectInfo(p));
    }
    let router = match listener {
        Listener::Public => cellbind_auth_service::public_router(state.clone()),
        Listener::Internal => cellbind_auth_service::internal_router(state.clone()),
    };
    answer(router.oneshot(req).await.unwrap()).await
}

/// An auth-service served over TLS by this process (the three listeners of
/// `cellbind_auth_service::serve_until`), stopped by [`Served::stop`] or when dropped.
pub struct Served {
    /// The public listener's address.
    pub public: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<cellbind_auth_service::Result<()>>>,
}

impl Served {
    /// Serves `state`, its public listener on `public` (already bound), with a certificate
    /// the CA `ca_pem` issued.
    pub async fn start(state: &AppState, public: std::net::TcpListener, ca_pem: &str) -> Served {
        let addr = public.local_addr().unwrap();
        let internal = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let management = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(cellbind_auth_service::serve_until(
            state.clone(),
            public,
            internal,
            management,
            async move {
                let _ = rx.await;
            },
        ));
        // Up once the listener answers a TLS request (the socket accepts before that).
        let client = cellbind_auth_service::client_trusting(ca_pem.as_bytes()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while client
            .get(format!("https://{addr}/healthz"))
            .send()
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{addr} never answered"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Served {
            public: addr,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops serving and waits until every listener is closed.
    pub async fn stop(mut self) {
        self.halt().await;
    }

    async fn halt(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A response read whole.
async fn answer(resp: axum::response::Response) -> Resp {
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        json,
        text,
    }
}

/// Decodes one base64url JWS segment as JSON.
pub fn segment(token: &str, i: usize) -> Value {
    use base64::Engine as _;
    let part = token.split('.').nth(i).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap(),
    )
    .unwrap()
}

/// A phone with its own P-256 device key, making `DPoP` proofs (RFC 9449) for the cell whose
/// public endpoint is `issuer`, at the time of `clock`.
pub struct Device {
    pub key: protocol::dpop::SoftwareP256Key,
    builder: protocol::dpop::ProofBuilder,
    issuer: String,
    clock: FakeClock,
}

impl Device {
    pub fn new(issuer: &str, clock: &FakeClock) -> Device {
        let key = protocol::dpop::SoftwareP256Key::generate().unwrap();
        let builder = protocol::dpop::ProofBuilder::new(key.public());
        Device {
            key,
            builder,
            issuer: issuer.trim_end_matches('/').to_owned(),
            clock: clock.clone(),
        }
    }

    /// The same device key, making proofs for the cell whose endpoint is `issuer` (after a
    /// transfer).
    pub fn at(&self, issuer: &str) -> Device {
        let key = protocol::dpop::SoftwareP256Key::from_pkcs8(self.key.pkcs8()).unwrap();
        let builder = protocol::dpop::ProofBuilder::new(key.public());
        Device {
            key,
            builder,
            issuer: issuer.trim_end_matches('/').to_owned(),
            clock: self.clock.clone(),
        }
    }

    /// The key's thumbprint (`cnf.jkt`).
    pub fn jkt(&self) -> String {
        self.key.public().thumbprint().to_string()
    }

    /// A fresh proof (new `jti`, `iat` now) for `method` on `path` at the cell, with the
    /// server's `nonce` and, for a request presenting a session, its hash (`ath`).
    pub fn proof(
        &self,
        method: &str,
        path: &str,
        nonce: Option<&str>,
        token: Option<&str>,
    ) -> String {
        use protocol::time::Clock as _;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let claims = protocol::dpop::ProofClaims {
            jti: format!("proof-{n}-{}", self.clock.now()),
            htm: method.to_owned(),
            htu: protocol::dpop::htu(&self.issuer, path),
            iat: self.clock.now(),
            ath: token.map(protocol::dpop::token_hash),
            nonce: nonce.map(str::to_owned),
        };
        let input = self.builder.signing_input(&claims).unwrap();
        let signature = self.key.sign(input.as_bytes()).unwrap();
        protocol::dpop::ProofBuilder::finish(input, &signature).unwrap()
    }
}

/// The `DPoP-Nonce` an answer offers.
pub fn dpop_nonce(r: &Resp) -> String {
    r.headers
        .get(protocol::dpop::DPOP_NONCE_HEADER)
        .unwrap_or_else(|| panic!("no DPoP-Nonce in {:?}", r.headers))
        .to_str()
        .unwrap()
        .to_owned()
}

/// A `401` refusing a proof with `code`; `challenge`: the RFC 9449 `error` of the
/// `WWW-Authenticate: DPoP` challenge (with a `DPoP-Nonce`) the answer must carry, or `None`
/// when it must carry neither (a refusal of what the edge asserted).
pub fn assert_dpop_refused(r: &Resp, code: &str, challenge: Option<&str>) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
    assert_eq!(r.json["error"], code, "{:?}", r.json);
    let www = r
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap());
    match challenge {
        Some(error) => {
            let www = www.unwrap_or_else(|| panic!("no challenge in {:?}", r.headers));
            assert!(www.starts_with("DPoP "), "{www}");
            assert!(www.contains(&format!("error=\"{error}\"")), "{www}");
            assert!(!dpop_nonce(r).is_empty());
        }
        None => {
            assert_eq!(www, None, "{:?}", r.headers);
            assert!(
                r.headers.get(protocol::dpop::DPOP_NONCE_HEADER).is_none(),
                "{:?}",
                r.headers
            );
        }
    }
}
