//! The auth-service's part of a contractor migration (DESIGN §5), admin API only:
//!
//! - `GET /admin/v1/contractors/{ctr}/export` → [`ContractorExport`]: the contractor's users
//!   (password hashes only, never a password) and the revocations that concern it (its
//!   subjects' and its own; one-session, key and cell revocations belong to this cell's keys
//!   and sessions, which never leave it).
//! - `POST /admin/v1/contractors/{ctr}/import` with that document → `{users, revocations}`:
//!   users are upserted in one transaction; each revocation not already held here is recorded
//!   again (same kind and `before`, audit `by` naming the source), so importing twice changes
//!   nothing.
//! - `GET /admin/v1/drain/{ctr}?seq=S` → [`DrainStatus`]: whether every edge instance with a
//!   current lease has applied feed sequence `S` and reports no write in flight for the
//!   contractor (instances report both on each feed request, see `feed.rs`). An instance
//!   counts until its write lease must have lapsed: `edge_write_lease_ms` plus the longest
//!   long-poll after its last request (it refuses writes by itself after that).

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use protocol::revocation::{Revocation, RevocationKind};
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SubjectId};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::http::{Admin, JsonBody};
use crate::state::{AppState, blocking};
use crate::store::{Role, UserRecord, UserStatus};

/// Schema version of [`ContractorExport`].
pub const EXPORT_SCHEMA: u32 = 1;
/// Slack added to an instance's live window, in seconds (clock granularity, transmission).
pub const LIVE_SLACK_S: u64 = 2;

/// One exported user.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedUser {
    pub login: Login,
    pub role: Role,
    /// argon2id PHC string.
    pub password_hash: String,
    pub status: UserStatus,
}

impl std::fmt::Debug for ExportedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportedUser")
            .field("login", &self.login)
            .field("role", &self.role)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// A contractor's credentials and revocations, as moved by a migration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractorExport {
    pub schema: u32,
    pub contractor_id: ContractorId,
    pub users: Vec<ExportedUser>,
    pub revocations: Vec<Revocation>,
}

fn path_ctr(p: Result<Path<String>, PathRejection>) -> Result<ContractorId> {
    let Path(s) = p.map_err(|_| Error::BadRequest("the contractor id is malformed".into()))?;
    ContractorId::new(s).map_err(|e| Error::BadRequest(format!("contractor id: {e}")))
}

/// Whether a revocation concerns the contractor (and so travels with it).
pub fn concerns(kind: &RevocationKind, ctr: &ContractorId) -> bool {
    match kind {
        RevocationKind::Contractor { ctr: c, .. } => c == ctr,
        RevocationKind::Subject { sub, .. } => sub
            .as_str()
            .strip_prefix(ctr.as_str())
            .is_some_and(|rest| rest.starts_with('.')),
        RevocationKind::Session { .. }
        | RevocationKind::Key { .. }
        | RevocationKind::Cell { .. } => false,
    }
}

/// `GET /admin/v1/contractors/{ctr}/export`.
pub async fn export(
    _: Admin,
    State(state): State<AppState>,
    ctr: Result<Path<String>, PathRejection>,
) -> Result<Response> {
    let ctr = path_ctr(ctr)?;
    let store = state.store.clone();
    let c = ctr.clone();
    let users = blocking(move || store.users_of(&c)).await?;
    let revocations = state
        .read()
        .revocations
        .iter()
        .filter(|r| concerns(&r.kind, &ctr))
        .cloned()
        .collect();
    let doc = ContractorExport {
        schema: EXPORT_SCHEMA,
        contractor_id: ctr,
        users: users
            .into_iter()
            .map(|u| ExportedUser {
                login: u.login,
                role: u.role,
                password_hash: u.password_hash,
                status: u.status,
            })
            .collect(),
        revocations,
    };
    Ok(Json(doc).into_response())
}

