//! Row plumbing of the PostgreSQL backend: the reads that several of its methods share (the
//! feed position, feed entries, keys, ownership, users, JSON-document tables), each on one
//! connection or transaction. The integer conversions and JSON columns are shared with the
//! SQLite backend (`portable.rs`): both backends store the same shapes.

use std::collections::BTreeMap;

use protocol::feed::FeedEntry;
use protocol::ownership::OwnershipRecord;
use protocol::{ContractorId, Kid};
use serde::de::DeserializeOwned;
use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::store::portable::{UserColumns, i, i_usize, u, unjson, user_parse};
use crate::store::records::{KeyRow, KeyState, Position, UserRecord};

/// `BEGIN` of the consistent reads (a load, a dump): every table from one moment.
pub(super) const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// The columns of a user row, in [`UserColumns`] order.
pub(super) const USER_SELECT: &str =
    "SELECT contractor_id, login, subject, role, password_hash, status FROM users";

/// The stored feed position.
pub(super) async fn position(conn: &mut PgConnection) -> Result<Position> {
    let (head, epoch): (i64, String) =
        sqlx::query_as("SELECT head, epoch FROM feed_head WHERE id = 1")
            .fetch_one(conn)
            .await?;
    Ok(Position {
        epoch,
        head: u(head),
    })
}

/// Every epoch, the current one last.
pub(super) async fn epochs(conn: &mut PgConnection) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar("SELECT epoch FROM epochs ORDER BY n")
        .fetch_all(conn)
        .await?)
}

/// Up to `limit` feed entries after `after`, oldest first.
pub(super) async fn feed(
    conn: &mut PgConnection,
    after: u64,
    limit: usize,
) -> Result<Vec<FeedEntry>> {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT seq, change FROM feed WHERE seq > $1 ORDER BY seq LIMIT $2")
            .bind(i(after))
            .bind(i_usize(limit))
            .fetch_all(conn)
            .await?;
    rows.into_iter()
        .map(|(seq, change)| {
            Ok(FeedEntry {
                seq: u(seq),
                change: unjson(&change, "feed entry")?,
            })
        })
        .collect()
}

type KeyColumns = (String, String, Vec<u8>, Option<Vec<u8>>, i64, i64);

/// Every stored key, oldest first.
pub(super) async fn keys(conn: &mut PgConnection) -> Result<Vec<KeyRow>> {
    let rows: Vec<KeyColumns> = sqlx::query_as(
        "SELECT kid, state, public_key, sealed_seed, created_at, state_at FROM keys
         ORDER BY created_at, kid",
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|(kid, state, public, sealed, created, at)| {
            let bad = || Error::Internal(format!("stored key {kid:?} is corrupt"));
            Ok(KeyRow {
                kid: Kid::new(kid.clone()).map_err(|_| bad())?,
                state: KeyState::parse(&state).ok_or_else(bad)?,
                public: public.as_slice().try_into().map_err(|_| bad())?,
                sealed_seed: sealed,
                created_at: u(created),
                state_at: u(at),
            })
        })
        .collect()
}

/// Every ownership record.
pub(super) async fn ownership(
    conn: &mut PgConnection,
) -> Result<BTreeMap<ContractorId, OwnershipRecord>> {
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT contractor_id, record FROM ownership")
        .fetch_all(conn)
        .await?;
    rows.into_iter()
        .map(|(ctr, rec)| {
            let ctr = ContractorId::new(ctr)
                .map_err(|_| Error::Internal("stored contractor id is corrupt".into()))?;
            Ok((ctr, unjson(&rec, "ownership record")?))
        })
        .collect()
}

/// Every row of `sql` (one JSON-document column), parsed; `what` names it when corrupt.
pub(super) async fn json_rows<T: DeserializeOwned>(
    conn: &mut PgConnection,
    sql: &'static str,
    what: &str,
) -> Result<Vec<T>> {
    let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(conn).await?;
    rows.iter().map(|b| unjson(b, what)).collect()
}

/// User rows parsed.
pub(super) fn users(rows: Vec<UserColumns>) -> Result<Vec<UserRecord>> {
    rows.into_iter().map(user_parse).collect()
}
