//! The PostgreSQL backend of [`Store`]: several auth-service replicas of one cell on one
//! database, and the services they share ([`PgCoordination`]).
//!
//! **Transactions.** Every method is one transaction (or one statement), so each keeps the
//! SQLite backend's contract under concurrent replicas:
//! - [`Store::commit`] first locks the feed position (`SELECT ... FROM feed_head WHERE id = 1
//!   FOR UPDATE`), which orders the commits of every replica; it writes nothing and answers
//!   [`Error::Stale`] unless the stored head is `commit.base` and the stored epoch
//!   `commit.epoch`. So the feed stays gap-free: one order of changes for all replicas. A
//!   revocation and its audit row are written in that same transaction.
//! - [`Store::burn_ticket`] burns the ticket id and the session id it carries in one
//!   transaction (`INSERT ... ON CONFLICT DO NOTHING`: a concurrent burn of the same id waits
//!   for the first and then finds it burned). Forgetting expired ids is a separate statement
//!   before it (it only shrinks the tables; two replicas doing it at once cannot deadlock a
//!   burn).
//! - [`Store::load`] and [`Store::dump`] read in one `REPEATABLE READ` transaction (every
//!   table from one moment); [`Store::restore`] replaces every table's contents in one
//!   transaction holding the feed-position lock, keeps the `epochs` rows and lists the new
//!   epoch last (the shared run-time tables below are not part of a backup).
//!
//! **Wake-ups.** A commit and a restore `NOTIFY` the channel
//! [`FEED_CHANNEL`](crate::store::postgres_coordination::FEED_CHANNEL)
//! (`cellbind_feed`, payload: the new head) inside their transaction, so it is delivered at
//! COMMIT; each replica `LISTEN`s on it to wake its feed long-polls
//! ([`PgCoordination::changed`]).
//!
//! **Leader.** The cell's scheduled work (key rotation, pruning) runs on one replica: the one
//! holding the session-level advisory lock [`LEADER_LOCK_KEY`] (the ASCII of `cellbind`) on a
//! dedicated connection ([`PgCoordination::lead`]).
//!
//! **Throttle.** Sign-in throttle buckets are shared: the table `throttle_buckets (key,
//! tat_ms)` holds each bucket's GCRA theoretical arrival time in Unix milliseconds, taken and
//! updated in one statement ([`PgCoordination::take`]); `feed_instances` records the edge
//! instances any replica's feed has seen.
//!
//! Backup and restore are in `postgres_backup.rs`, the writes several calls share in
//! `postgres_writes.rs`.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SessionId, SubjectId};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};

use crate::error::{Error, Result};
use crate::store::portable::{
    UserColumns, fresh_epoch, i, i_usize, json, transfer_record, u, unjson,
};
use crate::store::postgres_rows::{self as rows, BEGIN_SNAPSHOT, USER_SELECT};
use crate::store::postgres_writes as writes;
use crate::store::records::{
    Commit, Dump, KeyRow, Loaded, MintedSession, Position, TicketBurn, TransferRecord, UserRecord,
};
use crate::store::{Store, postgres_backup};

pub(crate) use crate::store::postgres_coordination::PgCoordination;

/// How long a request waits for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the database named by `url` (a `postgres://` URL; its password, if any, is
/// never logged), brings its schema up to date and gives a fresh database its feed position.
/// With `ca_cert` the server's certificate must chain to it and name the URL's host
/// (`verify-full`); without it the URL's `sslmode` applies. Connections are named
/// `cellbind-auth-service/<replica>` (`application_name`). Several replicas may open the
/// same database at once: the migrations run under an advisory lock and the feed position
/// is inserted once.
pub(crate) async fn open(
    url: &runtime::Secret,
    ca_cert: Option<&Path>,
    max_connections: u32,
    replica: &str,
) -> Result<(PgStore, PgCoordination)> {
    // The parser's error may quote the URL (and its password): not passed on.
    let mut options = PgConnectOptions::from_str(url.expose())
        .map_err(|_| Error::Config("the database URL is not a valid postgres:// URL".into()))?;
    if let Some(ca) = ca_cert {
        options = options.ssl_mode(PgSslMode::VerifyFull).ssl_root_cert(ca);
    }
    options = options.application_name(&format!("cellbind-auth-service/{replica}"));
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        // A connection the server dropped (a restart, `pg_terminate_backend`) is replaced
        // instead of failing a request.
        .test_before_acquire(true)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.clone())
        .await?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await?;
    let mut tx = pool.begin().await?;
    let epoch = fresh_epoch()?;
    let fresh = sqlx::query(
        "INSERT INTO feed_head (id, head, epoch) VALUES (1, 0, $1) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&epoch)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if fresh {
        sqlx::query("INSERT INTO epochs (epoch) VALUES ($1)")
            .bind(&epoch)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    if fresh {
        tracing::info!(%replica, "initialised a fresh database");
    }
    let coordination = PgCoordination::start(pool.clone(), options);
    let store = PgStore { pool };
    Ok((store, coordination))
}

