//! Row plumbing of the SQLite files: JSON-document queries and the user row's columns and
//! queries (the backend-neutral parts are in `portable.rs`).

use rusqlite::{Connection, OptionalExtension as _, Params};
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::store::portable::{UserColumns, unjson, user_parse};
use crate::store::records::UserRecord;

/// The columns of a user row, in the order [`user_from_row`] reads them.
pub(super) const USER_COLUMNS: &str = "contractor_id, login, subject, role, password_hash, status";

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
