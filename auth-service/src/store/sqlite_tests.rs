//! Tests of the SQLite backend: its schema versions and file, and the store contract (the same
//! bodies as the PostgreSQL tests, `contract.rs`).

use rusqlite::Connection;

use protocol::Kid;

use crate::config::DB_FILE;
use crate::store::Store as _;
use crate::store::contract;
use crate::store::portable::fresh_epoch;
use crate::store::records::{Commit, KeyRow, KeyState, Write};
use crate::store::sqlite::SqliteStore;
use crate::store::sqlite_rows::read_epochs;
use crate::store::sqlite_schema::{SCHEMA, SCHEMA_VERSION};

/// The one value `sql` answers.
fn one<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> T {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_the_version_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    drop(SqliteStore::open_in(dir.path(), DB_FILE).await.unwrap());
    let conn = Connection::open(&path).unwrap();
    assert_eq!(
        one::<i64>(&conn, "PRAGMA user_version"),
        i64::from(SCHEMA_VERSION)
    );
    assert_eq!(one::<String>(&conn, "PRAGMA journal_mode"), "wal");
    conn.execute_batch("PRAGMA user_version = 99").unwrap();
    drop(conn);
    assert!(SqliteStore::open_in(dir.path(), DB_FILE).await.is_err());
}

#[tokio::test]
async fn the_connection_is_opened_with_full_synchronous_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path(), DB_FILE).await.unwrap();
    let (journal, synchronous) = store
        .run(|c| {
            Ok((
                one::<String>(c, "PRAGMA journal_mode"),
                one::<i64>(c, "PRAGMA synchronous"),
            ))
        })
        .await
        .unwrap();
    // `synchronous` 2 is FULL: a commit is on disk before it answers.
    assert_eq!((journal.as_str(), synchronous), ("wal", 2));
}

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!("{SCHEMA} PRAGMA user_version = 1;"))
            .unwrap();
        conn.execute(
            "INSERT INTO burned_tickets (jti, exp) VALUES ('t-kept', 99)",
            [],
        )
        .unwrap();
    }
    let store = SqliteStore::open_in(dir.path(), DB_FILE).await.unwrap();
    store
        .run(|conn| {
            assert_eq!(
                one::<i64>(conn, "PRAGMA user_version"),
                i64::from(SCHEMA_VERSION)
            );
            assert_eq!(one::<i64>(conn, "SELECT COUNT(*) FROM burned_tickets"), 1);
            for table in ["burned_sessions", "transferred_sessions"] {
                let n: i64 = one(conn, &format!("SELECT COUNT(*) FROM {table}"));
                assert_eq!(n, 0, "{table}");
            }
            // Version 3 gave it its first epoch.
            let epoch: String = one(conn, "SELECT epoch FROM feed_head WHERE id = 1");
            assert_eq!(epoch.len(), 22);
            assert_eq!(read_epochs(conn).unwrap(), vec![epoch]);
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn every_fresh_database_gets_its_own_epoch() {
    let a = SqliteStore::in_memory().await.unwrap();
    let b = SqliteStore::in_memory().await.unwrap();
    let (a, b) = (a.position().await.unwrap(), b.position().await.unwrap());
    assert_eq!((a.head, b.head), (0, 0));
    assert_eq!(a.epoch.len(), 22);
    assert_ne!(a.epoch, b.epoch);
}

#[tokio::test]
async fn a_stale_commit_writes_nothing() {
    contract::a_stale_commit_writes_nothing(&SqliteStore::in_memory().await.unwrap()).await;
}

#[tokio::test]
async fn a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position() {
    contract::a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position(
        &SqliteStore::in_memory().await.unwrap(),
    )
    .await;
}

#[tokio::test]
async fn a_dump_restores_everything_under_a_new_epoch() {
    let store = SqliteStore::in_memory().await.unwrap();
    contract::a_dump_restores_everything_under_a_new_epoch(&store).await;
}

#[tokio::test]
async fn a_session_id_is_burned_once_whatever_ticket_carries_it() {
    contract::a_session_id_is_burned_once(&SqliteStore::in_memory().await.unwrap()).await;
}

#[tokio::test]
async fn a_session_keeps_its_first_transfer_record_until_it_expires() {
    contract::a_session_keeps_its_first_transfer_record(&SqliteStore::in_memory().await.unwrap())
        .await;
}

#[tokio::test]
async fn a_restore_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path(), DB_FILE).await.unwrap();
    contract::fill(&store).await;
    let dump = store.dump().await.unwrap();
    let other = SqliteStore::in_memory().await.unwrap();
    let epoch = fresh_epoch().unwrap();
    other.restore(dump.clone(), &epoch).await.unwrap();
    let restored = other.dump().await.unwrap();
    assert_eq!(restored.epoch, epoch);
    assert_eq!(restored.epochs.last(), Some(&epoch));
    assert!(restored.epochs.contains(&dump.epoch));
    assert_eq!(restored.users, dump.users);
    drop(store);
    let reopened = SqliteStore::open_in(dir.path(), DB_FILE).await.unwrap();
    assert_eq!(reopened.dump().await.unwrap(), dump);
}

#[tokio::test]
async fn revoked_keys_lose_their_seed_and_updates_keep_it() {
    let store = SqliteStore::in_memory().await.unwrap();
    let row = KeyRow {
        kid: Kid::new("k-1").unwrap(),
        state: KeyState::Next,
        public: [1; 32],
        sealed_seed: Some(vec![9; 61]),
        created_at: 1,
        state_at: 1,
    };
    let epoch = store.position().await.unwrap().epoch;
    let commit = |rows: Vec<KeyRow>, head| Commit {
        writes: rows.into_iter().map(Write::Key).collect(),
        entries: vec![],
        base: head - 1,
        head,
        epoch: epoch.clone(),
    };
    store
        .commit(&commit(vec![row.clone()], 1), 10)
        .await
        .unwrap();
    let promoted = KeyRow {
        state: KeyState::Current,
        sealed_seed: None,
        ..row.clone()
    };
    store.commit(&commit(vec![promoted], 2), 10).await.unwrap();
    let loaded = store.load(10).await.unwrap();
    assert_eq!(loaded.keys[0].sealed_seed, Some(vec![9; 61]));
    assert_eq!(loaded.head, 2);
    let revoked = KeyRow {
        state: KeyState::Revoked,
        ..row
    };
    store.commit(&commit(vec![revoked], 3), 10).await.unwrap();
    assert_eq!(store.load(10).await.unwrap().keys[0].sealed_seed, None);
}

#[tokio::test]
async fn a_call_that_panics_is_an_error_and_the_store_goes_on() {
    let store = SqliteStore::in_memory().await.unwrap();
    let failed = store
        .run(|_| -> crate::error::Result<()> { panic!("a bug in a store call") })
        .await;
    assert!(failed.is_err());
    assert_eq!(store.position().await.unwrap().head, 0);
}
