//! Game day of a production cell (PostgreSQL, several replicas per cell): every cell runs
//! two auth-service replicas on one PostgreSQL database. During a mixed storm — route loads and
//! job completions on every cell, sign-ins and renewals at cell-02, revocations at cell-02
//! through both replicas — cell-02's first replica is SIGKILLed, later the other replica's
//! database connections are terminated (`pg_terminate_backend`). Asserted: no route load or
//! completion fails; a sign-in (or renewal) fails at most once in a row per client and succeeds
//! on its retry; every acknowledged revocation reaches the cell's edge (p99 ≤ 1 s) and is in the
//! audit log at the end; each cell's scheduled key rotation happened exactly once.
//!
//! Runs in the SQLite pass of the suite only (it starts its own PostgreSQL fleet).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, TestFleet, complete, route_load, session_for, sign_in, signal};
use devfleet::{DemoUser, FleetCell, StoreKind, auth_service_id, database_name};
use futures::StreamExt as _;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Scheduled key rotation interval of the fleet, in seconds: the storm ends after the first
/// scheduled rotation and before a second one can be due.
const ROTATION_S: u64 = 40;
/// Storm time before cell-02's first replica is killed.
const KILL_AFTER: Duration = Duration::from_secs(6);
/// Storm time before the other replica's database connections are terminated.
const TERMINATE_AFTER: Duration = Duration::from_secs(14);
/// Shortest storm.
const MIN_STORM: Duration = Duration::from_secs(22);
/// Route-load sessions per cell.
const SESSIONS_PER_CELL: usize = 4;
/// Route loads in flight at once.
const ROUTE_CONCURRENCY: usize = 6;
/// Pace of the route-load batches (`ROUTE_CONCURRENCY * 4` loads and a completion each):
/// about 160 loads a second over the fleet, a storm of technicians, but each session well
/// under the edges' per-subject and per-address limits (a client beyond them is answered 429,
/// correctly, and this test is not about the limiter).
const ROUTE_BATCH_EVERY: Duration = Duration::from_millis(150);
/// Clients signing in (and renewing) at cell-02, each on its own account.
const SIGN_IN_CLIENTS: usize = 6;
/// Pause between two sign-ins of one client (the per-account throttle allows 10 a minute).
const SIGN_IN_EVERY: Duration = Duration::from_secs(5);
/// Sessions revoked during the storm, one at a time.
const REVOCATIONS: usize = 40;
/// The goal for the revocation p99 to the cell's edge.
const GOAL_P99: Duration = Duration::from_secs(1);
/// Longest a revocation may take to reach the edge before it counts as lost.
const REVOCATION_DEADLINE: Duration = Duration::from_secs(5);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Users of `cell` with `login`, in seed order.
fn users_of(t: &TestFleet, cell: &FleetCell, login: &str) -> Vec<DemoUser> {
    t.file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == cell.id && u.login == login)
        .cloned()
        .collect()
}