/// The PostgreSQL store: a connection pool.
pub(crate) struct PgStore {
    pool: PgPool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("connections", &self.pool.size())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// The pool (tests inspect the database through it).
    #[cfg(test)]
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The users matching `filter` (an SQL condition with `$1` = `a` and `$2` = `b`).
    async fn users_where(&self, filter: &str, a: &str, b: Option<&str>) -> Result<Vec<UserRecord>> {
        let mut q = sqlx::query_as::<_, UserColumns>(AssertSqlSafe(format!(
            "{USER_SELECT} WHERE {filter}"
        )))
        .bind(a);
        if let Some(b) = b {
            q = q.bind(b);
        }
        rows::users(q.fetch_all(&self.pool).await?)
    }

    /// A pooled connection.
    async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
        Ok(self.pool.acquire().await?)
    }
}

impl Store for PgStore {
    async fn load(&self, retain: u64) -> Result<Loaded> {
        let mut tx = self.pool.begin_with(BEGIN_SNAPSHOT).await?;
        let Position { epoch, head } = rows::position(&mut tx).await?;
        let out = Loaded {
            keys: rows::keys(&mut tx).await?,
            ownership: rows::ownership(&mut tx).await?,
            revocations: rows::json_rows(
                &mut tx,
                "SELECT body FROM revocations ORDER BY seq",
                "revocation",
            )
            .await?,
            map: rows::json_rows::<SignedMap>(
                &mut tx,
                "SELECT body FROM placement_map WHERE id = 1",
                "placement map",
            )
            .await?
            .pop(),
            log: rows::feed(&mut tx, head.saturating_sub(retain), usize::MAX).await?,
            users: u(sqlx::query_scalar("SELECT COUNT(*) FROM users")
                .fetch_one(&mut *tx)
                .await?),
            epoch,
            head,
        };
        tx.commit().await?;
        Ok(out)
    }

