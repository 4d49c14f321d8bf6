//! What the replicas of a cell share besides the store (see `postgres.rs` for the tables): wake-ups when another replica commits, the leader lock, the
//! sign-in throttle's buckets and the edge instances seen.

use std::time::Duration;

use protocol::ContractorId;
use protocol::admin::cell::InstanceSeen;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Connection as _, PgConnection};
use tokio::sync::{Mutex, watch};

use crate::error::Result;
use crate::store::portable::{i, json, u, unjson};

/// The channel every commit and restore notifies (payload: the new feed head).
pub(crate) const FEED_CHANNEL: &str = "cellbind_feed";
/// The advisory lock the leading replica holds: the ASCII bytes of `cellbind`.
pub(crate) const LEADER_LOCK_KEY: i64 = 0x6365_6c6c_6269_6e64;
/// First and longest wait before the listener reconnects.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// How long the leader connection may take to answer before it counts as lost.
const LEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// The cross-replica services, over the store's pool (and two connections of their own: the
/// listener's and the leader lock's).
pub(crate) struct PgCoordination {
    pool: PgPool,
    options: PgConnectOptions,
    /// Bumped by the listener task at each notification and (re)connection.
    wake: watch::Receiver<u64>,
    leader: Mutex<Leader>,
}

impl std::fmt::Debug for PgCoordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connect options hold the password: not shown.
        f.debug_struct("PgCoordination").finish_non_exhaustive()
    }
}

/// How long a replica that lost the leader lock's connection leaves the lock to the others
/// before it tries to take it again: a replica whose connection was cut (or flaps) does not
/// take leadership straight back from the one that took over.
const LEADER_YIELD: Duration = Duration::from_secs(10);

/// The leader lock's connection, detached from the pool (the lock lives as long as it).
#[derive(Default)]
struct Leader {
    conn: Option<PgConnection>,
    held: bool,
    /// Set when the lock's connection was lost while held: no attempt before then.
    yield_until: Option<tokio::time::Instant>,
}

impl PgCoordination {
    /// Starts the listener task (it ends when this is dropped).
    pub(super) fn start(pool: PgPool, options: PgConnectOptions) -> PgCoordination {
        let (tx, wake) = watch::channel(0);
        tokio::spawn(listen(options.clone(), tx));
        PgCoordination {
            pool,
            options,
            wake,
            leader: Mutex::new(Leader::default()),
        }
    }

    /// Waits until another replica may have committed: a NOTIFY on `cellbind_feed`, or the
    /// listener just (re)connected. Spurious wake-ups are fine; never returns an error (it
    /// reconnects with a short backoff inside, logging a warning).
    pub(crate) async fn changed(&self) {
        let mut wake = self.wake.clone();
        wake.mark_unchanged();
        if wake.changed().await.is_err() {
            // The listener task is gone (the runtime is shutting down): never wake.
            std::future::pending::<()>().await;
        }
    }

    /// Whether this replica leads the cell's scheduled work now: holds a session-level advisory
    /// lock (a fixed key, e.g. hash of "cellbind-auth-leader") on a dedicated connection detached
    /// from the pool; takes it when free; notices a lost connection (the lock is then gone, and
    /// another replica takes it). At most one replica answers true at any time.
    pub(crate) async fn lead(&self) -> bool {
        let mut leader = self.leader.lock().await;
        match tokio::time::timeout(LEADER_TIMEOUT, leader.check(&self.options)).await {
            Ok(Ok(held)) => held,
            failed => {
                if leader.held {
                    tracing::warn!("lost the leader lock's database connection");
                } else if let Ok(Err(e)) = failed {
                    tracing::debug!(error = %e, "cannot reach the database for the leader lock");
                }
                // The lock dies with its session: start over with a new connection, after
                // leaving the lock to the others for a while when this replica held it.
                let yield_until = leader
                    .held
                    .then(|| tokio::time::Instant::now() + LEADER_YIELD);
                *leader = Leader {
                    yield_until,
                    ..Leader::default()
                };
                false
            }
        }
    }

