//! The edge's state at scale (run in release: `cargo bench -p cellbind-cell-endpoint --bench
//! state`). Prints one table measured in this one run, a row per size:
//! - memory, counted by the global allocator (`stats_alloc`): net bytes the verified-token
//!   cache grew by per cached session (token digest + claims + rendered identity headers), the
//!   cache's table (allocated whole at start for the configured bound), per held revocation (the snapshot's list + the matcher), and the total;
//! - the hit path: ns of one `Edge::validate` of a cached token (cache lookup, revocation,
//!   rate limit, ownership; the function the `/api/*` guard calls), median and mean of every
//!   call timed alone, with the cache holding N sessions and tokens drawn at random among
//!   them — target ≤ 1 µs at 1M. Each call's header is written just before it, as hyper
//!   hands the edge a request it has just parsed (timing batches over header maps built up
//!   front would add those maps' cache misses: at 1M sessions 2.6 µs batch-timed against
//!   2.4 µs per call, the same code);
//! - start-up: median time of `state::load` (the disk copy: keys, ownership, revocations;
//!   sessions are not in it) and the size of the file.
//!
//! The table is printed twice, each from its own process: with the allocator's 4 KiB pages,
//! then with transparent huge pages (`HUGE_PAGES`), as the edge runs (mimalloc). At a million
//! sessions most of a random user's cost is address translation on 4 KiB pages (a TLB miss on
//! a virtual machine walks two sets of page tables).
//!
//! `STATE_BENCH_MAX_SESSIONS` (default [`DEFAULT_MAX_SESSIONS`]) caps the largest row;
//! `STATE_BENCH_HUGE_PAGES=0` skips the second pass.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::System;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::any;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::state;
use cellbind_cell_endpoint::testing::upstream::Upstreams;
use cellbind_cell_endpoint::{Edge, Settings};
use protocol::feed::{FeedKey, KeyStatus, Snapshot};
use protocol::ownership::{Access, OwnershipRecord};
use protocol::revocation::{Revocation, RevocationKind};
use protocol::time::FakeClock;
use protocol::token::{DEFAULT_SESSION_LIFETIME_S, SessionClaims, SigningKey};
use protocol::{CellId, ClientKind, ContractorId, Generation, Kid, SessionId, SubjectId};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NOW: u64 = 1_790_000_000;
const ISSUER: &str = "https://127.0.0.3:8443";
/// Batches of timed calls per hit-path measurement.
const SAMPLES: usize = 41;
/// Calls per batch (and in the untimed warm-up).
const HIT_BATCH: usize = 20_000;
/// Distinct cached tokens the hit path cycles through (drawn at random among the N held): many
/// enough that their entries are not all in the CPU caches, as with many users at once.
const HIT_TOKENS: usize = 4_096;
/// Distinct cached tokens of the "hot" hit path (a few busy users: all in the CPU caches).
const HOT_TOKENS: usize = 16;
/// Samples of `state::load` per file.
const LOAD_SAMPLES: usize = 5;
/// Largest session row by default.
const DEFAULT_MAX_SESSIONS: usize = 1_000_000;
/// Revocations held in the revocation row.
const REVOCATIONS: usize = 100_000;
/// Sessions per contractor (the contractors held in ownership are sessions / this).
const SESSIONS_PER_CONTRACTOR: usize = 10;
/// Subjects per contractor.
const SUBJECTS_PER_CONTRACTOR: usize = 5;

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

/// Net bytes held by everything allocated since `region` began (`stats_alloc` already counts
/// a reallocation's growth in `bytes_allocated` and its shrinking in `bytes_deallocated`).
fn net_bytes(region: &Region<'_, System>) -> i64 {
    let c = region.change();
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}

fn contractor(c: usize) -> ContractorId {
    ContractorId::new(format!("c-{}", 10_000 + c)).unwrap()
}

fn subject(c: usize, s: usize) -> SubjectId {
    SubjectId::new(format!("c-{}.tech{s}", 10_000 + c)).unwrap()
}

