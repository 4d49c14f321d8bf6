//! Writes of the SQLite backend that a commit, a user import and a restore share, each inside
//! the caller's transaction (the twin of `postgres_writes.rs`).

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::store::portable::{i, json};
use crate::store::records::{UserRecord, Write};
use crate::store::sqlite_revocations;
use crate::store::sqlite_rows::USER_COLUMNS;

/// Writes one state change inside the caller's transaction.
pub(super) fn write(conn: &Connection, w: &Write) -> Result<()> {
    match w {
        Write::Key(k) => {
            conn.execute(
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
            conn.execute(
                "INSERT INTO ownership (contractor_id, record) VALUES (?1, ?2)
                 ON CONFLICT(contractor_id) DO UPDATE SET record = ?2",
                params![contractor.as_str(), json(record)?],
            )?;
        }
        Write::Revocation(r) => {
            conn.execute(
                "INSERT INTO revocations (seq, body) VALUES (?1, ?2)",
                params![i(r.seq), json(r)?],
            )?;
            sqlite_revocations::audit(conn, r)?;
        }
        Write::Withdrawal(r) => {
            conn.execute("DELETE FROM revocations WHERE seq = ?1", params![i(r.seq)])?;
            sqlite_revocations::audit(conn, r)?;
        }
        Write::Map(m) => {
            conn.execute(
                "INSERT INTO placement_map (id, version, body) VALUES (1, ?1, ?2)
                 ON CONFLICT(id) DO UPDATE SET version = ?1, body = ?2",
                params![i(m.map.version), json(m)?],
            )?;
        }
    }
    Ok(())
}

/// Inserts users, or updates the role, password hash and status of those already there,
/// inside the caller's transaction.
pub(super) fn users(conn: &Connection, users: &[UserRecord]) -> Result<()> {
    let mut st = conn.prepare(&format!(
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
    Ok(())
}
