//! The admin API (bearer admin token): users, ownership, keys, revocations, placement map,
//! status.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::feed::FeedKey;
use protocol::ownership::{OwnershipRecord, check_transition};
use protocol::revocation::RevocationKind;
use protocol::{ContractorId, Kid, Login, Password, SubjectId};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::http::{Admin, JsonBody, RawBody};
use crate::state::{AppState, InstanceSeen, blocking};
use crate::store::{Role, UserRecord, UserStatus};

/// Longest audit text (`by`, `reason`) accepted, in bytes.
pub const MAX_AUDIT_TEXT_BYTES: usize = 512;

/// A user as the admin API accepts it: exactly one of `password` and `password_hash`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub role: Role,
    #[serde(default)]
    pub password: Option<Password>,
    #[serde(default)]
    pub password_hash: Option<String>,
    #[serde(default)]
    pub status: UserStatus,
}

/// Body of the bulk import.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportUsers {
    pub users: Vec<NewUser>,
}

fn path_id<T: std::str::FromStr>(p: Result<Path<String>, PathRejection>, what: &str) -> Result<T> {
    let Path(s) =
        p.map_err(|_| Error::BadRequest(format!("the {what} in the path is malformed")))?;
    s.parse::<T>()
        .map_err(|_| Error::BadRequest(format!("the {what} in the path is not valid")))
}

/// Validates a user and produces its record. Passwords are hashed here (slow).
fn to_record(u: NewUser, rng: &ring::rand::SystemRandom) -> Result<UserRecord> {
    let subject = SubjectId::new(format!("{}.{}", u.contractor_id, u.login))
        .map_err(|e| Error::BadRequest(format!("subject: {e}")))?;
    let password_hash = match (u.password, u.password_hash) {
        (Some(p), None) => crate::passwords::hash(&p, rng)?,
        (None, Some(h)) => {
            crate::passwords::check_phc(&h)?;
            h
        }
        _ => {
            return Err(Error::BadRequest(
                "give exactly one of password and password_hash".into(),
            ));
        }
    };
    Ok(UserRecord {
        contractor_id: u.contractor_id,
        login: u.login,
        subject,
        role: u.role,
        password_hash,
        status: u.status,
    })
}

async fn store_users(state: &AppState, users: Vec<NewUser>) -> Result<Vec<SubjectId>> {
    let rng = state.rng.clone();
    let store = state.store.clone();
    let (subjects, total) = blocking(move || {
        let records = users
            .into_iter()
            .map(|u| to_record(u, &rng))
            .collect::<Result<Vec<_>>>()?;
        let total = store.upsert_users(&records)?;
        Ok((
            records.into_iter().map(|r| r.subject).collect::<Vec<_>>(),
            total,
        ))
    })
    .await?;
    state.users.store(total, Ordering::Relaxed);
    Ok(subjects)
}

/// `POST /admin/v1/users` → 201 `{subject}`.
pub async fn create_user(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(user): JsonBody<NewUser>,
) -> Result<Response> {
    let subjects = store_users(&state, vec![user]).await?;
    let subject = subjects
        .into_iter()
        .next()
        .ok_or_else(|| Error::Internal("no user stored".into()))?;
    tracing::info!(%subject, "stored a user");
    Ok((StatusCode::CREATED, Json(json!({ "subject": subject }))).into_response())
}

/// `POST /admin/v1/users/import` → 200 `{imported}` (one transaction).
pub async fn import_users(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ImportUsers>,
) -> Result<Response> {
    let subjects = store_users(&state, body.users).await?;
    tracing::info!(imported = subjects.len(), "imported users");
    Ok(Json(json!({ "imported": subjects.len() })).into_response())
}

/// `PUT /admin/v1/ownership/{ctr}` with an `OwnershipRecord` → 200 `{seq}`.
pub async fn put_ownership(
    _: Admin,
    State(state): State<AppState>,
    ctr: Result<Path<String>, PathRejection>,
    JsonBody(record): JsonBody<OwnershipRecord>,
) -> Result<Response> {
    let ctr: ContractorId = path_id(ctr, "contractor id")?;
    set_ownership(&state, BTreeMap::from([(ctr, record)])).await
}

/// Body of the bulk ownership seed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnershipBulk {
    pub records: BTreeMap<ContractorId, OwnershipRecord>,
}

/// `PUT /admin/v1/ownership` `{records}` → 200 `{seq}` (one transaction).
pub async fn put_ownership_bulk(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<OwnershipBulk>,
) -> Result<Response> {
    set_ownership(&state, body.records).await
}

