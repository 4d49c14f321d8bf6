//! The Cellbind demo cell app: what a real cell's app looks like behind a cell-endpoint.
//!
//! - `GET /api/routes/today`: the caller's contractor's route for today.
//! - `POST /api/jobs/{id}/complete`: completes a job (created on first completion), applied once
//!   per `Idempotency-Key`, behind the generation fence (`X-Cellbind-Generation`).
//! - `/internal/v1/…` (bearer admin token): seeding and the migration interface
//!   (export, import, freeze, activate, release) plus the list of applied completions.
//!
//! Two listeners: the public one ([`public_router`], what the edge forwards to) serves only
//! `/api/*` and `/healthz`; the internal one ([`internal_router`]) only `/internal/v1/*` and
//! `/healthz`, so no path sent through the edge can reach the migration interface (ATTACKS A23).
//! `/api/*` is only served with the edge key (`X-Cellbind-Edge-Key`), compared in constant time.
//! Every request is logged on the `access` target with its listener, method, path and status.

pub mod config;
pub mod error;
pub mod routes;
pub mod server;
pub mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use protocol::time::SharedClock;
use protocol::{CellId, ContractorId, Generation};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

pub use config::Config;
pub use error::{AppError, Result};
use store::{CompleteOutcome, CompleteRequest, ExportDoc, Lifecycle, Store};

/// Header carrying the edge key on forwarded requests.
pub const EDGE_KEY_HEADER: &str = protocol::http::X_EDGE_KEY;
pub const SUBJECT_HEADER: &str = protocol::http::X_SUBJECT;
pub const CONTRACTOR_HEADER: &str = protocol::http::X_CONTRACTOR;
pub const GENERATION_HEADER: &str = protocol::http::X_GENERATION;
pub const SESSION_HEADER: &str = protocol::http::X_SESSION;
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Longest accepted idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;
/// Longest accepted job id, in bytes.
pub const MAX_JOB_ID_BYTES: usize = 128;

/// A secret token held in memory (zeroized on drop, never printed).
#[derive(Clone)]
pub struct Secret(Arc<Zeroizing<String>>);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(Arc::new(Zeroizing::new(s.into())))
    }
    /// Reads a token file (surrounding whitespace ignored); refuses an empty one.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| AppError::io(format!("reading {}", path.display()), e))?,
        );
        let t = text.trim();
        if t.is_empty() {
            return Err(AppError::Config(format!("{} is empty", path.display())));
        }
        Ok(Secret::new(t))
    }
    /// Constant-time comparison with a presented value.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Shared state of the handlers.
#[derive(Clone, Debug)]
pub struct AppState {
    pub cell_id: CellId,
    store: Arc<Mutex<Store>>,
    edge_key: Secret,
    admin_token: Secret,
    clock: SharedClock,
}

impl AppState {
    pub fn new(
        cell_id: CellId,
        store: Store,
        edge_key: Secret,
        admin_token: Secret,
        clock: SharedClock,
    ) -> Self {
        AppState {
            cell_id,
            store: Arc::new(Mutex::new(store)),
            edge_key,
            admin_token,
            clock,
        }
    }

    /// Runs `f` on the store off the async threads.
    async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = store
                .lock()
                .map_err(|_| AppError::Internal("store lock poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| AppError::Internal(format!("store task: {e}")))?
    }
}

/// The caller of `/api/*` as the edge vouched for it.
#[derive(Debug, Clone)]
pub struct EdgeCaller {
    pub contractor: ContractorId,
    pub subject: String,
    pub generation: Generation,
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Result<&'a str> {
    h.get(name)
        .ok_or_else(|| AppError::BadRequest(format!("missing {name}")))?
        .to_str()
        .map_err(|_| AppError::BadRequest(format!("{name} is not text")))
}

impl FromRequestParts<AppState> for EdgeCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let h = &parts.headers;
        let key = h.get(EDGE_KEY_HEADER).ok_or(AppError::EdgeKey)?;
        if !state.edge_key.matches(key.as_bytes()) {
            return Err(AppError::EdgeKey);
        }
        let contractor = ContractorId::new(header_str(h, CONTRACTOR_HEADER)?)
            .map_err(|e| AppError::BadRequest(e.to_string()))?;
        let subject = header_str(h, SUBJECT_HEADER)?.to_owned();
        let generation = header_str(h, GENERATION_HEADER)?
            .parse::<Generation>()
            .map_err(|e| AppError::BadRequest(e.to_string()))?;
        Ok(EdgeCaller {
            contractor,
            subject,
            generation,
        })
    }
}

/// A caller of `/internal/*` holding the admin token.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let presented = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .ok_or(AppError::AdminToken)?;
        if state.admin_token.matches(presented) {
            Ok(Admin)
        } else {
            Err(AppError::AdminToken)
        }
    }
}

fn parse_json<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| AppError::BadRequest(format!("body: {e}")))
}

