//! The HTTP layer: the routes of the two listeners and their handlers, which only read the
//! request (extractors in `extract.rs`), call the domain modules and write the answer. Both
//! routers write one `access` log line per request.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, patch, post, put};
use protocol::admin::{cell, placement};
use protocol::api::TRANSFER_STATUS_PATH;
use protocol::dpop::{DPOP_HEADER, DPOP_NONCE_HEADER};
use protocol::openapi::SecuritySchemes;
use runtime::access::Listener;

use crate::peers::JWKS_PATH;
pub(crate) use crate::routes::service::Management;
use crate::routes::service::{method_not_allowed, not_found};
use crate::state::AppState;

mod admin;
pub(crate) mod extract;
mod service;
mod sessions;
mod transfer;

/// Body limit of ordinary requests, in bytes.
pub(crate) const DEFAULT_BODY_LIMIT: usize = 64 * 1024;
/// Body limit of the bulk user import and bulk ownership seed, in bytes.
pub(crate) const BULK_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Body limit of a pushed placement map, in bytes.
pub(crate) const MAP_BODY_LIMIT: usize = protocol::map::MAX_MAP_BYTES;

/// The routes a client may reach (through the edge): sign-in, the session routes, transfer
/// (and its status, which other cells ask), rebind, the JWKS, the placement map and health.
fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", post(sessions::sign_in))
        .route(
            "/v1/sessions/current",
            get(sessions::current).delete(sessions::sign_out),
        )
        .route("/v1/sessions/renew", post(sessions::renew))
        .route("/v1/sessions/transfer", post(transfer::transfer))
        .route(TRANSFER_STATUS_PATH, post(transfer::transfer_status))
        .route("/v1/sessions/rebind", post(transfer::rebind))
        .route(JWKS_PATH, get(service::jwks))
        .route(placement::PLACEMENT_MAP_PATH, get(service::get_map))
        .route("/healthz", get(service::healthz))
        .route("/readyz", get(service::readyz))
}

/// The routes only the cell's own components reach: the feed and the admin API (metrics are
/// the management listener's, [`management`]).
fn internal_only_routes() -> Router<AppState> {
    Router::new()
        .route(protocol::feed::FEED_PATH, get(service::feed))
        .route(
            protocol::feed::REAPPLY_PATH,
            post(service::reapply).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route(cell::USERS_PATH, post(admin::create_user))
        .route(
            cell::USERS_IMPORT_PATH,
            post(admin::import_users).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route(
            cell::OWNERSHIP_PATH,
            put(admin::put_ownership_bulk)
                .layer(DefaultBodyLimit::max(BULK_BODY_LIMIT))
                .get(admin::list_ownership),
        )
        .route(
            cell::OWNERSHIP_ROUTE,
            put(admin::put_ownership).get(admin::get_ownership),
        )
        .route(cell::KEYS_PATH, get(admin::keys))
        .route(cell::KEYS_ROTATE_PATH, post(admin::rotate))
        .route(cell::KEY_REVOKE_ROUTE, post(admin::revoke_key))
        .route(
            cell::REVOCATIONS_PATH,
            post(admin::revoke).get(admin::held_revocations),
        )
        .route(cell::WITHDRAW_ROUTE, post(admin::withdraw))
        .route(cell::AUDIT_REVOCATIONS_PATH, get(admin::audit_export))
        .route(
            cell::SUBJECT_SESSIONS_ROUTE,
            get(admin::sessions_of_subject),
        )
        .route(cell::SUBJECT_ROUTE, patch(admin::change_user))
        .route(cell::CONTRACTOR_USERS_ROUTE, get(admin::contractor_users))
        .route(cell::SESSION_ROUTE, get(admin::session_record))
        .route(
            cell::PLACEMENT_MAP_PATH,
            put(admin::put_map).layer(DefaultBodyLimit::max(MAP_BODY_LIMIT)),
        )
        .route(cell::STATUS_PATH, get(admin::status))
        .route(cell::EXPORT_ROUTE, get(admin::export))
        .route(
            cell::IMPORT_ROUTE,
            post(admin::import).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route(cell::DRAIN_ROUTE, get(admin::drain))
}

fn finish(routes: Router<AppState>, listener: Listener, state: AppState) -> Router {
    let routes = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            offer_nonce,
        ));
    runtime::access::logged(routes, listener).with_state(state)
}

/// The answer to a request that brought a `DPoP` proof straight to this listener carries this
/// replica's current nonce (RFC 9449 §8.2), so the client's next proof has a fresh one. Not
/// through the edge: the client's nonces there are the edge instance's.
async fn offer_nonce(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let direct = req.headers().contains_key(DPOP_HEADER)
        && !extract::from_edge(req.headers(), &state.tokens.edge);
    let mut resp = next.run(req).await;
    if direct && !resp.headers().contains_key(DPOP_NONCE_HEADER) {
        let nonce = state.dpop.nonce(state.now());
        resp.headers_mut().insert(DPOP_NONCE_HEADER, nonce);
    }
    resp
}

/// The PUBLIC listener's routes (`listen`): the client routes only. Every other path is a
/// `404 NOT_FOUND` here, the admin API and the feed included.
pub fn public_router(state: AppState) -> Router {
    finish(public_routes(), Listener::Public, state)
}

/// The INTERNAL listener's routes (`internal_listen`): the client routes, the feed and the
/// admin API.
pub fn internal_router(state: AppState) -> Router {
    finish(
        public_routes().merge(internal_only_routes()),
        Listener::Internal,
        state,
    )
}

/// The MANAGEMENT listener's routes (`management_listen`): `/healthz`, `/readyz` and
/// `/metrics` (`runtime::management`), nothing else.
pub fn management_router(state: AppState) -> Router {
    runtime::management::router(std::sync::Arc::new(Management(state)))
}

/// The auth-service's session routes, as clients reach them through their cell's edge (the
/// public cell API document merges them with the edge's own routes and refusals).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        sessions::sign_in,
        sessions::current,
        sessions::sign_out,
        sessions::renew,
        transfer::transfer,
        transfer::transfer_status,
        transfer::rebind,
    ),
    modifiers(&SecuritySchemes)
)]
#[derive(Debug, Clone, Copy)]
pub struct SessionsApi;

/// The admin API of a cell's auth-service (`docs/openapi/cell-admin.json`), on its internal
/// listener, with the cell's admin token.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Cellbind cell admin API",
        description = "A cell's auth-service admin API (`/admin/v1/*`): users, ownership, \
            signing keys, revocations and their audit, sessions, the placement map, status and \
            the contractor migration steps. Served on the auth-service's internal listener; \
            every route takes the cell's admin token."
    ),
    paths(
        admin::create_user,
        admin::import_users,
        admin::put_ownership_bulk,
        admin::list_ownership,
        admin::put_ownership,
        admin::get_ownership,
        admin::keys,
        admin::rotate,
        admin::revoke_key,
        admin::revoke,
        admin::held_revocations,
        admin::withdraw,
        admin::audit_export,
        admin::sessions_of_subject,
        admin::change_user,
        admin::contractor_users,
        admin::session_record,
        admin::put_map,
        admin::status,
        admin::export,
        admin::import,
        admin::drain,
    ),
    components(schemas(cell::AuditFormat)),
    modifiers(&SecuritySchemes)
)]
#[derive(Debug, Clone, Copy)]
pub struct AdminApi;
