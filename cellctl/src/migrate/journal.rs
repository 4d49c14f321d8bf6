//! The migration journal: a small SQLite file (`migrations.db`, beside `fleet.json`) that
//! holds each migration's step, so a rerun after a crash resumes where the last run stopped.
//! One connection per operation (the orchestrator awaits between steps; several `cellctl`
//! processes may migrate different contractors at once, serialized by SQLite's lock).

use std::path::{Path, PathBuf};

use protocol::{CellId, ContractorId, Generation};
use rusqlite::{Connection, OptionalExtension as _, params};

pub use devfleet::JOURNAL_FILE;

use crate::error::{CtlError, Result};
use crate::migrate::step::Step;

/// Schema version of `migrations.db`.
pub const JOURNAL_SCHEMA: u32 = 1;
/// How long a writer waits for another process's lock, in milliseconds.
pub const JOURNAL_BUSY_TIMEOUT_MS: u64 = 10_000;

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

fn i64_of(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| CtlError::Internal("number out of range".into()))
}

impl Journal {
    /// Opens (creating if needed) the journal at `path`.
    pub fn open(path: &Path) -> Result<Journal> {
        let j = Journal {
            path: path.to_path_buf(),
        };
        runtime::sqlite::create_tables(
            &j.conn()?,
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
        )?;
        Ok(j)
    }

    /// A connection to the journal, which is 0600 (created so before SQLite opens it) with its
    /// `-wal`/`-shm` files; it lives beside `fleet.json`, in the fleet directory that
    /// `cellctl dev` makes 0700.
    fn conn(&self) -> Result<Connection> {
        let pragmas = runtime::sqlite::Pragmas::wal(JOURNAL_BUSY_TIMEOUT_MS).synchronous("FULL");
        runtime::sqlite::open(&self.path, pragmas)
    }

    /// The unfinished migration of a contractor, if any.
    pub fn open_migration(&self, c: &ContractorId) -> Result<Option<Record>> {
        let conn = self.conn()?;
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
        let conn = self.conn()?;
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
        self.open_migration(c)?
            .ok_or_else(|| CtlError::Internal("the migration just recorded is missing".into()))
    }

    /// Records that a migration moved on to `rec.step` (with its handoff fields).
    pub fn save(&self, rec: &Record, now_ms: u64) -> Result<()> {
        let conn = self.conn()?;
        let finished = (rec.step == Step::Done).then_some(now_ms);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
