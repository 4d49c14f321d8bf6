//! The SQLite backend of [`Store`]: one file, WAL, `synchronous=FULL` (an acknowledged
//! change survives a crash), schema version in `PRAGMA user_version`. One process writes it:
//! a commit is still conditional on the stored head and epoch (the same contract as the
//! PostgreSQL backend), and a restore replaces every table in one transaction under a new
//! epoch.
//!
//! The connection is owned by a thread of its own (`sqlite_thread.rs`) that runs the calls one
//! at a time. The schema is in `sqlite_schema.rs`, backup and restore in `sqlite_backup.rs`,
//! the shared reads in `sqlite_rows.rs`, a commit's state changes in `sqlite_writes.rs`.

use std::path::Path;

use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SessionId, SubjectId};
use runtime::sqlite::Pragmas;
use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::portable::{i, json, u};
use crate::store::records::{
    Commit, Dump, KeyRow, Loaded, MintedSession, Position, TicketBurn, TransferRecord, UserRecord,
};
use crate::store::sqlite_rows::{
    json_row, json_rows, read_epochs, read_feed, read_keys, read_ownership, read_position,
    users_where,
};
use crate::store::sqlite_thread::SqliteThread;
use crate::store::{
    sqlite_backup, sqlite_migration, sqlite_revocations, sqlite_schema, sqlite_writes,
};

/// How long a writer waits for a lock held by another connection, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;

/// How the database file is opened: WAL, `synchronous=FULL`, a busy timeout.
const PRAGMAS: Pragmas = Pragmas::wal(BUSY_TIMEOUT_MS).synchronous("FULL");

/// The SQLite store: one connection, owned by a thread of its own (`sqlite_thread.rs`) that
/// runs the calls one at a time.
#[derive(Debug)]
pub(crate) struct SqliteStore {
    thread: SqliteThread,
}

impl SqliteStore {
    /// Opens (creating if needed) the database `file` in `dir` (ATTACKS A30: the folder is
    /// made owner-only even when it already existed, and the database exists 0600 before
    /// SQLite opens it) and brings its schema up to date.
    pub(crate) async fn open_in(dir: &Path, file: &str) -> Result<SqliteStore> {
        let (dir, file) = (dir.to_path_buf(), file.to_owned());
        Self::start(move || {
            sqlite_schema::init(runtime::sqlite::open_in::<Error>(&dir, &file, PRAGMAS)?)
        })
        .await
    }

    /// An in-memory database (tests).
    #[cfg(test)]
    pub(crate) async fn in_memory() -> Result<SqliteStore> {
        Self::start(|| sqlite_schema::init(Connection::open_in_memory()?)).await
    }

    async fn start(
        open: impl FnOnce() -> Result<Connection> + Send + 'static,
    ) -> Result<SqliteStore> {
        Ok(SqliteStore {
            thread: SqliteThread::start(open).await?,
        })
    }

    /// Runs `f` on the connection's thread.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.thread.run(f).await
    }
}

impl Store for SqliteStore {
    async fn load(&self, retain: u64) -> Result<Loaded> {
        self.run(move |c| load(c, retain)).await
    }

    async fn commit(&self, commit: &Commit, retain: u64) -> Result<()> {
        let commit = commit.clone();
        self.run(move |c| write_commit(c, &commit, retain)).await
    }

    async fn position(&self) -> Result<Position> {
        self.run(|c| read_position(c)).await
    }

