//! The edge's part of the public cell API document (`docs/openapi/cell-public.json`): the
//! routes the edge answers itself ([`EdgeApi`]), and the refusals the edge adds in front of
//! every route it forwards ([`add_edge_answers`]). The forwarded routes' own operations are
//! the auth-service's (`/v1/sessions*`) and the app's (`/api/*`) documents, merged in by the
//! generator.

use protocol::ErrorCode as C;
use protocol::openapi::SecuritySchemes;
use protocol::openapi::{BEARER_SESSION, SESSION_COOKIE_SCHEME, add_errors};
use serde_json::{Value, json};

use crate::request::desk;
use crate::service;

/// The routes the edge answers itself.
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        service::healthz,
        service::readyz,
        service::jwks,
        service::placement_map,
        desk::to_desk,
        desk::index,
        desk::app_js,
        desk::app_css,
        desk::sign_in,
    ),
    modifiers(&SecuritySchemes)
)]
#[derive(Debug, Clone, Copy)]
pub struct EdgeApi;

/// Whether the edge forwards `path` (an OpenAPI path template) to the auth-service.
fn to_auth(path: &str) -> bool {
    path.starts_with("/v1/sessions")
}

/// Whether the edge validates a session for `path` and forwards it to the app.
fn to_app(path: &str) -> bool {
    path.starts_with("/api/")
}

/// Adds the answers the edge itself gives in front of the routes (its guards, outermost
/// first, `service::app`) to every operation of `doc`, and the session security of the app's
/// routes.
pub fn add_edge_answers(doc: &mut Value) {
    let every = |_: &str, _: &str| true;
    add_errors(
        doc,
        every,
        400,
        &[C::InvalidRequest],
        "the request target is not canonical (the edge routes only canonical targets).",
    );
    add_errors(
        doc,
        every,
        403,
        &[C::Forbidden],
        "a browser request from an origin outside the fleet.",
    );
    add_errors(
        doc,
        every,
        429,
        &[C::RateLimited],
        "the client address's request rate is over the edge's per-IP limit; \
         `retry_after_s` (and `Retry-After`) say when to retry.",
    );
    let forwarded = |p: &str, _: &str| to_auth(p) || to_app(p);
    add_errors(
        doc,
        forwarded,
        413,
        &[C::PayloadTooLarge],
        "the request body is over the edge's limit.",
    );
    add_errors(
        doc,
        |p: &str, _: &str| to_auth(p),
        503,
        &[C::UpstreamUnavailable],
        "the auth-service could not be reached or did not answer in time; retry after a moment.",
    );
    let app = |p: &str, _: &str| to_app(p);
    add_errors(
        doc,
        app,
        502,
        &[C::UpstreamUnavailable],
        "the app could not be reached.",
    );
    add_errors(
        doc,
        app,
        504,
        &[C::UpstreamUnavailable],
        "the app did not answer in time.",
    );
    add_errors(
        doc,
        app,
        401,
        &[
            C::SessionMissing,
            C::SessionInvalid,
            C::SessionExpired,
            C::SessionRevoked,
        ],
        "no session, or one that does not verify, has expired or was revoked.",
    );
    add_errors(
        doc,
        |p, m| to_app(p) && m != "get" && m != "head",
        403,
        &[C::Forbidden],
        "a write with the session cookie without the CSRF proof.",
    );
    add_errors(
        doc,
        app,
        404,
        &[C::UnknownContractor],
        "the session's contractor is not placed anywhere.",
    );
    add_errors(
        doc,
        app,
        409,
        &[C::WrongCell, C::HandoffInProgress],
        "the contractor is served by another cell (`owner_cell`, `owner_endpoint` name it), \
         or is moving and writes are paused.",
    );
    add_errors(
        doc,
        app,
        429,
        &[C::RateLimited],
        "the session's subject is over the per-subject limit.",
    );
    add_errors(
        doc,
        app,
        503,
        &[C::CellStateStale, C::NotReady],
        "the edge's view of ownership is too old to decide, or it holds no state yet.",
    );
    // The app's routes take the session the edge validates: bearer or cookie.
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            if !to_app(path) {
                continue;
            }
            for method in protocol::openapi::METHODS {
                if let Some(op) = item.get_mut(method).and_then(Value::as_object_mut) {
                    op.insert(
                        "security".into(),
                        json!([{BEARER_SESSION: []}, {SESSION_COOKIE_SCHEME: []}]),
                    );
                }
            }
        }
    }
}
