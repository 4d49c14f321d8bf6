//! Edge benchmark (run in release: `cargo bench -p cellbind-cell-endpoint --bench edge`).
//! Prints a table of medians measured in this one run:
//! - raw Ed25519 `PublicKey::verify` over a session's signing input;
//! - cold validation (a token never seen: parse, key lookup, verify, claims, revocation,
//!   ownership) vs raw verify — target ≤ 1.2×;
//! - cached validation (a repeat token) — target ≤ 1 µs;
//! - `/api` through the whole edge service (in-process `oneshot`) with validation, vs the same
//!   edge forwarding an unauthenticated route — target ratio ≥ 0.9 with repeat tokens.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::routing::any;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_cell_endpoint::config::UpstreamHttp;
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::upstream::{Target, Upstreams};
use cellbind_cell_endpoint::{Edge, Settings};
use protocol::feed::{FeedKey, KeyStatus, Snapshot};
use protocol::ownership::{Access, OwnershipRecord};
use protocol::time::FakeClock;
use protocol::token::{DEFAULT_SESSION_LIFETIME_S, SessionClaims, SigningKey};
use protocol::{CellId, ClientKind, ContractorId, Generation, Kid, SessionId, SubjectId};
use tower::ServiceExt as _;

const NOW: u64 = 1_790_000_000;
const ISSUER: &str = "https://127.0.0.3:8443";
/// Samples per measurement; each sample times a batch and divides.
const SAMPLES: usize = 41;

/// The request line every benchmarked validation is for (no DPoP: these sessions are bearer).
const CTX: cellbind_cell_endpoint::ProofContext<'static> = cellbind_cell_endpoint::ProofContext {
    method: "GET",
    path: "/api/routes/today",
    connection: None,
};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median per-operation times (ns) of two async operations, measured in alternating batches
/// so both see the same machine load (the medians are comparable within one run).
async fn measure_pair<A, FA, B, FB>(batch: usize, mut a: A, mut b: B) -> (f64, f64)
where
    A: FnMut(usize) -> FA,
    FA: std::future::Future<Output = ()>,
    B: FnMut(usize) -> FB,
    FB: std::future::Future<Output = ()>,
{
    for i in 0..batch {
        a(i).await;
        b(i).await;
    }
    let (mut sa, mut sb) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    let mut n = batch;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for k in 0..batch {
            a(n + k).await;
        }
        sa.push(t.elapsed().as_nanos() as f64 / batch as f64);
        let t = Instant::now();
        for k in 0..batch {
            b(n + k).await;
        }
        sb.push(t.elapsed().as_nanos() as f64 / batch as f64);
        n += batch;
    }
    (median(sa), median(sb))
}

