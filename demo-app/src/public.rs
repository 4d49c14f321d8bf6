//! The public listener (what the edge forwards `/api/*` to): today's route and job
//! completions behind the generation fence. Nothing else, whatever token a request carries.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use protocol::{ContractorId, Generation};
use runtime::access::Listener;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, Result};
use crate::http::{EdgeCaller, healthz, method_not_allowed, not_found};
use crate::routes;
use crate::state::AppState;
use crate::store::{CompleteOutcome, CompleteRequest};
use protocol::admin::app::Lifecycle;

pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest accepted idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;
/// Longest accepted job id, in bytes.
pub const MAX_JOB_ID_BYTES: usize = 128;

/// `GET` today's route.
pub const ROUTE_TODAY: &str = "/api/routes/today";
/// `POST` a job's completion.
pub const COMPLETE_JOB: &str = "/api/jobs/{id}/complete";
/// The API's routes (templates), as the request metrics name them.
pub const API_ROUTES: [&str; 2] = [ROUTE_TODAY, COMPLETE_JOB];

/// The public listener's routes: `/api/*` (edge key required) and `/healthz`. Nothing else,
/// whatever token a request carries: every other path is `404 NOT_FOUND`.
/// The app's public routes, as clients reach them through the edge.
#[derive(utoipa::OpenApi)]
#[openapi(paths(routes_today, complete_job))]
#[derive(Debug, Clone, Copy)]
pub struct PublicApi;

pub fn public_router(state: AppState) -> Router {
    let metrics = state.metrics().clone();
    metrics.expect(Listener::Public, &API_ROUTES);
    let r = Router::new()
        .route("/healthz", get(healthz))
        .route(ROUTE_TODAY, get(routes_today))
        .route(COMPLETE_JOB, post(complete_job))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    let r = crate::metrics::counted(r, Listener::Public, metrics);
    runtime::access::logged(r, Listener::Public)
}

/// A job in today's route.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Job {
    pub job_id: String,
    pub address: String,
    pub window: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
}

/// `GET /api/routes/today`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct RouteToday {
    pub contractor_id: ContractorId,
    pub date: String,
    pub generation: Generation,
    pub jobs: Vec<Job>,
}

/// The answer of `POST /api/jobs/{id}/complete` (a replay answers the first completion's body
/// with `replayed: true`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobCompleted {
    pub contractor_id: ContractorId,
    pub job_id: String,
    /// Always `completed`.
    pub status: String,
    /// Unix seconds.
    pub completed_at: u64,
    pub generation: Generation,
    pub subject: protocol::SubjectId,
    /// Whether this answer replays an earlier completion with the same idempotency key.
    pub replayed: bool,
}

/// The contractor's route for today.
#[utoipa::path(
    get,
    path = "/api/routes/today",
    tag = "app",
    responses(
        (status = 200, description = "Today's jobs.", body = RouteToday),
        (status = 409, description = "`WRONG_CELL`: the app released the contractor."),
        (status = 503, description = "`CELL_STATE_STALE`: the app does not know the contractor yet.")
    )
)]
pub(crate) async fn routes_today(
    State(st): State<AppState>,
    caller: EdgeCaller,
) -> Result<Response> {
    let now = st.now();
    let ctr = caller.contractor.clone();
    let (held, done) = st
        .with_store(move |s| {
            let held = s.contractor(&ctr)?;
            let done = s.completed_jobs(&ctr)?;
            Ok((held, done))
        })
        .await?;
    let held = match held {
        None => return Err(AppError::UnknownContractor),
        Some(h) if h.state == Lifecycle::Released => return Err(AppError::WrongCell),
        Some(h) => h,
    };
    let date = routes::utc_date(now);
    let done: BTreeMap<String, u64> = done
        .into_iter()
        .map(|j| (j.job_id, j.completed_at))
        .collect();
    let jobs = routes::plan(&caller.contractor, &date)
        .into_iter()
        .map(|p| {
            let completed_at = done.get(&p.job_id).copied();
            Job {
                status: if completed_at.is_some() {
                    "completed"
                } else {
                    "pending"
                }
                .into(),
                completed_at,
                job_id: p.job_id,
                address: p.address,
                window: p.window,
            }
        })
        .collect();
    Ok(axum::Json(RouteToday {
        contractor_id: caller.contractor,
        date,
        generation: held.generation,
        jobs,
    })
    .into_response())
}

fn valid_job_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_JOB_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Marks a job of today's route completed (idempotent with `Idempotency-Key`).
#[utoipa::path(
    post,
    path = "/api/jobs/{id}/complete",
    tag = "app",
    params(
        ("id" = String, Path, description = "The job id: 1 to 128 of `[A-Za-z0-9._:-]`.",
            pattern = "^[A-Za-z0-9._:-]{1,128}$"),
        ("idempotency-key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters: a retry with the same key \
                answers the first completion again.")
    ),
    responses(
        (status = 200, description = "Completed (or replayed).", body = JobCompleted),
        (status = 400, description = "`INVALID_REQUEST`: a bad job id or idempotency key."),
        (status = 404, description = "`NOT_FOUND`: no such job on today's route."),
        (status = 409, description = "`WRONG_CELL`: the app released the contractor; \
            `HANDOFF_IN_PROGRESS`: it is frozen for a move."),
        (status = 503, description = "`CELL_STATE_STALE`: the app's view is behind the session.")
    )
)]
pub(crate) async fn complete_job(
    State(st): State<AppState>,
    Path(job_id): Path<String>,
    caller: EdgeCaller,
    headers: HeaderMap,
) -> Result<Response> {
    if !valid_job_id(&job_id) {
        return Err(AppError::BadRequest("job id is not valid".into()));
    }
    let key = match headers.get(IDEMPOTENCY_KEY_HEADER) {
        None => None,
        Some(v) => {
            let k = v
                .to_str()
                .map_err(|_| AppError::BadRequest("Idempotency-Key is not text".into()))?;
            if k.is_empty()
                || k.len() > MAX_IDEMPOTENCY_KEY_BYTES
                || !k.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(AppError::BadRequest(format!(
                    "Idempotency-Key must be 1..={MAX_IDEMPOTENCY_KEY_BYTES} visible characters"
                )));
            }
            Some(k.to_owned())
        }
    };
    let now = st.now();
    let outcome = st
        .with_store(move |s| {
            let req = CompleteRequest {
                contractor: &caller.contractor,
                job_id: &job_id,
                subject: &caller.subject,
                generation: caller.generation,
                idempotency_key: key.as_deref(),
                now,
            };
            s.complete(&req, |completed_at| {
                serde_json::json!({
                    "contractor_id": caller.contractor,
                    "job_id": job_id,
                    "status": "completed",
                    "completed_at": completed_at,
                    "generation": caller.generation,
                    "subject": caller.subject,
                })
            })
        })
        .await?;
    let (mut body, replayed) = match outcome {
        CompleteOutcome::Applied(v) => (v, false),
        CompleteOutcome::Replayed(v) => (v, true),
    };
    if let Some(obj) = body.as_object_mut() {
        obj.insert("replayed".into(), serde_json::Value::Bool(replayed));
    }
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}
