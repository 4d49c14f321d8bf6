//! Row plumbing shared by the SQLite files: integer conversions, JSON columns, and the user
//! row (its columns, its reading and its queries). The backend-neutral parts (conversions,
//! JSON, a fresh epoch, the backup shapes of keys and users) serve the PostgreSQL files too.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SecureRandom as _;
use rusqlite::{Connection, OptionalExtension as _, Params};
use serde::Serialize;
use serde::de::DeserializeOwned;

use protocol::admin::cell::{Role, UserStatus};
use protocol::{ContractorId, Login, PasswordHash, SubjectId};

use crate::error::{Error, Result};
use crate::store::records::{DumpKey, DumpUser, KeyRow, UserRecord};

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

/// A fresh feed epoch: 16 random bytes, base64url (a new database, or a restore).
pub(super) fn fresh_epoch() -> Result<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto("random epoch"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// A stored key as a backup writes it.
pub(super) fn dump_key(k: &KeyRow) -> DumpKey {
    DumpKey {
        kid: k.kid.clone(),
        state: k.state,
        public: URL_SAFE_NO_PAD.encode(k.public),
        sealed_seed: k.sealed_seed.as_ref().map(|s| URL_SAFE_NO_PAD.encode(s)),
        created_at: k.created_at,
        state_at: k.state_at,
    }
}

/// A backed-up key as stored; refuses a malformed one.
pub(super) fn undump_key(d: &DumpKey) -> Result<KeyRow> {
    let bad = || Error::BadRequest(format!("backup key {:?} is malformed", d.kid.as_str()));
    let public = URL_SAFE_NO_PAD.decode(&d.public).map_err(|_| bad())?;
    let sealed_seed = match &d.sealed_seed {
        Some(s) => Some(URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?),
        None => None,
    };
    Ok(KeyRow {
        kid: d.kid.clone(),
        state: d.state,
        public: public.as_slice().try_into().map_err(|_| bad())?,
        sealed_seed,
        created_at: d.created_at,
        state_at: d.state_at,
    })
}

/// A stored user as a backup writes it.
pub(super) fn dump_user(u: UserRecord) -> DumpUser {
    DumpUser {
        contractor_id: u.contractor_id,
        login: u.login,
        subject: u.subject,
        role: u.role,
        password_hash: u.password_hash,
        status: u.status,
    }
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

/// A user row's text columns, in [`USER_COLUMNS`] order.
pub(super) type UserColumns = (String, String, String, String, String, String);

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

/// A user row's text columns, in [`USER_COLUMNS`] order, parsed.
pub(super) fn user_parse(row: UserColumns) -> Result<UserRecord> {
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