fn claims(i: usize) -> SessionClaims {
    let cell = CellId::new("cell-03").unwrap();
    let mut jti = [0u8; 16];
    jti[..8].copy_from_slice(&(i as u64).to_be_bytes());
    SessionClaims {
        iss: ISSUER.into(),
        aud: cell.clone(),
        sub: SubjectId::new(format!("c-40711.tech{}", i % 50)).unwrap(),
        ctr: ContractorId::new("c-40711").unwrap(),
        cell,
        generation: Generation(1),
        iat: NOW,
        nbf: NOW,
        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
        auth_time: NOW,
        jti: SessionId::from_random(jti),
        cli: ClientKind::Field,
        cnf: None,
    }
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    h
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = SigningKey::from_seed(Kid::new("k-bench").unwrap(), &[7; 32]).unwrap();
    let cell = CellId::new("cell-03").unwrap();
    let snapshot = Snapshot {
        keys: vec![FeedKey {
            kid: key.kid().clone(),
            x: URL_SAFE_NO_PAD.encode(key.public_bytes()),
            status: KeyStatus::Current,
            created_at: NOW,
        }],
        ownership: BTreeMap::from([(
            ContractorId::new("c-40711").unwrap(),
            OwnershipRecord::Active {
                generation: Generation(1),
            },
        )]),
        revocations: vec![],
        map: None,
    };
    let mut settings = Settings::new(cell.clone(), ISSUER);
    settings.serving.rate_per_subject_per_s = u32::MAX;
    settings.serving.burst_per_subject = u32::MAX;
    let upstream = Router::new().fallback(any(|| async { (StatusCode::OK, "{\"ok\":true}") }));
    let edge = Edge::new(
        settings,
        Arc::new(FakeClock::at(NOW)),
        Upstreams::local(Some(upstream.clone()), Some(upstream)),
    );
    edge.install(CellState::from_snapshot(cell, 1, 1, NOW, snapshot).unwrap());
    edge.mark_synced();

    const COLD: usize = 200;
    let fresh: Vec<String> = (0..COLD * (SAMPLES + 1) + 1)
        .map(|i| key.mint(&claims(i)).unwrap().expose().to_owned())
        .collect();
    let fresh_headers: Vec<HeaderMap> = fresh.iter().map(|t| bearer(t)).collect();
    let parts: Vec<(String, Vec<u8>)> = fresh
        .iter()
        .map(|t| {
            let (input, sig) = t.rsplit_once('.').unwrap();
            (input.to_owned(), URL_SAFE_NO_PAD.decode(sig).unwrap())
        })
        .collect();
    let public = key.public_key();

    // Raw verify and cold validation, alternating; each cold token is used exactly once.
    let (raw, cold) = rt.block_on(measure_pair(
        COLD,
        |i| {
            let (input, sig) = &parts[i % parts.len()];
            let ok = public.verify(input.as_bytes(), sig);
            async move { assert!(ok) }
        },
        |i| {
            let h = &fresh_headers[i];
            let edge = &edge;
            async move {
                edge.validate(h, Access::Read, &CTX)
                    .settle(h, &CTX)
                    .await
                    .unwrap();
            }
        },
    ));
    let repeat = bearer(&fresh[0]);
    let (cached, _) = rt.block_on(measure_pair(
        20_000,
        |_| {
            let edge = &edge;
            let h = &repeat;
            async move {
                edge.validate(h, Access::Read, &CTX)
                    .settle(h, &CTX)
                    .await
                    .unwrap();
            }
        },
        |_| async {},
    ));

    let app = cellbind_cell_endpoint::app(edge.clone());
    let token = fresh[1].clone();
    let call = |path: &'static str| {
        let app = app.clone();
        let req = Request::builder()
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        async move {
            let r = app.oneshot(req).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let _ = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        }
    };
    let (validated, unauthenticated) = rt.block_on(measure_pair(
        2_000,
        |_| call("/api/routes/today"),
        |_| call("/v1/sessions/current"),
    ));

    let (loop_validated, loop_unauth) = rt.block_on(loopback(&key));

    let us = |ns: f64| ns / 1000.0;
    let rps = |ns: f64| 1e9 / ns;
    println!("cell-endpoint benchmark: medians of {SAMPLES} samples, one run, one thread");
    println!("| measurement | median | target | result |");
    println!("|---|---|---|---|");
    println!(
        "| raw Ed25519 PublicKey::verify | {:.2} µs | — | — |",
        us(raw)
    );
    let cold_ratio = cold / raw;
    println!(
        "| cold validation (new token) | {:.2} µs ({cold_ratio:.2}× raw verify) | ≤ 1.20× | {} |",
        us(cold),
        if cold_ratio <= 1.2 { "met" } else { "MISSED" }
    );
    println!(
        "| cached validation (repeat token) | {:.3} µs | ≤ 1 µs | {} |",
        us(cached),
        if cached <= 1000.0 { "met" } else { "MISSED" }
    );
    println!(
        "| /api through the edge, validated (repeat token) | {:.2} µs = {:.0} req/s | — | — |",
        us(validated),
        rps(validated)
    );
    println!(
        "| same edge, unauthenticated forward (/v1/sessions/current) | {:.2} µs = {:.0} req/s | — | — |",
        us(unauthenticated),
        rps(unauthenticated)
    );
    let ratio = rps(validated) / rps(unauthenticated);
    println!(
        "| in-process: validated / unauthenticated throughput | {ratio:.3} | ≥ 0.90 | {} |",
        if ratio >= 0.9 { "met" } else { "MISSED" }
    );
    println!(
        "| loopback HTTPS (client → edge → app), validated (repeat token) | {:.2} µs = {:.0} req/s | — | — |",
        us(loop_validated),
        rps(loop_validated)
    );
    println!(
        "| loopback HTTPS, unauthenticated forward | {:.2} µs = {:.0} req/s | — | — |",
        us(loop_unauth),
        rps(loop_unauth)
    );
    let ratio = rps(loop_validated) / rps(loop_unauth);
    println!(
        "| loopback: validated / unauthenticated throughput | {ratio:.3} | ≥ 0.90 | {} |",
        if ratio >= 0.9 { "met" } else { "MISSED" }
    );
}

