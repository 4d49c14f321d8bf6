//! SQLite queries of the migration feature: the single-use
//! transfer tickets and transferred session ids burned at this cell as a target
//! (`burned_tickets`, version 1; `burned_sessions`, version 2), and the one ticket recorded
//! per transferred session at this cell as a source (`transferred_sessions`, version 2).

use protocol::SessionId;
use protocol::time::UnixSeconds;
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::error::Result;
use crate::store::portable::{i, transfer_record};
use crate::store::records::{TicketBurn, TransferRecord};

/// Burns a ticket id until its `exp` and its session id until the session's `sexp`, in one
/// transaction; `false` (and nothing written) when either was burned already. Expired entries
/// are forgotten in the same transaction (a replay after that is refused as expired anyway).
pub(super) fn burn_ticket(conn: &mut Connection, t: &TicketBurn, now: UnixSeconds) -> Result<bool> {
    let cutoff = i(now.saturating_sub(protocol::token::LEEWAY_S));
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute("DELETE FROM burned_tickets WHERE exp < ?1", params![cutoff])?;
    tx.execute(
        "DELETE FROM burned_sessions WHERE sexp < ?1",
        params![cutoff],
    )?;
    let fresh_ticket = tx.execute(
        "INSERT INTO burned_tickets (jti, exp) VALUES (?1, ?2) ON CONFLICT (jti) DO NOTHING",
        params![t.jti.as_str(), i(t.exp)],
    )? == 1;
    let fresh_session = fresh_ticket
        && tx.execute(
            "INSERT INTO burned_sessions (sid, sexp) VALUES (?1, ?2) ON CONFLICT (sid) DO NOTHING",
            params![t.sid.as_str(), i(t.sexp)],
        )? == 1;
    if !fresh_session {
        // Dropping the transaction rolls it back: a ticket refused for its session id is not
        // burned either (it is refused again anyway).
        return Ok(false);
    }
    tx.commit()?;
    Ok(true)
}

/// Records `proposed` as the ticket of session `sid` unless one is recorded; answers the
/// recorded one. Records of sessions expired before `now` (less the leeway) are forgotten.
pub(super) fn record_transfer(
    conn: &mut Connection,
    sid: &SessionId,
    sexp: UnixSeconds,
    proposed: &TransferRecord,
    now: UnixSeconds,
) -> Result<TransferRecord> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute(
        "DELETE FROM transferred_sessions WHERE sexp < ?1",
        params![i(now.saturating_sub(protocol::token::LEEWAY_S))],
    )?;
    tx.execute(
        "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sid) DO NOTHING",
        params![
            sid.as_str(),
            proposed.ticket_jti.as_str(),
            i(proposed.iat),
            i(proposed.exp),
            i(sexp)
        ],
    )?;
    let held = tx
        .query_row(
            "SELECT ticket_jti, iat, exp FROM transferred_sessions WHERE sid = ?1",
            params![sid.as_str()],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            },
        )
        .optional()?;
    tx.commit()?;
    transfer_record(held)
}
