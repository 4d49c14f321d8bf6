//! Tests of the PostgreSQL backend against a private server (one per test binary, a fresh
//! database per test): the store contract (the same bodies as the SQLite tests), several
//! replicas on one database, and the services they share.
//!
//! The server is the dev fleet's ([`devfleet::postgres::PgServer`], owned by this process: it
//! stops when the process exits). A machine without PostgreSQL fails these tests; they are
//! not skipped.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use devfleet::postgres::PgServer;
use protocol::admin::cell::InstanceSeen;
use protocol::{ContractorId, SessionId};

use crate::error::Error;
use crate::store::Store as _;
use crate::store::contract;
use crate::store::postgres::{PgCoordination, PgStore, open};
use crate::store::postgres_coordination::LEADER_LOCK_KEY;
use crate::store::records::{Commit, TicketBurn};

/// The private server, and the directory holding its files.
static SERVER: OnceLock<(PgServer, tempfile::TempDir)> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty database on the private server.
async fn fresh_url() -> String {
    let db = format!(
        "t_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::Relaxed)
    );
    tokio::task::spawn_blocking(move || {
        let (server, _) = SERVER.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let server = PgServer::start_for_process(dir.path(), 200)
                .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"));
            (server, dir)
        });
        server.create_database(&db).unwrap();
        server.url(&db)
    })
    .await
    .unwrap()
}

async fn replica(url: &str, name: &str) -> (Arc<PgStore>, Arc<PgCoordination>) {
    let (store, coordination) = open(&runtime::Secret::new(url), None, 4, name)
        .await
        .unwrap();
    (Arc::new(store), Arc::new(coordination))
}

