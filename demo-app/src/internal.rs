//! The internal listener: the migration interface of `protocol::admin::app` (seed, export,
//! import, freeze, activate, release, the applied completions), bearer admin token, and
//! `/healthz`. Never reachable through the edge (ATTACKS A23).

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post, put};
use protocol::ContractorId;
use protocol::admin::app::{
    ActivateRequest, CONTRACTORS_PATH, CompletionsResponse, ContractorOp, ContractorState,
    ExportDoc, ImportResponse, Lifecycle, SeedRequest, SeedResponse,
};
use runtime::access::Listener;

use crate::error::{AppError, Result};
use crate::http::{Admin, JsonBody, PathContractor, healthz, not_found};
use crate::state::AppState;
use crate::store::Store;

/// The internal listener's routes: `/internal/v1/*` (admin token required) and `/healthz`.
pub fn internal_router(state: AppState) -> Router {
    use ContractorOp as Op;
    let metrics = state.metrics().clone();
    let r = Router::new()
        .route("/healthz", get(healthz))
        .route(CONTRACTORS_PATH, put(seed))
        .route(Op::Export.route(), get(export))
        .route(Op::Import.route(), post(import))
        .route(
            Op::Freeze.route(),
            post(|st, admin, c| step(st, admin, c, Store::freeze)),
        )
        .route(Op::Activate.route(), post(activate))
        .route(
            Op::Release.route(),
            post(|st, admin, c| step(st, admin, c, Store::release)),
        )
        .route(Op::Completions.route(), get(completions))
        .fallback(not_found)
        .with_state(state);
    let r = crate::metrics::counted(r, Listener::Internal, metrics);
    runtime::access::logged(r, Listener::Internal)
}

async fn seed(
    State(st): State<AppState>,
    _: Admin,
    JsonBody(body): JsonBody<SeedRequest>,
) -> Result<Json<SeedResponse>> {
    let list: Vec<_> = body.contractors.into_iter().collect();
    let seeded = st.with_store(move |s| s.seed(&list)).await?;
    Ok(Json(SeedResponse { seeded }))
}

async fn export(
    State(st): State<AppState>,
    _: Admin,
    PathContractor(c): PathContractor,
) -> Result<Json<ExportDoc>> {
    Ok(Json(st.with_store(move |s| s.export(&c)).await?))
}

async fn import(
    State(st): State<AppState>,
    _: Admin,
    PathContractor(c): PathContractor,
    JsonBody(doc): JsonBody<ExportDoc>,
) -> Result<Json<ImportResponse>> {
    if doc.contractor_id != c {
        return Err(AppError::BadRequest(
            "the document is for another contractor".into(),
        ));
    }
    st.with_store(move |s| s.import(&doc)).await?;
    Ok(Json(ImportResponse {
        state: Lifecycle::Imported,
    }))
}

/// A lifecycle step of the contractor in the path (freeze, release), answered with its new
/// state.
async fn step(
    State(st): State<AppState>,
    _: Admin,
    PathContractor(c): PathContractor,
    f: fn(&Store, &ContractorId) -> Result<ContractorState>,
) -> Result<Json<ContractorState>> {
    Ok(Json(st.with_store(move |s| f(s, &c)).await?))
}

async fn activate(
    State(st): State<AppState>,
    _: Admin,
    PathContractor(c): PathContractor,
    JsonBody(body): JsonBody<ActivateRequest>,
) -> Result<Json<ContractorState>> {
    Ok(Json(
        st.with_store(move |s| s.activate(&c, body.generation))
            .await?,
    ))
}

async fn completions(
    State(st): State<AppState>,
    _: Admin,
    PathContractor(contractor_id): PathContractor,
) -> Result<Json<CompletionsResponse>> {
    let c = contractor_id.clone();
    let completions = st.with_store(move |s| s.completions(&c)).await?;
    Ok(Json(CompletionsResponse {
        contractor_id,
        completions,
    }))
}
