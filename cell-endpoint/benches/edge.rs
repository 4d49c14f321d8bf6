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
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::routing::any;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_cell_endpoint::forward::Upstreams;
use cellbind_cell_endpoint::{CellState, Edge, Settings};
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median per-operation time in nanoseconds.
fn measure(batch: usize, mut op: impl FnMut(usize)) -> f64 {
    for i in 0..batch {
        op(i); // warm-up
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    let mut n = 0;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for _ in 0..batch {
            op(n);
            n += 1;
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    median(samples)
}

async fn measure_async<F, Fut>(batch: usize, mut op: F) -> f64
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..batch {
        op(i).await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    let mut n = 0;
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for _ in 0..batch {
            op(n).await;
            n += 1;
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    median(samples)
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
        r#gen: Generation(1),
        iat: NOW,
        nbf: NOW,
        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
        auth_time: NOW,
        jti: SessionId::from_random(jti),
        cli: ClientKind::Field,
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
                r#gen: Generation(1),
            },
        )]),
        revocations: vec![],
        map: None,
    };
    let mut settings = Settings::new(cell.clone(), ISSUER);
    settings.rate_per_subject_per_s = u32::MAX;
    settings.burst_per_subject = u32::MAX;
    let upstream = Router::new().fallback(any(|| async { (StatusCode::OK, "{\"ok\":true}") }));
    let edge = Edge::new(
        settings,
        Arc::new(FakeClock::at(NOW)),
        Upstreams::local(Some(upstream.clone()), Some(upstream)),
    );
    edge.install(CellState::from_snapshot(cell, 1, 1, NOW, snapshot).unwrap());
    edge.mark_synced();

    const COLD: usize = 200;
    let fresh: Vec<String> = (0..COLD * (SAMPLES + 1))
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

    let raw = measure(COLD, |i| {
        let (input, sig) = &parts[i % parts.len()];
        assert!(public.verify(input.as_bytes(), sig));
    });
    let cold = rt.block_on(measure_async(COLD, |i| {
        let h = &fresh_headers[i % fresh_headers.len()];
        let edge = &edge;
        async move {
            edge.validate(h, Access::Read).await.unwrap();
        }
    }));
    let repeat = bearer(&fresh[0]);
    let cached = rt.block_on(measure_async(20_000, |_| {
        let edge = &edge;
        let h = &repeat;
        async move {
            edge.validate(h, Access::Read).await.unwrap();
        }
    }));

    let app = cellbind_cell_endpoint::app(edge.clone());
    let token = fresh[1].clone();
    let validated = rt.block_on(measure_async(2_000, |_| {
        let app = app.clone();
        let req = Request::builder()
            .uri("/api/routes/today")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        async move {
            let r = app.oneshot(req).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let _ = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        }
    }));
    let unauthenticated = rt.block_on(measure_async(2_000, |_| {
        let app = app.clone();
        let req = Request::builder()
            .uri("/v1/sessions/current")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        async move {
            let r = app.oneshot(req).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let _ = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        }
    }));

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
        "| validated / unauthenticated throughput | {ratio:.3} | ≥ 0.90 | {} |",
        if ratio >= 0.9 { "met" } else { "MISSED" }
    );
}
