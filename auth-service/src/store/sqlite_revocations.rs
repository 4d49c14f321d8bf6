//! SQLite side of per-cell revocation: the append-only revocation audit log (written in the
//! same transaction as the revocation and its feed entry, never compacted) and the record of
//! minted sessions. The tables are part of the version-1 schema in `sqlite.rs`.

use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{SessionId, SubjectId};
use rusqlite::{Connection, params};

use crate::error::Result;
use crate::store::portable::{i, i_usize, json};
use crate::store::records::{MintedSession, audit_position};
use crate::store::sqlite_rows::{json_row, json_rows};

/// Appends a revocation, or its withdrawal, to the audit log (inside the caller's
/// transaction). A change is audited once: its feed sequence number is the key
/// ([`audit_position`]).
pub(super) fn audit(conn: &Connection, r: &Revocation) -> Result<()> {
    let body = json(r)?;
    let (seq, at) = audit_position(r);
    conn.execute(
        "INSERT INTO revocation_audit (seq, at, body) VALUES (?1, ?2, ?3)
         ON CONFLICT(seq) DO NOTHING",
        params![i(seq), i(at), body],
    )?;
    Ok(())
}

/// Audit entries after `after`, oldest first, at most `limit`.
pub(super) fn audit_page(conn: &Connection, after: u64, limit: usize) -> Result<Vec<Revocation>> {
    json_rows(
        conn,
        "SELECT body FROM revocation_audit WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        params![i(after), i_usize(limit)],
        "audit entry",
    )
}

/// Records a minted session.
pub(super) fn record_session(conn: &Connection, s: &MintedSession) -> Result<()> {
    let body = json(s)?;
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
pub(super) fn sessions_of(
    conn: &Connection,
    sub: &SubjectId,
    now: UnixSeconds,
    limit: usize,
) -> Result<Vec<MintedSession>> {
    json_rows(
        conn,
        "SELECT body FROM minted_sessions WHERE sub = ?1 AND exp > ?2 ORDER BY exp DESC LIMIT ?3",
        params![sub.as_str(), i(now), i_usize(limit)],
        "minted session",
    )
}

/// One recorded session.
pub(super) fn session(conn: &Connection, jti: &SessionId) -> Result<Option<MintedSession>> {
    json_row(
        conn,
        "SELECT body FROM minted_sessions WHERE jti = ?1",
        params![jti.as_str()],
        "minted session",
    )
}

/// Deletes the records of sessions that expired before `cutoff`; answers how many.
pub(super) fn delete_expired(conn: &Connection, cutoff: UnixSeconds) -> Result<usize> {
    Ok(conn.execute(
        "DELETE FROM minted_sessions WHERE exp < ?1",
        params![i(cutoff)],
    )?)
}
