//! The feed credential is a read credential (ATTACKS A32, A37), on a real fleet:
//!
//! 1. After a backup and a restore, the attacker's handback — a `cell` revocation dated 2100
//!    and a key revocation, sent with a real edge instance's feed credential — is refused and
//!    records nothing; the cell's feed secret itself is no credential; a fresh sign-in works.
//! 2. A planted revocation (every session of the cell) is withdrawn with `cellctl revoke
//!    withdraw`, and the sessions it blocked are served again at the cell's edge within the
//!    propagation bound.
//! 3. A made-up instance polling the feed (with the cell's feed secret, or with a real
//!    instance's credential under another name) is refused, so it cannot hold a migration's
//!    drain: the migration finishes with its normal read-only window.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cellbind_tests::{
    Slot, TestFleet, auth_service_command, bin_dir, get_json, post_json, route_load, session_for,
    sign_in,
};
use cellctl::migrate::{MigrateOptions, migrate};
use devfleet::{CellToken, edge_instance_id};
use serde_json::{Value, json};

/// How soon a change must reach every edge of the cell (revocations: "within seconds").
const PROPAGATION_BOUND: Duration = Duration::from_secs(5);
/// The migration game day's bound on a contractor's read-only window.
const READ_ONLY_BOUND_MS: u64 = 5_000;

async fn reapply(
    t: &TestFleet,
    cell: &devfleet::FleetCell,
    token: &str,
    body: &Value,
) -> (u16, Value) {
    let url = format!("{}{}", cell.auth_service.url, protocol::feed::REAPPLY_PATH);
    post_json(&t.client, &url, Some(token), body.clone()).await
}

async fn held(t: &TestFleet, cell: &devfleet::FleetCell) -> Value {
    get_json(
        &t.client,
        &format!("{}/admin/v1/revocations", cell.auth_service.url),
        &cell.admin_token,
    )
    .await
}

