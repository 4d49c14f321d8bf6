//! The app's durable state in SQLite (`app.db`): contractors with their generation and
//! lifecycle, completed jobs, and every applied completion with its idempotency key.

use std::path::Path;

use protocol::admin::app::{
    Completion, ContractorState, EXPORT_SCHEMA, ExportDoc, JobRow, Lifecycle,
};
use protocol::{ContractorId, Generation};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::error::{AppError, Result};

/// Schema version of `app.db` (the export document's is `protocol::admin::app::EXPORT_SCHEMA`).
pub const SCHEMA_VERSION: u32 = 1;
/// File name of the database in the data directory.
pub const DB_FILE: &str = "app.db";
/// How long a writer waits for SQLite's lock, in milliseconds.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;

/// The outcome of a completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteOutcome {
    Applied(serde_json::Value),
    Replayed(serde_json::Value),
}

/// A completion to apply.
#[derive(Debug, Clone)]
pub struct CompleteRequest<'a> {
    pub contractor: &'a ContractorId,
    pub job_id: &'a str,
    pub subject: &'a str,
    pub generation: Generation,
    pub idempotency_key: Option<&'a str>,
    pub now: u64,
}

/// The SQLite store. One connection; callers serialize access.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
}

fn gen_of(v: i64) -> Result<Generation> {
    u64::try_from(v)
        .map(Generation)
        .map_err(|_| AppError::Corrupt("negative generation".into()))
}

fn to_i64(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| AppError::BadRequest("number out of range".into()))
}

fn lifecycle_of(s: &str) -> Result<Lifecycle> {
    Lifecycle::parse(s).ok_or_else(|| AppError::Corrupt(format!("unknown lifecycle {s:?}")))
}

/// A contractor as held, read on `conn` (the store's connection or a transaction).
fn contractor_in(conn: &Connection, c: &ContractorId) -> Result<Option<ContractorState>> {
    let row: Option<(i64, String)> = conn
        .query_row(
            "SELECT generation, state FROM contractors WHERE id = ?1",
            [c.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    row.map(|(g, s)| {
        Ok(ContractorState {
            generation: gen_of(g)?,
            state: lifecycle_of(&s)?,
        })
    })
    .transpose()
}

/// Records a completed job (the first completion's time).
fn insert_job(tx: &Transaction<'_>, c: &ContractorId, job_id: &str, at: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO jobs (contractor, job_id, completed_at) VALUES (?1, ?2, ?3)",
        params![c.as_str(), job_id, at],
    )?;
    Ok(())
}

/// Records an applied completion with the answer it was given.
fn insert_completion(tx: &Transaction<'_>, c: &ContractorId, k: &Completion) -> Result<()> {
    let text = serde_json::to_string(&k.result)
        .map_err(|e| AppError::Internal(format!("encoding a result: {e}")))?;
    tx.execute(
        "INSERT INTO completions
             (contractor, job_id, idempotency_key, subject, generation, completed_at, result)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            c.as_str(),
            k.job_id,
            k.idempotency_key,
            k.subject,
            to_i64(k.generation.0)?,
            to_i64(k.completed_at)?,
            text
        ],
    )?;
    Ok(())
}

