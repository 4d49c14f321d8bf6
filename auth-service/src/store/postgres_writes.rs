//! Writes of the PostgreSQL backend that several of its calls share (a commit's state changes,
//! an audit row, a minted session, the feed wake-up), each inside the caller's transaction
//! or on its connection.

use protocol::revocation::Revocation;
use sqlx::PgConnection;

use crate::error::Result;
use crate::store::portable::{i, json};
use crate::store::postgres_coordination::FEED_CHANNEL;
use crate::store::records::{MintedSession, UserRecord, Write, audit_position};

/// Writes one state change inside a commit's transaction.
pub(super) async fn write(conn: &mut PgConnection, w: &Write) -> Result<()> {
    match w {
        Write::Key(k) => {
            sqlx::query(
                "INSERT INTO keys (kid, state, public_key, sealed_seed, created_at, state_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (kid) DO UPDATE SET state = $2, state_at = $6,
                   sealed_seed = CASE WHEN $2 IN ('revoked', 'expired') THEN NULL
                                      ELSE COALESCE($4, keys.sealed_seed) END",
            )
            .bind(k.kid.as_str())
            .bind(k.state.as_str())
            .bind(&k.public[..])
            .bind(k.sealed_seed.as_deref())
            .bind(i(k.created_at))
            .bind(i(k.state_at))
            .execute(conn)
            .await?;
        }
        Write::Ownership { contractor, record } => {
            sqlx::query(
                "INSERT INTO ownership (contractor_id, record) VALUES ($1, $2)
                 ON CONFLICT (contractor_id) DO UPDATE SET record = $2",
            )
            .bind(contractor.as_str())
            .bind(json(record)?)
            .execute(conn)
            .await?;
        }
        Write::Revocation(r) => {
            sqlx::query("INSERT INTO revocations (seq, body) VALUES ($1, $2)")
                .bind(i(r.seq))
                .bind(json(r)?)
                .execute(&mut *conn)
                .await?;
            audit(conn, r).await?;
        }
        Write::Withdrawal(r) => {
            sqlx::query("DELETE FROM revocations WHERE seq = $1")
                .bind(i(r.seq))
                .execute(&mut *conn)
                .await?;
            audit(conn, r).await?;
        }
        Write::Map(m) => {
            sqlx::query(
                "INSERT INTO placement_map (id, version, body) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE SET version = $1, body = $2",
            )
            .bind(i(m.map.version))
            .bind(json(m)?)
            .execute(conn)
            .await?;
        }
    }
    Ok(())
}

/// Inserts users, or updates the role, password hash and status of those already there,
/// inside the caller's transaction.
pub(super) async fn users(conn: &mut PgConnection, users: &[UserRecord]) -> Result<()> {
    for user in users {
        sqlx::query(
            "INSERT INTO users (contractor_id, login, subject, role, password_hash, status)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (contractor_id, login) DO UPDATE SET
               role = $4, password_hash = $5, status = $6",
        )
        .bind(user.contractor_id.as_str())
        .bind(user.login.as_str())
        .bind(user.subject.as_str())
        .bind(user.role.as_str())
        .bind(user.password_hash.expose())
        .bind(user.status.as_str())
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Appends a revocation, or its withdrawal, to the audit log (inside the caller's
/// transaction), once per feed sequence number ([`audit_position`]).
pub(super) async fn audit(conn: &mut PgConnection, r: &Revocation) -> Result<()> {
    let (seq, at) = audit_position(r);
    sqlx::query(
        "INSERT INTO revocation_audit (seq, at, body) VALUES ($1, $2, $3)
         ON CONFLICT (seq) DO NOTHING",
    )
    .bind(i(seq))
    .bind(i(at))
    .bind(json(r)?)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a minted session (insert or replace).
pub(super) async fn record_session(conn: &mut PgConnection, s: &MintedSession) -> Result<()> {
    sqlx::query(
        "INSERT INTO minted_sessions (jti, sub, exp, body) VALUES ($1, $2, $3, $4)
         ON CONFLICT (jti) DO UPDATE SET sub = $2, exp = $3, body = $4",
    )
    .bind(s.session_id.as_str())
    .bind(s.subject.as_str())
    .bind(i(s.expires_at))
    .bind(json(s)?)
    .execute(conn)
    .await?;
    Ok(())
}

/// Notifies [`FEED_CHANNEL`] with the new head; delivered when the transaction commits.
pub(super) async fn notify(conn: &mut PgConnection, head: u64) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(FEED_CHANNEL)
        .bind(head.to_string())
        .execute(conn)
        .await?;
    Ok(())
}
