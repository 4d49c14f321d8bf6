//! The SQLite backend of [`Store`]: one file, WAL, `synchronous=FULL` (an acknowledged
//! change survives a crash), schema version in `PRAGMA user_version`. One process writes it:
//! a commit is still conditional on the stored head and epoch (the same contract as the
//! PostgreSQL backend), and a restore replaces every table in one transaction under a new
//! epoch.

use std::path::Path;
use std::sync::Mutex;

use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Kid, Login, SessionId, SubjectId};
use runtime::sqlite::Pragmas;
use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::portable::{
    RESTORED_TABLES, check_restorable, dump_key, fresh_epoch, history, i, i_usize, json, stored_id,
    u, undump_key, unjson,
};
use crate::store::records::{
    BACKUP_SCHEMA, Commit, Dump, DumpBurn, DumpTransfer, KeyRow, KeyState, Loaded, MintedSession,
    Position, TicketBurn, TransferRecord, UserRecord, Write,
};
use crate::store::sqlite_rows::{USER_COLUMNS, json_row, json_rows, users_where};
use crate::store::{sqlite_migration, sqlite_revocations};

/// Schema version written to `PRAGMA user_version`. Version 1 is [`SCHEMA`]; each later
/// version is reached from the one before by its entry in [`MIGRATIONS`].
pub(crate) const SCHEMA_VERSION: u32 = 3;
/// The version that brought feed epochs: a database reaching it gets its first epoch.
const EPOCHS_SINCE: u32 = 3;
/// How long a writer waits for a lock held by another connection, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;

