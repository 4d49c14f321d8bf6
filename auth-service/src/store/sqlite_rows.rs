//! Row plumbing shared by the SQLite files: integer conversions, JSON columns, and the user
//! row (its columns, its reading and its queries).

use rusqlite::{Connection, OptionalExtension as _, Params};
use serde::Serialize;
use serde::de::DeserializeOwned;

use protocol::admin::cell::{Role, UserStatus};
use protocol::{ContractorId, Login, PasswordHash, SubjectId};

use crate::error::{Error, Result};
use crate::store::records::UserRecord;

/// The columns of a user row, in the order [`user_from_row`] reads them.
pub(super) const USER_COLUMNS: &str = "contractor_id, login, subject, role, password_hash, status";

/// A stored integer as unsigned (a negative one, never written, reads as 0).
pub(super) fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// An unsigned value as a SQLite integer (saturating).
pub(super) fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A count or limit as a SQLite integer (saturating).
pub(super) fn i_usize(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A value as a JSON column.
pub(super) fn json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("encode: {e}")))
}

/// A JSON column read back; `what` names it when it is corrupt.
pub(super) fn unjson<T: DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| Error::Internal(format!("stored {what} is corrupt: {e}")))
}

/// Every row of a query whose one column is a JSON document.
pub(super) fn json_rows<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    what: &str,
) -> Result<Vec<T>> {
    let mut st = conn.prepare(sql)?;
    let rows = st.query_map(params, |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(unjson(&row?, what)?);
    }
    Ok(out)
}

/// The one row (if any) of a query whose one column is a JSON document.
pub(super) fn json_row<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    what: &str,
) -> Result<Option<T>> {
    conn.query_row(sql, params, |r| r.get::<_, String>(0))
        .optional()?
        .map(|b| unjson(&b, what))
        .transpose()
}

type UserColumns = (String, String, String, String, String, String);

fn user_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UserColumns> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn user_parse(row: UserColumns) -> Result<UserRecord> {
    let (ctr, login, sub, role, hash, status) = row;
    let bad = |w: &str| Error::Internal(format!("stored user {w} is corrupt"));
    Ok(UserRecord {
        contractor_id: ContractorId::new(ctr).map_err(|_| bad("contractor"))?,
        login: Login::new(login).map_err(|_| bad("login"))?,
        subject: SubjectId::new(sub).map_err(|_| bad("subject"))?,
        role: Role::parse(&role).ok_or_else(|| bad("role"))?,
        password_hash: PasswordHash::new(hash),
        status: UserStatus::parse(&status).ok_or_else(|| bad("status"))?,
    })
}

/// The users matching `filter` (an SQL condition, optionally with `ORDER BY`, and its
/// parameters).
pub(super) fn users_where(
    conn: &Connection,
    filter: &str,
    params: impl Params,
) -> Result<Vec<UserRecord>> {
    let mut st = conn.prepare(&format!("SELECT {USER_COLUMNS} FROM users WHERE {filter}"))?;
    let rows = st.query_map(params, user_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(user_parse(row?)?);
    }
    Ok(out)
}