    async fn commit(&self, commit: &Commit, retain: u64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // The row lock orders every replica's commits.
        let (head, epoch): (i64, String) =
            sqlx::query_as("SELECT head, epoch FROM feed_head WHERE id = 1 FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
        if u(head) != commit.base || epoch != commit.epoch {
            // Dropping the transaction rolls it back: nothing written.
            return Err(Error::Stale {
                stored: u(head),
                base: commit.base,
            });
        }
        for w in &commit.writes {
            writes::write(&mut tx, w).await?;
        }
        for e in &commit.entries {
            sqlx::query("INSERT INTO feed (seq, change) VALUES ($1, $2)")
                .bind(i(e.seq))
                .bind(json(&e.change)?)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE feed_head SET head = $1 WHERE id = 1")
            .bind(i(commit.head))
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM feed WHERE seq <= $1")
            .bind(i(commit.head.saturating_sub(retain)))
            .execute(&mut *tx)
            .await?;
        writes::notify(&mut tx, commit.head).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn upsert_users(&self, users: Vec<UserRecord>) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        writes::users(&mut tx, &users).await?;
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(u(n))
    }

    async fn burn_ticket(&self, t: &TicketBurn, now: UnixSeconds) -> Result<bool> {
        let cutoff = i(now.saturating_sub(protocol::token::LEEWAY_S));
        // Forgetting expired ids only shrinks the tables: its own statements, outside the
        // burn (a replay after that is refused as expired anyway).
        sqlx::query("DELETE FROM burned_tickets WHERE exp < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM burned_sessions WHERE sexp < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        let mut tx = self.pool.begin().await?;
        let fresh_ticket = sqlx::query(
            "INSERT INTO burned_tickets (jti, exp) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING",
        )
        .bind(t.jti.as_str())
        .bind(i(t.exp))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let fresh_session = fresh_ticket
            && sqlx::query(
                "INSERT INTO burned_sessions (sid, sexp) VALUES ($1, $2)
                 ON CONFLICT (sid) DO NOTHING",
            )
            .bind(t.sid.as_str())
            .bind(i(t.sexp))
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
        if !fresh_session {
            // Dropping the transaction rolls it back: a ticket refused for its session id is
            // not burned either (it is refused again anyway).
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM transferred_sessions WHERE sexp < $1")
            .bind(i(now.saturating_sub(protocol::token::LEEWAY_S)))
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sid) DO NOTHING",
        )
        .bind(sid.as_str())
        .bind(proposed.ticket_jti.as_str())
        .bind(i(proposed.iat))
        .bind(i(proposed.exp))
        .bind(i(sexp))
        .execute(&mut *tx)
        .await?;
        // READ COMMITTED: this statement sees a record another replica committed meanwhile.
        let held: Option<(String, i64, i64)> =
            sqlx::query_as("SELECT ticket_jti, iat, exp FROM transferred_sessions WHERE sid = $1")
                .bind(sid.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        transfer_record(held)
    }

    async fn position(&self) -> Result<Position> {
        rows::position(&mut *self.conn().await?).await
    }

    async fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
        rows::feed(&mut *self.conn().await?, after, limit).await
    }

    async fn keys(&self) -> Result<Vec<KeyRow>> {
        rows::keys(&mut *self.conn().await?).await
    }

    async fn dump(&self) -> Result<Dump> {
        postgres_backup::dump(&self.pool).await
    }

    async fn restore(&self, dump: Dump, epoch: &str) -> Result<()> {
        postgres_backup::restore(&self.pool, &dump, epoch).await
    }

    async fn epochs(&self) -> Result<Vec<String>> {
        rows::epochs(&mut *self.conn().await?).await
    }

    async fn delete_revocations(&self, seqs: &[u64]) -> Result<()> {
        let seqs: Vec<i64> = seqs.iter().map(|s| i(*s)).collect();
        sqlx::query("DELETE FROM revocations WHERE seq = ANY($1)")
            .bind(&seqs)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>> {
        let users = self
            .users_where(
                "contractor_id = $1 AND login = $2",
                contractor.as_str(),
                Some(login.as_str()),
            )
            .await?;
        Ok(users.into_iter().next())
    }

    async fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>> {
        let users = self
            .users_where("subject = $1", subject.as_str(), None)
            .await?;
        Ok(users.into_iter().next())
    }

    async fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
        self.users_where(
            "contractor_id = $1 ORDER BY login",
            contractor.as_str(),
            None,
        )
        .await
    }

    async fn record_session(&self, session: &MintedSession) -> Result<()> {
        writes::record_session(&mut *self.conn().await?, session).await
    }

    async fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM minted_sessions WHERE sub = $1 AND exp > $2
             ORDER BY exp DESC LIMIT $3",
        )
        .bind(subject.as_str())
        .bind(i(now))
        .bind(i_usize(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|b| unjson(b, "minted session")).collect()
    }

    async fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>> {
        let body: Option<String> =
            sqlx::query_scalar("SELECT body FROM minted_sessions WHERE jti = $1")
                .bind(jti.as_str())
                .fetch_optional(&self.pool)
                .await?;
        body.map(|b| unjson(&b, "minted session")).transpose()
    }

    async fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize> {
        let n = sqlx::query("DELETE FROM minted_sessions WHERE exp < $1")
            .bind(i(cutoff))
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    async fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM revocation_audit WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(i(after))
        .bind(i_usize(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|b| unjson(b, "audit entry")).collect()
    }
}
