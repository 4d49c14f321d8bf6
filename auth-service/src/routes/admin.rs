//! The admin API (bearer admin token; internal listener), HTTP in and out: users, ownership,
//! keys, revocations and their audit, session listings, the placement map, status and the
//! migration interface. Every body and answer is a `protocol::admin::cell` type (its module
//! doc has the table of endpoints).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use protocol::admin::cell::{
    self, AuditFormat, AuditQuery, ContractorExport, ContractorUsers, DrainQuery, HeldRevocations,
    ImportUsers, KeyRevokeRequest, KeyRevoked, Keys, KidStatus, NewUser, OwnershipBulk,
    OwnershipRecord, OwnershipSet, RevokeRequest, Status, UserChange, UserChanged, UserCreated,
    UsersImported, WithdrawAnswer, WithdrawRequest,
};
use protocol::{ContractorId, Kid, SessionId, SubjectId};

use crate::error::{Error, Result};
use crate::keys::lifecycle;
use crate::metrics::MigrationStep;
use crate::revocations::{self, checked_text};
use crate::routes::extract::{Admin, JsonBody, PathId, QueryOf, RawBody};
use crate::state::AppState;
use crate::{map, migration, ownership, users};

/// Default number of audit entries in one export page.
pub(crate) const DEFAULT_AUDIT_PAGE: usize = 10_000;
/// Largest audit export page.
pub(crate) const MAX_AUDIT_PAGE: usize = 100_000;
/// `Content-Type` of the JSON-lines audit export.
pub(crate) const JSON_LINES: &str = "application/x-ndjson";

// ---- users ----------------------------------------------------------------------------------

/// `POST /admin/v1/users` [`NewUser`] → 201 [`UserCreated`].
#[utoipa::path(
    post,
    path = cell::USERS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::NewUser,
    responses(
        (status = 201, description = "Stored.", body = protocol::admin::cell::UserCreated),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit."),
    )
)]
pub(crate) async fn create_user(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(user): JsonBody<NewUser>,
) -> Result<Response> {
    let subject = users::create(&state, vec![user])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Internal("no user stored".into()))?;
    tracing::info!(%subject, "stored a user");
    Ok((StatusCode::CREATED, Json(UserCreated { subject })).into_response())
}

/// `POST /admin/v1/users/import` [`ImportUsers`] → 200 [`UsersImported`] (one transaction).
#[utoipa::path(
    post,
    path = cell::USERS_IMPORT_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::ImportUsers,
    responses(
        (status = 200, description = "Imported, in one transaction.", body = protocol::admin::cell::UsersImported),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn import_users(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ImportUsers>,
) -> Result<Json<UsersImported>> {
    let subjects = users::create(&state, body.users).await?;
    tracing::info!(imported = subjects.len(), "imported users");
    Ok(Json(UsersImported {
        imported: subjects.len() as u64,
    }))
}

/// `GET /admin/v1/contractors/{ctr}/users` → 200 [`ContractorUsers`] (no password hashes).
#[utoipa::path(
    get,
    path = cell::CONTRACTOR_USERS_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The contractor's users at this cell, by login (none: an empty list).", body = protocol::admin::cell::ContractorUsers),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes.")
    )
)]
pub(crate) async fn contractor_users(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
) -> Result<Json<ContractorUsers>> {
    let users = users::list(&state, &ctr).await?;
    Ok(Json(ContractorUsers {
        contractor_id: ctr,
        users,
    }))
}

