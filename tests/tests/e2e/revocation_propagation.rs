//! Revocation propagation (DESIGN §6): for each of the five kinds, the time from `cellctl
//! revoke` returning (its library entry point, the same code the command runs) to the first
//! `401 SESSION_REVOKED` on every edge instance of the cell, with three edge instances per
//! cell, on real processes over TLS. Prints p50/p99 per kind; asserts the goal (p99 ≤ 2 s) and
//! that every run reached every instance.
//!
//! Also: a key revocation refuses exactly the sessions that key signed (a session of a retired,
//! unrevoked key keeps working), and the next sign-in uses the pre-published next key at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::revocation_support::*;
use cellbind_tests::{TestFleet, sign_in};
use cellctl::revoke::{AuditArgs, RevokeCommand, Revoker};
use devfleet::DemoUser;
use futures::StreamExt as _;
use protocol::{CellId, ContractorId, Kid, SessionId, SubjectId};

/// Runs per kind.
const RUNS: usize = 100;
/// Edge instances per cell (the fleet's own plus extra ones).
const EDGES_PER_CELL: usize = 3;
/// Longest a run may take to reach every edge before it counts as failed.
const RUN_DEADLINE: Duration = Duration::from_secs(5);
/// Interval between two probes of one edge.
const POLL: Duration = Duration::from_millis(5);
/// The goal for the 99th percentile.
const GOAL_P99: Duration = Duration::from_secs(2);
/// Concurrent sign-ins while preparing.
const SIGN_IN_CONCURRENCY: usize = 4;

fn audit(reason: &str, before: Option<u64>) -> AuditArgs {
    AuditArgs {
        reason: reason.into(),
        by: Some("propagation-test".into()),
        before,
        wait_edges: false,
    }
}

fn host_of(endpoint: &str) -> String {
    endpoint
        .trim_start_matches("https://")
        .split(':')
        .next()
        .unwrap()
        .to_owned()
}

struct Kind {
    name: &'static str,
    times: Vec<Duration>,
    failures: Vec<String>,
}

impl Kind {
    fn new(name: &'static str) -> Self {
        Kind {
            name,
            times: Vec::new(),
            failures: Vec::new(),
        }
    }

    fn record(&mut self, per_edge: Vec<Result<Duration, String>>) {
        let mut worst = Duration::ZERO;
        for r in per_edge {
            match r {
                Ok(d) => worst = worst.max(d),
                Err(e) => {
                    self.failures.push(e);
                    return;
                }
            }
        }
        self.times.push(worst);
    }

    fn report(&mut self) {
        self.times.sort();
        println!(
            "revocation propagation, {:<10} runs {:>3}, {} edges: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, failed {}",
            self.name,
            self.times.len(),
            EDGES_PER_CELL,
            percentile_ms(&self.times, 0.50),
            percentile_ms(&self.times, 0.99),
            self.times
                .last()
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0),
            self.failures.len()
        );
    }

    fn check(&self) {
        assert!(
            self.failures.is_empty(),
            "{}: {} runs did not reach every edge: {:?}",
            self.name,
            self.failures.len(),
            &self.failures[..self.failures.len().min(5)]
        );
        assert_eq!(self.times.len(), RUNS, "{}: every run measured", self.name);
        let p99 = Duration::from_secs_f64(percentile_ms(&self.times, 0.99) / 1000.0);
        assert!(
            p99 <= GOAL_P99,
            "{}: p99 {p99:?} is over the goal {GOAL_P99:?}",
            self.name
        );
    }
}

/// Signs every user in at its own cell: (user, token).
async fn sign_in_all(t: &TestFleet, users: &[DemoUser]) -> Vec<(DemoUser, String)> {
    futures::stream::iter(users.iter().cloned())
        .map(|u| async move {
            let ep = t.cell(&u.cell_id).endpoint.clone();
            let (s, v) = sign_in(&t.client, &ep, &u).await;
            assert_eq!(s, 201, "sign-in of {}/{}: {v}", u.contractor_id, u.login);
            (u, v["session"].as_str().unwrap().to_owned())
        })
        .buffer_unordered(SIGN_IN_CONCURRENCY)
        .collect()
        .await
}

