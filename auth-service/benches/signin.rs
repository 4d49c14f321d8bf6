//! Sign-in throughput: medians of the argon2id verification, the whole sign-in through the
//! router (store lookup + argon2 + mint), minting alone and session verification.
//! Run: `cargo bench -p cellbind-auth-service --bench signin`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use cellbind_auth_service::passwords::{
    ARGON2_ITERATIONS, ARGON2_LANES, ARGON2_MEMORY_KIB, hash, verify,
};
use protocol::token::{Expectations, SessionClaims};
use protocol::{CellId, Password};
use tower::ServiceExt as _;

const ROUNDS_SLOW: usize = 21;
const ROUNDS_FAST: usize = 2001;
const IMPORT_USERS: usize = 7000;
const IMPORT_ROUNDS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let rng = ring::rand::SystemRandom::new();
    let pw = Password::new("bench-password-1").unwrap();
    let phc = hash(&pw, &rng).unwrap();
    let argon = time(ROUNDS_SLOW, || assert!(verify(&phc, &pw)));

    let dir = tempfile::tempdir().unwrap();
    let config = common::bench_config(dir.path(), "");
    let state = cellbind_auth_service::open(config).await.unwrap();
    let app = cellbind_auth_service::internal_router(state.clone());
    let admin = |method: &str, path: &str, body: serde_json::Value| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", "Bearer bench-admin-token")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let r = app
        .clone()
        .oneshot(admin(
            "POST",
            "/admin/v1/users",
            serde_json::json!({"contractor_id":"c-1","login":"t","role":"technician","password_hash": phc}),
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = app
        .clone()
        .oneshot(admin(
            "PUT",
            "/admin/v1/ownership/c-1",
            serde_json::json!({"state":"active","gen":1}),
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let sign_in = || {
        Request::builder()
            .method("POST")
            .uri("/v1/sessions")
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"contractor_id":"c-1","login":"t","password":"bench-password-1","client":"field"}"#,
            ))
            .unwrap()
    };
    let mut samples = Vec::new();
    let mut token = String::new();
    for _ in 0..ROUNDS_SLOW {
        let t = Instant::now();
        let r = app.clone().oneshot(sign_in()).await.unwrap();
        samples.push(t.elapsed());
        assert_eq!(r.status(), 201);
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        token = v["session"].as_str().unwrap().to_owned();
    }
    let signin = median(samples);

    let failed = |login: &'static str, password: &'static str| {
        Request::builder()
            .method("POST")
            .uri("/v1/sessions")
            .header("content-type", "application/json")
            .body(Body::from(format!(
                r#"{{"contractor_id":"c-1","login":"{login}","password":"{password}","client":"field"}}"#
            )))
            .unwrap()
    };
    let mut unknown = Vec::new();
    let mut wrong = Vec::new();
    for _ in 0..ROUNDS_SLOW {
        let t = Instant::now();
        let r = app
            .clone()
            .oneshot(failed("nobody", "bench-password-1"))
            .await
            .unwrap();
        unknown.push(t.elapsed());
        assert_eq!(r.status(), 401);
        let t = Instant::now();
        let r = app
            .clone()
            .oneshot(failed("t", "not-the-password"))
            .await
            .unwrap();
        wrong.push(t.elapsed());
        assert_eq!(r.status(), 401);
    }
    let (unknown, wrong) = (median(unknown), median(wrong));

    let signer = state.current_signer().unwrap();
    let claims: SessionClaims = serde_json::from_slice(
        &base64::Engine::decode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            token.split('.').nth(1).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let mint = time(ROUNDS_FAST, || signer.mint(&claims).unwrap());
    let keys = state.key_set();
    let cell = CellId::new("cell-01").unwrap();
    let expect = Expectations {
        issuer: "https://127.0.0.1:8443",
        audience: &cell,
        max_lifetime_s: protocol::token::DEFAULT_SESSION_LIFETIME_S,
        leeway_s: protocol::token::LEEWAY_S,
    };
    let now = claims.iat;
    let check = time(ROUNDS_FAST, || {
        protocol::token::verify::<SessionClaims>(&token, &keys, &expect, now, 8192).unwrap()
    });

    let mut imports = Vec::new();
    for round in 0..IMPORT_ROUNDS {
        let users: Vec<serde_json::Value> = (0..IMPORT_USERS)
            .map(|i| serde_json::json!({"contractor_id": format!("c-{round}-{}", i / 3), "login": format!("tech{i}"), "role": "technician", "password_hash": phc}))
            .collect();
        let req = admin(
            "POST",
            "/admin/v1/users/import",
            serde_json::json!({ "users": users }),
        );
        let t = Instant::now();
        let r = app.clone().oneshot(req).await.unwrap();
        imports.push(t.elapsed());
        assert_eq!(r.status(), 200);
    }
    let import = median(imports);

    let per_s = |d: Duration| 1.0 / d.as_secs_f64();
    println!(
        "argon2id m={ARGON2_MEMORY_KIB} KiB, t={ARGON2_ITERATIONS}, p={ARGON2_LANES}; one thread; medians"
    );
    println!("| what | median | per second per core |");
    println!("|---|---:|---:|");
    println!(
        "| argon2id verify ({ROUNDS_SLOW} runs) | {:.2} ms | {:.1} |",
        argon.as_secs_f64() * 1e3,
        per_s(argon)
    );
    println!(
        "| sign-in through the router ({ROUNDS_SLOW} runs) | {:.2} ms | {:.1} |",
        signin.as_secs_f64() * 1e3,
        per_s(signin)
    );
    println!(
        "| failed sign-in, unknown user ({ROUNDS_SLOW} runs) | {:.2} ms | |",
        unknown.as_secs_f64() * 1e3
    );
    println!(
        "| failed sign-in, wrong password ({ROUNDS_SLOW} runs) | {:.2} ms | |",
        wrong.as_secs_f64() * 1e3
    );
    println!(
        "| mint session, EdDSA ({ROUNDS_FAST} runs) | {:.1} µs | {:.0} |",
        mint.as_secs_f64() * 1e6,
        per_s(mint)
    );
    println!(
        "| verify session ({ROUNDS_FAST} runs) | {:.1} µs | {:.0} |",
        check.as_secs_f64() * 1e6,
        per_s(check)
    );
    println!(
        "| import {IMPORT_USERS} users with a precomputed hash ({IMPORT_ROUNDS} runs) | {:.1} ms | |",
        import.as_secs_f64() * 1e3
    );
}