/// Waits until `token` gets `want` at `endpoint`; answers how long that took.
async fn until_status(t: &TestFleet, endpoint: &str, token: &str, want: u16) -> Duration {
    cellbind_tests::route_status_within(&t.client, endpoint, token, want, 4 * PROPAGATION_BOUND)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restore_the_feed_credential_writes_nothing_and_a_planted_revocation_is_withdrawn()
{
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let cell = t.file().cells[2].clone();
    let users: Vec<_> = t
        .file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == cell.id && u.login == "tech-1")
        .take(2)
        .cloned()
        .collect();
    let before = session_for(&t, &users[0]).await;
    assert_eq!(
        route_load(&t.client, &before.endpoint, &before.token).await,
        200
    );

    // ---- 1. backup, restore, then the attacker's handback with the feed credential.
    let backup = t.dir.path().join("cell-03.backup");
    let taken = auth_service_command(&t, &cell.id, &["backup", "--out", backup.to_str().unwrap()]);
    let restored = auth_service_command(
        &t,
        &cell.id,
        &["restore", "--from", backup.to_str().unwrap()],
    );
    let old_epoch = taken["epoch"].as_str().unwrap().to_owned();
    assert_ne!(restored["epoch"], taken["epoch"]);
    let kid = get_json::<Value>(
        &t.client,
        &format!("{}/admin/v1/keys", cell.auth_service.url),
        &cell.admin_token,
    )
    .await["keys"][0]["kid"]
        .clone();
    let instance = edge_instance_id(&cell.id, 1).unwrap();
    let now = protocol::time::system_clock().now();
    let credential = t.edge_feed_credential(&cell.id, instance.as_str());
    let attack = json!({
        "from_epoch": old_epoch,
        "instance": instance.as_str(),
        "revocations": [
            {"seq": 1, "kind": "cell", "before": 4_102_444_800u64, "at": now,
             "by": "ops", "reason": "attack"},
            {"seq": 2, "kind": "key", "kid": kid, "at": now,
             "by": "ops", "reason": "attack"},
        ],
    });
    // The running auth-service follows the restore (it notices the new epoch by itself).
    let probe = t.edge_feed_credential(&cell.id, "feed-credentials-probe");
    let followed = Instant::now();
    loop {
        let feed: Value = get_json(
            &t.client,
            &format!(
                "{}/internal/v1/feed?since={}&instance=feed-credentials-probe&wait_ms=0",
                cell.auth_service.url,
                u64::MAX
            ),
            &probe,
        )
        .await;
        if feed["epoch"] == restored["epoch"] {
            break;
        }
        assert!(followed.elapsed() < PROPAGATION_BOUND, "{feed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let head_before = held(&t, &cell).await["head"].clone();
    // With the cell's feed secret itself: not a credential at all.
    let secret = t.cell_token(&cell.id, CellToken::Feed);
    let (s, v) = reapply(&t, &cell, &secret, &attack).await;
    assert_eq!(s, 403, "the feed secret as a credential: {v}");
    // With a real instance's own credential: refused, revocation by revocation.
    let (s, v) = reapply(&t, &cell, &credential, &attack).await;
    println!("feed credentials: the attacker's handback after a restore answered {s} {v}");
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["recorded"].as_u64(), v["refused"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(
        held(&t, &cell).await["head"],
        head_before,
        "nothing recorded"
    );
    let fresh = session_for(&t, &users[1]).await;
    assert_eq!(
        route_load(&t.client, &fresh.endpoint, &fresh.token).await,
        200
    );
    assert_eq!(
        route_load(&t.client, &before.endpoint, &before.token).await,
        200
    );

    // ---- 2. a planted revocation (every session of the cell), withdrawn with cellctl.
    let planted = t
        .client
        .post(format!("{}/admin/v1/revocations", cell.auth_service.url))
        .bearer_auth(&cell.admin_token)
        .json(
            &json!({"kind": "cell", "before": protocol::time::system_clock().now() + 1,
                      "reason": "planted", "by": "intruder"}),
        )
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let seq = planted["seq"].as_u64().unwrap();
    until_status(&t, &before.endpoint, &before.token, 401).await;
    until_status(&t, &fresh.endpoint, &fresh.token, 401).await;
    let withdrawn_at = Instant::now();
    let out = std::process::Command::new(bin_dir().join("cellctl"))
        .args([
            "--fleet",
            t.fleet.fleet_file_path().to_str().unwrap(),
            "--json",
        ])
        .args([
            "revoke",
            "withdraw",
            &seq.to_string(),
            "--cell",
            cell.id.as_str(),
        ])
        .args([
            "--reason",
            "planted by an intruder",
            "--by",
            "security",
            "--wait-edges",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cellctl revoke withdraw: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let served_again = until_status(&t, &before.endpoint, &before.token, 200)
        .await
        .max(until_status(&t, &fresh.endpoint, &fresh.token, 200).await);
    let took = withdrawn_at.elapsed();
    println!(
        "feed credentials: planted revocation {seq} withdrawn with cellctl: {} of {} edge(s) applied it \
         in {} ms (cellctl --wait-edges); sessions it blocked served again {:.0} ms after the command \
         started (bound {} ms)",
        report["report"]["edges"]["applied"],
        report["report"]["edges"]["live"],
        report["report"]["edges"]["waited_ms"],
        took.as_secs_f64() * 1000.0,
        PROPAGATION_BOUND.as_millis()
    );
    assert_eq!(report["ok"], true, "{report}");
    assert!(
        took <= PROPAGATION_BOUND,
        "{took:?} (served again after {served_again:?})"
    );
    // Audited: the audit log holds the withdrawal, who and why.
    let audit: Vec<Value> = get_json(
        &t.client,
        &format!(
            "{}/admin/v1/audit/revocations?format=json",
            cell.auth_service.url
        ),
        &cell.admin_token,
    )
    .await;
    assert!(
        audit
            .iter()
            .any(|r| r["seq"] == seq && r["withdrawn"]["by"] == "security"),
        "{audit:?}"
    );
    t.fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_instance_polling_the_feed_cannot_hold_a_migration_drain() {
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let user = t.sample_per_cell(1, &[])[0].clone();
    let source = t.cell(&user.cell_id).clone();
    let target = t
        .file()
        .cells
        .iter()
        .find(|c| c.id != source.id)
        .unwrap()
        .id
        .clone();
    let s = session_for(&t, &user).await;
    assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 200);

    // The made-up instance polls the source's feed as fast as it can, reporting nothing
    // applied and a write in flight, with every credential it could have stolen.
    let secret = t.cell_token(&source.id, CellToken::Feed);
    let real = t.edge_feed_credential(
        &source.id,
        edge_instance_id(&source.id, 1).unwrap().as_str(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (polls, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let ghost = {
        let (client, url, ctr) = (
            t.client.clone(),
            source.auth_service.url.clone(),
            user.contractor_id.clone(),
        );
        let (stop, polls, refused) = (stop.clone(), polls.clone(), refused.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for token in [&secret, &real] {
                    let r = client
                        .get(format!(
                            "{url}/internal/v1/feed?since=0&instance=ghost&wait_ms=0&busy={ctr}"
                        ))
                        .bearer_auth(token)
                        .send()
                        .await;
                    polls.fetch_add(1, Ordering::Relaxed);
                    if r.is_ok_and(|r| r.status() == 403) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = migrate(
        &t.fleet.fleet_file_path(),
        &MigrateOptions::new(user.contractor_id.clone(), target.clone()),
        |_| {},
    )
    .await
    .expect("the migration finishes");
    stop.store(true, Ordering::Relaxed);
    ghost.await.unwrap();
    let read_only = report.read_only_ms.unwrap_or(u64::MAX);
    let (polls, refused) = (
        polls.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    println!(
        "feed credentials: a made-up instance polled the source's feed {polls} time(s), refused {refused}; \
         the migration of {} to {target} finished with a read-only window of {read_only} ms (bound {READ_ONLY_BOUND_MS} ms)",
        user.contractor_id
    );
    assert_eq!(
        refused, polls,
        "every poll of the made-up instance was refused"
    );
    assert!(polls > 0);
    assert!(read_only <= READ_ONLY_BOUND_MS, "{read_only} ms");
    // The instance list never held it.
    let status: Value = get_json(
        &t.client,
        &format!("{}/admin/v1/status", source.auth_service.url),
        &source.admin_token,
    )
    .await;
    assert!(
        status["instances"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["id"] != "ghost"),
        "{status}"
    );
    // The technician follows the move as before (one WRONG_CELL hop at the old cell).
    let (code, _) = sign_in(&t.client, &t.cell(&target).endpoint, &user).await;
    assert_eq!(code, 201);
    t.fleet.stop().await;
}