/// `PATCH /admin/v1/subjects/{sub}` [`UserChange`] → 200 [`UserChanged`] or 404.
#[utoipa::path(
    patch,
    path = cell::SUBJECT_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::UserChange,
    params(("sub" = protocol::SubjectId, Path, description = "The user (`{contractor}.{login}`).")),
    responses(
        (status = 200, description = "Changed (or already as asked: `changed` false).", body = protocol::admin::cell::UserChanged),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes, or asks for no change."),
        (status = 404, description = "`NOT_FOUND`: no such user at this cell."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn change_user(
    _: Admin,
    State(state): State<AppState>,
    PathId(sub): PathId<SubjectId>,
    JsonBody(change): JsonBody<UserChange>,
) -> Result<Json<UserChanged>> {
    let what = (
        change.role.map(|r| r.as_str()),
        change.status.map(|s| s.as_str()),
        change.password.is_some(),
    );
    match users::change(&state, &sub, change).await? {
        Some(changed) => {
            tracing::info!(subject = %sub, role = ?what.0, status = ?what.1, password = what.2, changed, "changed a user");
            Ok(Json(UserChanged {
                subject: sub,
                changed,
            }))
        }
        None => Err(Error::NotFound(format!("no user {sub} at this cell"))),
    }
}

// ---- ownership ------------------------------------------------------------------------------

/// `PUT /admin/v1/ownership/{ctr}` [`OwnershipRecord`] → 200 [`OwnershipSet`].
#[utoipa::path(
    put,
    path = cell::OWNERSHIP_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::ownership::OwnershipRecord,
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "Set.", body = protocol::admin::cell::OwnershipSet),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn put_ownership(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
    JsonBody(record): JsonBody<OwnershipRecord>,
) -> Result<Json<OwnershipSet>> {
    let step = MigrationStep::of(&record);
    let seq = migration::counted(
        &state,
        step,
        ownership::set(&state, BTreeMap::from([(ctr, record)])),
    )
    .await?;
    Ok(Json(OwnershipSet { seq }))
}

/// `PUT /admin/v1/ownership` [`OwnershipBulk`] → 200 [`OwnershipSet`] (one transaction).
#[utoipa::path(
    put,
    path = cell::OWNERSHIP_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::OwnershipBulk,
    responses(
        (status = 200, description = "Set, in one transaction.", body = protocol::admin::cell::OwnershipSet),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn put_ownership_bulk(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<OwnershipBulk>,
) -> Result<Json<OwnershipSet>> {
    let seq = ownership::set(&state, body.records).await?;
    Ok(Json(OwnershipSet { seq }))
}

/// `GET /admin/v1/ownership` → 200 [`OwnershipBulk`]: every record the cell holds (the
/// contractors it owns, and those it handed off or released), by contractor.
#[utoipa::path(
    get,
    path = cell::OWNERSHIP_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Every ownership record held.", body = protocol::admin::cell::OwnershipBulk),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
pub(crate) async fn list_ownership(_: Admin, State(state): State<AppState>) -> Json<OwnershipBulk> {
    Json(OwnershipBulk {
        records: state.read().ownership.clone(),
    })
}

/// `GET /admin/v1/ownership/{ctr}` → the [`OwnershipRecord`] or 404.
#[utoipa::path(
    get,
    path = cell::OWNERSHIP_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The record.", body = protocol::ownership::OwnershipRecord),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: no record for the contractor.")
    )
)]
pub(crate) async fn get_ownership(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
) -> Result<Json<OwnershipRecord>> {
    ownership::get(&state, &ctr).map(Json)
}

// ---- keys -----------------------------------------------------------------------------------

/// `GET /admin/v1/keys` → [`Keys`].
#[utoipa::path(
    get,
    path = cell::KEYS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The signing keys and their status.", body = protocol::admin::cell::Keys),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
pub(crate) async fn keys(_: Admin, State(state): State<AppState>) -> Json<Keys> {
    Json(Keys {
        keys: state.read().ring.feed_keys(),
    })
}

/// `POST /admin/v1/keys/rotate` → `Rotation`.
#[utoipa::path(
    post,
    path = cell::KEYS_ROTATE_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Rotated.", body = protocol::admin::cell::Rotation),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
pub(crate) async fn rotate(_: Admin, State(state): State<AppState>) -> Result<Response> {
    Ok(Json(lifecycle::rotate(&state).await?).into_response())
}

/// `POST /admin/v1/keys/{kid}/revoke` [`KeyRevokeRequest`] → 200 [`KeyRevoked`].
#[utoipa::path(
    post,
    path = cell::KEY_REVOKE_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::KeyRevokeRequest,
    params(("kid" = protocol::Kid, Path, description = "The key.")),
    responses(
        (status = 200, description = "Revoked (or already).", body = protocol::admin::cell::KeyRevoked),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit."),
        (status = 404, description = "`NOT_FOUND`: no such key.")
    )
)]
pub(crate) async fn revoke_key(
    _: Admin,
    State(state): State<AppState>,
    PathId(kid): PathId<Kid>,
    JsonBody(audit): JsonBody<KeyRevokeRequest>,
) -> Result<Json<KeyRevoked>> {
    checked_text("reason", &audit.reason)?;
    checked_text("by", &audit.by)?;
    let changed = lifecycle::revoke_key(&state, &kid, audit.by, audit.reason).await?;
    tracing::warn!(%kid, changed, "key revoked");
    let seq = state.read().head;
    Ok(Json(KeyRevoked {
        seq,
        revoked: changed,
    }))
}