impl Store {
    /// Opens (creating if needed) `app.db` in `data_dir`. The folder is made owner-only
    /// (0700) even if it existed, and the database with its `-wal`/`-shm` files 0600; the
    /// database file is created 0600 before SQLite opens it, so it is never readable by others
    /// (ATTACKS A30).
    pub fn open(data_dir: &Path) -> Result<Store> {
        let pragmas = runtime::sqlite::Pragmas::wal(BUSY_TIMEOUT_MS).synchronous("NORMAL");
        let conn = runtime::sqlite::open_in::<AppError>(data_dir, DB_FILE, pragmas)?;
        Self::init(conn)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> Result<Store> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Store> {
        runtime::sqlite::create_tables(
            &conn,
            SCHEMA_VERSION,
            "CREATE TABLE IF NOT EXISTS contractors (
                 id TEXT PRIMARY KEY, generation INTEGER NOT NULL, state TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS jobs (
                 contractor TEXT NOT NULL, job_id TEXT NOT NULL, completed_at INTEGER NOT NULL,
                 PRIMARY KEY (contractor, job_id));
             CREATE TABLE IF NOT EXISTS completions (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 contractor TEXT NOT NULL, job_id TEXT NOT NULL, idempotency_key TEXT,
                 subject TEXT NOT NULL, generation INTEGER NOT NULL,
                 completed_at INTEGER NOT NULL, result TEXT NOT NULL,
                 UNIQUE (contractor, idempotency_key));",
            |other| AppError::Corrupt(format!("app.db has {other}")),
        )?;
        Ok(Store { conn })
    }

    pub fn contractor(&self, c: &ContractorId) -> Result<Option<ContractorState>> {
        contractor_in(&self.conn, c)
    }

    fn set_contractor(&self, c: &ContractorId, st: ContractorState) -> Result<()> {
        self.conn.execute(
            "INSERT INTO contractors (id, generation, state) VALUES (?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET generation = excluded.generation, state = excluded.state",
            params![c.as_str(), to_i64(st.generation.0)?, st.state.as_str()],
        )?;
        Ok(())
    }

    /// Seeds contractors as active at their generation (one transaction). A contractor already
    /// held at a higher generation keeps it. Returns how many were written.
    pub fn seed(&mut self, contractors: &[(ContractorId, Generation)]) -> Result<usize> {
        let tx = self.conn.transaction()?;
        let mut n = 0;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO contractors (id, generation, state) VALUES (?1, ?2, 'active')
                 ON CONFLICT (id) DO UPDATE SET generation = excluded.generation, state = 'active'
                 WHERE excluded.generation >= contractors.generation",
            )?;
            for (c, g) in contractors {
                n += stmt.execute(params![c.as_str(), to_i64(g.0)?])?;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// Completed jobs of a contractor, as (job_id, completed_at).
    pub fn completed_jobs(&self, c: &ContractorId) -> Result<Vec<JobRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id, completed_at FROM jobs WHERE contractor = ?1 ORDER BY job_id",
        )?;
        let rows = stmt.query_map([c.as_str()], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job_id, at) = row?;
            out.push(JobRow {
                job_id,
                completed_at: u64::try_from(at).unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Applies a job completion once per idempotency key, behind the generation fence.
    /// `result_of` builds the answer for a newly applied completion.
    pub fn complete(
        &mut self,
        req: &CompleteRequest<'_>,
        result_of: impl FnOnce(u64) -> serde_json::Value,
    ) -> Result<CompleteOutcome> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let ContractorState {
            generation: held,
            state,
        } = contractor_in(&tx, req.contractor)?.ok_or(AppError::UnknownContractor)?;
        if let Some(key) = req.idempotency_key {
            let prior: Option<String> = tx
                .query_row(
                    "SELECT result FROM completions WHERE contractor = ?1 AND idempotency_key = ?2",
                    params![req.contractor.as_str(), key],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(prior) = prior {
                let v = serde_json::from_str(&prior)
                    .map_err(|e| AppError::Corrupt(format!("stored result: {e}")))?;
                return Ok(CompleteOutcome::Replayed(v));
            }
        }
        // The generation fence.
        if state == Lifecycle::Released || req.generation < held {
            return Err(AppError::WrongCell);
        }
        if req.generation > held || state == Lifecycle::Imported {
            return Err(AppError::Stale);
        }
        if state == Lifecycle::Frozen {
            return Err(AppError::Handoff);
        }
        let completed_at: i64 = match tx
            .query_row(
                "SELECT completed_at FROM jobs WHERE contractor = ?1 AND job_id = ?2",
                params![req.contractor.as_str(), req.job_id],
                |r| r.get(0),
            )
            .optional()?
        {
            Some(at) => at,
            None => {
                let at = to_i64(req.now)?;
                insert_job(&tx, req.contractor, req.job_id, at)?;
                at
            }
        };
        let result = result_of(u64::try_from(completed_at).unwrap_or(0));
        insert_completion(
            &tx,
            req.contractor,
            &Completion {
                job_id: req.job_id.to_owned(),
                idempotency_key: req.idempotency_key.map(str::to_owned),
                subject: req.subject.to_owned(),
                generation: req.generation,
                completed_at: req.now,
                result: result.clone(),
            },
        )?;
        tx.commit()?;
        Ok(CompleteOutcome::Applied(result))
    }

    /// Every applied completion of a contractor, oldest first.
    pub fn completions(&self, c: &ContractorId) -> Result<Vec<Completion>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id, idempotency_key, subject, generation, completed_at, result
             FROM completions WHERE contractor = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([c.as_str()], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job_id, idempotency_key, subject, g, at, result) = row?;
            out.push(Completion {
                job_id,
                idempotency_key,
                subject,
                generation: gen_of(g)?,
                completed_at: u64::try_from(at).unwrap_or(0),
                result: serde_json::from_str(&result)
                    .map_err(|e| AppError::Corrupt(format!("stored result: {e}")))?,
            });
        }
        Ok(out)
    }

    /// The contractor's data for a migration.
    pub fn export(&self, c: &ContractorId) -> Result<ExportDoc> {
        let st = self.contractor(c)?.ok_or(AppError::NotFound)?;
        Ok(ExportDoc {
            schema: EXPORT_SCHEMA,
            contractor_id: c.clone(),
            generation: st.generation,
            jobs: self.completed_jobs(c)?,
            completions: self.completions(c)?,
        })
    }

    /// Takes in a contractor's data (state `imported`: not serving writes until activated).
    /// Refused while the contractor is active or frozen here.
    pub fn import(&mut self, doc: &ExportDoc) -> Result<()> {
        if doc.schema != EXPORT_SCHEMA {
            return Err(AppError::BadRequest(format!(
                "export schema {} is not {EXPORT_SCHEMA}",
                doc.schema
            )));
        }
        let c = &doc.contractor_id;
        if let Some(st) = self.contractor(c)?
            && matches!(st.state, Lifecycle::Active | Lifecycle::Frozen)
        {
            return Err(AppError::BadRequest(
                "the contractor is live in this cell; release it before importing".into(),
            ));
        }
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM jobs WHERE contractor = ?1", [c.as_str()])?;
        tx.execute(
            "DELETE FROM completions WHERE contractor = ?1",
            [c.as_str()],
        )?;
        for j in &doc.jobs {
            insert_job(&tx, c, &j.job_id, to_i64(j.completed_at)?)?;
        }
        for k in &doc.completions {
            insert_completion(&tx, c, k)?;
        }
        tx.execute(
            "INSERT INTO contractors (id, generation, state) VALUES (?1, ?2, 'imported')
             ON CONFLICT (id) DO UPDATE SET generation = excluded.generation, state = 'imported'",
            params![c.as_str(), to_i64(doc.generation.0)?],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Active → frozen (writes refused). Idempotent.
    pub fn freeze(&self, c: &ContractorId) -> Result<ContractorState> {
        let st = self.contractor(c)?.ok_or(AppError::NotFound)?;
        match st.state {
            Lifecycle::Active | Lifecycle::Frozen => {
                let new = ContractorState {
                    state: Lifecycle::Frozen,
                    ..st
                };
                self.set_contractor(c, new)?;
                Ok(new)
            }
            other => Err(AppError::BadRequest(format!(
                "cannot freeze a contractor that is {}",
                other.as_str()
            ))),
        }
    }

    /// Imported or frozen (or active) → active at `generation`; generations never go down.
    pub fn activate(&self, c: &ContractorId, generation: Generation) -> Result<ContractorState> {
        let st = self.contractor(c)?.ok_or(AppError::NotFound)?;
        if generation < st.generation {
            return Err(AppError::BadRequest(format!(
                "generation {generation} is lower than the held {}",
                st.generation
            )));
        }
        if st.state == Lifecycle::Released && generation == st.generation {
            return Err(AppError::BadRequest(
                "a released contractor comes back only at a higher generation".into(),
            ));
        }
        let new = ContractorState {
            generation,
            state: Lifecycle::Active,
        };
        self.set_contractor(c, new)?;
        Ok(new)
    }

    /// → released (this cell no longer serves the contractor). Idempotent.
    pub fn release(&self, c: &ContractorId) -> Result<ContractorState> {
        let st = self.contractor(c)?.ok_or(AppError::NotFound)?;
        let new = ContractorState {
            state: Lifecycle::Released,
            ..st
        };
        self.set_contractor(c, new)?;
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> ContractorId {
        ContractorId::new(s).unwrap()
    }

    fn req<'a>(ctr: &'a ContractorId, key: Option<&'a str>, g: u64) -> CompleteRequest<'a> {
        CompleteRequest {
            contractor: ctr,
            job_id: "j-1",
            subject: "c-1.tech-1",
            generation: Generation(g),
            idempotency_key: key,
            now: 1_800_000_000,
        }
    }

    #[test]
    fn state_survives_reopen_and_schema_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let ctr = c("c-1");
        {
            let mut s = Store::open(dir.path()).unwrap();
            s.seed(&[(ctr.clone(), Generation(1))]).unwrap();
            s.complete(&req(&ctr, Some("k1"), 1), |_| serde_json::json!({"ok":1}))
                .unwrap();
        }
        let mut s = Store::open(dir.path()).unwrap();
        let out = s
            .complete(&req(&ctr, Some("k1"), 1), |_| serde_json::json!({"ok":2}))
            .unwrap();
        assert_eq!(out, CompleteOutcome::Replayed(serde_json::json!({"ok":1})));
        assert_eq!(s.completions(&ctr).unwrap().len(), 1);
    }

    #[test]
    fn export_import_moves_data_and_keys() {
        let mut a = Store::open_in_memory().unwrap();
        let mut b = Store::open_in_memory().unwrap();
        let ctr = c("c-7");
        a.seed(&[(ctr.clone(), Generation(3))]).unwrap();
        a.complete(&req(&ctr, Some("k"), 3), |_| serde_json::json!({"n":1}))
            .unwrap();
        a.freeze(&ctr).unwrap();
        assert!(matches!(
            a.complete(&req(&ctr, Some("k2"), 3), |_| serde_json::json!({})),
            Err(AppError::Handoff)
        ));
        let doc = a.export(&ctr).unwrap();
        b.import(&doc).unwrap();
        // Imported, not yet active: writes refused as stale.
        assert!(matches!(
            b.complete(&req(&ctr, Some("k3"), 4), |_| serde_json::json!({})),
            Err(AppError::Stale)
        ));
        b.activate(&ctr, Generation(4)).unwrap();
        a.release(&ctr).unwrap();
        // The key applied at the source is a replay at the target.
        let out = b
            .complete(&req(&ctr, Some("k"), 4), |_| serde_json::json!({"n":2}))
            .unwrap();
        assert_eq!(out, CompleteOutcome::Replayed(serde_json::json!({"n":1})));
        // A session at the old generation is fenced off at the target.
        assert!(matches!(
            b.complete(&req(&ctr, Some("k4"), 3), |_| serde_json::json!({})),
            Err(AppError::WrongCell)
        ));
        assert!(matches!(
            a.complete(&req(&ctr, Some("k5"), 3), |_| serde_json::json!({})),
            Err(AppError::WrongCell)
        ));
        assert!(b.activate(&ctr, Generation(2)).is_err());
    }
}