    /// One token from the shared GCRA bucket `key` (capacity `burst`, one token back every
    /// `interval_ms`), atomically in ONE statement (INSERT ... ON CONFLICT DO UPDATE ...
    /// RETURNING) so replicas share it exactly: Ok(None) allowed, Ok(Some(retry_after_s >= 1))
    /// refused (and the bucket unchanged). `now_ms` is passed in (tests). A burst of 0 acts
    /// as 1.
    pub(crate) async fn take(
        &self,
        key: &str,
        burst: u32,
        interval_ms: u64,
        now_ms: u64,
    ) -> Result<Option<u64>> {
        let tolerance = u64::from(burst.saturating_sub(1)).saturating_mul(interval_ms);
        // `stored` is read from the statement's snapshot, only for the retry hint.
        let (allowed, stored): (Option<i64>, Option<i64>) = sqlx::query_as(
            "WITH taken AS (
                 INSERT INTO throttle_buckets AS b (key, tat_ms) VALUES ($1, $2 + $3)
                 ON CONFLICT (key) DO UPDATE SET tat_ms = GREATEST(b.tat_ms, $2) + $3
                 WHERE GREATEST(b.tat_ms, $2) - $2 <= $4
                 RETURNING tat_ms
             )
             SELECT (SELECT tat_ms FROM taken),
                    (SELECT tat_ms FROM throttle_buckets WHERE key = $1)",
        )
        .bind(key)
        .bind(i(now_ms))
        .bind(i(interval_ms))
        .bind(i(tolerance))
        .fetch_one(&self.pool)
        .await?;
        if allowed.is_some() {
            return Ok(None);
        }
        let wait_ms = stored
            .map(|tat| u(tat).saturating_sub(now_ms).saturating_sub(tolerance))
            .unwrap_or(0);
        Ok(Some(wait_ms.div_ceil(1000).max(1)))
    }

    /// Drops buckets that are full again (tat <= now).
    pub(crate) async fn shrink_buckets(&self, now_ms: u64) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM throttle_buckets WHERE tat_ms <= $1")
                .bind(i(now_ms))
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }

    /// Records a feed request of an edge instance (upsert), and lists them (sorted by id).
    pub(crate) async fn saw_instance(&self, seen: &InstanceSeen) -> Result<()> {
        sqlx::query(
            "INSERT INTO feed_instances (id, applied_seq, last_seen, busy) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE SET applied_seq = $2, last_seen = $3, busy = $4",
        )
        .bind(&seen.id)
        .bind(i(seen.applied_seq))
        .bind(i(seen.last_seen))
        .bind(json(&seen.busy)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The edge instances seen, sorted by id.
    pub(crate) async fn instances(&self) -> Result<Vec<InstanceSeen>> {
        let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
            "SELECT id, applied_seq, last_seen, busy FROM feed_instances ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, applied, seen, busy)| {
                Ok(InstanceSeen {
                    id,
                    applied_seq: u(applied),
                    last_seen: u(seen),
                    busy: unjson::<Vec<ContractorId>>(&busy, "instance")?,
                })
            })
            .collect()
    }
}

impl Leader {
    /// Takes the lock when free, or checks that the connection holding it is alive.
    async fn check(&mut self, options: &PgConnectOptions) -> Result<bool, sqlx::Error> {
        if let Some(until) = self.yield_until {
            if tokio::time::Instant::now() < until {
                return Ok(false);
            }
            self.yield_until = None;
        }
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                self.held = false;
                self.conn.insert(PgConnection::connect_with(options).await?)
            }
        };
        if self.held {
            conn.ping().await?;
        } else {
            self.held = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(LEADER_LOCK_KEY)
                .fetch_one(&mut *conn)
                .await?;
            if self.held {
                tracing::info!("this replica leads the cell's scheduled work");
            }
        }
        Ok(self.held)
    }
}

/// Listens on [`FEED_CHANNEL`] until every receiver of `wake` is gone, bumping it at each
/// notification and each (re)connection (notifications may have been missed meanwhile).
async fn listen(options: PgConnectOptions, wake: watch::Sender<u64>) {
    let bump = || wake.send_modify(|n| *n = n.wrapping_add(1));
    let mut backoff = BACKOFF.0;
    loop {
        let (connected, failed) = tokio::select! {
            () = wake.closed() => return,
            lost = listen_once(&options, &bump) => lost,
        };
        if connected {
            backoff = BACKOFF.0;
        }
        tracing::warn!(error = %failed, "the feed listener lost its database connection");
        tokio::select! {
            () = wake.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF.1);
    }
}

/// One listening connection, until it fails: whether it had connected, and why it failed.
async fn listen_once(options: &PgConnectOptions, bump: &impl Fn()) -> (bool, sqlx::Error) {
    // A pool of one, only to reconnect: the store's pool does not lend a connection that
    // never comes back.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options.clone());
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(listener) => listener,
        Err(e) => return (false, e),
    };
    if let Err(e) = listener.listen(FEED_CHANNEL).await {
        return (false, e);
    }
    bump();
    loop {
        // `Ok(None)`: the connection was lost and made again (notifications were missed).
        if let Err(e) = listener.try_recv().await {
            return (true, e);
        }
        bump();
    }
}
