//! The service routes: the cell state feed (an edge instance's feed credential), the JWKS, the held placement map,
//! health, readiness, the management listener's probe (readiness and metrics), and the
//! answers for unknown paths and methods.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::feed::{self, FeedAsk};
use crate::routes::extract::{FeedReader, QueryOf, RawBody};
use crate::state::AppState;

/// `Cache-Control` of the JWKS.
pub(crate) const JWKS_CACHE_CONTROL: &str = "public, max-age=60";

/// Query of the feed: `since=SEQ&instance=ID&wait_ms=MS&busy=c-1,c-2`.
#[derive(Debug, Deserialize)]
pub(crate) struct FeedQuery {
    #[serde(default)]
    since: u64,
    instance: String,
    #[serde(default)]
    wait_ms: u64,
    /// Comma-separated contractors in handoff with writes still in flight at the instance.
    #[serde(default)]
    busy: Option<String>,
    /// The epoch the instance holds: a different one gets a snapshot.
    #[serde(default)]
    epoch: Option<String>,
}

/// `GET /internal/v1/feed` (an edge instance's feed credential): a delta after `since` or a snapshot, after a
/// long-poll of at most `wait_ms`.
pub(crate) async fn feed(
    FeedReader(caller): FeedReader,
    State(state): State<AppState>,
    QueryOf(q): QueryOf<FeedQuery>,
) -> Result<Response> {
    let instance = caller.instance_named(&q.instance)?;
    let ask = FeedAsk {
        since: q.since,
        instance: &instance,
        wait_ms: q.wait_ms,
        busy: q.busy.as_deref(),
        epoch: q.epoch.as_deref(),
    };
    Ok(axum::Json(feed::serve(&state, ask).await?).into_response())
}

/// `POST /internal/v1/feed/reapply` (an edge instance's feed credential): an edge hands back revocations it held
/// from before a restore.
pub(crate) async fn reapply(
    FeedReader(caller): FeedReader,
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> Result<Response> {
    let req: protocol::feed::Reapply = protocol::json::from_object_slice(&body)
        .map_err(|e| Error::BadRequest(format!("body: {e}")))?;
    Ok(axum::Json(crate::revocations::reapply(&state, &caller, req).await?).into_response())
}

pub(crate) async fn not_found() -> Error {
    Error::NotFound("route".into())
}

/// A method the route does not take: `405 INVALID_REQUEST` (as the edge answers it), the
/// `Allow` header axum's.
pub(crate) async fn method_not_allowed() -> Response {
    runtime::error_response(
        405,
        protocol::ErrorBody::new(
            protocol::ErrorCode::InvalidRequest,
            "method not allowed on this path",
        ),
    )
}

/// `GET /.well-known/jwks.json`.
pub(crate) async fn jwks(State(state): State<AppState>) -> Response {
    let jwks = state.read().ring.jwks();
    let mut resp = axum::Json(jwks).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(JWKS_CACHE_CONTROL),
    );
    resp
}

/// `GET /v1/placement-map`: the held signed map, or 503 `NOT_READY`.
pub(crate) async fn get_map(State(state): State<AppState>) -> Result<Response> {
    let map = state.read().map.clone();
    map.map(|m| axum::Json(m).into_response())
        .ok_or(Error::NotReady("no placement map is held yet"))
}

pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz` of the public and internal listeners: [`readiness`].
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<&'static str> {
    readiness(&state)?;
    Ok("ready\n")
}

/// Ready once the store is open and its state loaded (an [`AppState`] exists only then), a
/// signing key is loaded and, with a control plane configured, a map is held.
fn readiness(state: &AppState) -> Result<()> {
    let inner = state.read();
    if inner.ring.current().is_none() {
        return Err(Error::NotReady("no signing key loaded"));
    }
    if state.config.control_plane_url.is_some() && inner.map.is_none() {
        return Err(Error::NotReady("no placement map held yet"));
    }
    Ok(())
}

/// What the management listener serves (`runtime::management`): [`readiness`] and the
/// metrics.
#[derive(Debug)]
pub(crate) struct Management(pub(crate) AppState);

impl runtime::management::Probe for Management {
    fn readiness(&self) -> std::result::Result<(), protocol::ErrorBody> {
        readiness(&self.0).map_err(|e| {
            protocol::ErrorBody::new(e.code(), e.to_string()).retry_after(NOT_READY_RETRY_AFTER_S)
        })
    }

    fn metrics(&self) -> String {
        self.0.metrics.render()
    }
}

/// `Retry-After` of a `503 NOT_READY` on the management listener, in seconds.
const NOT_READY_RETRY_AFTER_S: u64 = 1;