fn parse_contractor(s: &str) -> Result<ContractorId> {
    ContractorId::new(s).map_err(|e| AppError::BadRequest(e.to_string()))
}

/// A job in today's route.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Job {
    pub job_id: String,
    pub address: String,
    pub window: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
}

/// `GET /api/routes/today`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouteToday {
    pub contractor_id: ContractorId,
    pub date: String,
    pub generation: Generation,
    pub jobs: Vec<Job>,
}

async fn routes_today(State(st): State<AppState>, caller: EdgeCaller) -> Result<Response> {
    let now = st.clock.now();
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

async fn complete_job(
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
    let now = st.clock.now();
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

/// `PUT /internal/v1/contractors` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedBody {
    pub contractors: BTreeMap<ContractorId, Generation>,
}

async fn seed(State(st): State<AppState>, _: Admin, body: Bytes) -> Result<Response> {
    let body: SeedBody = parse_json(&body)?;
    let list: Vec<_> = body.contractors.into_iter().collect();
    let n = st.with_store(move |s| s.seed(&list)).await?;
    Ok(axum::Json(serde_json::json!({ "seeded": n })).into_response())
}

async fn export(State(st): State<AppState>, _: Admin, Path(c): Path<String>) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let doc = st.with_store(move |s| s.export(&c)).await?;
    Ok(axum::Json(doc).into_response())
}

async fn import(
    State(st): State<AppState>,
    _: Admin,
    Path(c): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let doc: ExportDoc = parse_json(&body)?;
    if doc.contractor_id != c {
        return Err(AppError::BadRequest(
            "the document is for another contractor".into(),
        ));
    }
    st.with_store(move |s| s.import(&doc)).await?;
    Ok(axum::Json(serde_json::json!({ "state": Lifecycle::Imported })).into_response())
}

async fn freeze(State(st): State<AppState>, _: Admin, Path(c): Path<String>) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let new = st.with_store(move |s| s.freeze(&c)).await?;
    Ok(axum::Json(new).into_response())
}

/// `POST …/activate` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActivateBody {
    pub generation: Generation,
}

async fn activate(
    State(st): State<AppState>,
    _: Admin,
    Path(c): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let body: ActivateBody = parse_json(&body)?;
    let new = st
        .with_store(move |s| s.activate(&c, body.generation))
        .await?;
    Ok(axum::Json(new).into_response())
}

async fn release(State(st): State<AppState>, _: Admin, Path(c): Path<String>) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let new = st.with_store(move |s| s.release(&c)).await?;
    Ok(axum::Json(new).into_response())
}

async fn completions(
    State(st): State<AppState>,
    _: Admin,
    Path(c): Path<String>,
) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let c2 = c.clone();
    let list = st.with_store(move |s| s.completions(&c2)).await?;
    Ok(axum::Json(serde_json::json!({ "contractor_id": c, "completions": list })).into_response())
}

async fn healthz(State(st): State<AppState>) -> Response {
    axum::Json(serde_json::json!({ "status": "ok", "cell_id": st.cell_id })).into_response()
}

async fn not_found() -> AppError {
    AppError::NotFound
}

pub use runtime::access::{ACCESS_LOG_TARGET, Listener};

/// The public listener's routes: `/api/*` (edge key required) and `/healthz`. Nothing else,
/// whatever token a request carries: every other path is `404 NOT_FOUND`.
pub fn public_router(state: AppState) -> Router {
    let r = Router::new()
        .route("/healthz", get(healthz))
        .route("/api/routes/today", get(routes_today))
        .route("/api/jobs/{id}/complete", post(complete_job))
        .fallback(not_found)
        .with_state(state);
    runtime::access::logged(r, Listener::Public)
}

/// The internal listener's routes: `/internal/v1/*` (admin token required) and `/healthz`.
pub fn internal_router(state: AppState) -> Router {
    let r = Router::new()
        .route("/healthz", get(healthz))
        .route("/internal/v1/contractors", put(seed))
        .route("/internal/v1/contractors/{ctr}/export", get(export))
        .route("/internal/v1/contractors/{ctr}/import", post(import))
        .route("/internal/v1/contractors/{ctr}/freeze", post(freeze))
        .route("/internal/v1/contractors/{ctr}/activate", post(activate))
        .route("/internal/v1/contractors/{ctr}/release", post(release))
        .route(
            "/internal/v1/contractors/{ctr}/completions",
            get(completions),
        )
        .fallback(not_found)
        .with_state(state);
    runtime::access::logged(r, Listener::Internal)
}

/// Builds the state from a configuration (opens the store, reads the token files).
pub fn state_from_config(config: &Config) -> Result<AppState> {
    Ok(AppState::new(
        config.cell_id.clone(),
        Store::open(&config.data_dir)?,
        Secret::from_file(&config.app_token_file)?,
        Secret::from_file(&config.admin_token_file)?,
        protocol::time::system_clock(),
    ))
}
