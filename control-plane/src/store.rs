//! The placement store (SQLite `placements.db`): contractor → cell and generation, plus the
//! last published signed map (so versions only go up across restarts).

use std::path::Path;

use protocol::map::SignedMap;
use protocol::{CellId, ContractorId, Generation};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{CpError, Result};

/// Schema version of `placements.db`.
pub const SCHEMA_VERSION: u32 = 1;
/// How long a writer waits for SQLite's lock, in milliseconds.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
/// File name of the store in the data directory.
pub const DB_FILE: &str = "placements.db";

pub use protocol::admin::placement::Placement;

/// The store. One connection; callers serialize access.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
}

fn corrupt(e: impl std::fmt::Display) -> CpError {
    CpError::Internal(format!("placements.db holds an invalid value: {e}"))
}

fn i64_of(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| CpError::BadRequest("number out of range".into()))
}

impl Store {
    /// Opens (creating if needed) `placements.db` in `data_dir`. The folder is made 0700 (also
    /// when it exists) and the database, created 0600 before SQLite opens it, stays 0600 with
    /// its `-wal`/`-shm` files.
    pub fn open(data_dir: &Path) -> Result<Store> {
        let pragmas = runtime::sqlite::Pragmas::wal(BUSY_TIMEOUT_MS);
        let conn = runtime::sqlite::open_in::<CpError>(data_dir, DB_FILE, pragmas)?;
        runtime::sqlite::create_tables(
            &conn,
            SCHEMA_VERSION,
            "CREATE TABLE IF NOT EXISTS placements (
                 contractor TEXT PRIMARY KEY, cell TEXT NOT NULL,
                 generation INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS published (
                 id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL,
                 signed TEXT NOT NULL);",
            |other| CpError::Config(format!("placements.db has {other}")),
        )?;
        Ok(Store { conn })
    }

    pub fn get(&self, c: &ContractorId) -> Result<Option<Placement>> {
        let row: Option<(String, i64)> = self
            .conn
            .query_row(
                "SELECT cell, generation FROM placements WHERE contractor = ?1",
                [c.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(cell, g)| {
            Ok(Placement {
                cell: CellId::new(cell).map_err(corrupt)?,
                generation: Generation(u64::try_from(g).map_err(corrupt)?),
            })
        })
        .transpose()
    }

    /// Sets a placement. Generations only go up, and a move to another cell needs a higher
    /// generation. Returns whether anything changed.
    pub fn put(&self, c: &ContractorId, p: &Placement) -> Result<bool> {
        if let Some(held) = self.get(c)? {
            if p.generation < held.generation {
                return Err(CpError::BadRequest(format!(
                    "generation {} is lower than the held {}",
                    p.generation, held.generation
                )));
            }
            if p.generation == held.generation {
                if p.cell != held.cell {
                    return Err(CpError::BadRequest(
                        "moving to another cell needs a higher generation".into(),
                    ));
                }
                return Ok(false);
            }
        }
        self.conn.execute(
            "INSERT INTO placements (contractor, cell, generation) VALUES (?1, ?2, ?3)
             ON CONFLICT (contractor) DO UPDATE SET cell = excluded.cell,
                 generation = excluded.generation",
            params![c.as_str(), p.cell.as_str(), i64_of(p.generation.0)?],
        )?;
        Ok(true)
    }

    /// Seeds many placements in one transaction (a fresh fleet).
    pub fn put_many(&mut self, items: &[(ContractorId, Placement)]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO placements (contractor, cell, generation) VALUES (?1, ?2, ?3)
                 ON CONFLICT (contractor) DO UPDATE SET cell = excluded.cell,
                     generation = excluded.generation
                 WHERE excluded.generation >= placements.generation",
            )?;
            for (c, p) in items {
                stmt.execute(params![
                    c.as_str(),
                    p.cell.as_str(),
                    i64_of(p.generation.0)?
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Every placement.
    pub fn all(&self) -> Result<Vec<(ContractorId, Placement)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT contractor, cell, generation FROM placements ORDER BY contractor")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (c, cell, g) = row?;
            out.push((
                ContractorId::new(c).map_err(corrupt)?,
                Placement {
                    cell: CellId::new(cell).map_err(corrupt)?,
                    generation: Generation(u64::try_from(g).map_err(corrupt)?),
                },
            ));
        }
        Ok(out)
    }

    /// The last published map, if any.
    pub fn published(&self) -> Result<Option<SignedMap>> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT signed FROM published WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()?;
        text.map(|t| serde_json::from_str(&t).map_err(corrupt))
            .transpose()
    }

    /// Records a published map.
    pub fn set_published(&self, m: &SignedMap) -> Result<()> {
        let text = serde_json::to_string(m).map_err(|e| CpError::Internal(e.to_string()))?;
        self.conn.execute(
            "INSERT INTO published (id, version, signed) VALUES (1, ?1, ?2)
             ON CONFLICT (id) DO UPDATE SET version = excluded.version, signed = excluded.signed",
            params![i64_of(m.map.version)?, text],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> ContractorId {
        ContractorId::new(s).unwrap()
    }
    fn p(cell: &str, g: u64) -> Placement {
        Placement {
            cell: CellId::new(cell).unwrap(),
            generation: Generation(g),
        }
    }

    #[test]
    fn generations_only_go_up_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(dir.path()).unwrap();
            assert!(s.put(&c("c-1"), &p("cell-01", 1)).unwrap());
            assert!(!s.put(&c("c-1"), &p("cell-01", 1)).unwrap());
            assert!(s.put(&c("c-1"), &p("cell-02", 1)).is_err());
            assert!(s.put(&c("c-1"), &p("cell-02", 2)).unwrap());
            assert!(s.put(&c("c-1"), &p("cell-01", 1)).is_err());
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.get(&c("c-1")).unwrap(), Some(p("cell-02", 2)));
        assert_eq!(s.get(&c("c-2")).unwrap(), None);
    }
}
