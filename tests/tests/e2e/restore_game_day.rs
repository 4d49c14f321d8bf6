//! Restore game day (backup and restore, the feed epoch): a cell's auth-service is backed
//! up with `cellbind-auth-service backup`; then a session is revoked and another signed in; then
//! the backup is restored with `cellbind-auth-service restore` while everything keeps running.
//! The documented outcome (auth-service/README.md, "Backup and restore"): the revocation made
//! after the backup is still in force at the edge and in the restored database (carried over),
//! sessions signed by restored keys keep working, and the edge takes the restored state under
//! its new epoch without a restart: a revocation recorded after the restore reaches it within
//! 5 s of the restore. Runs on the suite's store (SQLite, or PostgreSQL with its replicas).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use cellbind_tests::{Slot, TestFleet, process_gone, route_load, session_for};
use serde_json::{Value, json};

/// The bound for edges to serve the restored state.
const GOAL: Duration = Duration::from_secs(5);

fn auth_command(t: &TestFleet, cell: &protocol::CellId, args: &[&str]) -> Value {
    cellbind_tests::auth_service_command(t, cell, args)
}

async fn revoke_session(t: &TestFleet, cell: &devfleet::FleetCell, s: &cellbind_tests::Session) {
    let current = cellbind_tests::current_session(&t.client, s).await;
    let r = t
        .client
        .post(format!("{}/admin/v1/revocations", cell.auth_service.url))
        .bearer_auth(&cell.admin_token)
        .json(
            &json!({"kind": "session", "jti": current["jti"], "exp": current["exp"],
                      "reason": "restore game day", "by": "ops"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Waits until `s` is refused (401) at its edge; answers how long that took.
async fn refused_within(t: &TestFleet, s: &cellbind_tests::Session, limit: Duration) -> Duration {
    cellbind_tests::route_status_within(&t.client, &s.endpoint, &s.token, 401, limit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_game_day_a_restored_cell_keeps_its_revocations_and_edges_follow_without_a_restart()
{
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let cell = t.file().cells[2].clone();
    let users: Vec<_> = t
        .file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == cell.id && u.login == "tech-1")
        .take(3)
        .cloned()
        .collect();
    let a = session_for(&t, &users[0]).await;
    let b = session_for(&t, &users[1]).await;
    for s in [&a, &b] {
        assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 200);
    }

    let backup = t.dir.path().join("cell-03.backup");
    let taken = auth_command(&t, &cell.id, &["backup", "--out", backup.to_str().unwrap()]);
    println!("restore game day: backup {taken}");

    // After the backup: a revocation and a sign-in.
    revoke_session(&t, &cell, &a).await;
    refused_within(&t, &a, GOAL).await;
    let c = session_for(&t, &users[2]).await;
    assert_eq!(route_load(&t.client, &c.endpoint, &c.token).await, 200);

    let restored_at = Instant::now();
    let restored = auth_command(
        &t,
        &cell.id,
        &["restore", "--from", backup.to_str().unwrap()],
    );
    println!("restore game day: restore {restored}");
    assert_ne!(restored["epoch"], taken["epoch"], "a new epoch");
    assert_eq!(
        restored["carried_over"], 1,
        "the revocation made after the backup is carried over"
    );

    // The edge follows the restored state under its new epoch, without a restart: a
    // revocation recorded after the restore reaches it.
    revoke_session(&t, &cell, &b).await;
    let followed = refused_within(&t, &b, GOAL).await;
    let since_restore = restored_at.elapsed();
    // The revocation made after the backup still holds; sessions of restored keys still serve.
    assert_eq!(route_load(&t.client, &a.endpoint, &a.token).await, 401);
    assert_eq!(route_load(&t.client, &c.endpoint, &c.token).await, 200);
    assert!(
        !process_gone(cell.endpoint_pid),
        "the edge was not restarted"
    );
    let exited = t.fleet.exited();
    assert!(exited.is_empty(), "nothing died: {exited:?}");
    println!(
        "restore game day ({} replica(s)): the edge served the restored state {:.0} ms after the restore \
         (a new revocation refused {:.0} ms after it was recorded); the revocation made after the backup \
         still refused; a session minted after the backup still served",
        cell.auth_services.len().max(1),
        since_restore.as_secs_f64() * 1000.0,
        followed.as_secs_f64() * 1000.0,
    );
    assert!(since_restore <= GOAL, "{since_restore:?}");

    // The restored auth-service itself holds the carried-over revocation.
    let audit: Vec<Value> = t
        .client
        .get(format!(
            "{}/admin/v1/audit/revocations?format=json",
            cell.auth_service.url
        ))
        .bearer_auth(&cell.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        audit.iter().any(|r| r["by"]
            .as_str()
            .is_some_and(|b| b.starts_with("carried-over:"))),
        "{audit:?}"
    );
    t.fleet.stop().await;
}
