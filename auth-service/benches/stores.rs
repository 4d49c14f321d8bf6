//! SQLite against PostgreSQL, in one run and one table: sign-ins per second per core (the whole
//! sign-in through the router: throttles, user lookup, argon2id, mint, session record),
//! revocation latency (admin call to durable commit, p50/p99) and feed wake-up latency (a
//! long-poll waiting on one replica, a revocation committed on another: PostgreSQL's
//! LISTEN/NOTIFY path; with SQLite's one replica, on the same one).
//! Run: `cargo bench -p cellbind-auth-service --bench stores` (starts a private PostgreSQL
//! server; needs `initdb`/`pg_ctl`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use cellbind_auth_service::AppState;
use tower::ServiceExt as _;

/// Sign-ins per backend (spread over the cores).
const SIGN_INS: usize = 96;
/// Users signing in (one bucket each, so the per-account throttle never bites).
const USERS: usize = 32;
/// Revocations timed per backend.
const REVOCATIONS: usize = 300;
/// Feed wake-ups timed per backend.
const WAKE_UPS: usize = 100;

fn req(method: &str, path: &str, token: &str, body: String) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

async fn json(app: &Router, r: Request<Body>) -> (u16, serde_json::Value) {
    let resp = app.clone().oneshot(r).await.unwrap();
    let s = resp.status().as_u16();
    let b = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .unwrap();
    (s, serde_json::from_slice(&b).unwrap_or_default())
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

struct Row {
    name: &'static str,
    sign_ins_per_core: f64,
    revoke_p50: f64,
    revoke_p99: f64,
    wake_p50: f64,
    wake_p99: f64,
}

/// Measures one backend: `a` takes the writes, `b` (possibly the same) serves the long-polls.
async fn measure(name: &'static str, a: AppState, b: AppState) -> Row {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let admin = cellbind_auth_service::internal_router(a.clone());
    let public = cellbind_auth_service::public_router(a.clone());
    let feed = cellbind_auth_service::internal_router(b.clone());
    let rng = ring::rand::SystemRandom::new();
    let pw = protocol::Password::new("bench-password-1").unwrap();
    let phc = cellbind_auth_service::passwords::hash(&pw, &rng).unwrap();
    let users: Vec<_> = (0..USERS)
        .map(|i| serde_json::json!({"contractor_id": "c-1", "login": format!("t{i}"), "role": "technician", "password_hash": phc}))
        .collect();
    let (s, v) = json(
        &admin,
        req(
            "POST",
            "/admin/v1/users/import",
            "bench-admin-token",
            serde_json::json!({ "users": users }).to_string(),
        ),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = json(
        &admin,
        req(
            "PUT",
            "/admin/v1/ownership/c-1",
            "bench-admin-token",
            r#"{"state":"active","gen":1}"#.into(),
        ),
    )
    .await;
    assert_eq!(s, 200);

    // Sign-ins, `cores` at a time.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..cores {
        let public = public.clone();
        tasks.push(tokio::spawn(async move {
            for i in (c..SIGN_INS).step_by(cores) {
                let body = format!(
                    r#"{{"contractor_id":"c-1","login":"t{}","password":"bench-password-1","client":"field"}}"#,
                    i % USERS
                );
                let r = Request::builder()
                    .method("POST")
                    .uri("/v1/sessions")
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap();
                let (s, v) = json(&public, r).await;
                assert_eq!(s, 201, "{v}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sign_ins_per_core = SIGN_INS as f64 / started.elapsed().as_secs_f64() / cores as f64;

    // Revocations, one at a time, each answered once durable.
    let mut revoke = Vec::new();
    for i in 0..REVOCATIONS {
        let body = format!(
            r#"{{"kind":"subject","sub":"c-1.r{i}","before":1,"reason":"bench","by":"bench"}}"#
        );
        let t = Instant::now();
        let (s, v) = json(
            &admin,
            req("POST", "/admin/v1/revocations", "bench-admin-token", body),
        )
        .await;
        revoke.push(t.elapsed());
        assert_eq!(s, 200, "{v}");
    }
    revoke.sort();

    // Feed wake-ups: a long-poll on `b` at its head, a revocation on `a`.
    let mut wake = Vec::new();
    for i in 0..WAKE_UPS {
        let (_, v) = json(
            &feed,
            req(
                "GET",
                "/internal/v1/feed?since=0&instance=bench",
                "bench-feed-token",
                String::new(),
            ),
        )
        .await;
        let head = v["head"].as_u64().unwrap();
        let poll = {
            let feed = feed.clone();
            tokio::spawn(async move {
                let (s, v) = json(
                    &feed,
                    req(
                        "GET",
                        &format!("/internal/v1/feed?since={head}&instance=bench&wait_ms=10000"),
                        "bench-feed-token",
                        String::new(),
                    ),
                )
                .await;
                assert_eq!(s, 200, "{v}");
                assert!(v["head"].as_u64().unwrap() > head, "woke with news");
                Instant::now()
            })
        };
        // Let the long-poll start waiting (it answers at once otherwise, which only helps).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let body = format!(
            r#"{{"kind":"subject","sub":"c-1.w{i}","before":1,"reason":"bench","by":"bench"}}"#
        );
        let (s, _) = json(
            &admin,
            req("POST", "/admin/v1/revocations", "bench-admin-token", body),
        )
        .await;
        assert_eq!(s, 200);
        let committed = Instant::now();
        let woke = poll.await.unwrap();
        wake.push(woke.saturating_duration_since(committed));
    }
    wake.sort();
    Row {
        name,
        sign_ins_per_core,
        revoke_p50: pct(&revoke, 0.5),
        revoke_p99: pct(&revoke, 0.99),
        wake_p50: pct(&wake, 0.5),
        wake_p99: pct(&wake, 0.99),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    runtime::install_crypto_provider();
    // SQLite: one replica.
    let dir = tempfile::tempdir().unwrap();
    let s = cellbind_auth_service::open(common::bench_config(dir.path(), ""))
        .await
        .unwrap();
    let bg = cellbind_auth_service::spawn_background(&s);
    let sqlite = measure("SQLite (1 replica)", s.clone(), s).await;
    bg.into_iter().for_each(|t| t.abort());

    // PostgreSQL: two replicas of one cell on one database (unix socket, same machine).
    let pg_dir = tempfile::tempdir().unwrap();
    let server = devfleet::PgServer::start_for_process(pg_dir.path(), 100).unwrap();
    server.create_database("bench").unwrap();
    let url = pg_dir.path().join("bench.url");
    std::fs::write(&url, server.url("bench")).unwrap();
    let store = format!(
        "store = \"postgres\"\ndatabase_url_file = \"{}\"",
        url.display()
    );
    let dir_a = tempfile::tempdir().unwrap();
    let a = cellbind_auth_service::open(common::bench_config(dir_a.path(), &store))
        .await
        .unwrap();
    // The second replica shares the first one's key-encryption key.
    let dir_b = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir_b.path().join("data")).unwrap();
    let mut cb = common::bench_config(dir_b.path(), &store);
    cb.kek_file = dir_a.path().join("kek");
    let b = cellbind_auth_service::open(cb).await.unwrap();
    let mut bg = cellbind_auth_service::spawn_background(&a);
    bg.extend(cellbind_auth_service::spawn_background(&b));
    let postgres = measure("PostgreSQL (2 replicas)", a, b).await;
    bg.into_iter().for_each(|t| t.abort());
    server.stop().unwrap();

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("\nstores ({cores} cores; medians and percentiles of one run)\n");
    println!(
        "| store | sign-ins/s per core | revocation p50 | revocation p99 | feed wake-up p50 | feed wake-up p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in [&sqlite, &postgres] {
        println!(
            "| {} | {:.1} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            r.name, r.sign_ins_per_core, r.revoke_p50, r.revoke_p99, r.wake_p50, r.wake_p99
        );
    }
    println!(
        "| PostgreSQL / SQLite | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
        postgres.sign_ins_per_core / sqlite.sign_ins_per_core,
        postgres.revoke_p50 / sqlite.revoke_p50,
        postgres.revoke_p99 / sqlite.revoke_p99,
        postgres.wake_p50 / sqlite.wake_p50,
        postgres.wake_p99 / sqlite.wake_p99,
    );
}