/// Session `i` of a cell with `contractors` contractors.
fn claims(i: usize, contractors: usize) -> SessionClaims {
    let cell = CellId::new("cell-03").unwrap();
    let mut jti = [0u8; 16];
    jti[..8].copy_from_slice(&(i as u64).to_be_bytes());
    let c = i % contractors;
    SessionClaims {
        iss: ISSUER.into(),
        aud: cell.clone(),
        sub: subject(c, (i / contractors) % SUBJECTS_PER_CONTRACTOR),
        ctr: contractor(c),
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

/// A snapshot with the bench key, `contractors` active ownership records and `revocations`
/// session revocations (of sessions no row presents, still live).
fn snapshot(key: &SigningKey, contractors: usize, revocations: usize) -> Snapshot {
    Snapshot {
        keys: vec![FeedKey {
            kid: key.kid().clone(),
            x: URL_SAFE_NO_PAD.encode(key.public_bytes()),
            status: KeyStatus::Current,
            created_at: NOW,
        }],
        ownership: (0..contractors)
            .map(|c| {
                (
                    contractor(c),
                    OwnershipRecord::Active {
                        generation: Generation(1),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
        revocations: (0..revocations)
            .map(|r| {
                let mut jti = [0xff; 16];
                jti[..8].copy_from_slice(&(r as u64).to_be_bytes());
                Revocation {
                    seq: 2 + r as u64,
                    kind: RevocationKind::Session {
                        jti: SessionId::from_random(jti),
                        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
                    },
                    at: NOW,
                    by: "self".into(),
                    reason: "sign-out".into(),
                    seal: None,
                    handed_back: None,
                    withdrawn: None,
                }
            })
            .collect(),
        map: None,
    }
}

/// One `Edge::validate` of a cached token, timed alone: median and mean ns over
/// [`SAMPLES`] × [`HIT_BATCH`] calls, the token drawn in turn among `spread` chosen at random
/// among the `held` cached ones. Each call's `Authorization` header is written just before
/// it (untimed), so the token is in the CPU caches as when hyper has just parsed the request;
/// everything the edge holds (cache slot, claims, limiter, ownership) is where the earlier
/// calls left it.
fn hit_path(
    rt: &tokio::runtime::Runtime,
    edge: &Edge,
    key: &SigningKey,
    held: usize,
    contractors: usize,
    spread: usize,
) -> Hit {
    // A fixed xorshift draw: the same tokens every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let values: Vec<String> = (0..spread)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % held as u64) as usize;
            format!(
                "Bearer {}",
                key.mint(&claims(i, contractors)).unwrap().expose()
            )
        })
        .collect();
    let hits_before = edge.token_cache().len();
    let run = |n: usize, from: usize, ns: &mut Vec<u32>| {
        rt.block_on(async {
            let mut h = HeaderMap::new();
            for k in 0..n {
                let v = &values[(from + k) % spread];
                h.insert("authorization", HeaderValue::from_str(v).unwrap());
                let t = Instant::now();
                edge.validate(&h, Access::Read, &CTX)
                    .settle(&h, &CTX)
                    .await
                    .unwrap();
                ns.push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
            }
        })
    };
    let mut ns = Vec::with_capacity(SAMPLES * HIT_BATCH);
    run(HIT_BATCH, 0, &mut ns);
    ns.clear();
    run(SAMPLES * HIT_BATCH, HIT_BATCH, &mut ns);
    // Every token was a hit: none was inserted.
    assert_eq!(edge.token_cache().len(), hits_before);
    let mean = ns.iter().map(|&n| f64::from(n)).sum::<f64>() / ns.len() as f64;
    ns.sort_unstable();
    Hit {
        p50_ns: f64::from(ns[ns.len() / 2]),
        mean_ns: mean,
    }
}

/// A hit path measurement ([`hit_path`]).
#[derive(Clone, Copy)]
struct Hit {
    p50_ns: f64,
    mean_ns: f64,
}

/// Validates sessions `from..to` once each (cold: each is verified and cached).
fn fill(
    rt: &tokio::runtime::Runtime,
    edge: &Edge,
    key: &SigningKey,
    from: usize,
    to: usize,
    contractors: usize,
) {
    rt.block_on(async {
        for i in from..to {
            let h = bearer(key.mint(&claims(i, contractors)).unwrap().expose());
            edge.validate(&h, Access::Read, &CTX)
                .settle(&h, &CTX)
                .await
                .unwrap();
        }
    });
}

/// Median ms of `state::load` of `st` persisted, and the file's size in bytes.
fn load_time(st: &CellState) -> (f64, u64) {
    let dir = tempfile::tempdir().unwrap();
    state::persist(dir.path(), st).unwrap();
    let size = std::fs::metadata(state::state_path(dir.path()))
        .unwrap()
        .len();
    let samples = (0..LOAD_SAMPLES)
        .map(|_| {
            let t = Instant::now();
            let loaded = state::load(dir.path(), &st.cell).unwrap().unwrap();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(loaded.revocations.len(), st.revocations.len());
            ms
        })
        .collect();
    (median(samples), size)
}

struct Row {
    label: String,
    sessions: usize,
    revocations: usize,
    contractors: usize,
    per_session: Option<f64>,
    per_revocation: Option<f64>,
    total_mib: f64,
    hit: Hit,
    hot: Hit,
    load_ms: f64,
    file_bytes: u64,
}

/// Set in the second pass's environment (the bench runs itself again).
const SECOND_PASS: &str = "CELLBIND_STATE_BENCH_SECOND_PASS";

/// glibc's switch for transparent huge pages under `malloc` (the bench's allocator, which
/// counts bytes). The edge binary's allocator, mimalloc, backs its heap with them unasked
/// where the host's setting allows (`madvise` or `always`).
const HUGE_PAGES: (&str, &str) = ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");

fn main() {
    if std::env::var_os(SECOND_PASS).is_some() {
        measure("transparent huge pages (glibc.malloc.hugetlb=1), as the edge's mimalloc runs");
        return;
    }
    measure("4 KiB pages (the allocator's default)");
    if std::env::var("STATE_BENCH_HUGE_PAGES").as_deref() == Ok("0") {
        return;
    }
    // The tunable is read when the process starts: the same bench again, in a new process.
    println!();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(std::env::args_os().skip(1))
        .env(HUGE_PAGES.0, HUGE_PAGES.1)
        .env(SECOND_PASS, "1")
        .status()
        .unwrap();
    assert!(status.success(), "the huge-page pass failed: {status}");
}

fn measure(pages: &str) {
    let max: usize = std::env::var("STATE_BENCH_MAX_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_SESSIONS);
    let sizes: Vec<usize> = [10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    let largest = *sizes.last().expect("at least one size");
    let contractors = largest / SESSIONS_PER_CONTRACTOR;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = SigningKey::from_seed(Kid::new("k-bench").unwrap(), &[7; 32]).unwrap();
    let cell = CellId::new("cell-03").unwrap();
    let mut settings = Settings::new(cell.clone(), ISSUER);
    settings.serving.rate_per_subject_per_s = u32::MAX;
    settings.serving.burst_per_subject = u32::MAX;
    // Headroom: a token may live in 8 slots of one page only, so a table filled to the brim
    // evicts before every slot is used (the bound is rounded up to a power of two slots).
    settings.serving.token_cache_capacity = largest + largest / 4;
    let upstream = Router::new().fallback(any(|| async { (StatusCode::OK, "{\"ok\":true}") }));
    let edge = Edge::new(
        settings.clone(),
        Arc::new(FakeClock::at(NOW)),
        Upstreams::local(Some(upstream.clone()), Some(upstream)),
    );
    // The cache's table is allocated whole by `Edge::new`, before any region: counted apart.
    let table_bytes = edge.token_cache().slots() * cellbind_cell_endpoint::testing::SLOT_BYTES;
    let plain =
        CellState::from_snapshot(cell.clone(), 1, 1, NOW, snapshot(&key, contractors, 0)).unwrap();
    edge.install(plain.clone());
    edge.mark_synced();
    // The subjects' rate limiters are made before the sessions' memory is counted: they are
    // per subject, not per session (counted on their own).
    let region = Region::new(GLOBAL);
    for c in 0..contractors {
        for s in 0..SUBJECTS_PER_CONTRACTOR {
            edge.limits().subject(&subject(c, s));
        }
    }
    let subjects = contractors * SUBJECTS_PER_CONTRACTOR;
    let per_subject = net_bytes(&region) as f64 / subjects as f64;

    let (load_ms, file_bytes) = load_time(&plain);
    let mut rows = Vec::new();
    let mut held = 0;
    let mut cache_bytes = 0i64;
    for &n in &sizes {
        let region = Region::new(GLOBAL);
        fill(&rt, &edge, &key, held, n, contractors);
        cache_bytes += net_bytes(&region);
        held = n;
        assert_eq!(edge.token_cache().len(), n, "every session is cached");
        let hit = hit_path(&rt, &edge, &key, held, contractors, HIT_TOKENS);
        let hot = hit_path(&rt, &edge, &key, held, contractors, HOT_TOKENS);
        rows.push(Row {
            label: format!("{}k sessions", n / 1_000),
            sessions: n,
            revocations: 0,
            contractors,
            per_session: Some(cache_bytes as f64 / n as f64),
            per_revocation: None,
            total_mib: (cache_bytes + table_bytes as i64) as f64 / (1024.0 * 1024.0),
            hit,
            hot,
            load_ms,
            file_bytes,
        });
    }

    // The largest row again, with 100k revocations held (the view the edge decides from).
    let region = Region::new(GLOBAL);
    let revoked =
        CellState::from_snapshot(cell, 2, 2, NOW, snapshot(&key, contractors, REVOCATIONS))
            .unwrap();
    let with_revocations = net_bytes(&region);
    let region = Region::new(GLOBAL);
    let plain_again =
        CellState::from_snapshot(plain.cell.clone(), 1, 1, NOW, plain.snapshot.clone()).unwrap();
    let without = net_bytes(&region);
    drop(plain_again);
    let per_revocation = (with_revocations - without) as f64 / REVOCATIONS as f64;
    let (load_ms, file_bytes) = load_time(&revoked);
    edge.install(revoked);
    let hit = hit_path(&rt, &edge, &key, held, contractors, HIT_TOKENS);
    let hot = hit_path(&rt, &edge, &key, held, contractors, HOT_TOKENS);
    let total = cache_bytes + table_bytes as i64 + (with_revocations - without);
    rows.push(Row {
        label: format!("{}k sessions + 100k revocations", held / 1_000),
        sessions: held,
        revocations: REVOCATIONS,
        contractors,
        per_session: Some(cache_bytes as f64 / held as f64),
        per_revocation: Some(per_revocation),
        total_mib: total as f64 / (1024.0 * 1024.0),
        hit,
        hot,
        load_ms,
        file_bytes,
    });

    println!("memory pages: {pages}");
    println!(
        "cell-endpoint state benchmark: one run, one thread; hit path = one `Edge::validate` \
         of a cached token timed alone (the token just written, as after parsing), median \
         and mean of {} calls; load = median of {LOAD_SAMPLES}",
        SAMPLES * HIT_BATCH
    );
    println!(
        "per-subject rate limiter (shared by the subject's sessions): {per_subject:.0} bytes \
         each, {subjects} subjects"
    );
    println!(
        "verified-token cache table (allocated at start): {} slots of {} bytes = {:.1} MiB for \
         a bound of {} ({:.0} bytes per bound entry; not in bytes / cached session, in the \
         total)",
        edge.token_cache().slots(),
        cellbind_cell_endpoint::testing::SLOT_BYTES,
        table_bytes as f64 / (1024.0 * 1024.0),
        settings.serving.token_cache_capacity,
        table_bytes as f64 / settings.serving.token_cache_capacity as f64,
    );
    println!(
        "| row | cached sessions | held revocations | contractors (ownership) | bytes / cached session | bytes / held revocation | total MiB (cache + revocations) | hit path, {HIT_TOKENS} random users: median (mean) | target ≤ 1 µs (median) | hit path, {HOT_TOKENS} busy users: median (mean) | state::load | state file |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let fmt = |v: Option<f64>| v.map_or("—".to_owned(), |b| format!("{b:.0}"));
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.0} ns ({:.0}) | {} | {:.0} ns ({:.0}) | {:.1} ms | {:.1} MiB |",
            r.label,
            r.sessions,
            r.revocations,
            r.contractors,
            fmt(r.per_session),
            fmt(r.per_revocation),
            r.total_mib,
            r.hit.p50_ns,
            r.hit.mean_ns,
            if r.hit.p50_ns <= 1_000.0 {
                "met"
            } else {
                "MISSED"
            },
            r.hot.p50_ns,
            r.hot.mean_ns,
            r.load_ms,
            r.file_bytes as f64 / (1024.0 * 1024.0),
        );
    }
}
