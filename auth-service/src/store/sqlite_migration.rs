//! SQLite queries of the migration feature: a contractor's users (export) and the single-use
//! transfer tickets burned at this cell (table `burned_tickets` in the version-1 schema).

use protocol::time::UnixSeconds;
use protocol::{ContractorId, SessionId};
use rusqlite::{Connection, params};

use super::UserRecord;
use super::sqlite::{USER_COLUMNS, user_from_row, user_parse};
use crate::error::Result;

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Every user of a contractor, by login.
pub fn users_of(conn: &Connection, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
    let mut st = conn.prepare(&format!(
        "SELECT {USER_COLUMNS} FROM users WHERE contractor_id = ?1 ORDER BY login"
    ))?;
    let rows = st.query_map(params![contractor.as_str()], user_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(user_parse(row?)?);
    }
    Ok(out)
}

/// Burns a ticket id until `exp`; `false` when it was burned already. Expired ids are
/// forgotten in the same transaction (a replay after that is refused as expired anyway).
pub fn burn_ticket(
    conn: &mut Connection,
    jti: &SessionId,
    exp: UnixSeconds,
    now: UnixSeconds,
) -> Result<bool> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute(
        "DELETE FROM burned_tickets WHERE exp < ?1",
        params![i(now.saturating_sub(protocol::token::LEEWAY_S))],
    )?;
    let fresh = tx.execute(
        "INSERT INTO burned_tickets (jti, exp) VALUES (?1, ?2) ON CONFLICT (jti) DO NOTHING",
        params![jti.as_str(), i(exp)],
    )?;
    tx.commit()?;
    Ok(fresh == 1)
}