/// `POST /admin/v1/contractors/{ctr}/import`.
pub async fn import(
    _: Admin,
    State(state): State<AppState>,
    ctr: Result<Path<String>, PathRejection>,
    JsonBody(doc): JsonBody<ContractorExport>,
) -> Result<Response> {
    let ctr = path_ctr(ctr)?;
    if doc.schema != EXPORT_SCHEMA {
        return Err(Error::BadRequest(format!(
            "export schema {} is not {EXPORT_SCHEMA}",
            doc.schema
        )));
    }
    if doc.contractor_id != ctr {
        return Err(Error::BadRequest(
            "the document is for another contractor".into(),
        ));
    }
    if let Some(r) = doc.revocations.iter().find(|r| !concerns(&r.kind, &ctr)) {
        return Err(Error::BadRequest(format!(
            "revocation {} does not concern {ctr}",
            r.seq
        )));
    }
    let mut records = Vec::with_capacity(doc.users.len());
    for u in doc.users {
        crate::passwords::check_phc(&u.password_hash)?;
        let subject = SubjectId::new(format!("{ctr}.{}", u.login))
            .map_err(|e| Error::BadRequest(format!("subject: {e}")))?;
        records.push(UserRecord {
            contractor_id: ctr.clone(),
            login: u.login,
            subject,
            role: u.role,
            password_hash: u.password_hash,
            status: u.status,
        });
    }
    let users = records.len();
    let store = state.store.clone();
    let total = blocking(move || store.upsert_users(&records)).await?;
    state
        .users
        .store(total, std::sync::atomic::Ordering::Relaxed);
    let (_, added) = state
        .commit_with(|inner, batch| {
            let mut added = 0usize;
            for r in doc.revocations {
                if inner.revocations.iter().any(|held| held.kind == r.kind) {
                    continue;
                }
                let by = format!("migration:{}", r.by)
                    .chars()
                    .take(crate::admin::MAX_AUDIT_TEXT_BYTES / 4)
                    .collect();
                batch.revocation(r.kind, r.at, by, r.reason);
                added += 1;
            }
            Ok(added)
        })
        .await?;
    tracing::info!(%ctr, users, revocations = added, "imported a contractor's credentials");
    Ok(Json(json!({ "users": users, "revocations": added })).into_response())
}

/// Query of the drain status.
#[derive(Debug, Deserialize)]
pub struct DrainQuery {
    pub seq: u64,
}

/// One instance's part of a drain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrainInstance {
    pub id: String,
    pub applied_seq: u64,
    pub last_seen: UnixSeconds,
    /// Whether its lease is current (only those count).
    pub live: bool,
    /// Whether it still reports a write in flight for the contractor.
    pub busy: bool,
}

/// Answer of `GET /admin/v1/drain/{ctr}?seq=S`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrainStatus {
    pub contractor_id: ContractorId,
    pub seq: u64,
    /// Every live instance has applied `seq` and has no write in flight for the contractor.
    pub drained: bool,
    pub instances: Vec<DrainInstance>,
}

/// The drain verdict from what the feed recorded.
pub fn drain_status(state: &AppState, ctr: &ContractorId, seq: u64) -> DrainStatus {
    let now = state.now();
    // An instance records `last_seen` when its feed request starts; the answer (which renews
    // its lease) may come up to the longest long-poll later, and the lease runs from there.
    let live_s =
        (state.config.edge_write_lease_ms + crate::feed::MAX_WAIT_MS).div_ceil(1000) + LIVE_SLACK_S;
    let mut instances: Vec<DrainInstance> = state
        .instances
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|i| DrainInstance {
            id: i.id.clone(),
            applied_seq: i.applied_seq,
            last_seen: i.last_seen,
            live: now.saturating_sub(i.last_seen) <= live_s,
            busy: i.busy.contains(ctr),
        })
        .collect();
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    let drained = instances
        .iter()
        .filter(|i| i.live)
        .all(|i| i.applied_seq >= seq && !i.busy);
    DrainStatus {
        contractor_id: ctr.clone(),
        seq,
        drained,
        instances,
    }
}

/// `GET /admin/v1/drain/{ctr}?seq=S`.
pub async fn drain(
    _: Admin,
    State(state): State<AppState>,
    ctr: Result<Path<String>, PathRejection>,
    query: Result<Query<DrainQuery>, QueryRejection>,
) -> Result<Response> {
    let ctr = path_ctr(ctr)?;
    let Query(q) = query.map_err(|e| Error::BadRequest(format!("drain query: {e}")))?;
    Ok(Json(drain_status(&state, &ctr, q.seq)).into_response())
}

/// Most contractors an instance may report busy in one feed request.
pub const MAX_BUSY_REPORTED: usize = 256;

/// Parses the feed's `busy` parameter: comma-separated contractor ids.
pub fn parse_busy(s: Option<&str>) -> Result<Vec<ContractorId>> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let list = s
        .split(',')
        .map(|c| ContractorId::new(c).map_err(|e| Error::BadRequest(format!("busy: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    if list.len() > MAX_BUSY_REPORTED {
        return Err(Error::BadRequest(format!(
            "busy lists more than {MAX_BUSY_REPORTED} contractors"
        )));
    }
    Ok(list)
}