// ---- revocations ----------------------------------------------------------------------------

/// `POST /admin/v1/revocations` [`RevokeRequest`] → 200 `RevokeAnswer`.
#[utoipa::path(
    post,
    path = cell::REVOCATIONS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::RevokeRequest,
    responses(
        (status = 200, description = "Recorded.", body = protocol::admin::cell::RevokeAnswer),
        (status = 404, description = "`NOT_FOUND`: a key revocation names a key this cell does not have."),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn revoke(
    _: Admin,
    State(state): State<AppState>,
    JsonBody(req): JsonBody<RevokeRequest>,
) -> Result<Response> {
    let answer = revocations::revoke(&state, req.kind, req.by, req.reason).await?;
    Ok(Json(answer).into_response())
}

/// `GET /admin/v1/revocations` → 200 `HeldRevocations`: the revocations in force, by sequence
/// number.
#[utoipa::path(
    get,
    path = cell::REVOCATIONS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The revocations in force, by sequence number.", body = protocol::admin::cell::HeldRevocations),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
pub(crate) async fn held_revocations(
    _: Admin,
    State(state): State<AppState>,
) -> Json<HeldRevocations> {
    Json(revocations::held(&state))
}

/// `POST /admin/v1/revocations/{seq}/withdraw` [`WithdrawRequest`] → 200 `WithdrawAnswer`.
#[utoipa::path(
    post,
    path = cell::WITHDRAW_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::WithdrawRequest,
    params(("seq" = u64, Path, description = "The sequence number of the revocation in force.")),
    responses(
        (status = 200, description = "Withdrawn: from the feed position `seq` on, it matches nothing at this cell and its edges.", body = protocol::admin::cell::WithdrawAnswer),
        (status = 404, description = "`NOT_FOUND`: no revocation of that sequence number is in force."),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes, or the revocation is a key revocation (which cannot be withdrawn)."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn withdraw(
    _: Admin,
    State(state): State<AppState>,
    PathId(seq): PathId<u64>,
    JsonBody(req): JsonBody<WithdrawRequest>,
) -> Result<Json<WithdrawAnswer>> {
    revocations::withdraw(&state, seq, req.by, req.reason)
        .await
        .map(Json)
}

/// `GET /admin/v1/audit/revocations?after=SEQ&limit=N&format=jsonl|json` ([`AuditQuery`]):
/// every revocation ever recorded by this cell, oldest first, with who, when and why. JSON
/// lines by default, a JSON array with `format=json`.
#[utoipa::path(
    get,
    path = cell::AUDIT_REVOCATIONS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    params(("after" = Option<u64>, Query, description = "Only entries with a larger sequence number."), ("limit" = Option<u64>, Query, description = "Page size (1 to 100000)."), ("format" = Option<protocol::admin::cell::AuditFormat>, Query, description = "`jsonl` (default) or `json`.")),
    responses(
        (status = 200, description = "The revocations, oldest first: JSON lines (default) or a JSON array (`format=json`).", content((Vec<protocol::revocation::Revocation> = "application/json"), (String = "application/x-ndjson"))),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes.")
    )
)]
pub(crate) async fn audit_export(
    _: Admin,
    State(state): State<AppState>,
    QueryOf(q): QueryOf<AuditQuery>,
) -> Result<Response> {
    let limit = q
        .limit
        .map_or(DEFAULT_AUDIT_PAGE, |l| {
            usize::try_from(l).unwrap_or(usize::MAX)
        })
        .clamp(1, MAX_AUDIT_PAGE);
    let entries = revocations::audit_page(&state, q.after, limit).await?;
    match q.format.unwrap_or_default() {
        AuditFormat::Jsonl => {
            let mut body = String::new();
            for e in &entries {
                body.push_str(
                    &serde_json::to_string(e).map_err(|e| Error::Internal(e.to_string()))?,
                );
                body.push('\n');
            }
            let mut resp = body.into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON_LINES));
            Ok(resp)
        }
        AuditFormat::Json => Ok(Json(entries).into_response()),
    }
}

/// `GET /admin/v1/subjects/{sub}/sessions` → `SubjectSessions`.
#[utoipa::path(
    get,
    path = cell::SUBJECT_SESSIONS_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("sub" = protocol::SubjectId, Path, description = "The subject.")),
    responses(
        (status = 200, description = "The subject's sessions.", body = protocol::admin::cell::SubjectSessions),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes.")
    )
)]
pub(crate) async fn sessions_of_subject(
    _: Admin,
    State(state): State<AppState>,
    PathId(sub): PathId<SubjectId>,
) -> Result<Response> {
    Ok(Json(revocations::sessions_of_subject(&state, sub).await?).into_response())
}