async fn set_ownership(
    state: &AppState,
    records: BTreeMap<ContractorId, OwnershipRecord>,
) -> Result<Response> {
    let (seq, changed) = state
        .commit_with(|inner, batch| {
            let mut changed = 0usize;
            for (ctr, record) in records {
                let held = inner.ownership.get(&ctr);
                check_transition(held, &record)
                    .map_err(|e| Error::BadRequest(format!("ownership of {ctr} refused: {e}")))?;
                if held != Some(&record) {
                    batch.ownership(ctr, record);
                    changed += 1;
                }
            }
            Ok(changed)
        })
        .await?;
    tracing::info!(changed, seq, "ownership records set");
    Ok(Json(json!({ "seq": seq })).into_response())
}

/// `GET /admin/v1/ownership/{ctr}` → the record or 404.
pub async fn get_ownership(
    _: Admin,
    State(state): State<AppState>,
    ctr: Result<Path<String>, PathRejection>,
) -> Result<Response> {
    let ctr: ContractorId = path_id(ctr, "contractor id")?;
    let rec = state.read().ownership.get(&ctr).cloned();
    rec.map(|r| Json(r).into_response())
        .ok_or_else(|| Error::NotFound(format!("ownership record of {ctr}")))
}

#[derive(Debug, Serialize)]
struct KeysAnswer {
    keys: Vec<FeedKey>,
}

/// `GET /admin/v1/keys` → `{keys: [FeedKey]}`.
pub async fn keys(_: Admin, State(state): State<AppState>) -> Result<Response> {
    let keys = state.read().ring.feed_keys();
    Ok(Json(KeysAnswer { keys }).into_response())
}

/// `POST /admin/v1/keys/rotate` → `{current, next, retired}`.
pub async fn rotate(_: Admin, State(state): State<AppState>) -> Result<Response> {
    Ok(Json(state.rotate().await?).into_response())
}

/// Audit fields of an admin revocation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Audit {
    pub reason: String,
    pub by: String,
}

impl Audit {
    fn checked(self) -> Result<Audit> {
        for (name, v) in [("reason", &self.reason), ("by", &self.by)] {
            if v.trim().is_empty()
                || v.len() > MAX_AUDIT_TEXT_BYTES
                || v.chars().any(char::is_control)
            {
                return Err(Error::BadRequest(format!(
                    "{name} must be 1 to {MAX_AUDIT_TEXT_BYTES} bytes of printable text"
                )));
            }
        }
        Ok(self)
    }
}

/// `POST /admin/v1/keys/{kid}/revoke` `{reason, by}` → 200 `{seq, revoked}`.
pub async fn revoke_key(
    _: Admin,
    State(state): State<AppState>,
    kid: Result<Path<String>, PathRejection>,
    JsonBody(audit): JsonBody<Audit>,
) -> Result<Response> {
    let kid: Kid = path_id(kid, "kid")?;
    let audit = audit.checked()?;
    let changed = state.revoke_key(&kid, audit.by, audit.reason).await?;
    tracing::warn!(%kid, changed, "key revoked");
    let seq = state.read().head;
    Ok(Json(json!({ "seq": seq, "revoked": changed })).into_response())
}

/// Body of `POST /admin/v1/revocations`: a revocation kind with its audit fields.
#[derive(Debug, Deserialize)]
pub struct RevokeRequest {
    #[serde(flatten)]
    pub kind: RevocationKind,
    pub reason: String,
    pub by: String,
}

/// `PUT /admin/v1/placement-map` with a `SignedMap` → 200 `{version, seq}` / 400.
pub async fn put_map(
    _: Admin,
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> Result<Response> {
    let (version, seq) = crate::map::accept(&state, &body).await?;
    Ok(Json(json!({ "version": version, "seq": seq })).into_response())
}

#[derive(Debug, Serialize)]
struct KidStatus {
    kid: Kid,
    status: protocol::feed::KeyStatus,
}

#[derive(Debug, Serialize)]
struct Status {
    cell_id: protocol::CellId,
    seq: u64,
    kids: Vec<KidStatus>,
    map_version: Option<u64>,
    users: u64,
    contractors: usize,
    instances: Vec<InstanceSeen>,
}

/// `GET /admin/v1/status`.
pub async fn status(_: Admin, State(state): State<AppState>) -> Result<Response> {
    let kids = state
        .kid_statuses()
        .into_iter()
        .map(|(kid, status)| KidStatus { kid, status })
        .collect();
    let (seq, map_version, contractors) = {
        let inner = state.read();
        (
            inner.head,
            inner.map.as_ref().map(|m| m.map.version),
            inner.ownership.len(),
        )
    };
    let mut instances: Vec<InstanceSeen> = state
        .instances
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Json(Status {
        cell_id: state.config.cell_id.clone(),
        seq,
        kids,
        map_version,
        users: state.user_count(),
        contractors,
        instances,
    })
    .into_response())
}
