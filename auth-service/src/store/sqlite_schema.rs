//! The SQLite schema: version 1 ([`SCHEMA`]) and the steps to each later version
//! ([`MIGRATIONS`]), applied when a database is opened; the version is in `PRAGMA user_version`.

use rusqlite::Connection;

use crate::error::Result;
use crate::store::portable::fresh_epoch;

/// Schema version written to `PRAGMA user_version`. Version 1 is [`SCHEMA`]; each later
/// version is reached from the one before by its entry in [`MIGRATIONS`].
pub(super) const SCHEMA_VERSION: u32 = 3;
/// The version that brought feed epochs: a database reaching it gets its first epoch.
const EPOCHS_SINCE: u32 = 3;

/// Version 1 of the schema.
pub(super) const SCHEMA: &str = "
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

/// Brings `conn`'s schema up to [`SCHEMA_VERSION`] (a fresh database gets version 1 and every
/// step after it, all in one transaction with the version bump) and refuses a newer one.
pub(super) fn init(mut conn: Connection) -> Result<Connection> {
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
    Ok(conn)
}
