//! The migration journal: a small SQLite file (`migrations.db`, beside `fleet.json`) that
//! holds each migration's step, so a rerun after a crash resumes where the last run stopped.
//! One connection per operation (the orchestrator awaits between steps; several `cellctl`
//! processes may migrate different contractors at once, serialized by SQLite's lock).
//!
//! SQLite's busy timeout does not cover every lock: the last connection to close a WAL file
//! holds it exclusively while it checkpoints and removes the `-wal`, and a connection that
//! opens in that instant gets `SQLITE_BUSY` at once. With migrations opening the journal for
//! each step (one process running several, or several processes), that instant does come, so
//! each operation is retried on `SQLITE_BUSY`/`SQLITE_LOCKED` for up to
//! [`JOURNAL_BUSY_TIMEOUT_MS`]. Every operation is one write statement (or, at open, idempotent
//! ones), so a retry never repeats a write that happened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use backon::{BlockingRetryable as _, ExponentialBuilder};
use protocol::{CellId, ContractorId, Generation};
use rusqlite::{Connection, OptionalExtension as _, params};

pub use fleet_description::JOURNAL_FILE;

use crate::error::{CtlError, Result};
use crate::migrate::step::Step;

/// Schema version of `migrations.db`.
pub const JOURNAL_SCHEMA: u32 = 1;
/// How long a writer waits for another process's lock, in milliseconds (SQLite's busy
/// timeout, and the bound on retrying an operation that found the file busy).
pub const JOURNAL_BUSY_TIMEOUT_MS: u64 = 10_000;
/// The first pause before retrying an operation that found the journal busy, in milliseconds.
const BUSY_RETRY_MIN_DELAY_MS: u64 = 5;
/// The longest pause between such retries, in milliseconds.
const BUSY_RETRY_MAX_DELAY_MS: u64 = 250;

/// One migration as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: i64,
    pub contractor: ContractorId,
    pub source: CellId,
    pub target: CellId,
    /// The generation at the source (the target gets `generation + 1`).
    pub generation: Generation,
    /// The next step to run.
    pub step: Step,
    /// Feed sequence of the source's handoff, once known.
    pub handoff_seq: Option<u64>,
    /// When the source went read-only (unix ms), once it did.
    pub handoff_at_ms: Option<u64>,
}

/// The journal file.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

fn corrupt(e: impl std::fmt::Display) -> CtlError {
    CtlError::Internal(format!("{JOURNAL_FILE} holds an invalid value: {e}"))
}

