//! SQLite side of per-cell revocation: the append-only revocation audit log (written in the
//! same transaction as the revocation and its feed entry, never compacted) and the record of
//! minted sessions. The tables are part of the version-1 schema in `sqlite.rs`.

use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{SessionId, SubjectId};
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::{Error, Result};
use crate::revocations::MintedSession;

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn corrupt(what: &str) -> impl FnOnce(serde_json::Error) -> Error + '_ {
    move |e| Error::Internal(format!("stored {what} is corrupt: {e}"))
}

/// Appends a revocation to the audit log (inside the caller's transaction). A revocation is
/// audited once: its feed sequence number is the key.
pub fn audit(conn: &Connection, r: &Revocation) -> Result<()> {
    let body = serde_json::to_string(r).map_err(|e| Error::Internal(format!("encode: {e}")))?;
    conn.execute(
        "INSERT INTO revocation_audit (seq, at, body) VALUES (?1, ?2, ?3)
         ON CONFLICT(seq) DO NOTHING",
        params![i(r.seq), i(r.at), body],
    )?;
    Ok(())
}

/// Audit entries after `after`, oldest first, at most `limit`.
pub fn audit_page(conn: &Connection, after: u64, limit: usize) -> Result<Vec<Revocation>> {
    let mut st =
        conn.prepare("SELECT body FROM revocation_audit WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let rows = st.query_map(
        params![i(after), i64::try_from(limit).unwrap_or(i64::MAX)],
        |r| r.get::<_, String>(0),
    )?;
    let mut out = Vec::new();
    for row in rows {
        out.push(serde_json::from_str(&row?).map_err(corrupt("audit entry"))?);
    }
    Ok(out)
}

/// Records a minted session.
pub fn record_session(conn: &Connection, s: &MintedSession) -> Result<()> {
    let body = serde_json::to_string(s).map_err(|e| Error::Internal(format!("encode: {e}")))?;
    conn.execute(
        "INSERT INTO minted_sessions (jti, sub, exp, body) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(jti) DO UPDATE SET sub = ?2, exp = ?3, body = ?4",
        params![
            s.session_id.as_str(),
            s.subject.as_str(),
            i(s.expires_at),
            body
        ],
    )?;
    Ok(())
}

/// A subject's recorded sessions that expire after `now`, newest first, at most `limit`.
pub fn sessions_of(
    conn: &Connection,
    sub: &SubjectId,
    now: UnixSeconds,
    limit: usize,
) -> Result<Vec<MintedSession>> {
    let mut st = conn.prepare(
        "SELECT body FROM minted_sessions WHERE sub = ?1 AND exp > ?2 ORDER BY exp DESC LIMIT ?3",
    )?;
    let rows = st.query_map(
        params![
            sub.as_str(),
            i(now),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        |r| r.get::<_, String>(0),
    )?;
    let mut out = Vec::new();
    for row in rows {
        out.push(serde_json::from_str(&row?).map_err(corrupt("minted session"))?);
    }
    Ok(out)
}

/// One recorded session.
pub fn session(conn: &Connection, jti: &SessionId) -> Result<Option<MintedSession>> {
    conn.query_row(
        "SELECT body FROM minted_sessions WHERE jti = ?1",
        params![jti.as_str()],
        |r| r.get::<_, String>(0),
    )
    .optional()?
    .map(|b| serde_json::from_str(&b).map_err(corrupt("minted session")))
    .transpose()
}

/// Deletes the records of sessions that expired before `cutoff`; answers how many.
pub fn delete_expired(conn: &Connection, cutoff: UnixSeconds) -> Result<usize> {
    Ok(conn.execute(
        "DELETE FROM minted_sessions WHERE exp < ?1",
        params![i(cutoff)],
    )?)
}

/// Number of audit entries (tests and status).
pub fn audit_len(conn: &Connection) -> Result<u64> {
    Ok(u(conn.query_row(
        "SELECT COUNT(*) FROM revocation_audit",
        [],
        |r| r.get(0),
    )?))
}
