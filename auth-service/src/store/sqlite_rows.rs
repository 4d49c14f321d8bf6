//! Row plumbing of the SQLite files: the reads that several of its calls share (the feed
//! position, feed entries, epochs, keys, ownership), JSON-document queries and the user row's
//! columns and queries (the backend-neutral parts are in `portable.rs`).

use std::collections::BTreeMap;

use protocol::feed::FeedEntry;
use protocol::ownership::OwnershipRecord;
use protocol::{ContractorId, Kid};
use rusqlite::{Connection, OptionalExtension as _, Params, params};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::store::portable::{UserColumns, i, i_usize, u, unjson, user_parse};
use crate::store::records::{KeyRow, KeyState, Position, UserRecord};

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

/// The stored feed position.
pub(super) fn read_position(conn: &Connection) -> Result<Position> {
    let (head, epoch) =
        conn.query_row("SELECT head, epoch FROM feed_head WHERE id = 1", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
    Ok(Position {
        epoch,
        head: u(head),
    })
}

/// Every epoch, the current one last.
pub(super) fn read_epochs(conn: &Connection) -> Result<Vec<String>> {
    let mut st = conn.prepare("SELECT epoch FROM epochs ORDER BY n")?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
}

/// Up to `limit` feed entries after `after`, oldest first.
pub(super) fn read_feed(conn: &Connection, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
    let mut st =
        conn.prepare("SELECT seq, change FROM feed WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let rows = st.query_map(params![i(after), i_usize(limit)], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, change) = row?;
        out.push(FeedEntry {
            seq: u(seq),
            change: unjson(&change, "feed entry")?,
        });
    }
    Ok(out)
}

/// Every stored key, oldest first.
pub(super) fn read_keys(conn: &Connection) -> Result<Vec<KeyRow>> {
    let mut st = conn.prepare(
        "SELECT kid, state, public_key, sealed_seed, created_at, state_at FROM keys ORDER BY created_at, kid",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Vec<u8>>(2)?,
            r.get::<_, Option<Vec<u8>>>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, i64>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (kid, state, public, sealed, created, at) = row?;
        let bad = || Error::Internal(format!("stored key {kid:?} is corrupt"));
        out.push(KeyRow {
            kid: Kid::new(kid.clone()).map_err(|_| bad())?,
            state: KeyState::parse(&state).ok_or_else(bad)?,
            public: public.as_slice().try_into().map_err(|_| bad())?,
            sealed_seed: sealed,
            created_at: u(created),
            state_at: u(at),
        });
    }
    Ok(out)
}

/// Every ownership record.
pub(super) fn read_ownership(conn: &Connection) -> Result<BTreeMap<ContractorId, OwnershipRecord>> {
    let mut out = BTreeMap::new();
    let mut st = conn.prepare("SELECT contractor_id, record FROM ownership")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    for row in rows {
        let (ctr, rec) = row?;
        let ctr = ContractorId::new(ctr)
            .map_err(|_| Error::Internal("stored contractor id is corrupt".into()))?;
        out.insert(ctr, unjson(&rec, "ownership record")?);
    }
    Ok(out)
}