/// The same comparison over real sockets: a client → the edge (TLS, HTTP/2) → a trivial app
/// (TLS), all on loopback in this process, one request at a time.
async fn loopback(key: &SigningKey) -> (f64, f64) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let (ca, cert, keyf) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
    );
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&keyf, leaf_key.serialize_pem()).unwrap();
    let tls = cellbind_cell_endpoint::testing::tls::load(&cert, &keyf)
        .await
        .unwrap();

    let serve = |app: Router| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let tls = tls.clone();
        let open = cellbind_cell_endpoint::config::EdgeListeners {
            max_connections_per_ip: usize::MAX,
            ..Default::default()
        };
        let gate = Arc::new(cellbind_cell_endpoint::testing::ConnectionGate::new(
            Default::default(),
            false,
            &open,
            Default::default(),
        ));
        tokio::spawn(cellbind_cell_endpoint::testing::tls::serve_listener(
            listener,
            tls,
            axum_server::Handle::new(),
            gate,
            app,
        ));
        url
    };
    let app_url =
        serve(Router::new().fallback(any(|| async { (StatusCode::OK, "{\"ok\":true}") })));
    let app_url = protocol::Endpoint::parse(&app_url).unwrap();
    let client = cellbind_cell_endpoint::testing::upstream::https_client(
        &ca,
        Duration::from_secs(2),
        UpstreamHttp::default(),
    )
    .unwrap();
    let mut up = Upstreams::local(None, None);
    let base = cellbind_cell_endpoint::testing::upstream::base_url("app", &app_url).unwrap();
    up.auth = Target::http(client.clone(), vec![base.clone()]).unwrap();
    up.app = Target::http(client.clone(), vec![base]).unwrap();
    let cell = CellId::new("cell-03").unwrap();
    let mut settings = Settings::new(cell.clone(), ISSUER);
    settings.serving.rate_per_subject_per_s = u32::MAX;
    settings.serving.burst_per_subject = u32::MAX;
    settings.serving.rate_per_ip_per_s = u32::MAX;
    settings.serving.burst_per_ip = u32::MAX;
    let edge = Edge::new(settings, Arc::new(FakeClock::at(NOW)), up);
    let snapshot = Snapshot {
        keys: vec![FeedKey {
            kid: key.kid().clone(),
            x: URL_SAFE_NO_PAD.encode(key.public_bytes()),
            status: KeyStatus::Current,
            created_at: NOW,
        }],
        ownership: BTreeMap::from([(
            ContractorId::new("c-40711").unwrap(),
            OwnershipRecord::Active {
                generation: Generation(1),
            },
        )]),
        revocations: vec![],
        map: None,
    };
    edge.install(CellState::from_snapshot(cell, 1, 1, NOW, snapshot).unwrap());
    edge.mark_synced();
    let edge_url = serve(cellbind_cell_endpoint::app(edge));
    let token = key.mint(&claims(999_999)).unwrap().expose().to_owned();
    let user = runtime::tls::client_trusting(&std::fs::read(&ca).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let call = |path: &'static str| {
        let req = user.get(format!("{edge_url}{path}")).bearer_auth(&token);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let _ = r.bytes().await.unwrap();
        }
    };
    measure_pair(
        200,
        |_| call("/api/routes/today"),
        |_| call("/v1/sessions/current"),
    )
    .await
}
