//! What both listeners' handlers share: the two callers (the edge, vouching for a session's
//! identity with the edge key; an operator tool holding the app's internal token), body and
//! path parsing, `/healthz` and the `404` fallback.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use protocol::http::{X_CONTRACTOR, X_EDGE_KEY, X_GENERATION, X_SUBJECT};
use protocol::{ContractorId, Generation};
use serde::de::DeserializeOwned;

use crate::error::{AppError, Result};
use crate::state::AppState;

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
        let key = h.get(X_EDGE_KEY).ok_or(AppError::EdgeKey)?;
        if !state.edge_key().matches(key.as_bytes()) {
            return Err(AppError::EdgeKey);
        }
        let contractor = parse_contractor(header_str(h, X_CONTRACTOR)?)?;
        let subject = header_str(h, X_SUBJECT)?.to_owned();
        let generation = header_str(h, X_GENERATION)?
            .parse::<Generation>()
            .map_err(|e| AppError::BadRequest(e.to_string()))?;
        Ok(EdgeCaller {
            contractor,
            subject,
            generation,
        })
    }
}

/// A caller of `/internal/*` holding the app's internal token (compared in constant time).
#[derive(Debug, Clone, Copy)]
pub struct InternalCaller;

impl FromRequestParts<AppState> for InternalCaller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        if state.internal_token().authorizes(&parts.headers) {
            Ok(InternalCaller)
        } else {
            Err(AppError::InternalToken)
        }
    }
}

/// A JSON body (a malformed one is `400 INVALID_REQUEST`, one over the body limit
/// `413 PAYLOAD_TOO_LARGE`: typed like every other refusal).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> std::result::Result<Self, Response> {
        let body = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                AppError::PayloadTooLarge.into_response()
            } else {
                AppError::BadRequest("the request body could not be read".into()).into_response()
            }
        })?;
        serde_json::from_slice(&body)
            .map(JsonBody)
            .map_err(|e| AppError::BadRequest(format!("body: {e}")).into_response())
    }
}

/// The contractor id of a `/{contractor_id}/…` path (a malformed one is
/// `400 INVALID_REQUEST`).
#[derive(Debug)]
pub(crate) struct PathContractor(pub(crate) ContractorId);

impl<S: Send + Sync> FromRequestParts<S> for PathContractor {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> std::result::Result<Self, Response> {
        let Path(c) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        parse_contractor(&c)
            .map(PathContractor)
            .map_err(IntoResponse::into_response)
    }
}

/// A contractor id from a path or header.
fn parse_contractor(s: &str) -> Result<ContractorId> {
    ContractorId::new(s).map_err(|e| AppError::BadRequest(e.to_string()))
}

/// `GET /healthz` on both listeners.
pub(crate) async fn healthz(State(st): State<AppState>) -> Response {
    axum::Json(serde_json::json!({ "status": "ok", "cell_id": st.cell_id })).into_response()
}

/// Every other path on both listeners.
pub(crate) async fn not_found() -> AppError {
    AppError::NotFound
}

/// A method the route does not take: a typed `405` (the `Allow` header is axum's).
pub(crate) async fn method_not_allowed() -> Response {
    runtime::error_response(
        405,
        protocol::ErrorBody::new(
            protocol::ErrorCode::InvalidRequest,
            "method not allowed on this route",
        ),
    )
}
