//! SQLite side of backup and restore: everything the database holds as one [`Dump`], read in
//! one transaction, and a restore that replaces every table's contents in one transaction
//! under a new epoch (the epochs it replaces stay listed).

use rusqlite::{Connection, params};

use crate::error::Result;
use crate::store::portable::{
    RESTORED_TABLES, check_restorable, dump_key, history, i, json, stored_id, u, undump_key,
};
use crate::store::records::{BACKUP_SCHEMA, Dump, DumpBurn, DumpTransfer, Position, Write};
use crate::store::sqlite_rows::{
    json_row, json_rows, read_epochs, read_feed, read_keys, read_ownership, read_position,
    users_where,
};
use crate::store::{sqlite_revocations, sqlite_writes};

/// Everything the database holds.
pub(super) fn dump(conn: &mut Connection) -> Result<Dump> {
    // One read transaction: every table from the same moment.
    let tx = conn.transaction()?;
    let Position { epoch, head } = read_position(&tx)?;
    let burns = |sql: &str| -> Result<Vec<DumpBurn>> {
        let mut st = tx.prepare(sql)?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, until) = row?;
            out.push(DumpBurn {
                id: stored_id(id)?,
                until: u(until),
            });
        }
        Ok(out)
    };
    let burned_tickets = burns("SELECT jti, exp FROM burned_tickets ORDER BY jti")?;
    let burned_sessions = burns("SELECT sid, sexp FROM burned_sessions ORDER BY sid")?;
    let mut transferred_sessions = Vec::new();
    {
        let mut st = tx.prepare(
            "SELECT sid, ticket_jti, iat, exp, sexp FROM transferred_sessions ORDER BY sid",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        for row in rows {
            let (sid, ticket, iat, exp, sexp) = row?;
            transferred_sessions.push(DumpTransfer {
                sid: stored_id(sid)?,
                ticket_jti: stored_id(ticket)?,
                iat: u(iat),
                exp: u(exp),
                sexp: u(sexp),
            });
        }
    }
    Ok(Dump {
        schema: BACKUP_SCHEMA,
        cell: None,
        taken_at: 0,
        epochs: read_epochs(&tx)?,
        epoch,
        head,
        feed: read_feed(&tx, 0, usize::MAX)?,
        users: users_where(&tx, "1 = 1 ORDER BY contractor_id, login", [])?,
        keys: read_keys(&tx)?.iter().map(dump_key).collect(),
        ownership: read_ownership(&tx)?,
        revocations: json_rows(
            &tx,
            "SELECT body FROM revocations ORDER BY seq",
            [],
            "revocation",
        )?,
        revocation_audit: json_rows(
            &tx,
            "SELECT body FROM revocation_audit ORDER BY seq",
            [],
            "audit entry",
        )?,
        map: json_row(
            &tx,
            "SELECT body FROM placement_map WHERE id = 1",
            [],
            "placement map",
        )?,
        minted_sessions: json_rows(
            &tx,
            "SELECT body FROM minted_sessions ORDER BY jti",
            [],
            "minted session",
        )?,
        burned_tickets,
        burned_sessions,
        transferred_sessions,
    })
}

/// Replaces everything the database holds with `dump`, under `epoch`, in one transaction.
pub(super) fn restore(conn: &mut Connection, dump: &Dump, epoch: &str) -> Result<()> {
    check_restorable(dump, epoch)?;
    let keys = dump
        .keys
        .iter()
        .map(undump_key)
        .collect::<Result<Vec<_>>>()?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for table in RESTORED_TABLES {
        tx.execute(&format!("DELETE FROM {table}"), [])?;
    }
    sqlite_writes::users(&tx, &dump.users)?;
    // Users, keys and ownership go in as a commit or an import writes them (the tables are empty: nothing to update).
    for k in keys {
        sqlite_writes::write(&tx, &Write::Key(k))?;
    }
    for (contractor, record) in &dump.ownership {
        let (contractor, record) = (contractor.clone(), record.clone());
        sqlite_writes::write(&tx, &Write::Ownership { contractor, record })?;
    }
    for r in &dump.revocations {
        tx.execute(
            "INSERT INTO revocations (seq, body) VALUES (?1, ?2)",
            params![i(r.seq), json(r)?],
        )?;
    }
    for r in &dump.revocation_audit {
        sqlite_revocations::audit(&tx, r)?;
    }
    if let Some(m) = &dump.map {
        sqlite_writes::write(&tx, &Write::Map(Box::new(m.clone())))?;
    }
    for e in &dump.feed {
        tx.execute(
            "INSERT INTO feed (seq, change) VALUES (?1, ?2)",
            params![i(e.seq), json(&e.change)?],
        )?;
    }
    for s in &dump.minted_sessions {
        sqlite_revocations::record_session(&tx, s)?;
    }
    for b in &dump.burned_tickets {
        tx.execute(
            "INSERT INTO burned_tickets (jti, exp) VALUES (?1, ?2)",
            params![b.id.as_str(), i(b.until)],
        )?;
    }
    for b in &dump.burned_sessions {
        tx.execute(
            "INSERT INTO burned_sessions (sid, sexp) VALUES (?1, ?2)",
            params![b.id.as_str(), i(b.until)],
        )?;
    }
    for t in &dump.transferred_sessions {
        tx.execute(
            "INSERT INTO transferred_sessions (sid, ticket_jti, iat, exp, sexp)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                t.sid.as_str(),
                t.ticket_jti.as_str(),
                i(t.iat),
                i(t.exp),
                i(t.sexp)
            ],
        )?;
    }
    tx.execute(
        "UPDATE feed_head SET head = ?1, epoch = ?2 WHERE id = 1",
        params![i(dump.head), epoch],
    )?;
    for old in history(dump) {
        tx.execute(
            "INSERT INTO epochs (epoch) VALUES (?1) ON CONFLICT (epoch) DO NOTHING",
            [old],
        )?;
    }
    tx.execute("DELETE FROM epochs WHERE epoch = ?1", [epoch])?;
    tx.execute("INSERT INTO epochs (epoch) VALUES (?1)", [epoch])?;
    tx.commit()?;
    Ok(())
}
