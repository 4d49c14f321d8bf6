//! Crash safety of revocations (ATTACKS fault matrix, "crash mid-write"): a client fires
//! revocations at a cell's real auth-service while the test SIGKILLs and restarts it at random
//! moments. Every revocation the API acknowledged must still be in force after the restarts
//! (in the feed snapshot the edges load, and in the audit log), and the feed sequence never
//! goes backwards. Also: the audit export lists who, when and why, and an admin call without
//! the admin token is refused and logged without the token.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::revocation_support::*;
use cellbind_tests::{TestFleet, process_gone, signal};
use nix::sys::signal::Signal;
use rand::RngExt as _;
use serde_json::{Value, json};

/// Acknowledged revocations to collect.
const TARGET_ACKS: usize = 1_000;
/// Kills (and restarts) of the auth-service, at least.
const MIN_KILLS: usize = 4;
/// Clients firing at once.
const CONCURRENCY: usize = 8;
/// Bound of the whole firing phase.
const FIRING_DEADLINE: Duration = Duration::from_secs(60);
/// A kill happens this long (uniformly random, in milliseconds) after the service is back.
const KILL_AFTER_MS: std::ops::Range<u64> = 100..500;

#[derive(Debug, Clone)]
struct Ack {
    seq: u64,
    kind: Value,
    head: u64,
}

fn revocation(i: usize, now: u64) -> Value {
    match i % 3 {
        0 => {
            let jti = protocol::SessionId::from_random(rand::rng().random::<[u8; 16]>());
            json!({"kind": "session", "jti": jti, "exp": now + 3600})
        }
        1 => json!({"kind": "subject", "sub": format!("c-crash-{i}.tech-1"), "before": now + 1}),
        _ => json!({"kind": "contractor", "ctr": format!("c-crash-{i}"), "before": now + 1}),
    }
}

