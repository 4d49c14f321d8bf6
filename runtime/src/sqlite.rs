//! The SQLite files of the servers and `cellctl`: opening one owner-only with the pragmas every
//! writer uses (WAL, a busy timeout), creating its tables, and checking its schema version.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::IoError;
use crate::io::IoContext as _;

/// How a database file is opened: always in WAL mode, with a busy timeout.
#[derive(Debug, Clone, Copy)]
pub struct Pragmas {
    busy_timeout: Duration,
    synchronous: Option<&'static str>,
}

impl Pragmas {
    /// WAL mode; a writer waits `busy_timeout_ms` for another connection's lock.
    pub const fn wal(busy_timeout_ms: u64) -> Self {
        Pragmas {
            busy_timeout: Duration::from_millis(busy_timeout_ms),
            synchronous: None,
        }
    }

    /// Sets `PRAGMA synchronous` (`"NORMAL"`, `"FULL"`) instead of SQLite's default.
    pub const fn synchronous(self, level: &'static str) -> Self {
        Pragmas {
            synchronous: Some(level),
            ..self
        }
    }
}

/// [`open`] for `file` in `dir`, which is first created if needed and made owner-only (0700),
/// also when it already existed with a wider mode.
pub fn open_in<E>(dir: &Path, file: &str, pragmas: Pragmas) -> Result<Connection, E>
where
    E: From<IoError> + From<rusqlite::Error>,
{
    crate::private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    open(&dir.join(file), pragmas)
}

/// Opens (creating if needed) the database `db`: the file is created 0600 before SQLite opens
/// it, so it is never readable by others, and stays 0600 with its `-wal`/`-shm` files; WAL
/// journal, `pragmas` applied.
pub fn open<E>(db: &Path, pragmas: Pragmas) -> Result<Connection, E>
where
    E: From<IoError> + From<rusqlite::Error>,
{
    let restrict =
        || crate::private_sqlite(db).with_context(|| format!("restricting {}", db.display()));
    restrict()?;
    let conn = Connection::open(db)?;
    conn.busy_timeout(pragmas.busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    if let Some(level) = pragmas.synchronous {
        conn.pragma_update(None, "synchronous", level)?;
    }
    // SQLite gives the -wal/-shm it creates the database's mode; make sure of it.
    restrict()?;
    Ok(conn)
}

/// Creates the `meta` table of [`check_sqlite_schema`] and the tables a database lacks
/// (`tables`: `CREATE … IF NOT EXISTS` statements), then records or checks its schema version
/// in one write transaction (several processes may open a new file at once). A file of another
/// schema is refused with `mismatch(the refusal)`.
pub fn create_tables<E>(
    conn: &Connection,
    version: u32,
    tables: &str,
    mismatch: impl FnOnce(SchemaError) -> E,
) -> Result<(), E>
where
    E: From<rusqlite::Error>,
{
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    )?;
    conn.execute_batch(tables)?;
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    check_sqlite_schema(&tx, version).map_err(|e| match e {
        SchemaError::Sqlite(e) => E::from(e),
        other => mismatch(other),
    })?;
    tx.commit()?;
    Ok(())
}

/// Records or checks the schema version of a SQLite file that keeps it in a
/// `meta (key TEXT PRIMARY KEY, value TEXT)` table under the key `schema`. A new file gets
/// `expected`; a file written by another schema is refused with the version it holds.
pub fn check_sqlite_schema(conn: &rusqlite::Connection, expected: u32) -> Result<(), SchemaError> {
    use rusqlite::OptionalExtension as _;
    let held: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()?;
    match held {
        None => {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                [expected.to_string()],
            )?;
            Ok(())
        }
        Some(v) if v == expected.to_string() => Ok(()),
        Some(held) => Err(SchemaError::Mismatch { held, expected }),
    }
}

/// Checks the schema version of a SQLite file that keeps it in `PRAGMA user_version` (0 for
/// a new file) and answers it. A version above `supported` (or a negative one) was written by
/// a newer build and is refused; an older one is the caller's to migrate.
pub fn check_sqlite_user_version(
    conn: &rusqlite::Connection,
    supported: u32,
) -> Result<u32, SchemaError> {
    let held: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match u32::try_from(held) {
        Ok(v) if v <= supported => Ok(v),
        _ => Err(SchemaError::TooNew { held, supported }),
    }
}

/// Why a SQLite file's schema version was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    #[error("schema {held}, this build reads {expected}")]
    Mismatch { held: String, expected: u32 },
    #[error("database schema version {held} is not one this build reads (0..={supported})")]
    TooNew { held: i64, supported: u32 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}