/// Whether an operation failed only because another connection held the file.
fn is_busy(e: &CtlError) -> bool {
    matches!(
        e,
        CtlError::Db(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn i64_of(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| CtlError::Internal("number out of range".into()))
}

impl Journal {
    /// Opens (creating if needed) the journal at `path`.
    pub fn open(path: &Path) -> Result<Journal> {
        let j = Journal {
            path: path.to_path_buf(),
        };
        j.with_conn(|conn| {
            runtime::sqlite::create_tables(
                conn,
                JOURNAL_SCHEMA,
                "CREATE TABLE IF NOT EXISTS migrations (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 contractor TEXT NOT NULL,
                 source TEXT NOT NULL,
                 target TEXT NOT NULL,
                 generation INTEGER NOT NULL,
                 step TEXT NOT NULL,
                 handoff_seq INTEGER,
                 handoff_at_ms INTEGER,
                 started_at_ms INTEGER NOT NULL,
                 finished_at_ms INTEGER);
             CREATE UNIQUE INDEX IF NOT EXISTS one_open_migration
                 ON migrations (contractor) WHERE step != 'done';",
                |other| CtlError::Config(format!("{JOURNAL_FILE} has {other}")),
            )
        })?;
        Ok(j)
    }

    /// A connection to the journal, which is 0600 (created so before SQLite opens it) with its
    /// `-wal`/`-shm` files; it lives beside `fleet.json`, in the fleet directory that
    /// `cellctl dev` makes 0700.
    fn conn(&self) -> Result<Connection> {
        let pragmas = runtime::sqlite::Pragmas::wal(JOURNAL_BUSY_TIMEOUT_MS).synchronous("FULL");
        runtime::sqlite::open(&self.path, pragmas)
    }

    /// Opens a connection and runs `op` (one statement) on it, again while the file is busy
    /// (see the module doc), for up to [`JOURNAL_BUSY_TIMEOUT_MS`] of pauses.
    fn with_conn<T>(&self, op: impl Fn(&Connection) -> Result<T>) -> Result<T> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(BUSY_RETRY_MIN_DELAY_MS))
            .with_max_delay(Duration::from_millis(BUSY_RETRY_MAX_DELAY_MS))
            .with_total_delay(Some(Duration::from_millis(JOURNAL_BUSY_TIMEOUT_MS)))
            .without_max_times()
            .with_jitter();
        (|| op(&self.conn()?)).retry(backoff).when(is_busy).call()
    }

    /// Every unfinished migration: (contractor, target).
    pub fn unfinished(&self) -> Result<Vec<(ContractorId, CellId)>> {
        let rows = self.with_conn(|conn| {
            let mut st = conn.prepare(
                "SELECT contractor, target FROM migrations WHERE step != 'done' ORDER BY id",
            )?;
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(c, t)| {
                Ok((
                    ContractorId::new(c).map_err(corrupt)?,
                    CellId::new(t).map_err(corrupt)?,
                ))
            })
            .collect()
    }

    /// The unfinished migration of a contractor, if any.
    pub fn open_migration(&self, c: &ContractorId) -> Result<Option<Record>> {
        let row = self.with_conn(|conn| {
            let row = conn
                .query_row(
                    "SELECT id, source, target, generation, step, handoff_seq, handoff_at_ms
                 FROM migrations WHERE contractor = ?1 AND step != 'done'",
                    [c.as_str()],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, String>(4)?,
                            r.get::<_, Option<i64>>(5)?,
                            r.get::<_, Option<i64>>(6)?,
                        ))
                    },
                )
                .optional()?;
            Ok(row)
        })?;
        let Some((id, source, target, g, step, seq, at)) = row else {
            return Ok(None);
        };
        Ok(Some(Record {
            id,
            contractor: c.clone(),
            source: CellId::new(source).map_err(corrupt)?,
            target: CellId::new(target).map_err(corrupt)?,
            generation: Generation(u64::try_from(g).map_err(corrupt)?),
            step: Step::parse(&step).ok_or_else(|| corrupt(step))?,
            handoff_seq: seq.map(|s| u64::try_from(s).unwrap_or(0)),
            handoff_at_ms: at.map(|s| u64::try_from(s).unwrap_or(0)),
        }))
    }

    /// Starts a migration at its first step.
    pub fn begin(
        &self,
        c: &ContractorId,
        source: &CellId,
        target: &CellId,
        generation: Generation,
        now_ms: u64,
    ) -> Result<Record> {
        self.with_conn(|conn| {
            conn.execute(
            "INSERT INTO migrations (contractor, source, target, generation, step, started_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                c.as_str(),
                source.as_str(),
                target.as_str(),
                i64_of(generation.0)?,
                Step::FIRST.as_str(),
                i64_of(now_ms)?
            ],
        )?;
            Ok(())
        })?;
        self.open_migration(c)?
            .ok_or_else(|| CtlError::Internal("the migration just recorded is missing".into()))
    }

    /// Records that a migration moved on to `rec.step` (with its handoff fields).
    pub fn save(&self, rec: &Record, now_ms: u64) -> Result<()> {
        let finished = (rec.step == Step::Done).then_some(now_ms);
        self.with_conn(|conn| {
            conn.execute(
                "UPDATE migrations SET step = ?2, handoff_seq = ?3, handoff_at_ms = ?4,
                 finished_at_ms = ?5 WHERE id = ?1",
                params![
                    rec.id,
                    rec.step.as_str(),
                    rec.handoff_seq.map(i64_of).transpose()?,
                    rec.handoff_at_ms.map(i64_of).transpose()?,
                    finished.map(i64_of).transpose()?
                ],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32) -> CtlError {
        CtlError::Db(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn an_operation_that_finds_the_file_busy_is_retried_and_other_errors_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join(JOURNAL_FILE)).unwrap();
        // Busy twice (the instant another connection closes the WAL), then done.
        let attempts = std::cell::Cell::new(0);
        let answer = j.with_conn(|_| {
            attempts.set(attempts.get() + 1);
            match attempts.get() {
                1 => Err(sqlite_error(rusqlite::ffi::SQLITE_BUSY)),
                2 => Err(sqlite_error(rusqlite::ffi::SQLITE_LOCKED)),
                _ => Ok(7),
            }
        });
        assert_eq!(answer.unwrap(), 7);
        assert_eq!(attempts.get(), 3);
        // A constraint failure is an answer, not a lock: one attempt.
        attempts.set(0);
        let refused = j.with_conn(|_| -> Result<()> {
            attempts.set(attempts.get() + 1);
            Err(sqlite_error(rusqlite::ffi::SQLITE_CONSTRAINT))
        });
        assert!(matches!(refused, Err(CtlError::Db(_))));
        assert_eq!(attempts.get(), 1);
    }

    #[test]
    fn a_migration_resumes_from_its_recorded_step_and_only_one_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let c = ContractorId::new("c-1").unwrap();
        let (a, b) = (
            CellId::new("cell-01").unwrap(),
            CellId::new("cell-02").unwrap(),
        );
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.open_migration(&c).unwrap(), None);
        let mut rec = j.begin(&c, &a, &b, Generation(3), 1).unwrap();
        assert_eq!(rec.step, Step::FIRST);
        assert!(
            j.begin(&c, &a, &b, Generation(3), 2).is_err(),
            "one open migration"
        );
        rec.step = Step::Drain;
        rec.handoff_seq = Some(42);
        rec.handoff_at_ms = Some(1_000);
        j.save(&rec, 3).unwrap();
        // A new process (reopen) sees the same step.
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.open_migration(&c).unwrap(), Some(rec.clone()));
        rec.step = Step::Done;
        j.save(&rec, 4).unwrap();
        assert_eq!(j.open_migration(&c).unwrap(), None);
        // Done migrations do not block the next one.
        let next = j.begin(&c, &b, &a, Generation(4), 5).unwrap();
        assert_ne!(next.id, rec.id);
    }

    #[test]
    fn steps_round_trip_their_names() {
        for s in Step::ALL {
            assert_eq!(Step::parse(s.as_str()), Some(s));
        }
        assert_eq!(Step::parse("nope"), None);
    }
}