fn kind_of(v: &Value) -> Value {
    let mut k = v.clone();
    if let Some(o) = k.as_object_mut() {
        for f in [
            "seq",
            "at",
            "by",
            "reason",
            "seal",
            "handed_back",
            "withdrawn",
        ] {
            o.remove(f);
        }
    }
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_revocations_survive_sigkill() {
    let t = TestFleet::start_exclusive().await;
    let dir = t.fleet.dir().to_owned();
    let cell = t.file().cells[0].clone();
    // The cell's own admin token, at its auth-service's internal listener.
    let admin_token = cell.admin_token.clone();
    let auth_url = cell.auth_service.url.clone();

    // The test runs the cell's auth-service itself so it can kill and restart it.
    signal(cell.auth_service.pid, Signal::SIGKILL);
    assert!(
        cellbind_tests::eventually(Duration::from_secs(5), || process_gone(
            cell.auth_service.pid
        ))
        .await
    );
    let mut auth = start_auth_service(&dir, cell.id.as_str(), &auth_url, "crash-auth-0.log");
    assert!(
        wait_ready(&t.client, &auth_url, "/healthz").await,
        "auth-service back"
    );

    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let failed_attempts = Arc::new(AtomicUsize::new(0));
    let max_acked = Arc::new(AtomicU64::new(0));
    let url = format!("{auth_url}/admin/v1/revocations");
    let started = Instant::now();

    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (acks, done, next, failed, max_acked) = (
                acks.clone(),
                done.clone(),
                next.clone(),
                failed_attempts.clone(),
                max_acked.clone(),
            );
            let (client, url, token) = (t.client.clone(), url.clone(), admin_token.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) && started.elapsed() < FIRING_DEADLINE {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let now = protocol::time::system_clock().now();
                    let mut body = revocation(i, now);
                    body["reason"] = json!(format!("crash test {i}"));
                    body["by"] = json!("crash-test");
                    // The same request until it is acknowledged (a retry after a lost answer
                    // is answered with the revocation already in force).
                    loop {
                        if started.elapsed() >= FIRING_DEADLINE {
                            return;
                        }
                        let r = client
                            .post(&url)
                            .bearer_auth(&token)
                            .json(&body)
                            .timeout(Duration::from_secs(3))
                            .send()
                            .await;
                        match r {
                            Ok(r) if r.status().as_u16() == 200 => {
                                let Ok(v) = r.json::<Value>().await else {
                                    failed.fetch_add(1, Ordering::SeqCst);
                                    continue;
                                };
                                let seq = v["seq"].as_u64().unwrap();
                                let head = v["head"].as_u64().unwrap();
                                max_acked.fetch_max(seq, Ordering::SeqCst);
                                acks.lock().unwrap().push(Ack {
                                    seq,
                                    kind: kind_of(&body),
                                    head,
                                });
                                break;
                            }
                            Ok(r) => {
                                let s = r.status().as_u16();
                                assert!(s >= 500, "a revocation refused with {s}");
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            })
        })
        .collect();

    // The killer: SIGKILL at a random moment, restart, and check the head did not go back.
    let mut kills = 0usize;
    let mut restarts_ms = Vec::new();
    let mut heads_after_restart = Vec::new();
    while (kills < MIN_KILLS || acks.lock().unwrap().len() < TARGET_ACKS)
        && started.elapsed() < FIRING_DEADLINE
    {
        let wait = rand::rng().random_range(KILL_AFTER_MS);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let before_kill = max_acked.load(Ordering::SeqCst);
        auth.kill().await;
        kills += 1;
        let t0 = Instant::now();
        auth = start_auth_service(
            &dir,
            cell.id.as_str(),
            &auth_url,
            &format!("crash-auth-{kills}.log"),
        );
        assert!(
            wait_ready(&t.client, &auth_url, "/healthz").await,
            "restart {kills}"
        );
        restarts_ms.push(t0.elapsed().as_millis());
        let (s, st) = admin(
            &t.client,
            &admin_token,
            reqwest::Method::GET,
            &format!("{auth_url}/admin/v1/status"),
            None,
        )
        .await;
        assert_eq!(s, 200, "{st}");
        let head = st["seq"].as_u64().unwrap();
        assert!(
            head >= before_kill,
            "feed head {head} after restart {kills} is behind an acknowledged revocation {before_kill}"
        );
        heads_after_restart.push(head);
    }
    done.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let acks = acks.lock().unwrap().clone();
    assert!(
        acks.len() >= TARGET_ACKS,
        "only {} acknowledged in time",
        acks.len()
    );
    assert!(kills >= MIN_KILLS);
    assert!(
        heads_after_restart.windows(2).all(|w| w[0] <= w[1]),
        "the head never goes backwards across restarts: {heads_after_restart:?}"
    );

    // One more kill with nothing in flight, then read everything back.
    auth.kill().await;
    let mut auth = start_auth_service(&dir, cell.id.as_str(), &auth_url, "crash-auth-final.log");
    assert!(wait_ready(&t.client, &auth_url, "/healthz").await);
    let feed_credential = t.edge_feed_credential(&cell.id, "crash-test");
    let snap: Value = t
        .client
        .get(format!(
            "{auth_url}/internal/v1/feed?since=0&instance=crash-test"
        ))
        .bearer_auth(feed_credential)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let head = snap["head"].as_u64().unwrap();
    let in_force: BTreeMap<u64, Value> = snap["body"]["snapshot"]["revocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), kind_of(r)))
        .collect();
    let audit: Vec<Value> = {
        let (s, v) = admin(
            &t.client,
            &admin_token,
            reqwest::Method::GET,
            &format!("{auth_url}/admin/v1/audit/revocations?format=json&limit=100000"),
            None,
        )
        .await;
        assert_eq!(s, 200, "{v}");
        v.as_array().unwrap().clone()
    };
    let audited: BTreeMap<u64, &Value> = audit
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r))
        .collect();
    let mut lost = 0usize;
    let mut not_audited = 0usize;
    for a in &acks {
        if in_force.get(&a.seq) != Some(&a.kind) {
            lost += 1;
        }
        match audited.get(&a.seq) {
            Some(r)
                if kind_of(r) == a.kind
                    && r["by"] == "crash-test"
                    && r["at"].as_u64().is_some()
                    && r["reason"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("crash test")) => {}
            _ => not_audited += 1,
        }
        assert!(a.head >= a.seq && head >= a.head);
    }
    let acked_max = acks.iter().map(|a| a.seq).max().unwrap_or(0);
    println!(
        "revocation crash test: {} acknowledged revocations, {} SIGKILLs, {} lost, {} missing from the audit, {} unacknowledged attempts retried, restarts {:?} ms, final head {head} (highest acknowledged {acked_max}), {:.1} s",
        acks.len(),
        kills + 1,
        lost,
        not_audited,
        failed_attempts.load(Ordering::SeqCst),
        restarts_ms,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(lost, 0, "acknowledged revocations lost");
    assert_eq!(
        not_audited, 0,
        "acknowledged revocations missing from the audit log"
    );
    assert!(head >= acked_max);

    // The cell's edge catches up with the restarted service (it never sees the head go back).
    let edge_applied = || async {
        let (_, st) = admin(
            &t.client,
            &admin_token,
            reqwest::Method::GET,
            &format!("{auth_url}/admin/v1/status"),
            None,
        )
        .await;
        st["instances"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["id"] == format!("{}-edge-1", cell.id)))
            .and_then(|i| i["applied_seq"].as_u64())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while edge_applied().await < head && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        edge_applied().await >= head,
        "the edge applied the feed up to the head again"
    );

    // Audit export as JSON lines: one revocation per line with who, when and why.
    let r = t
        .client
        .get(format!(
            "{auth_url}/admin/v1/audit/revocations?after={}",
            acked_max.saturating_sub(5)
        ))
        .bearer_auth(&admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty() && lines.len() <= 5);
    for l in &lines {
        assert!(l["seq"].as_u64().unwrap() > acked_max.saturating_sub(5));
        assert!(
            l["at"].is_u64()
                && l["by"].is_string()
                && l["reason"].is_string()
                && l["kind"].is_string()
        );
    }

    // An admin call without the admin token, or with a wrong one, is refused and logged — and
    // the presented token never appears in the log.
    let wrong = "not-the-admin-token-5f2c9a";
    for token in [None, Some(wrong)] {
        let mut req = t
            .client
            .post(&url)
            .json(&json!({"kind": "cell", "before": 1, "reason": "x", "by": "intruder"}));
        if let Some(tk) = token {
            req = req.bearer_auth(tk);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"].is_string());
    }
    let (s, _) = admin(
        &t.client,
        wrong,
        reqwest::Method::GET,
        &format!("{auth_url}/admin/v1/audit/revocations"),
        None,
    )
    .await;
    assert_eq!(s, 403, "the audit export needs the admin token too");
    let log_has = |needle: &str| {
        std::fs::read_to_string(&auth.log)
            .unwrap_or_default()
            .contains(needle)
    };
    assert!(
        cellbind_tests::eventually(Duration::from_secs(5), || log_has(
            "refused a request without a bearer token"
        ) && log_has(
            "refused a wrong bearer token"
        ))
        .await,
        "refusals are logged"
    );
    let log = std::fs::read_to_string(&auth.log).unwrap();
    assert!(!log.contains(wrong), "a presented token is never logged");
    assert!(
        !log.contains(&admin_token),
        "the admin token is never logged"
    );
    auth.kill().await;
}
