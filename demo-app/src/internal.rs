//! The internal listener: the migration interface of `protocol::admin::app` (seed, export,
//! import, freeze, activate, release, the applied completions), bearer internal token (the
//! app's own, never the cell's admin token: ATTACKS A35), and `/healthz`. Never reachable
//! through the edge (ATTACKS A23).

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post, put};
use protocol::ContractorId;
use protocol::admin::app::{
    ActivateRequest, CONTRACTORS_PATH, CompletionsResponse, ContractorOp, ContractorState,
    ExportDoc, ImportResponse, Lifecycle, SeedRequest, SeedResponse,
};
use protocol::openapi::SecuritySchemes;
use runtime::access::Listener;

use crate::error::{AppError, Result};
use crate::http::{
    InternalCaller, JsonBody, PathContractor, healthz, method_not_allowed, not_found,
};
use crate::state::AppState;
use crate::store::Store;

/// The app's internal listener (`docs/openapi/demo-app-internal.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Cellbind demo app internal API",
        description = "The migration interface of a cell's app (`/internal/v1/*`): seed, \
            export, import, freeze, activate, release and the applied completions. On the \
            app's internal listener, with the app's own internal token (not the cell's admin \
            token); never reachable through the edge."
    ),
    paths(seed, export, import, freeze, activate, release, completions),
    modifiers(&SecuritySchemes)
)]
#[derive(Debug, Clone, Copy)]
pub struct InternalApi;

/// The internal listener's routes: `/internal/v1/*` (internal token required) and `/healthz`.
pub fn internal_router(state: AppState) -> Router {
    use ContractorOp as Op;
    let metrics = state.metrics().clone();
    let r = Router::new()
        .route("/healthz", get(healthz))
        .route(CONTRACTORS_PATH, put(seed))
        .route(Op::Export.route(), get(export))
        .route(Op::Import.route(), post(import))
        .route(Op::Freeze.route(), post(freeze))
        .route(Op::Activate.route(), post(activate))
        .route(Op::Release.route(), post(release))
        .route(Op::Completions.route(), get(completions))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    let r = crate::metrics::counted(r, Listener::Internal, metrics);
    runtime::access::logged(r, Listener::Internal)
}

#[utoipa::path(
    put,
    path = CONTRACTORS_PATH,
    tag = "migration",
    security(("appInternalToken" = [])),
    request_body = SeedRequest,
    responses(
        (status = 200, description = "Seeded.", body = SeedResponse),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes.")
    )
)]
async fn seed(
    State(st): State<AppState>,
    _: InternalCaller,
    JsonBody(body): JsonBody<SeedRequest>,
) -> Result<Json<SeedResponse>> {
    let list: Vec<_> = body.contractors.into_iter().collect();
    let seeded = st.with_store(move |s| s.seed(&list)).await?;
    Ok(Json(SeedResponse { seeded }))
}

#[utoipa::path(
    get,
    path = ContractorOp::Export.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The contractor's data.", body = ExportDoc),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the app does not hold the contractor."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`, `WRONG_CELL`: the contractor is not in a state that allows this step.")
    )
)]
async fn export(
    State(st): State<AppState>,
    _: InternalCaller,
    PathContractor(c): PathContractor,
) -> Result<Json<ExportDoc>> {
    Ok(Json(st.with_store(move |s| s.export(&c)).await?))
}

#[utoipa::path(
    post,
    path = ContractorOp::Import.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    request_body = ExportDoc,
    responses(
        (status = 200, description = "Imported.", body = ImportResponse),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`, `WRONG_CELL`: the contractor is not in a state that allows this step.")
    )
)]
async fn import(
    State(st): State<AppState>,
    _: InternalCaller,
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

/// Freezes the contractor (writes refused) for its export.
#[utoipa::path(
    post,
    path = ContractorOp::Freeze.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "Frozen.", body = ContractorState),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the app does not hold the contractor."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`, `WRONG_CELL`: the contractor is not in a state that allows this step.")
    )
)]
async fn freeze(
    st: State<AppState>,
    caller: InternalCaller,
    c: PathContractor,
) -> Result<Json<ContractorState>> {
    step(st, caller, c, Store::freeze).await
}

/// Releases the contractor (it moved away).
#[utoipa::path(
    post,
    path = ContractorOp::Release.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "Released.", body = ContractorState),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the app does not hold the contractor."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`, `WRONG_CELL`: the contractor is not in a state that allows this step.")
    )
)]
async fn release(
    st: State<AppState>,
    caller: InternalCaller,
    c: PathContractor,
) -> Result<Json<ContractorState>> {
    step(st, caller, c, Store::release).await
}

/// A lifecycle step of the contractor in the path (freeze, release), answered with its new
/// state.
async fn step(
    State(st): State<AppState>,
    _: InternalCaller,
    PathContractor(c): PathContractor,
    f: fn(&Store, &ContractorId) -> Result<ContractorState>,
) -> Result<Json<ContractorState>> {
    Ok(Json(st.with_store(move |s| f(s, &c)).await?))
}

#[utoipa::path(
    post,
    path = ContractorOp::Activate.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    request_body = ActivateRequest,
    responses(
        (status = 200, description = "Active at the generation.", body = ContractorState),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the app does not hold the contractor."),
        (status = 409, description = "`HANDOFF_IN_PROGRESS`, `WRONG_CELL`: the contractor is not in a state that allows this step.")
    )
)]
async fn activate(
    State(st): State<AppState>,
    _: InternalCaller,
    PathContractor(c): PathContractor,
    JsonBody(body): JsonBody<ActivateRequest>,
) -> Result<Json<ContractorState>> {
    Ok(Json(
        st.with_store(move |s| s.activate(&c, body.generation))
            .await?,
    ))
}

#[utoipa::path(
    get,
    path = ContractorOp::Completions.route(),
    tag = "migration",
    security(("appInternalToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The applied completions.", body = CompletionsResponse),
        (status = 403, description = "`FORBIDDEN`: no or a wrong internal token."),
        (status = 400, description = "`INVALID_REQUEST`: the body or path is not what the route takes."),
        (status = 404, description = "`NOT_FOUND`: the app does not hold the contractor.")
    )
)]
async fn completions(
    State(st): State<AppState>,
    _: InternalCaller,
    PathContractor(contractor_id): PathContractor,
) -> Result<Json<CompletionsResponse>> {
    let c = contractor_id.clone();
    let completions = st.with_store(move |s| s.completions(&c)).await?;
    Ok(Json(CompletionsResponse {
        contractor_id,
        completions,
    }))
}