/// Every session is served by every edge of its cell (and is then in each edge's cache).
async fn assert_served(
    t: &TestFleet,
    edges: &BTreeMap<CellId, Vec<String>>,
    s: &[(DemoUser, String)],
) {
    let checks = futures::stream::iter(s.iter())
        .map(|(u, tok)| async move {
            for e in &edges[&u.cell_id] {
                let (st, code) = route(&t.client, e, tok).await;
                assert_eq!(
                    st, 200,
                    "{} at {e} before any revocation: {code}",
                    u.contractor_id
                );
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>();
    checks.await;
}

async fn revoke_ok(revoker: &Revoker, cmd: RevokeCommand) {
    let report = revoker.revoke(&cmd).await.expect("revoke");
    assert!(report.ok(), "every cell confirmed: {report:?}");
}

fn users_of(t: &TestFleet, cell: &str) -> Vec<DemoUser> {
    t.file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id.as_str() == cell)
        .cloned()
        .collect()
}

async fn keys_of(t: &TestFleet, cell: &CellId) -> Vec<(String, String)> {
    let (s, v) = admin(
        &t.client,
        &t.cell(cell).admin_token,
        reqwest::Method::GET,
        &format!("{}/admin/v1/keys", t.cell(cell).auth_service.url),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kid"].as_str().unwrap().to_owned(),
                k["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_reaches_every_edge_within_seconds() {
    let started = Instant::now();
    let t = TestFleet::start_exclusive().await;
    // The command's own code path (`cellctl revoke` = `Revoker::load` + `revoke`), loaded once.
    let revoker = Revoker::load(&t.fleet.fleet_file_path()).expect("fleet file");
    let dir = t.fleet.dir().to_owned();

    // Three edge instances per cell: the fleet's own and two more with the same configuration.
    let mut extra = Vec::new();
    let mut edges: BTreeMap<CellId, Vec<String>> = BTreeMap::new();
    for c in &t.file().cells {
        let more = start_extra_edges(
            &dir,
            c.id.as_str(),
            &host_of(&c.endpoint),
            EDGES_PER_CELL - 1,
        );
        let mut list = vec![c.endpoint.clone()];
        list.extend(more.iter().map(|p| p.url.clone()));
        edges.insert(c.id.clone(), list);
        extra.extend(more);
    }
    for p in &extra {
        assert!(
            wait_ready(&t.client, &p.url, "/readyz").await,
            "extra edge {} ready; see {}",
            p.url,
            p.log.display()
        );
    }
    let cells: Vec<CellId> = t.file().cells.iter().map(|c| c.id.clone()).collect();
    assert_eq!(cells.len(), 5);
    let cell = |n: usize| cells[n].clone();

    // Sessions for the session, subject and contractor kinds, each kind on its own cell.
    let session_users: Vec<DemoUser> = users_of(&t, cell(0).as_str())
        .into_iter()
        .take(RUNS)
        .collect();
    let subject_users: Vec<DemoUser> = users_of(&t, cell(1).as_str())
        .into_iter()
        .take(RUNS)
        .collect();
    let contractor_users: Vec<DemoUser> = users_of(&t, cell(2).as_str())
        .into_iter()
        .filter(|u| u.login == "tech-1")
        .take(RUNS)
        .collect();
    let prep = Instant::now();
    let mut all = session_users.clone();
    all.extend(subject_users.iter().cloned());
    all.extend(contractor_users.iter().cloned());
    let sessions = sign_in_all(&t, &all).await;
    assert_served(&t, &edges, &sessions).await;
    let token_of: BTreeMap<(String, String), String> = sessions
        .iter()
        .map(|(u, tok)| ((u.contractor_id.to_string(), u.login.clone()), tok.clone()))
        .collect();
    let tok = |u: &DemoUser| token_of[&(u.contractor_id.to_string(), u.login.clone())].clone();
    println!(
        "prepared {} sessions served by {} edges in {:.1} s",
        sessions.len(),
        extra.len() + cells.len(),
        prep.elapsed().as_secs_f64()
    );

    // 1. One session.
    let mut k = Kind::new("session");
    for u in &session_users {
        let token = tok(u);
        let jti = session_id_of(&t, &edges[&u.cell_id][0], &token).await;
        revoke_ok(
            &revoker,
            RevokeCommand::Session {
                jti,
                cell: u.cell_id.clone(),
                audit: audit("stolen phone", None),
            },
        )
        .await;
        let t0 = Instant::now();
        k.record(
            time_to_revoked(
                &t.client,
                &edges[&u.cell_id],
                &token,
                t0,
                RUN_DEADLINE,
                POLL,
            )
            .await,
        );
    }
    k.report();
    k.check();

    // 2. A subject.
    let mut k = Kind::new("subject");
    for u in &subject_users {
        let token = tok(u);
        revoke_ok(
            &revoker,
            RevokeCommand::Subject {
                sub: SubjectId::new(format!("{}.{}", u.contractor_id, u.login)).unwrap(),
                audit: audit("technician left", None),
            },
        )
        .await;
        let t0 = Instant::now();
        k.record(
            time_to_revoked(
                &t.client,
                &edges[&u.cell_id],
                &token,
                t0,
                RUN_DEADLINE,
                POLL,
            )
            .await,
        );
    }
    k.report();
    k.check();

    // 3. A contractor.
    let mut k = Kind::new("contractor");
    for u in &contractor_users {
        let token = tok(u);
        revoke_ok(
            &revoker,
            RevokeCommand::Contractor {
                ctr: ContractorId::new(u.contractor_id.as_str()).unwrap(),
                audit: audit("contractor under investigation", None),
            },
        )
        .await;
        let t0 = Instant::now();
        k.record(
            time_to_revoked(
                &t.client,
                &edges[&u.cell_id],
                &token,
                t0,
                RUN_DEADLINE,
                POLL,
            )
            .await,
        );
    }
    k.report();
    k.check();

    // 4. A key: each run revokes the current key of cell 4; a session of a retired (unrevoked)
    // key keeps working throughout, and the next sign-in uses the pre-published next key.
    let kc = cell(3);
    let key_users: Vec<DemoUser> = users_of(&t, kc.as_str())
        .into_iter()
        .take(RUNS + 2)
        .collect();
    let (_, old) = sign_in_all(&t, &key_users[..1]).await.remove(0);
    let retired_kid = kid_of(&old);
    let (s, v) = admin(
        &t.client,
        &t.cell(&kc).admin_token,
        reqwest::Method::POST,
        &format!("{}/admin/v1/keys/rotate", t.cell(&kc).auth_service.url),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let mut k = Kind::new("key");
    let mut expected_kid: Option<String> = None;
    for (i, u) in key_users[1..=RUNS].iter().enumerate() {
        let keys = keys_of(&t, &kc).await;
        let current = keys.iter().find(|(_, s)| s == "current").unwrap().0.clone();
        let next = keys.iter().find(|(_, s)| s == "next").unwrap().0.clone();
        assert!(
            keys.iter()
                .any(|(kid, s)| kid == &retired_kid && s == "retired")
        );
        let (_, token) = sign_in_all(&t, std::slice::from_ref(u)).await.remove(0);
        let kid = kid_of(&token);
        assert_eq!(kid, current, "sign-ins use the current key");
        if let Some(e) = &expected_kid {
            assert_eq!(&kid, e, "after a revocation the next key signs at once");
        }
        // Served at once by every edge (the key was published as `next` long ago).
        for e in &edges[&kc] {
            let (st, code) = route(&t.client, e, &token).await;
            assert_eq!(st, 200, "run {i}: a fresh session at {e}: {code}");
        }
        revoke_ok(
            &revoker,
            RevokeCommand::Key {
                kid: Kid::new(kid.clone()).unwrap(),
                cell: kc.clone(),
                audit: audit("signing key leaked", None),
            },
        )
        .await;
        let t0 = Instant::now();
        k.record(time_to_revoked(&t.client, &edges[&kc], &token, t0, RUN_DEADLINE, POLL).await);
        let after = keys_of(&t, &kc).await;
        assert!(
            !after.iter().any(|(k, _)| k == &kid),
            "the revoked key left the set"
        );
        assert!(
            after.iter().any(|(k, s)| k == &next && s == "current"),
            "next was promoted"
        );
        assert!(
            after.iter().any(|(k, s)| s == "next" && k != &next),
            "a new next key is published"
        );
        expected_kid = Some(next);
        if i % 10 == 0 {
            for e in &edges[&kc] {
                let (st, code) = route(&t.client, e, &old).await;
                assert_eq!(
                    st, 200,
                    "a retired key's session is not revoked ({e}: {code})"
                );
            }
        }
    }
    k.report();
    k.check();

    // 5. The whole cell, round-robin over the five cells (it ends every session there, so it
    // comes last). Each run signs a fresh technician in and revokes everything issued before
    // the second after that session's `iat`.
    let mut k = Kind::new("cell");
    let mut pools: Vec<Vec<DemoUser>> = cells
        .iter()
        .map(|c| users_of(&t, c.as_str()).into_iter().skip(300).collect())
        .collect();
    for run in 0..RUNS {
        let ci = run % cells.len();
        let u = pools[ci].pop().expect("an unused technician");
        let (_, token) = sign_in_all(&t, std::slice::from_ref(&u)).await.remove(0);
        for e in &edges[&u.cell_id] {
            let (st, code) = route(&t.client, e, &token).await;
            assert_eq!(st, 200, "run {run}: a fresh session at {e}: {code}");
        }
        let iat = claims_of(&t, &edges[&u.cell_id][0], &token).await["iat"]
            .as_u64()
            .unwrap();
        revoke_ok(
            &revoker,
            RevokeCommand::Cell {
                cell: u.cell_id.clone(),
                audit: audit("cell compromised", Some(iat + 1)),
            },
        )
        .await;
        let t0 = Instant::now();
        k.record(
            time_to_revoked(
                &t.client,
                &edges[&u.cell_id],
                &token,
                t0,
                RUN_DEADLINE,
                POLL,
            )
            .await,
        );
    }
    k.report();
    k.check();

    println!(
        "revocation propagation test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for mut p in extra {
        p.kill().await;
    }
}

async fn claims_of(t: &TestFleet, edge: &str, token: &str) -> serde_json::Value {
    let r = t
        .client
        .get(format!("{edge}/v1/sessions/current"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.unwrap()
}

async fn session_id_of(t: &TestFleet, edge: &str, token: &str) -> SessionId {
    SessionId::new(claims_of(t, edge, token).await["jti"].as_str().unwrap()).unwrap()
}
