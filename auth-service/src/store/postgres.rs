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
//! **Wake-ups.** A commit and a restore `NOTIFY` the channel [`FEED_CHANNEL`]
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
//! The driver is async; the [`Store`] trait is not: each method drives its query on the
//! runtime captured at [`open`] (`Handle::block_on`, from the blocking thread pool).

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SessionId, SubjectId};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::portable::{
    RESTORED_TABLES, UserColumns, check_restorable, dump_key, fresh_epoch, history, i, i_usize,
    json, stored_id, transfer_record, u, undump_key,
};
use crate::store::postgres_rows::{self as rows, USER_SELECT};
use crate::store::records::{
    BACKUP_SCHEMA, Commit, Dump, DumpBurn, DumpTransfer, KeyRow, Loaded, MintedSession, Position,
    TicketBurn, TransferRecord, UserRecord, Write, audit_position,
};

pub(crate) use crate::store::postgres_coordination::{FEED_CHANNEL, PgCoordination};

/// How long a request waits for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// `BEGIN` of the consistent reads ([`Store::load`], [`Store::dump`]).
const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

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
    let store = PgStore {
        pool,
        rt: tokio::runtime::Handle::current(),
    };
    Ok((store, coordination))
}

/// The PostgreSQL store: a connection pool, and the runtime its blocking calls drive it on.
pub(crate) struct PgStore {
    pool: PgPool,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("connections", &self.pool.size())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Runs `fut` to completion from a blocking-pool thread.
    fn run<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        self.rt.block_on(fut)
    }

    /// The pool (tests inspect the database through it).
    #[cfg(test)]
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn load_async(&self, retain: u64) -> Result<Loaded> {
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

    async fn commit_async(&self, commit: &Commit, retain: u64) -> Result<()> {
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
            write(&mut tx, w).await?;
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
        notify(&mut tx, commit.head).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn dump_async(&self) -> Result<Dump> {
        let mut tx = self.pool.begin_with(BEGIN_SNAPSHOT).await?;
        let Position { epoch, head } = rows::position(&mut tx).await?;
        let burns = |rows: Vec<(String, i64)>| -> Result<Vec<DumpBurn>> {
            rows.into_iter()
                .map(|(id, until)| {
                    Ok(DumpBurn {
                        id: stored_id(id)?,
                        until: u(until),
                    })
                })
                .collect()
        };
        let burned_tickets = burns(
            sqlx::query_as("SELECT jti, exp FROM burned_tickets ORDER BY jti")
                .fetch_all(&mut *tx)
                .await?,
        )?;
        let burned_sessions = burns(
            sqlx::query_as("SELECT sid, sexp FROM burned_sessions ORDER BY sid")
                .fetch_all(&mut *tx)
                .await?,
        )?;
        let transfers: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
            "SELECT sid, ticket_jti, iat, exp, sexp FROM transferred_sessions ORDER BY sid",
        )
        .fetch_all(&mut *tx)
        .await?;
        let transferred_sessions = transfers
            .into_iter()
            .map(|(sid, ticket, iat, exp, sexp)| {
                Ok(DumpTransfer {
                    sid: stored_id(sid)?,
                    ticket_jti: stored_id(ticket)?,
                    iat: u(iat),
                    exp: u(exp),
                    sexp: u(sexp),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let users: Vec<UserColumns> = sqlx::query_as(AssertSqlSafe(format!(
            "{USER_SELECT} ORDER BY contractor_id, login"
        )))
        .fetch_all(&mut *tx)
        .await?;
        let dump = Dump {
            schema: BACKUP_SCHEMA,
            cell: None,
            taken_at: 0,
            epochs: rows::epochs(&mut tx).await?,
            epoch,
            head,
            feed: rows::feed(&mut tx, 0, usize::MAX).await?,
            users: rows::users(users)?,
            keys: rows::keys(&mut tx).await?.iter().map(dump_key).collect(),
            ownership: rows::ownership(&mut tx).await?,
            revocations: rows::json_rows(
                &mut tx,
                "SELECT body FROM revocations ORDER BY seq",
                "revocation",
            )
            .await?,
            revocation_audit: rows::json_rows(
                &mut tx,
                "SELECT body FROM revocation_audit ORDER BY seq",
                "audit entry",
            )
            .await?,
            map: rows::json_rows(
                &mut tx,
                "SELECT body FROM placement_map WHERE id = 1",
                "placement map",
            )
            .await?
            .pop(),
            minted_sessions: rows::json_rows(
                &mut tx,
                "SELECT body FROM minted_sessions ORDER BY jti",
                "minted session",
            )
            .await?,
            burned_tickets,
            burned_sessions,
            transferred_sessions,
        };
        tx.commit().await?;
        Ok(dump)
    }

    async fn restore_async(&self, dump: &Dump, epoch: &str) -> Result<()> {
        check_restorable(dump, epoch)?;
        let keys = dump
            .keys
            .iter()
            .map(undump_key)
            .collect::<Result<Vec<_>>>()?;
        let mut tx = self.pool.begin().await?;
        // Commits wait for the restore (and then find themselves stale).
        sqlx::query("SELECT head FROM feed_head WHERE id = 1 FOR UPDATE")
            .fetch_one(&mut *tx)
            .await?;
        for table in RESTORED_TABLES {
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
                .execute(&mut *tx)
                .await?;
        }
        for user in &dump.users {
            sqlx::query(
                "INSERT INTO users (contractor_id, login, subject, role, password_hash, status)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(user.contractor_id.as_str())
            .bind(user.login.as_str())
            .bind(user.subject.as_str())
            .bind(user.role.as_str())
            .bind(user.password_hash.expose())
            .bind(user.status.as_str())
            .execute(&mut *tx)
            .await?;
        }
        for k in &keys {
            sqlx::query(
                "INSERT INTO keys (kid, state, public_key, sealed_seed, created_at, state_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(k.kid.as_str())
            .bind(k.state.as_str())
            .bind(&k.public[..])
            .bind(k.sealed_seed.as_deref())
            .bind(i(k.created_at))
            .bind(i(k.state_at))
            .execute(&mut *tx)
            .await?;
        }
        for (contractor, record) in &dump.ownership {
            sqlx::query("INSERT INTO ownership (contractor_id, record) VALUES ($1, $2)")
                .bind(contractor.as_str())
                .bind(json(record)?)
                .execute(&mut *tx)
                .await?;
        }
        for r in &dump.revocations {
            sqlx::query("INSERT INTO revocations (seq, body) VALUES ($1, $2)")
                .bind(i(r.seq))
                .bind(json(r)?)
                .execute(&mut *tx)
                .await?;
        }
        for r in &dump.revocation_audit {
            audit(&mut tx, r).await?;
        }
        if let Some(m) = &dump.map {
            write(&mut tx, &Write::Map(Box::new(m.clone()))).await?;
        }
        for e in &dump.feed {
            sqlx::query("INSERT INTO feed (seq, change) VALUES ($1, $2)")
                .bind(i(e.seq))
                .bind(json(&e.change)?)
                .execute(&mut *tx)
                .await?;
        }
        for s in &dump.minted_sessions {
            record_session(&mut tx, s).await?;
        }
        for b in &dump.burned_tickets {
            sqlx::query("INSERT INTO burned_tickets (jti, exp) VALUES ($1, $2)")
                .bind(b.id.as_str())
                .bind(i(b.until))
                .execute(&mut *tx)
                .await?;
        }
        for b in &dump.burned_sessions {
            sqlx::query("INSERT INTO burned_sessions (sid, sexp) VALUES ($1, $2)")
                .bind(b.id.as_str())
                .bind(i(b.until))
                .execute(&mut *tx)
                .await?;
        }
        for t in &dump.transferred_sessions {
            sqlx::query(
                "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(t.sid.as_str())
            .bind(t.ticket_jti.as_str())
            .bind(i(t.iat))
            .bind(i(t.exp))
            .bind(i(t.sexp))
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("UPDATE feed_head SET head = $1, epoch = $2 WHERE id = 1")
            .bind(i(dump.head))
            .bind(epoch)
            .execute(&mut *tx)
            .await?;
        for old in history(dump) {
            sqlx::query("INSERT INTO epochs (epoch) VALUES ($1) ON CONFLICT (epoch) DO NOTHING")
                .bind(old)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM epochs WHERE epoch = $1")
            .bind(epoch)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO epochs (epoch) VALUES ($1)")
            .bind(epoch)
            .execute(&mut *tx)
            .await?;
        notify(&mut tx, dump.head).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn upsert_users_async(&self, users: &[UserRecord]) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        for user in users {
            sqlx::query(
                "INSERT INTO users (contractor_id, login, subject, role, password_hash, status)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (contractor_id, login) DO UPDATE SET
                   role = $4, password_hash = $5, status = $6",
            )
            .bind(user.contractor_id.as_str())
            .bind(user.login.as_str())
            .bind(user.subject.as_str())
            .bind(user.role.as_str())
            .bind(user.password_hash.expose())
            .bind(user.status.as_str())
            .execute(&mut *tx)
            .await?;
        }
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(u(n))
    }

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

    async fn burn_ticket_async(&self, t: &TicketBurn, now: UnixSeconds) -> Result<bool> {
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

    async fn record_transfer_async(
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

    async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
        Ok(self.pool.acquire().await?)
    }
}

/// Writes one state change inside a commit's transaction.
async fn write(conn: &mut PgConnection, w: &Write) -> Result<()> {
    match w {
        Write::Key(k) => {
            sqlx::query(
                "INSERT INTO keys (kid, state, public_key, sealed_seed, created_at, state_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (kid) DO UPDATE SET state = $2, state_at = $6,
                   sealed_seed = CASE WHEN $2 IN ('revoked', 'expired') THEN NULL
                                      ELSE COALESCE($4, keys.sealed_seed) END",
            )
            .bind(k.kid.as_str())
            .bind(k.state.as_str())
            .bind(&k.public[..])
            .bind(k.sealed_seed.as_deref())
            .bind(i(k.created_at))
            .bind(i(k.state_at))
            .execute(conn)
            .await?;
        }
        Write::Ownership { contractor, record } => {
            sqlx::query(
                "INSERT INTO ownership (contractor_id, record) VALUES ($1, $2)
                 ON CONFLICT (contractor_id) DO UPDATE SET record = $2",
            )
            .bind(contractor.as_str())
            .bind(json(record)?)
            .execute(conn)
            .await?;
        }
        Write::Revocation(r) => {
            sqlx::query("INSERT INTO revocations (seq, body) VALUES ($1, $2)")
                .bind(i(r.seq))
                .bind(json(r)?)
                .execute(&mut *conn)
                .await?;
            audit(conn, r).await?;
        }
        Write::Withdrawal(r) => {
            sqlx::query("DELETE FROM revocations WHERE seq = $1")
                .bind(i(r.seq))
                .execute(&mut *conn)
                .await?;
            audit(conn, r).await?;
        }
        Write::Map(m) => {
            sqlx::query(
                "INSERT INTO placement_map (id, version, body) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE SET version = $1, body = $2",
            )
            .bind(i(m.map.version))
            .bind(json(m)?)
            .execute(conn)
            .await?;
        }
    }
    Ok(())
}

/// Appends a revocation, or its withdrawal, to the audit log (inside the caller's
/// transaction), once per feed sequence number ([`audit_position`]).
async fn audit(conn: &mut PgConnection, r: &Revocation) -> Result<()> {
    let (seq, at) = audit_position(r);
    sqlx::query(
        "INSERT INTO revocation_audit (seq, at, body) VALUES ($1, $2, $3)
         ON CONFLICT (seq) DO NOTHING",
    )
    .bind(i(seq))
    .bind(i(at))
    .bind(json(r)?)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a minted session (insert or replace).
async fn record_session(conn: &mut PgConnection, s: &MintedSession) -> Result<()> {
    sqlx::query(
        "INSERT INTO minted_sessions (jti, sub, exp, body) VALUES ($1, $2, $3, $4)
         ON CONFLICT (jti) DO UPDATE SET sub = $2, exp = $3, body = $4",
    )
    .bind(s.session_id.as_str())
    .bind(s.subject.as_str())
    .bind(i(s.expires_at))
    .bind(json(s)?)
    .execute(conn)
    .await?;
    Ok(())
}

/// Notifies [`FEED_CHANNEL`] with the new head; delivered when the transaction commits.
async fn notify(conn: &mut PgConnection, head: u64) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(FEED_CHANNEL)
        .bind(head.to_string())
        .execute(conn)
        .await?;
    Ok(())
}

impl Store for PgStore {
    fn load(&self, retain: u64) -> Result<Loaded> {
        self.run(self.load_async(retain))
    }

    fn commit(&self, commit: &Commit, retain: u64) -> Result<()> {
        self.run(self.commit_async(commit, retain))
    }

    fn position(&self) -> Result<Position> {
        self.run(async { rows::position(&mut *self.conn().await?).await })
    }

    fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
        self.run(async { rows::feed(&mut *self.conn().await?, after, limit).await })
    }

    fn keys(&self) -> Result<Vec<KeyRow>> {
        self.run(async { rows::keys(&mut *self.conn().await?).await })
    }

    fn dump(&self) -> Result<Dump> {
        self.run(self.dump_async())
    }

    fn restore(&self, dump: &Dump, epoch: &str) -> Result<()> {
        self.run(self.restore_async(dump, epoch))
    }

    fn epochs(&self) -> Result<Vec<String>> {
        self.run(async { rows::epochs(&mut *self.conn().await?).await })
    }

    fn delete_revocations(&self, seqs: &[u64]) -> Result<()> {
        let seqs: Vec<i64> = seqs.iter().map(|s| i(*s)).collect();
        self.run(async {
            sqlx::query("DELETE FROM revocations WHERE seq = ANY($1)")
                .bind(&seqs)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
    }

    fn upsert_users(&self, users: &[UserRecord]) -> Result<u64> {
        self.run(self.upsert_users_async(users))
    }

    fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>> {
        let users = self.run(self.users_where(
            "contractor_id = $1 AND login = $2",
            contractor.as_str(),
            Some(login.as_str()),
        ))?;
        Ok(users.into_iter().next())
    }

    fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>> {
        let users = self.run(self.users_where("subject = $1", subject.as_str(), None))?;
        Ok(users.into_iter().next())
    }

    fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
        self.run(self.users_where(
            "contractor_id = $1 ORDER BY login",
            contractor.as_str(),
            None,
        ))
    }

    fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool> {
        self.run(self.burn_ticket_async(ticket, now))
    }

    fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord> {
        self.run(self.record_transfer_async(sid, sexp, proposed, now))
    }

    fn record_session(&self, session: &MintedSession) -> Result<()> {
        self.run(async { record_session(&mut *self.conn().await?, session).await })
    }

    fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>> {
        self.run(async {
            let rows: Vec<String> = sqlx::query_scalar(
                "SELECT body FROM minted_sessions WHERE sub = $1 AND exp > $2
                 ORDER BY exp DESC LIMIT $3",
            )
            .bind(subject.as_str())
            .bind(i(now))
            .bind(i_usize(limit))
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(|b| crate::store::portable::unjson(b, "minted session"))
                .collect()
        })
    }

    fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>> {
        self.run(async {
            let body: Option<String> =
                sqlx::query_scalar("SELECT body FROM minted_sessions WHERE jti = $1")
                    .bind(jti.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
            body.map(|b| crate::store::portable::unjson(&b, "minted session"))
                .transpose()
        })
    }

    fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize> {
        self.run(async {
            let n = sqlx::query("DELETE FROM minted_sessions WHERE exp < $1")
                .bind(i(cutoff))
                .execute(&self.pool)
                .await?
                .rows_affected();
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>> {
        self.run(async {
            let rows: Vec<String> = sqlx::query_scalar(
                "SELECT body FROM revocation_audit WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .bind(i(after))
            .bind(i_usize(limit))
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(|b| crate::store::portable::unjson(b, "audit entry"))
                .collect()
        })
    }
}
