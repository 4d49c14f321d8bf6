//! PostgreSQL side of backup and restore: everything the database holds as one [`Dump`], read
//! in one `REPEATABLE READ` transaction, and a restore that replaces every table's contents in
//! one transaction holding the feed-position lock (so commits wait for it and then find
//! themselves stale), keeps the `epochs` rows and lists the new epoch last. The shared
//! run-time tables (throttle buckets, edge instances) are not part of a backup.

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::error::Result;
use crate::store::portable::{
    RESTORED_TABLES, UserColumns, check_restorable, dump_key, history, i, json, stored_id, u,
    undump_key,
};
use crate::store::postgres_rows::{self as rows, BEGIN_SNAPSHOT, USER_SELECT};
use crate::store::postgres_writes as writes;
use crate::store::records::{BACKUP_SCHEMA, Dump, DumpBurn, DumpTransfer, Position, Write};

/// Everything the database holds.
pub(super) async fn dump(pool: &PgPool) -> Result<Dump> {
    let mut tx = pool.begin_with(BEGIN_SNAPSHOT).await?;
    let Position { epoch, head } = rows::position(&mut tx).await?;
    let burns = |rows: Vec<(String, i64)>| -> Result<Vec<DumpBurn>> {
        rows.into_iter()
            .map(|(id, until)| {
                Ok(DumpBurn {
                    id: stored_id(id)?,
                    until: u(until),
                })
            })
            .collect()
    };
    let burned_tickets = burns(
        sqlx::query_as("SELECT jti, exp FROM burned_tickets ORDER BY jti")
            .fetch_all(&mut *tx)
            .await?,
    )?;
    let burned_sessions = burns(
        sqlx::query_as("SELECT sid, sexp FROM burned_sessions ORDER BY sid")
            .fetch_all(&mut *tx)
            .await?,
    )?;
    let transfers: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT sid, ticket_jti, iat, exp, sexp FROM transferred_sessions ORDER BY sid",
    )
    .fetch_all(&mut *tx)
    .await?;
    let transferred_sessions = transfers
        .into_iter()
        .map(|(sid, ticket, iat, exp, sexp)| {
            Ok(DumpTransfer {
                sid: stored_id(sid)?,
                ticket_jti: stored_id(ticket)?,
                iat: u(iat),
                exp: u(exp),
                sexp: u(sexp),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let users: Vec<UserColumns> = sqlx::query_as(AssertSqlSafe(format!(
        "{USER_SELECT} ORDER BY contractor_id, login"
    )))
    .fetch_all(&mut *tx)
    .await?;
    let dump = Dump {
        schema: BACKUP_SCHEMA,
        cell: None,
        taken_at: 0,
        epochs: rows::epochs(&mut tx).await?,
        epoch,
        head,
        feed: rows::feed(&mut tx, 0, usize::MAX).await?,
        users: rows::users(users)?,
        keys: rows::keys(&mut tx).await?.iter().map(dump_key).collect(),
        ownership: rows::ownership(&mut tx).await?,
        revocations: rows::json_rows(
            &mut tx,
            "SELECT body FROM revocations ORDER BY seq",
            "revocation",
        )
        .await?,
        revocation_audit: rows::json_rows(
            &mut tx,
            "SELECT body FROM revocation_audit ORDER BY seq",
            "audit entry",
        )
        .await?,
        map: rows::json_rows(
            &mut tx,
            "SELECT body FROM placement_map WHERE id = 1",
            "placement map",
        )
        .await?
        .pop(),
        minted_sessions: rows::json_rows(
            &mut tx,
            "SELECT body FROM minted_sessions ORDER BY jti",
            "minted session",
        )
        .await?,
        burned_tickets,
        burned_sessions,
        transferred_sessions,
    };
    tx.commit().await?;
    Ok(dump)
}

/// Replaces everything the database holds with `dump`, under `epoch`, in one transaction.
pub(super) async fn restore(pool: &PgPool, dump: &Dump, epoch: &str) -> Result<()> {
    check_restorable(dump, epoch)?;
    let keys = dump
        .keys
        .iter()
        .map(undump_key)
        .collect::<Result<Vec<_>>>()?;
    let mut tx = pool.begin().await?;
    // Commits wait for the restore (and then find themselves stale).
    sqlx::query("SELECT head FROM feed_head WHERE id = 1 FOR UPDATE")
        .fetch_one(&mut *tx)
        .await?;
    for table in RESTORED_TABLES {
        sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
            .execute(&mut *tx)
            .await?;
    }
    writes::users(&mut tx, &dump.users).await?;
    // Users, keys and ownership go in as a commit or an import writes them (the tables are empty: nothing to update).
    for k in keys {
        writes::write(&mut tx, &Write::Key(k)).await?;
    }
    for (contractor, record) in &dump.ownership {
        let (contractor, record) = (contractor.clone(), record.clone());
        writes::write(&mut tx, &Write::Ownership { contractor, record }).await?;
    }
    for r in &dump.revocations {
        sqlx::query("INSERT INTO revocations (seq, body) VALUES ($1, $2)")
            .bind(i(r.seq))
            .bind(json(r)?)
            .execute(&mut *tx)
            .await?;
    }
    for r in &dump.revocation_audit {
        writes::audit(&mut tx, r).await?;
    }
    if let Some(m) = &dump.map {
        writes::write(&mut tx, &Write::Map(Box::new(m.clone()))).await?;
    }
    for e in &dump.feed {
        sqlx::query("INSERT INTO feed (seq, change) VALUES ($1, $2)")
            .bind(i(e.seq))
            .bind(json(&e.change)?)
            .execute(&mut *tx)
            .await?;
    }
    for s in &dump.minted_sessions {
        writes::record_session(&mut tx, s).await?;
    }
    for b in &dump.burned_tickets {
        sqlx::query("INSERT INTO burned_tickets (jti, exp) VALUES ($1, $2)")
            .bind(b.id.as_str())
            .bind(i(b.until))
            .execute(&mut *tx)
            .await?;
    }
    for b in &dump.burned_sessions {
        sqlx::query("INSERT INTO burned_sessions (sid, sexp) VALUES ($1, $2)")
            .bind(b.id.as_str())
            .bind(i(b.until))
            .execute(&mut *tx)
            .await?;
    }
    for t in &dump.transferred_sessions {
        sqlx::query(
            "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(t.sid.as_str())
        .bind(t.ticket_jti.as_str())
        .bind(i(t.iat))
        .bind(i(t.exp))
        .bind(i(t.sexp))
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query("UPDATE feed_head SET head = $1, epoch = $2 WHERE id = 1")
        .bind(i(dump.head))
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
    for old in history(dump) {
        sqlx::query("INSERT INTO epochs (epoch) VALUES ($1) ON CONFLICT (epoch) DO NOTHING")
            .bind(old)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("DELETE FROM epochs WHERE epoch = $1")
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO epochs (epoch) VALUES ($1)")
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
    writes::notify(&mut tx, dump.head).await?;
    tx.commit().await?;
    Ok(())
}