/// `GET /admin/v1/sessions/{jti}` → `SessionRecordAnswer` or 404.
#[utoipa::path(
    get,
    path = cell::SESSION_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("jti" = protocol::SessionId, Path, description = "The session id.")),
    responses(
        (status = 200, description = "The session.", body = protocol::admin::cell::SessionRecordAnswer),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: no such session.")
    )
)]
pub(crate) async fn session_record(
    _: Admin,
    State(state): State<AppState>,
    PathId(jti): PathId<SessionId>,
) -> Result<Response> {
    Ok(Json(revocations::session_record(&state, jti).await?).into_response())
}

// ---- placement map and status ---------------------------------------------------------------

/// `PUT /admin/v1/placement-map` with a `SignedMap` → 200 `MapAccepted` / 400.
#[utoipa::path(
    put,
    path = cell::PLACEMENT_MAP_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::map::SignedMap,
    responses(
        (status = 200, description = "Accepted.", body = protocol::admin::cell::MapAccepted),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: not a map signed by the control plane, or older than the one held."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit.")
    )
)]
pub(crate) async fn put_map(
    _: Admin,
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> Result<Response> {
    Ok(Json(map::accept(&state, &body).await?).into_response())
}

/// `GET /admin/v1/status` → [`Status`].
#[utoipa::path(
    get,
    path = cell::STATUS_PATH,
    tag = "admin",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "The cell's state.", body = protocol::admin::cell::Status),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
pub(crate) async fn status(_: Admin, State(state): State<AppState>) -> Result<Json<Status>> {
    let (seq, kids, map_version, contractors) = {
        let inner = state.read();
        let kids = inner
            .ring
            .feed_keys()
            .into_iter()
            .map(|k| KidStatus {
                kid: k.kid,
                status: k.status,
            })
            .collect();
        (
            inner.head,
            kids,
            inner.map.as_ref().map(|m| m.map.version),
            inner.ownership.len() as u64,
        )
    };
    Ok(Json(Status {
        cell_id: state.config.cell_id.clone(),
        seq,
        kids,
        map_version,
        users: state.user_count(),
        contractors,
        instances: state.instances_seen().await?,
    }))
}

// ---- migration ------------------------------------------------------------------------------

/// `GET /admin/v1/contractors/{ctr}/export` → [`ContractorExport`].
#[utoipa::path(
    get,
    path = cell::EXPORT_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The contractor's users and sessions.", body = protocol::admin::cell::ContractorExport),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the contractor is not held here."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`: the contractor is not frozen for export.")
    )
)]
pub(crate) async fn export(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
) -> Result<Json<ContractorExport>> {
    migration::counted(
        &state,
        MigrationStep::Export,
        migration::export(&state, ctr),
    )
    .await
    .map(Json)
}

/// `POST /admin/v1/contractors/{ctr}/import` [`ContractorExport`] → `ImportAnswer`.
#[utoipa::path(
    post,
    path = cell::IMPORT_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    request_body = protocol::admin::cell::ContractorExport,
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "Imported.", body = protocol::admin::cell::ImportAnswer),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the route's limit."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`: the contractor is not expected here.")
    )
)]
pub(crate) async fn import(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
    JsonBody(doc): JsonBody<ContractorExport>,
) -> Result<Response> {
    let answer = migration::counted(
        &state,
        MigrationStep::Import,
        migration::import(&state, ctr, doc),
    )
    .await?;
    Ok(Json(answer).into_response())
}

/// `GET /admin/v1/drain/{ctr}?seq=S` ([`DrainQuery`]) → `DrainStatus`.
#[utoipa::path(
    get,
    path = cell::DRAIN_ROUTE,
    tag = "admin",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor."), ("seq" = u64, Query, description = "The feed sequence to wait for.")),
    responses(
        (status = 200, description = "How far the cell's edges have drained.", body = protocol::admin::cell::DrainStatus),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 400, description = "`INVALID_REQUEST`: the body, path or query is not what the route takes.")
    )
)]
pub(crate) async fn drain(
    _: Admin,
    State(state): State<AppState>,
    PathId(ctr): PathId<ContractorId>,
    QueryOf(q): QueryOf<DrainQuery>,
) -> Result<Response> {
    Ok(Json(migration::drain_status(&state, &ctr, q.seq).await?).into_response())
}