    async fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
        self.run(move |c| read_feed(c, after, limit)).await
    }

    async fn keys(&self) -> Result<Vec<KeyRow>> {
        self.run(|c| read_keys(c)).await
    }

    async fn dump(&self) -> Result<Dump> {
        self.run(sqlite_backup::dump).await
    }

    async fn restore(&self, dump: Dump, epoch: &str) -> Result<()> {
        let epoch = epoch.to_owned();
        self.run(move |c| sqlite_backup::restore(c, &dump, &epoch))
            .await
    }

    async fn epochs(&self) -> Result<Vec<String>> {
        self.run(|c| read_epochs(c)).await
    }

    async fn delete_revocations(&self, seqs: &[u64]) -> Result<()> {
        let seqs = seqs.to_vec();
        self.run(move |c| delete_revocations(c, &seqs)).await
    }

    async fn upsert_users(&self, users: Vec<UserRecord>) -> Result<u64> {
        self.run(move |c| upsert_users(c, &users)).await
    }

    async fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>> {
        let (contractor, login) = (contractor.clone(), login.clone());
        let users = self
            .run(move |c| {
                users_where(
                    c,
                    "contractor_id = ?1 AND login = ?2",
                    params![contractor.as_str(), login.as_str()],
                )
            })
            .await?;
        Ok(users.into_iter().next())
    }

    async fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>> {
        let subject = subject.clone();
        let users = self
            .run(move |c| users_where(c, "subject = ?1", params![subject.as_str()]))
            .await?;
        Ok(users.into_iter().next())
    }

    async fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
        let contractor = contractor.clone();
        self.run(move |c| {
            users_where(
                c,
                "contractor_id = ?1 ORDER BY login",
                params![contractor.as_str()],
            )
        })
        .await
    }

    async fn record_session(&self, session: &MintedSession) -> Result<()> {
        let session = session.clone();
        self.run(move |c| sqlite_revocations::record_session(c, &session))
            .await
    }

    async fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>> {
        let subject = subject.clone();
        self.run(move |c| sqlite_revocations::sessions_of(c, &subject, now, limit))
            .await
    }

    async fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>> {
        let jti = jti.clone();
        self.run(move |c| sqlite_revocations::session(c, &jti))
            .await
    }

    async fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize> {
        self.run(move |c| sqlite_revocations::delete_expired(c, cutoff))
            .await
    }

    async fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>> {
        self.run(move |c| sqlite_revocations::audit_page(c, after, limit))
            .await
    }

    async fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool> {
        let ticket = ticket.clone();
        self.run(move |c| sqlite_migration::burn_ticket(c, &ticket, now))
            .await
    }

    async fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord> {
        let (sid, proposed) = (sid.clone(), proposed.clone());
        self.run(move |c| sqlite_migration::record_transfer(c, &sid, sexp, &proposed, now))
            .await
    }
}

/// The state, keeping the newest `retain` feed entries.
fn load(conn: &Connection, retain: u64) -> Result<Loaded> {
    let mut out = Loaded {
        keys: read_keys(conn)?,
        ownership: read_ownership(conn)?,
        ..Loaded::default()
    };
    out.revocations = json_rows::<Revocation>(
        conn,
        "SELECT body FROM revocations ORDER BY seq",
        [],
        "revocation",
    )?;
    out.map = json_row::<SignedMap>(
        conn,
        "SELECT body FROM placement_map WHERE id = 1",
        [],
        "placement map",
    )?;
    let Position { epoch, head } = read_position(conn)?;
    out.epoch = epoch;
    out.head = head;
    out.log = read_feed(conn, out.head.saturating_sub(retain), usize::MAX)?;
    out.users = u(conn.query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?);
    Ok(out)
}

/// Writes a commit in one transaction, unless the stored position is not the one it was built
/// on (then nothing is written: `Error::Stale`).
fn write_commit(conn: &mut Connection, commit: &Commit, retain: u64) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let stored = read_position(&tx)?;
    if stored.head != commit.base || stored.epoch != commit.epoch {
        // Dropping the transaction rolls it back: nothing written.
        return Err(Error::Stale {
            stored: stored.head,
            base: commit.base,
        });
    }
    for w in &commit.writes {
        sqlite_writes::write(&tx, w)?;
    }
    for e in &commit.entries {
        tx.execute(
            "INSERT INTO feed (seq, change) VALUES (?1, ?2)",
            params![i(e.seq), json(&e.change)?],
        )?;
    }
    tx.execute(
        "UPDATE feed_head SET head = ?1 WHERE id = 1",
        params![i(commit.head)],
    )?;
    tx.execute(
        "DELETE FROM feed WHERE seq <= ?1",
        params![i(commit.head.saturating_sub(retain))],
    )?;
    tx.commit()?;
    Ok(())
}

/// Deletes revocations by feed sequence, in one transaction.
fn delete_revocations(conn: &mut Connection, seqs: &[u64]) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut st = tx.prepare("DELETE FROM revocations WHERE seq = ?1")?;
        for seq in seqs {
            st.execute(params![i(*seq)])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Inserts or replaces users in one transaction; answers the total number of users.
fn upsert_users(conn: &mut Connection, users: &[UserRecord]) -> Result<u64> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    sqlite_writes::users(&tx, users)?;
    let n: i64 = tx.query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?;
    tx.commit()?;
    Ok(u(n))
}
