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

/// The revocation of subject `sub` as the feed's snapshot holds it (with its seal).
fn held_of(feed: &Value, sub: &str) -> Value {
    feed["body"]["snapshot"]["revocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sub"] == sub)
        .cloned()
        .unwrap_or_else(|| panic!("{sub} not held: {feed}"))
}

fn handback(epoch: &str, instance: &str, revocations: Vec<Value>) -> Value {
    json!({"from_epoch": epoch, "instance": instance, "revocations": revocations})
}

/// ATTACKS A32: after a restore, the edges' feed credential can hand back only what this cell
/// sealed in the epoch it was restored over. The attack (a `cell` revocation
/// dated 2100, a key revocation, forged copies of a real record) is refused and changes
/// nothing; a fresh sign-in still works; a genuine record lost with the old database is taken
/// back, at this cell's time and naming the instance; a withdrawn one never is.
#[tokio::test]
async fn an_edge_hands_back_only_revocations_this_cell_sealed_in_the_epoch_it_was_restored_over() {
    let a = Fixture::new().await;
    assert_eq!(revoke_subject(&a, "t-kept").await.status, StatusCode::OK);
    let backup = a.dir.path().join("cell.backup");
    cellbind_auth_service::backup(&a.config, &backup)
        .await
        .unwrap();
    assert_eq!(revoke_subject(&a, "t-lost").await.status, StatusCode::OK);
    let old = a.feed(0).await;
    let old_epoch = old["epoch"].as_str().unwrap().to_owned();
    let (kept, lost) = (held_of(&old, "t-kept"), held_of(&old, "t-lost"));
    assert!(
        lost["seal"].is_string(),
        "recorded revocations are sealed: {lost}"
    );

    // The database is lost; the cell is rebuilt on a new machine from the backup (same
    // key-encryption key), so nothing is carried over and "t-lost" is gone.
    let b = Fixture::sharing_kek_of(&a).await;
    let restored = cellbind_auth_service::restore(&b.config, &backup)
        .await
        .unwrap();
    assert_eq!(restored.from_epoch, old_epoch);
    b.state.catch_up().await.unwrap();
    assert_eq!(revoked_subjects(&b.feed(0).await), vec!["t-kept"]);
    let head = b.head().await;

    // An attacker's handback, with the feed credential of a real instance.
    let forged_seal = lost["seal"].clone();
    let attack = vec![
        json!({"seq": 2, "kind": "cell", "before": 4_102_444_800u64, "at": T0,
               "by": "ops", "reason": "lockout"}),
        json!({"seq": 2, "kind": "cell", "before": 4_102_444_800u64, "at": T0,
               "by": "ops", "reason": "lockout", "seal": forged_seal}),
        json!({"seq": 3, "kind": "key", "kid": "k-anything", "at": T0,
               "by": "ops", "reason": "lockout"}),
        {
            let mut later = lost.clone();
            later["at"] = json!(4_102_444_800u64);
            later
        },
    ];
    let r = reapply(
        &b,
        handback(&old_epoch, "edge-1", attack),
        feed_for("edge-1"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    println!("forged handback answered {}", r.json);
    assert_eq!(
        (r.json["recorded"].as_u64(), r.json["refused"].as_u64()),
        (Some(0), Some(4))
    );
    assert_eq!(b.head().await, head, "refusals change nothing");
    b.seed("c-7", "fresh", "pw-fresh-user", 1).await;
    let signed_in = b.sign_in("c-7", "fresh", "pw-fresh-user", "field").await;
    assert_eq!(
        signed_in.status,
        StatusCode::CREATED,
        "{:?}",
        signed_in.json
    );
    let head = b.head().await;

    // Not with the admin token, not as another instance than the credential's, not from the
    // current epoch or an unknown one.
    let genuine = || handback(&old_epoch, "edge-1", vec![kept.clone(), lost.clone()]);
    assert_eq!(
        reapply(&b, genuine(), ADMIN).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        reapply(&b, genuine(), feed_for("edge-2")).await.status,
        StatusCode::FORBIDDEN
    );
    for epoch in [restored.epoch.as_str(), "never-an-epoch"] {
        let r = reapply(
            &b,
            handback(epoch, "edge-1", vec![lost.clone()]),
            feed_for("edge-1"),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{epoch}: {:?}", r.json);
    }
    assert_eq!(b.head().await, head, "refusals change nothing");

    // The genuine records: the lost one is recorded again, the kept one is in force already.
    let r = reapply(&b, genuine(), feed_for("edge-1")).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(
        (r.json["recorded"].as_u64(), r.json["skipped"].as_u64()),
        (Some(1), Some(1))
    );
    let feed = b.feed(head).await;
    let entries = feed["body"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    let again = &entries[0]["change"];
    assert_eq!(again["sub"], "t-lost");
    assert_eq!(
        again["at"].as_u64(),
        Some(T0),
        "recorded at this cell's time"
    );
    assert!(again["by"].as_str().unwrap().starts_with("reapplied:"));
    assert_eq!(again["handed_back"]["instance"], "edge-1");
    assert_eq!(again["handed_back"]["from_epoch"], old_epoch.as_str());
    assert_eq!(again["handed_back"]["seq"], lost["seq"]);
    let r = reapply(&b, genuine(), feed_for("edge-1")).await;
    assert_eq!(
        r.json["recorded"], 0,
        "handing the same back again records nothing"
    );

    // Withdrawn here, it is never taken back from an edge that missed the withdrawal, and the
    // answer tells the edge to stop enforcing it.
    let seq = again["seq"].as_u64().unwrap();
    let w = b
        .admin(
            Method::POST,
            &format!("/admin/v1/revocations/{seq}/withdraw"),
            json!({"reason": "planted", "by": "ops"}),
        )
        .await;
    assert_eq!(w.status, StatusCode::OK, "{:?}", w.json);
    let r = reapply(&b, genuine(), feed_for("edge-1")).await;
    assert_eq!(r.json["recorded"], 0, "{:?}", r.json);
    assert_eq!(r.json["withdrawn"], json!([lost["seq"]]), "{:?}", r.json);
    assert_eq!(revoked_subjects(&b.feed(0).await), vec!["t-kept"]);
}
