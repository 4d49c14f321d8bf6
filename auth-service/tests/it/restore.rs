//! Several replicas on one store, and backup/restore, in-process: two `AppState`s opened on the
//! same store behave as two replicas (a commit built on a stale head is built again, each
//! catches up with the other's changes, the feed stays one gap-free sequence); a restore brings
//! the backup back under a new feed epoch, carries over the revocations recorded after the
//! backup, and refuses a backup it cannot use; an edge's re-applied revocations are recorded
//! only from an epoch the database was restored over.

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

async fn revoke_subject(state_of: &Fixture, sub: &str) -> Resp {
    state_of
        .admin(
            Method::POST,
            "/admin/v1/revocations",
            json!({"kind": "subject", "sub": sub, "before": T0 + 1, "reason": "test", "by": "ops"}),
        )
        .await
}

/// The subjects of the subject revocations in a feed snapshot.
fn revoked_subjects(feed: &Value) -> Vec<String> {
    let mut subs: Vec<String> = feed["body"]["snapshot"]["revocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["sub"].as_str().map(str::to_owned))
        .collect();
    subs.sort();
    subs
}

/// The sequence numbers of a delta's entries.
fn seqs(feed: &Value) -> Vec<u64> {
    feed["body"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn two_replicas_on_one_store_build_one_gap_free_feed() {
    let a = Fixture::new().await;
    // A second replica: another `AppState` over the same store.
    let b = Fixture::replica_of(&a).await;
    let start = a.head().await;
    assert_eq!(b.head().await, start);

    // A commits; B, not told, commits on its stale head: B's commit is refused by the store,
    // B catches up and builds again on top of A's change.
    assert_eq!(revoke_subject(&a, "t-a").await.status, StatusCode::OK);
    assert_eq!(revoke_subject(&b, "t-b").await.status, StatusCode::OK);
    assert_eq!(b.head().await, start + 2);
    // The same revocation asked of the other replica is already in force there (decided on
    // the newest state), not recorded twice.
    let again = revoke_subject(&b, "t-a").await;
    assert_eq!(again.json["outcome"], "already", "{:?}", again.json);
    assert!(a.state.catch_up().await.unwrap());
    assert_eq!(a.head().await, start + 2);
    let (fa, fb) = (a.feed(start).await, b.feed(start).await);
    assert_eq!(seqs(&fa), vec![start + 1, start + 2]);
    assert_eq!(fa["body"], fb["body"], "both replicas serve the same feed");
    assert_eq!(revoked_subjects(&a.feed(0).await), vec!["t-a", "t-b"]);

    // A key rotation on one replica reaches the other's signing ring.
    let r = a
        .admin(Method::POST, "/admin/v1/keys/rotate", Value::Null)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let current = r.json["current"].as_str().unwrap().to_owned();
    assert!(b.state.catch_up().await.unwrap());
    assert_eq!(
        b.state.current_signer().unwrap().kid().as_str(),
        current,
        "the other replica signs with the rotated key"
    );
}

#[tokio::test]
async fn a_restore_brings_the_backup_back_under_a_new_epoch_and_keeps_later_revocations() {
    let f = Fixture::new().await;
    assert_eq!(revoke_subject(&f, "t-before").await.status, StatusCode::OK);
    let before = f.feed(0).await;
    let backup = f.dir.path().join("cell.backup");
    let taken = cellbind_auth_service::backup(&f.config, &backup)
        .await
        .unwrap();
    assert_eq!(taken.head, before["head"].as_u64().unwrap());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // After the backup: a revocation, and a user.
    assert_eq!(revoke_subject(&f, "t-after").await.status, StatusCode::OK);
    f.seed("c-9", "late", "pw-late-user", 1).await;
    assert_eq!(
        f.sign_in("c-9", "late", "pw-late-user", "field")
            .await
            .status,
        StatusCode::CREATED
    );

    let clock: protocol::time::SharedClock = std::sync::Arc::new(f.clock.clone());
    let restored = cellbind_auth_service::restore_with_clock(&f.config, &backup, &clock)
        .await
        .unwrap();
    assert_eq!(restored.carried_over, 1, "{restored:?}");
    assert_ne!(restored.epoch, restored.from_epoch);
    assert!(f.state.catch_up().await.unwrap(), "the replica reloads");

    let after = f.feed(0).await;
    assert_eq!(after["epoch"], restored.epoch.as_str());
    assert_ne!(after["epoch"], before["epoch"]);
    assert_eq!(after["head"].as_u64().unwrap(), taken.head + 1);
    // The revocation recorded after the backup is still in force (carried over).
    assert_eq!(revoked_subjects(&after), vec!["t-after", "t-before"]);
    // The user and the ownership record set after the backup are gone (documented): the
    // contractor is unknown here again.
    let r = f.sign_in("c-9", "late", "pw-late-user", "field").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json);
}

#[tokio::test]
async fn a_backup_of_another_cell_or_under_another_key_encryption_key_is_refused_and_changes_nothing()
 {
    let f = Fixture::new().await;
    assert_eq!(revoke_subject(&f, "t-1").await.status, StatusCode::OK);
    let backup = f.dir.path().join("cell.backup");
    cellbind_auth_service::backup(&f.config, &backup)
        .await
        .unwrap();
    let head = f.head().await;
    let epoch = f.feed(0).await["epoch"].clone();

    let mut other_kek = f.config.clone();
    other_kek.kek_file = f.dir.path().join("other-kek.bin");
    std::fs::write(&other_kek.kek_file, [7u8; 32]).unwrap();
    let e = cellbind_auth_service::restore(&other_kek, &backup)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("do not open"), "{e}");

    let mut other_cell = f.config.clone();
    other_cell.cell_id = protocol::CellId::new("cell-09").unwrap();
    let e = cellbind_auth_service::restore(&other_cell, &backup)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cell-09"), "{e}");

    std::fs::write(&backup, b"{\"schema\": 99}").unwrap();
    assert!(
        cellbind_auth_service::restore(&f.config, &backup)
            .await
            .is_err()
    );

    assert!(!f.state.catch_up().await.unwrap(), "nothing changed");
    assert_eq!(f.head().await, head);
    assert_eq!(f.feed(0).await["epoch"], epoch);
}

async fn reapply(f: &Fixture, body: Value, token: &str) -> Resp {
    let auth = format!("Bearer {token}");
    f.call_internal(
        Method::POST,
        protocol::feed::REAPPLY_PATH,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        Body::from(body.to_string()),
    )
    .await
}

#[tokio::test]
async fn an_edge_hands_back_revocations_only_from_an_epoch_the_database_was_restored_over() {
    let f = Fixture::new().await;
    assert_eq!(revoke_subject(&f, "t-kept").await.status, StatusCode::OK);
    let old_epoch = f.feed(0).await["epoch"].as_str().unwrap().to_owned();
    let backup = f.dir.path().join("cell.backup");
    cellbind_auth_service::backup(&f.config, &backup)
        .await
        .unwrap();
    let restored = cellbind_auth_service::restore(&f.config, &backup)
        .await
        .unwrap();
    f.state.catch_up().await.unwrap();
    let head = f.head().await;

    let held = |sub: &str, seq: u64| {
        json!({"seq": seq, "kind": "subject", "sub": sub, "before": T0 + 1,
               "at": T0, "by": "ops", "reason": "stolen"})
    };
    let body = |epoch: &str| {
        json!({"from_epoch": epoch, "instance": "edge-1",
               "revocations": [held("t-kept", 1), held("t-lost", 2)]})
    };
    // Not with the admin token, nor from the current epoch or an unknown one.
    assert_eq!(
        reapply(&f, body(&old_epoch), ADMIN).await.status,
        StatusCode::FORBIDDEN
    );
    for epoch in [restored.epoch.as_str(), "never-an-epoch"] {
        let r = reapply(&f, body(epoch), FEED).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{epoch}: {:?}", r.json);
    }
    assert_eq!(f.head().await, head, "refusals change nothing");

    let r = reapply(&f, body(&old_epoch), FEED).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["recorded"], 1);
    assert_eq!(r.json["skipped"], 1);
    let feed = f.feed(head).await;
    let entries = feed["body"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["change"]["sub"], "t-lost");
    assert!(
        entries[0]["change"]["by"]
            .as_str()
            .unwrap()
            .starts_with("reapplied:")
    );
    // Handing the same back again records nothing more.
    let r = reapply(&f, body(&old_epoch), FEED).await;
    assert_eq!(r.json["recorded"], 0);
}