/// An admin call to the first replica of `cell` that answers (replica `prefer` first).
async fn admin(
    t: &TestFleet,
    cell: &FleetCell,
    prefer: usize,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Option<(u16, Value)> {
    let n = cell.auth_services.len();
    for i in 0..n {
        let replica = &cell.auth_services[(prefer + i) % n];
        let mut req = t
            .client
            .request(method.clone(), format!("{}{path}", replica.url))
            .bearer_auth(&cell.admin_token)
            .timeout(Duration::from_secs(5));
        if let Some(b) = &body {
            req = req.json(b);
        }
        if let Ok(r) = req.send().await {
            let s = r.status().as_u16();
            return Some((s, r.json().await.unwrap_or(Value::Null)));
        }
    }
    None
}

/// The key set of a cell, from any live replica (retried for a few seconds: a replica may
/// be between database connections).
async fn keys(t: &TestFleet, cell: &FleetCell) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match admin(t, cell, 1, reqwest::Method::GET, "/admin/v1/keys", None).await {
            Some((200, v)) => return v["keys"].as_array().unwrap().clone(),
            other => assert!(Instant::now() < deadline, "keys of {}: {other:?}", cell.id),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count_status(keys: &[Value], status: &str) -> usize {
    keys.iter().filter(|k| k["status"] == status).count()
}

/// `POST /v1/sessions/renew` at `endpoint`: (status, new token).
async fn renew(client: &reqwest::Client, endpoint: &str, token: &str) -> (u16, Option<String>) {
    match client
        .post(format!("{endpoint}/v1/sessions/renew"))
        .bearer_auth(token)
        .send()
        .await
    {
        Ok(r) => {
            let s = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            (s, v["session"].as_str().map(str::to_owned))
        }
        Err(_) => (0, None),
    }
}

#[derive(Debug, Default)]
struct Tally {
    route_loads: usize,
    route_failures: Vec<u16>,
    completions: usize,
    completion_failures: Vec<u16>,
    sign_ins: usize,
    sign_in_first_failures: usize,
    sign_in_double_failures: Vec<String>,
    renewals: usize,
    renewal_first_failures: usize,
    renewal_double_failures: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_game_day_a_replica_dies_and_the_other_loses_its_database_connections() {
    let t = TestFleet::start_in(Slot::Exclusive, |o| {
        o.store(StoreKind::Postgres)
            .auth_replicas(2)
            .key_rotation_interval_s(ROTATION_S)
    })
    .await;
    let fleet_up = Instant::now();
    let cells = t.file().cells.clone();
    let victim = cells[1].clone();
    assert_eq!(victim.auth_services.len(), 2, "two replicas per cell");
    let keys_before: BTreeMap<_, _> = {
        let mut m = BTreeMap::new();
        for c in &cells {
            let k = keys(&t, c).await;
            assert_eq!(count_status(&k, "retired"), 0, "{}: {k:?}", c.id);
            m.insert(c.id.clone(), k);
        }
        m
    };

    // Sessions: route loads on every cell; sessions to revoke at cell-02 (tech-2 accounts);
    // sign-in clients at cell-02 (dispatcher accounts).
    let mut sessions = Vec::new();
    for u in t.sample_per_cell(SESSIONS_PER_CELL, &[]) {
        sessions.push(session_for(&t, &u).await);
    }
    let to_revoke: Vec<_> = {
        let users = users_of(&t, &victim, "tech-2");
        assert!(users.len() >= REVOCATIONS);
        let mut out = Vec::new();
        for u in users.iter().take(REVOCATIONS) {
            out.push(session_for(&t, u).await);
        }
        out
    };
    let signers: Vec<DemoUser> = t
        .file()
        .demo
        .dispatchers
        .iter()
        .filter(|u| u.cell_id == victim.id)
        .take(SIGN_IN_CLIENTS)
        .cloned()
        .collect();
    assert_eq!(signers.len(), SIGN_IN_CLIENTS);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let storm_start = Instant::now();

    // Route loads and completions on every cell.
    let loads = {
        let (stop, tally, client, sessions) = (
            stop.clone(),
            tally.clone(),
            t.client.clone(),
            sessions.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0usize;
            let mut pace = tokio::time::interval(ROUTE_BATCH_EVERY);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                pace.tick().await;
                let batch: Vec<u16> = futures::stream::iter(i..i + ROUTE_CONCURRENCY * 4)
                    .map(|k| {
                        let s = &sessions[k % sessions.len()];
                        let client = &client;
                        async move { route_load(client, &s.endpoint, &s.token).await }
                    })
                    .buffer_unordered(ROUTE_CONCURRENCY)
                    .collect()
                    .await;
                i += batch.len();
                let s = &sessions[i % sessions.len()];
                let (cs, _) = complete(
                    &client,
                    &s.endpoint,
                    &s.token,
                    &format!("rgd-job-{i}"),
                    &format!("rgd-key-{i}"),
                )
                .await;
                let mut t = tally.lock().await;
                t.route_loads += batch.len();
                t.route_failures
                    .extend(batch.into_iter().filter(|s| *s != 200));
                t.completions += 1;
                if cs != 200 {
                    t.completion_failures.push(cs);
                }
            }
        })
    };

    // Sign-ins and renewals at cell-02: each failure is retried at once, once.
    let mut sign_in_tasks = Vec::new();
    for u in signers {
        let (stop, tally, client, endpoint) = (
            stop.clone(),
            tally.clone(),
            t.client.clone(),
            victim.endpoint.clone(),
        );
        sign_in_tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut token = None;
                for attempt in 0..2 {
                    let (s, v) = sign_in(&client, &endpoint, &u).await;
                    let mut t = tally.lock().await;
                    if s == 201 {
                        t.sign_ins += 1;
                        token = v["session"].as_str().map(str::to_owned);
                        break;
                    }
                    if attempt == 0 {
                        t.sign_in_first_failures += 1;
                    } else {
                        t.sign_in_double_failures
                            .push(format!("{}: {s} {v}", u.contractor_id));
                    }
                }
                if let Some(token) = token {
                    for attempt in 0..2 {
                        let (s, _) = renew(&client, &endpoint, &token).await;
                        let mut t = tally.lock().await;
                        // A renewal answers as a sign-in does: 201 with the new session.
                        if s == 201 {
                            t.renewals += 1;
                            break;
                        }
                        if attempt == 0 {
                            t.renewal_first_failures += 1;
                        } else {
                            t.renewal_double_failures
                                .push(format!("{}: {s}", u.contractor_id));
                        }
                    }
                }
                tokio::time::sleep(SIGN_IN_EVERY).await;
            }
        }));
    }

    // The faults, at their times (checked between revocations, and after them).
    let pg = t.fleet.postgres().expect("a PostgreSQL fleet");
    let first = victim.auth_services[0].pid;
    let mut killed = false;
    let mut terminated = false;
    let faults_due = |killed: &mut bool, terminated: &mut bool| {
        if !*killed && storm_start.elapsed() >= KILL_AFTER {
            signal(first, Signal::SIGKILL);
            *killed = true;
            println!(
                "replica game day: SIGKILLed {} at {:.1} s",
                auth_service_id(&victim.id, 0),
                storm_start.elapsed().as_secs_f64()
            );
        }
        if !*terminated && storm_start.elapsed() >= TERMINATE_AFTER {
            let app = format!("cellbind-auth-service/{}-r1", victim.id);
            let out = pg
                .psql(
                    &database_name(&victim.id),
                    &format!(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE application_name = '{app}'"
                    ),
                )
                .expect("psql");
            *terminated = true;
            println!(
                "replica game day: terminated the other replica's database connections ({}) at {:.1} s",
                out.trim(),
                storm_start.elapsed().as_secs_f64()
            );
            assert!(
                out.trim().parse::<u64>().unwrap_or(0) > 0,
                "the other replica had database connections: {out}"
            );
        }
    };

    // Revocations at cell-02, alternating between the replicas while both live; each one
    // timed from its acknowledgement to the first 401 SESSION_REVOKED at the cell's edge.
    let mut propagation = Vec::new();
    let mut acknowledged = Vec::new();
    let mut lost = Vec::new();
    let mut admin_failures = 0usize;
    for (i, s) in to_revoke.iter().enumerate() {
        faults_due(&mut killed, &mut terminated);
        let current = cellbind_tests::current_session(&t.client, s).await;
        let jti = current["jti"].as_str().expect("jti").to_owned();
        let body = json!({"kind": "session", "jti": jti, "exp": current["exp"],
                          "reason": "game day", "by": "replica-game-day"});
        let acked = loop {
            match admin(
                &t,
                &victim,
                i % 2,
                reqwest::Method::POST,
                "/admin/v1/revocations",
                Some(body.clone()),
            )
            .await
            {
                Some((200, _)) => break Instant::now(),
                _ => {
                    admin_failures += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        acknowledged.push(jti.clone());
        let deadline = acked + REVOCATION_DEADLINE;
        loop {
            let status = route_load(&t.client, &s.endpoint, &s.token).await;
            if status == 401 {
                propagation.push(acked.elapsed());
                break;
            }
            if Instant::now() > deadline {
                lost.push(jti.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Keep the storm up until every cell's scheduled rotation happened (and at least the
    // shortest storm), then stop.
    let rotation_deadline = fleet_up + Duration::from_secs(2 * ROTATION_S - 5);
    loop {
        faults_due(&mut killed, &mut terminated);
        let mut all_rotated = true;
        for c in &cells {
            all_rotated &= count_status(&keys(&t, c).await, "retired") >= 1;
        }
        if all_rotated && killed && terminated && storm_start.elapsed() >= MIN_STORM {
            break;
        }
        assert!(
            Instant::now() < rotation_deadline,
            "a scheduled rotation did not happen in time"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    loads.await.unwrap();
    for h in sign_in_tasks {
        h.await.unwrap();
    }
    let storm = storm_start.elapsed();
    assert!(
        fleet_up.elapsed() < Duration::from_secs(2 * ROTATION_S),
        "the run must end before a second rotation can be due"
    );

    let tally = tally.lock().await;
    propagation.sort();
    let (p50, p99) = (
        percentile(&propagation, 0.5),
        percentile(&propagation, 0.99),
    );
    println!(
        "replica game day ({:.0} s storm, 2 replicas per cell on PostgreSQL): route loads {}/{} ok, completions {}/{} ok, \
         sign-ins {} ok ({} failed once, {} failed twice), renewals {} ok ({} failed once, {} failed twice), \
         revocations {} acknowledged ({} admin attempts refused or unreachable), reached the edge: {}/{} (p50 {:.0} ms, p99 {:.0} ms)",
        storm.as_secs_f64(),
        tally.route_loads - tally.route_failures.len(),
        tally.route_loads,
        tally.completions - tally.completion_failures.len(),
        tally.completions,
        tally.sign_ins,
        tally.sign_in_first_failures,
        tally.sign_in_double_failures.len(),
        tally.renewals,
        tally.renewal_first_failures,
        tally.renewal_double_failures.len(),
        acknowledged.len(),
        admin_failures,
        propagation.len(),
        acknowledged.len(),
        p50.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
    );
    assert!(
        tally.route_failures.is_empty(),
        "{:?}",
        tally.route_failures
    );
    assert!(
        tally.completion_failures.is_empty(),
        "{:?}",
        tally.completion_failures
    );
    assert!(tally.sign_ins > 0 && tally.renewals > 0);
    assert!(
        tally.sign_in_double_failures.is_empty(),
        "{:?}",
        tally.sign_in_double_failures
    );
    assert!(
        tally.renewal_double_failures.is_empty(),
        "{:?}",
        tally.renewal_double_failures
    );
    assert!(
        lost.is_empty(),
        "revocations that never reached the edge: {lost:?}"
    );
    assert!(p99 <= GOAL_P99, "revocation p99 {p99:?} over {GOAL_P99:?}");

    // Every acknowledged revocation is in the audit log of the surviving replica.
    let (s, audit) = admin(
        &t,
        &victim,
        1,
        reqwest::Method::GET,
        "/admin/v1/audit/revocations?format=json&limit=1000",
        None,
    )
    .await
    .expect("the surviving replica answers");
    assert_eq!(s, 200, "{audit}");
    let audited: Vec<String> = audit
        .as_array()
        .expect("audit entries")
        .iter()
        .filter_map(|r| r["jti"].as_str().map(str::to_owned))
        .collect();
    let missing: Vec<_> = acknowledged
        .iter()
        .filter(|j| !audited.contains(j))
        .collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");

    // Exactly one scheduled rotation per cell: the old current key retired, the old next key
    // current, one new next key.
    for c in &cells {
        let before = &keys_before[&c.id];
        let after = keys(&t, c).await;
        let kid = |keys: &[Value], status: &str| {
            keys.iter()
                .find(|k| k["status"] == status)
                .map(|k| k["kid"].clone())
        };
        assert_eq!(count_status(&after, "retired"), 1, "{}: {after:?}", c.id);
        assert_eq!(
            kid(&after, "retired"),
            kid(before, "current"),
            "{}: one rotation",
            c.id
        );
        assert_eq!(kid(&after, "current"), kid(before, "next"), "{}", c.id);
    }
    println!(
        "replica game day: every cell rotated its key exactly once ({} cells, interval {ROTATION_S} s)",
        cells.len()
    );

    // The operator's `cellctl revoke` still reaches cell-02, whose first replica is dead: its
    // admin calls move on to the next replica.
    let revoker = cellctl::revoke::Revoker::load(&t.fleet.fleet_file_path()).expect("fleet file");
    let who = &to_revoke[0].user;
    let report = revoker
        .revoke(&cellctl::revoke::RevokeCommand::Subject {
            sub: protocol::SubjectId::new(format!("{}.{}", who.contractor_id, who.login)).unwrap(),
            audit: cellctl::revoke::AuditArgs {
                reason: "game day, replica 0 dead".into(),
                by: Some("replica-game-day".into()),
                before: None,
                wait_edges: false,
            },
        })
        .await
        .expect("cellctl revoke");
    assert!(report.ok(), "every cell confirmed: {report:?}");
    println!(
        "replica game day: cellctl revoke confirmed by {} cells with {}'s first replica dead",
        report.cells.len(),
        victim.id
    );
    t.fleet.stop().await;
}