const SCHEMA: &str = "
CREATE TABLE users (
    contractor_id TEXT NOT NULL,
    login TEXT NOT NULL,
    subject TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (contractor_id, login)
) WITHOUT ROWID;
CREATE TABLE keys (
    kid TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    public_key BLOB NOT NULL,
    sealed_seed BLOB,
    created_at INTEGER NOT NULL,
    state_at INTEGER NOT NULL
);
CREATE TABLE ownership (
    contractor_id TEXT PRIMARY KEY,
    record TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE revocations (
    seq INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE placement_map (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE feed (
    seq INTEGER PRIMARY KEY,
    change TEXT NOT NULL
);
CREATE TABLE feed_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    head INTEGER NOT NULL
);
INSERT INTO feed_head (id, head) VALUES (1, 0);
-- Per-cell revocation: the audit log (append-only, written with each revocation, never
-- compacted) and the sessions minted here (listed by subject; dropped once expired).
CREATE TABLE revocation_audit (
    seq INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE minted_sessions (
    jti TEXT PRIMARY KEY,
    sub TEXT NOT NULL,
    exp INTEGER NOT NULL,
    body TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX minted_sessions_by_subject ON minted_sessions (sub, exp);
CREATE INDEX minted_sessions_by_expiry ON minted_sessions (exp);
-- Migration: transfer tickets already used at this cell (single use), kept until they expire.
CREATE TABLE burned_tickets (
    jti TEXT PRIMARY KEY,
    exp INTEGER NOT NULL
) WITHOUT ROWID;
";

/// `(version reached, SQL)`: the steps from version 1 to [`SCHEMA_VERSION`], applied in order
/// in one transaction with the version bump.
const MIGRATIONS: &[(u32, &str)] = &[
    (
        2,
        "
-- A session id is transferred at most once (ATTACKS A28). At a target: the session ids
-- already rebound here, burned with the ticket, kept until the session's expiry.
CREATE TABLE burned_sessions (
    sid TEXT PRIMARY KEY,
    sexp INTEGER NOT NULL
) WITHOUT ROWID;
-- At a source: the one ticket issued for each transferred session (repeated transfers answer
-- the same ticket until it expires), kept until the session's expiry.
CREATE TABLE transferred_sessions (
    sid TEXT PRIMARY KEY,
    ticket_jti TEXT NOT NULL,
    iat INTEGER NOT NULL,
    exp INTEGER NOT NULL,
    sexp INTEGER NOT NULL
) WITHOUT ROWID;
",
    ),
    (
        3,
        "
-- Feed epochs: the database's id, new at each restore from a backup. The current one is in
-- `feed_head`; `epochs` lists every one the database has had, in order (the current last).
CREATE TABLE epochs (
    n INTEGER PRIMARY KEY,
    epoch TEXT NOT NULL UNIQUE
);
ALTER TABLE feed_head ADD COLUMN epoch TEXT NOT NULL DEFAULT '';
",
    ),
];

/// How the database file is opened: WAL, `synchronous=FULL`, a busy timeout.
const PRAGMAS: Pragmas = Pragmas::wal(BUSY_TIMEOUT_MS).synchronous("FULL");

/// The SQLite store. One connection, serialised by a mutex (writes are serialised anyway).
#[derive(Debug)]
pub(crate) struct SqliteStore {
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database `file` in `dir` (ATTACKS A30: the folder is
    /// made owner-only even when it already existed, and the database exists 0600 before
    /// SQLite opens it) and brings its schema up to date.
    pub(crate) fn open_in(dir: &Path, file: &str) -> Result<SqliteStore> {
        Self::init(runtime::sqlite::open_in::<Error>(dir, file, PRAGMAS)?)
    }

    /// An in-memory database (tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> Result<SqliteStore> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<SqliteStore> {
        conn.execute_batch("PRAGMA foreign_keys=ON;")?;
        let version = runtime::check_sqlite_user_version(&conn, SCHEMA_VERSION)?;
        if version < SCHEMA_VERSION {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut sql = String::new();
            if version == 0 {
                sql.push_str(SCHEMA);
            }
            for (_, step) in MIGRATIONS.iter().filter(|(v, _)| *v > version.max(1)) {
                sql.push_str(step);
            }
            sql.push_str(&format!(" PRAGMA user_version = {SCHEMA_VERSION};"));
            tx.execute_batch(&sql)?;
            if version < EPOCHS_SINCE {
                // A fresh database, or one from before epochs: its first epoch.
                let epoch = fresh_epoch()?;
                tx.execute("UPDATE feed_head SET epoch = ?1 WHERE id = 1", [&epoch])?;
                tx.execute("INSERT INTO epochs (epoch) VALUES (?1)", [&epoch])?;
            }
            tx.commit()?;
            if version > 0 {
                tracing::info!(
                    from = version,
                    to = SCHEMA_VERSION,
                    "migrated the database schema"
                );
            }
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for SqliteStore {
    fn load(&self, retain: u64) -> Result<Loaded> {
        let conn = self.conn();
        let mut out = Loaded {
            keys: read_keys(&conn)?,
            ownership: read_ownership(&conn)?,
            ..Loaded::default()
        };
        out.revocations = json_rows::<Revocation>(
            &conn,
            "SELECT body FROM revocations ORDER BY seq",
            [],
            "revocation",
        )?;
        out.map = json_row::<SignedMap>(
            &conn,
            "SELECT body FROM placement_map WHERE id = 1",
            [],
            "placement map",
        )?;
        let Position { epoch, head } = read_position(&conn)?;
        out.epoch = epoch;
        out.head = head;
        out.log = read_feed(&conn, out.head.saturating_sub(retain), usize::MAX)?;
        out.users = u(conn.query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?);
        Ok(out)
    }

    fn commit(&self, commit: &Commit, retain: u64) -> Result<()> {
        let mut conn = self.conn();
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
            match w {
                Write::Key(k) => {
                    tx.execute(
                        "INSERT INTO keys (kid, state, public_key, sealed_seed, created_at, state_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT(kid) DO UPDATE SET state = ?2, state_at = ?6,
                           sealed_seed = CASE WHEN ?2 IN ('revoked', 'expired') THEN NULL
                                              ELSE COALESCE(?4, sealed_seed) END",
                        params![
                            k.kid.as_str(),
                            k.state.as_str(),
                            &k.public[..],
                            k.sealed_seed,
                            i(k.created_at),
                            i(k.state_at)
                        ],
                    )?;
                }
                Write::Ownership { contractor, record } => {
                    tx.execute(
                        "INSERT INTO ownership (contractor_id, record) VALUES (?1, ?2)
                         ON CONFLICT(contractor_id) DO UPDATE SET record = ?2",
                        params![contractor.as_str(), json(record)?],
                    )?;
                }
                Write::Revocation(r) => {
                    tx.execute(
                        "INSERT INTO revocations (seq, body) VALUES (?1, ?2)",
                        params![i(r.seq), json(r)?],
                    )?;
                    sqlite_revocations::audit(&tx, r)?;
                }
                Write::Withdrawal(r) => {
                    tx.execute("DELETE FROM revocations WHERE seq = ?1", params![i(r.seq)])?;
                    sqlite_revocations::audit(&tx, r)?;
                }
                Write::Map(m) => {
                    tx.execute(
                        "INSERT INTO placement_map (id, version, body) VALUES (1, ?1, ?2)
                         ON CONFLICT(id) DO UPDATE SET version = ?1, body = ?2",
                        params![i(m.map.version), json(m)?],
                    )?;
                }
            }
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

    fn position(&self) -> Result<Position> {
        read_position(&self.conn())
    }

    fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
        read_feed(&self.conn(), after, limit)
    }

    fn keys(&self) -> Result<Vec<KeyRow>> {
        read_keys(&self.conn())
    }

    fn dump(&self) -> Result<Dump> {
        let mut conn = self.conn();
        // One read transaction: every table from the same moment.
        let tx = conn.transaction()?;
        let Position { epoch, head } = read_position(&tx)?;
        let burns = |sql: &str| -> Result<Vec<DumpBurn>> {
            let mut st = tx.prepare(sql)?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (id, until) = row?;
                out.push(DumpBurn {
                    id: stored_id(id)?,
                    until: u(until),
                });
            }
            Ok(out)
        };
        let burned_tickets = burns("SELECT jti, exp FROM burned_tickets ORDER BY jti")?;
        let burned_sessions = burns("SELECT sid, sexp FROM burned_sessions ORDER BY sid")?;
        let mut transferred_sessions = Vec::new();
        {
            let mut st = tx.prepare(
                "SELECT sid, ticket_jti, iat, exp, sexp FROM transferred_sessions ORDER BY sid",
            )?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })?;
            for row in rows {
                let (sid, ticket, iat, exp, sexp) = row?;
                transferred_sessions.push(DumpTransfer {
                    sid: stored_id(sid)?,
                    ticket_jti: stored_id(ticket)?,
                    iat: u(iat),
                    exp: u(exp),
                    sexp: u(sexp),
                });
            }
        }
        Ok(Dump {
            schema: BACKUP_SCHEMA,
            cell: None,
            taken_at: 0,
            epochs: read_epochs(&tx)?,
            epoch,
            head,
            feed: read_feed(&tx, 0, usize::MAX)?,
            users: users_where(&tx, "1 = 1 ORDER BY contractor_id, login", [])?,
            keys: read_keys(&tx)?.iter().map(dump_key).collect(),
            ownership: read_ownership(&tx)?,
            revocations: json_rows(
                &tx,
                "SELECT body FROM revocations ORDER BY seq",
                [],
                "revocation",
            )?,
            revocation_audit: json_rows(
                &tx,
                "SELECT body FROM revocation_audit ORDER BY seq",
                [],
                "audit entry",
            )?,
            map: json_row(
                &tx,
                "SELECT body FROM placement_map WHERE id = 1",
                [],
                "placement map",
            )?,
            minted_sessions: json_rows(
                &tx,
                "SELECT body FROM minted_sessions ORDER BY jti",
                [],
                "minted session",
            )?,
            burned_tickets,
            burned_sessions,
            transferred_sessions,
        })
    }

    fn restore(&self, dump: &Dump, epoch: &str) -> Result<()> {
        check_restorable(dump, epoch)?;
        let keys = dump
            .keys
            .iter()
            .map(undump_key)
            .collect::<Result<Vec<_>>>()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for table in RESTORED_TABLES {
            tx.execute(&format!("DELETE FROM {table}"), [])?;
        }
        for user in &dump.users {
            tx.execute(
                &format!("INSERT INTO users ({USER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
                params![
                    user.contractor_id.as_str(),
                    user.login.as_str(),
                    user.subject.as_str(),
                    user.role.as_str(),
                    user.password_hash.expose(),
                    user.status.as_str(),
                ],
            )?;
        }
        for k in &keys {
            tx.execute(
                "INSERT INTO keys (kid, state, public_key, sealed_seed, created_at, state_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    k.kid.as_str(),
                    k.state.as_str(),
                    &k.public[..],
                    k.sealed_seed,
                    i(k.created_at),
                    i(k.state_at)
                ],
            )?;
        }
        for (contractor, record) in &dump.ownership {
            tx.execute(
                "INSERT INTO ownership (contractor_id, record) VALUES (?1, ?2)",
                params![contractor.as_str(), json(record)?],
            )?;
        }
        for r in &dump.revocations {
            tx.execute(
                "INSERT INTO revocations (seq, body) VALUES (?1, ?2)",
                params![i(r.seq), json(r)?],
            )?;
        }
        for r in &dump.revocation_audit {
            sqlite_revocations::audit(&tx, r)?;
        }
        if let Some(m) = &dump.map {
            tx.execute(
                "INSERT INTO placement_map (id, version, body) VALUES (1, ?1, ?2)",
                params![i(m.map.version), json(m)?],
            )?;
        }
        for e in &dump.feed {
            tx.execute(
                "INSERT INTO feed (seq, change) VALUES (?1, ?2)",
                params![i(e.seq), json(&e.change)?],
            )?;
        }
        for s in &dump.minted_sessions {
            sqlite_revocations::record_session(&tx, s)?;
        }
        for b in &dump.burned_tickets {
            tx.execute(
                "INSERT INTO burned_tickets (jti, exp) VALUES (?1, ?2)",
                params![b.id.as_str(), i(b.until)],
            )?;
        }
        for b in &dump.burned_sessions {
            tx.execute(
                "INSERT INTO burned_sessions (sid, sexp) VALUES (?1, ?2)",
                params![b.id.as_str(), i(b.until)],
            )?;
        }
        for t in &dump.transferred_sessions {
            tx.execute(
                "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    t.sid.as_str(),
                    t.ticket_jti.as_str(),
                    i(t.iat),
                    i(t.exp),
                    i(t.sexp)
                ],
            )?;
        }
        tx.execute(
            "UPDATE feed_head SET head = ?1, epoch = ?2 WHERE id = 1",
            params![i(dump.head), epoch],
        )?;
        for old in history(dump) {
            tx.execute(
                "INSERT INTO epochs (epoch) VALUES (?1) ON CONFLICT (epoch) DO NOTHING",
                [old],
            )?;
        }
        tx.execute("DELETE FROM epochs WHERE epoch = ?1", [epoch])?;
        tx.execute("INSERT INTO epochs (epoch) VALUES (?1)", [epoch])?;
        tx.commit()?;
        Ok(())
    }

    fn epochs(&self) -> Result<Vec<String>> {
        read_epochs(&self.conn())
    }

    fn delete_revocations(&self, seqs: &[u64]) -> Result<()> {
        let mut conn = self.conn();
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

    fn upsert_users(&self, users: &[UserRecord]) -> Result<u64> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut st = tx.prepare(&format!(
                "INSERT INTO users ({USER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(contractor_id, login) DO UPDATE SET
                   role = ?4, password_hash = ?5, status = ?6"
            ))?;
            for user in users {
                st.execute(params![
                    user.contractor_id.as_str(),
                    user.login.as_str(),
                    user.subject.as_str(),
                    user.role.as_str(),
                    user.password_hash.expose(),
                    user.status.as_str(),
                ])?;
            }
        }
        let n: i64 = tx.query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?;
        tx.commit()?;
        Ok(u(n))
    }

    fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>> {
        let users = users_where(
            &self.conn(),
            "contractor_id = ?1 AND login = ?2",
            params![contractor.as_str(), login.as_str()],
        )?;
        Ok(users.into_iter().next())
    }

    fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>> {
        let users = users_where(&self.conn(), "subject = ?1", params![subject.as_str()])?;
        Ok(users.into_iter().next())
    }

    fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
        users_where(
            &self.conn(),
            "contractor_id = ?1 ORDER BY login",
            params![contractor.as_str()],
        )
    }

    fn record_session(&self, session: &MintedSession) -> Result<()> {
        sqlite_revocations::record_session(&self.conn(), session)
    }

    fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>> {
        sqlite_revocations::sessions_of(&self.conn(), subject, now, limit)
    }

    fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>> {
        sqlite_revocations::session(&self.conn(), jti)
    }

    fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize> {
        sqlite_revocations::delete_expired(&self.conn(), cutoff)
    }

    fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>> {
        sqlite_revocations::audit_page(&self.conn(), after, limit)
    }

    fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool> {
        sqlite_migration::burn_ticket(&mut self.conn(), ticket, now)
    }

    fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord> {
        sqlite_migration::record_transfer(&mut self.conn(), sid, sexp, proposed, now)
    }
}

/// The stored feed position.
fn read_position(conn: &Connection) -> Result<Position> {
    let (head, epoch) =
        conn.query_row("SELECT head, epoch FROM feed_head WHERE id = 1", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
    Ok(Position {
        epoch,
        head: u(head),
    })
}

/// Every epoch, the current one last.
fn read_epochs(conn: &Connection) -> Result<Vec<String>> {
    let mut st = conn.prepare("SELECT epoch FROM epochs ORDER BY n")?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

/// Up to `limit` feed entries after `after`, oldest first.
fn read_feed(conn: &Connection, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
    let mut st =
        conn.prepare("SELECT seq, change FROM feed WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let rows = st.query_map(params![i(after), i_usize(limit)], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, change) = row?;
        out.push(FeedEntry {
            seq: u(seq),
            change: unjson(&change, "feed entry")?,
        });
    }
    Ok(out)
}

/// Every stored key, oldest first.
fn read_keys(conn: &Connection) -> Result<Vec<KeyRow>> {
    let mut st = conn.prepare(
        "SELECT kid, state, public_key, sealed_seed, created_at, state_at FROM keys ORDER BY created_at, kid",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Vec<u8>>(2)?,
            r.get::<_, Option<Vec<u8>>>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, i64>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (kid, state, public, sealed, created, at) = row?;
        let bad = || Error::Internal(format!("stored key {kid:?} is corrupt"));
        out.push(KeyRow {
            kid: Kid::new(kid.clone()).map_err(|_| bad())?,
            state: KeyState::parse(&state).ok_or_else(bad)?,
            public: public.as_slice().try_into().map_err(|_| bad())?,
            sealed_seed: sealed,
            created_at: u(created),
            state_at: u(at),
        });
    }
    Ok(out)
}

/// Every ownership record.
fn read_ownership(
    conn: &Connection,
) -> Result<std::collections::BTreeMap<ContractorId, protocol::ownership::OwnershipRecord>> {
    let mut out = std::collections::BTreeMap::new();
    let mut st = conn.prepare("SELECT contractor_id, record FROM ownership")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    for row in rows {
        let (ctr, rec) = row?;
        let ctr = ContractorId::new(ctr)
            .map_err(|_| Error::Internal("stored contractor id is corrupt".into()))?;
        out.insert(ctr, unjson(&rec, "ownership record")?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DB_FILE;
    use crate::store::contract;

    /// The one value `sql` answers.
    fn one<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> T {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_newer_schema_is_refused_and_the_version_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        drop(SqliteStore::open_in(dir.path(), DB_FILE).unwrap());
        let conn = Connection::open(&path).unwrap();
        assert_eq!(
            one::<i64>(&conn, "PRAGMA user_version"),
            i64::from(SCHEMA_VERSION)
        );
        assert_eq!(one::<String>(&conn, "PRAGMA journal_mode"), "wal");
        conn.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(conn);
        assert!(SqliteStore::open_in(dir.path(), DB_FILE).is_err());
    }

    #[test]
    fn a_version_1_database_is_migrated_and_keeps_its_data() {
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
        let store = SqliteStore::open_in(dir.path(), DB_FILE).unwrap();
        let conn = store.conn();
        assert_eq!(
            one::<i64>(&conn, "PRAGMA user_version"),
            i64::from(SCHEMA_VERSION)
        );
        assert_eq!(one::<i64>(&conn, "SELECT COUNT(*) FROM burned_tickets"), 1);
        for table in ["burned_sessions", "transferred_sessions"] {
            let n: i64 = one(&conn, &format!("SELECT COUNT(*) FROM {table}"));
            assert_eq!(n, 0, "{table}");
        }
        // Version 3 gave it its first epoch.
        let epoch: String = one(&conn, "SELECT epoch FROM feed_head WHERE id = 1");
        assert_eq!(epoch.len(), 22);
        assert_eq!(read_epochs(&conn).unwrap(), vec![epoch]);
    }

    #[test]
    fn every_fresh_database_gets_its_own_epoch() {
        let a = SqliteStore::in_memory().unwrap().position().unwrap();
        let b = SqliteStore::in_memory().unwrap().position().unwrap();
        assert_eq!((a.head, b.head), (0, 0));
        assert_eq!(a.epoch.len(), 22);
        assert_ne!(a.epoch, b.epoch);
    }

    #[test]
    fn a_stale_commit_writes_nothing() {
        contract::a_stale_commit_writes_nothing(&SqliteStore::in_memory().unwrap());
    }

    #[test]
    fn a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position() {
        contract::a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position(
            &SqliteStore::in_memory().unwrap(),
        );
    }

    #[test]
    fn a_dump_restores_everything_under_a_new_epoch() {
        let store = SqliteStore::in_memory().unwrap();
        contract::a_dump_restores_everything_under_a_new_epoch(&store);
    }

    #[test]
    fn a_restore_survives_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in(dir.path(), DB_FILE).unwrap();
        contract::fill(&store);
        let dump = store.dump().unwrap();
        let other = SqliteStore::in_memory().unwrap();
        let epoch = fresh_epoch().unwrap();
        other.restore(&dump, &epoch).unwrap();
        let restored = other.dump().unwrap();
        assert_eq!(restored.epoch, epoch);
        assert_eq!(restored.epochs.last(), Some(&epoch));
        assert!(restored.epochs.contains(&dump.epoch));
        assert_eq!(restored.users, dump.users);
        drop(store);
        let reopened = SqliteStore::open_in(dir.path(), DB_FILE).unwrap();
        assert_eq!(reopened.dump().unwrap(), dump);
    }

    #[test]
    fn revoked_keys_lose_their_seed_and_updates_keep_it() {
        let store = SqliteStore::in_memory().unwrap();
        let row = KeyRow {
            kid: Kid::new("k-1").unwrap(),
            state: KeyState::Next,
            public: [1; 32],
            sealed_seed: Some(vec![9; 61]),
            created_at: 1,
            state_at: 1,
        };
        let epoch = store.position().unwrap().epoch;
        let commit = |rows: Vec<KeyRow>, head| Commit {
            writes: rows.into_iter().map(Write::Key).collect(),
            entries: vec![],
            base: head - 1,
            head,
            epoch: epoch.clone(),
        };
        store.commit(&commit(vec![row.clone()], 1), 10).unwrap();
        let promoted = KeyRow {
            state: KeyState::Current,
            sealed_seed: None,
            ..row.clone()
        };
        store.commit(&commit(vec![promoted], 2), 10).unwrap();
        let loaded = store.load(10).unwrap();
        assert_eq!(loaded.keys[0].sealed_seed, Some(vec![9; 61]));
        assert_eq!(loaded.head, 2);
        let revoked = KeyRow {
            state: KeyState::Revoked,
            ..row
        };
        store.commit(&commit(vec![revoked], 3), 10).unwrap();
        assert_eq!(store.load(10).unwrap().keys[0].sealed_seed, None);
    }
}