/// The one value `sql` answers on `store`'s database.
async fn one<T>(store: &PgStore, sql: &'static str) -> T
where
    T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_commit_writes_nothing() {
    let (store, _) = replica(&fresh_url().await, "r0").await;
    contract::a_stale_commit_writes_nothing(&*store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dump_restores_everything_under_a_new_epoch() {
    let (store, _) = replica(&fresh_url().await, "r0").await;
    contract::a_dump_restores_everything_under_a_new_epoch(&*store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position() {
    let (store, _) = replica(&fresh_url().await, "r0").await;
    contract::a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position(&*store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_id_is_burned_once_whatever_ticket_carries_it() {
    let (store, _) = replica(&fresh_url().await, "r0").await;
    contract::a_session_id_is_burned_once(&*store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_keeps_its_first_transfer_record_until_it_expires() {
    let (store, _) = replica(&fresh_url().await, "r0").await;
    contract::a_session_keeps_its_first_transfer_record(&*store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_starting_at_once_share_one_schema_and_one_epoch() {
    let url = fresh_url().await;
    let secret = runtime::Secret::new(url);
    let (a, b, c) = tokio::join!(
        open(&secret, None, 2, "r0"),
        open(&secret, None, 2, "r1"),
        open(&secret, None, 2, "r2"),
    );
    let stores = [a.unwrap().0, b.unwrap().0, c.unwrap().0].map(Arc::new);
    let mut positions = Vec::new();
    for s in &stores {
        positions.push((s.position().await.unwrap(), s.epochs().await.unwrap()));
    }
    let (first, epochs) = &positions[0];
    assert_eq!(first.head, 0);
    assert_eq!(epochs, &vec![first.epoch.clone()]);
    assert!(positions.iter().all(|p| p == &positions[0]));
    // The password-free Debug.
    assert!(!format!("{:?}", stores[0]).contains("cellbind@"));
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_see_each_others_commits_and_never_fork_the_feed() {
    let url = fresh_url().await;
    let (a, _) = replica(&url, "r0").await;
    let (b, _) = replica(&url, "r1").await;
    let first = contract::ownership(&*a, 1, 1).await;
    a.commit(&first, 1_000).await.unwrap();
    assert_eq!(b.position().await.unwrap().head, 1);
    assert_eq!(b.entries_after(0, 10).await.unwrap(), first.entries);
    // Built by b on the head it held before a's commit: refused, nothing written.
    let stale = Commit {
        writes: contract::ownership_write(2, 1),
        ..first.clone()
    };
    let refused = b.commit(&stale, 1_000).await;
    assert!(matches!(refused, Err(Error::Stale { stored: 1, base: 0 })));
    assert_eq!(a.load(1_000).await.unwrap().ownership.len(), 1);

    // Both replicas commit as fast as they can, catching up on Stale: one gap-free order.
    let per_replica = 15;
    let run = |store: Arc<PgStore>, ctr: u8| {
        tokio::spawn(async move {
            let mut stale = 0;
            for g in 1..=per_replica {
                loop {
                    let c = contract::ownership(&*store, ctr, g).await;
                    match store.commit(&c, 1_000).await {
                        Ok(()) => break,
                        Err(Error::Stale { .. }) => stale += 1,
                        Err(e) => panic!("commit failed: {e}"),
                    }
                }
            }
            stale
        })
    };
    let (sa, sb) = tokio::join!(run(a.clone(), 10), run(b.clone(), 11));
    let (sa, sb) = (sa.unwrap(), sb.unwrap());
    let entries = a.entries_after(0, 1_000).await.unwrap();
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    let total = 1 + 2 * per_replica;
    assert_eq!(
        seqs,
        (1..=total).collect::<Vec<_>>(),
        "stale retries: {sa} + {sb}"
    );
    assert_eq!(b.position().await.unwrap().head, total);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ticket_burned_at_two_replicas_at_once_passes_once() {
    let url = fresh_url().await;
    let (a, _) = replica(&url, "r0").await;
    let (b, _) = replica(&url, "r1").await;
    for n in 0..10u8 {
        let burn = TicketBurn {
            jti: SessionId::from_random([n; 16]),
            exp: 1_000,
            sid: SessionId::from_random([n + 100; 16]),
            sexp: 5_000,
        };
        let (ra, rb) = tokio::join!(a.burn_ticket(&burn, 900), b.burn_ticket(&burn, 900));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(ra ^ rb, "exactly one replica burns ticket {n}: {ra} {rb}");
    }
}

/// Waits until `c` has been quiet for a moment (its listener connected and settled).
async fn settle(c: &PgCoordination) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::time::timeout(Duration::from_millis(300), c.changed())
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the listener never settles");
    }
}

/// Whether `c` is listening (its listener shows in `pg_stat_activity`).
async fn listening(store: &PgStore, replica: &str) -> bool {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(format!("cellbind-auth-service/{replica}"))
    .fetch_one(store.pool())
    .await
    .unwrap();
    n > 0
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_wakes_the_other_replicas_feed_within_a_second() {
    let url = fresh_url().await;
    let (a, _) = replica(&url, "r0").await;
    let (_b, cb) = replica(&url, "r1").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening(&a, "r1").await {
        assert!(Instant::now() < deadline, "r1 never listens");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&cb).await;
    for round in 0..3 {
        let waiter = tokio::spawn({
            let cb = cb.clone();
            async move { cb.changed().await }
        });
        // The waiter is registered before the commit (a later wake-up would still count, but
        // this proves the notification woke it).
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "woke before the commit ({round})");
        let committed = Instant::now();
        let c = contract::ownership(&*a, 1, 1 + round).await;
        a.commit(&c, 100).await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap_or_else(|_| panic!("no wake-up within 1 s ({round})"))
            .unwrap();
        assert!(committed.elapsed() < Duration::from_secs(1));
    }
    // The listener's connection is terminated: it reconnects and wakes (it may have missed a
    // notification), and later commits wake it again.
    let woke = tokio::spawn({
        let cb = cb.clone();
        async move { cb.changed().await }
    });
    tokio::task::yield_now().await;
    let killed: i64 = one(
        &a,
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'cellbind-auth-service/r1'
           AND query LIKE 'LISTEN%'",
    )
    .await;
    assert_eq!(killed, 1);
    tokio::time::timeout(Duration::from_secs(5), woke)
        .await
        .expect("a wake-up after the reconnect")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !listening(&a, "r1").await {
        assert!(Instant::now() < deadline, "r1 never listens again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&cb).await;
    let waiter = tokio::spawn({
        let cb = cb.clone();
        async move { cb.changed().await }
    });
    tokio::task::yield_now().await;
    let c = contract::ownership(&*a, 2, 1).await;
    a.commit(&c, 100).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("a wake-up after the reconnect's commit")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_leads_and_another_takes_over_when_its_connection_dies() {
    let url = fresh_url().await;
    let (a, ca) = replica(&url, "r0").await;
    let (_b, cb) = replica(&url, "r1").await;
    let (la, lb) = (ca.lead().await, cb.lead().await);
    assert!(la ^ lb, "exactly one leader: {la} {lb}");
    for _ in 0..3 {
        assert_eq!((ca.lead().await, cb.lead().await), (la, lb), "stable");
    }
    let (old, new) = if la { (&ca, &cb) } else { (&cb, &ca) };
    let killed: i64 = sqlx::query_scalar(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks
         WHERE locktype = 'advisory' AND granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND classid::bigint = ($1 >> 32) AND objid::bigint = ($1 & 4294967295)",
    )
    .bind(LEADER_LOCK_KEY)
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(killed, 1, "the leader's lock was found");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (o, n) = (old.lead().await, new.lead().await);
        assert!(!(o && n), "never two leaders");
        if n {
            break;
        }
        assert!(Instant::now() < deadline, "no handover within 5 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!old.lead().await, "the old leader stays a follower");
    assert!(new.lead().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_one_throttle_bucket_exactly() {
    let url = fresh_url().await;
    let (a, ca) = replica(&url, "r0").await;
    let (_b, cb) = replica(&url, "r1").await;
    let now = 1_767_225_600_000;
    let interval = 60_000;
    for n in 0..10 {
        let c = if n % 2 == 0 { &ca } else { &cb };
        assert_eq!(
            c.take("ip:1", 10, interval, now).await.unwrap(),
            None,
            "{n}"
        );
    }
    // The 11th, whichever replica takes it, is refused; the bucket is unchanged.
    assert_eq!(cb.take("ip:1", 10, interval, now).await.unwrap(), Some(60));
    assert_eq!(
        ca.take("ip:1", 10, interval, now + 1).await.unwrap(),
        Some(60)
    );
    assert_eq!(
        ca.take("ip:1", 10, interval, now + 59_000).await.unwrap(),
        Some(1)
    );
    // One token back per interval.
    assert_eq!(
        cb.take("ip:1", 10, interval, now + interval).await.unwrap(),
        None
    );
    assert!(
        ca.take("ip:1", 10, interval, now + interval)
            .await
            .unwrap()
            .is_some()
    );
    // Concurrently, across both pools: exactly `burst` pass.
    let mut tasks = Vec::new();
    for n in 0..30 {
        let c = if n % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(async move {
            c.take("ip:2", 10, interval, now).await.unwrap()
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap().is_none());
    }
    assert_eq!(allowed, 10);
    // Full buckets are dropped; a drained one is kept.
    assert_eq!(ca.shrink_buckets(now).await.unwrap(), 0);
    assert_eq!(ca.shrink_buckets(now + 10 * interval).await.unwrap(), 1);
    assert_eq!(
        one::<i64>(&a, "SELECT COUNT(*) FROM throttle_buckets").await,
        1
    );
    assert_eq!(ca.shrink_buckets(now + 11 * interval).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn edge_instances_seen_by_any_replica_are_listed_by_every_replica() {
    let url = fresh_url().await;
    let (_a, ca) = replica(&url, "r0").await;
    let (_b, cb) = replica(&url, "r1").await;
    let seen = |id: &str, seq: u64, busy: Vec<ContractorId>| InstanceSeen {
        id: id.into(),
        applied_seq: seq,
        last_seen: 100 + seq,
        busy,
    };
    ca.saw_instance(&seen("edge-b", 3, vec![])).await.unwrap();
    cb.saw_instance(&seen("edge-a", 4, vec![ContractorId::new("c-1").unwrap()]))
        .await
        .unwrap();
    cb.saw_instance(&seen("edge-b", 5, vec![])).await.unwrap();
    let expected = vec![
        seen("edge-a", 4, vec![ContractorId::new("c-1").unwrap()]),
        seen("edge-b", 5, vec![]),
    ];
    assert_eq!(ca.instances().await.unwrap(), expected);
    assert_eq!(cb.instances().await.unwrap(), expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_url_is_refused_without_quoting_it() {
    let secret = runtime::Secret::new("postgres://cellbind:hunter2@[::1/db");
    let err = open(&secret, None, 1, "r0").await.unwrap_err();
    assert!(matches!(err, Error::Config(_)));
    assert!(!err.to_string().contains("hunter2"));
}
