//! The whole edge service ([`app`]): the routes (an allow-list), the status routes answered
//! from the held state, and the guards in front of them, composed once, outermost first, each
//! with why it sits where it does; and what the management listener serves ([`Management`]).
//! The public listener serves no `/metrics`: metrics are the management listener's.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::handler::Handler as _;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower::ServiceBuilder;

use crate::edge::Edge;
use crate::error::{Refusal, rescue};
use crate::held::state::CellState;
use crate::metrics::Outcome;
use crate::net::limits::{ClientIp, peer_of};
use crate::net::target;
use crate::request::browser::BrowserGuard;
use crate::request::counted::CountLayer;
use crate::request::desk;
use crate::request::forward::{self, SessionRoute};
use crate::request::guard::{Check, Guard, GuardLayer};
use crate::request::validate::ValidateGuard;

/// The whole edge service. Layers, outermost first, each with why it sits there.
pub fn app(edge: Edge) -> Router {
    // Only `/api/*` is validated here: the session routes resolve their credential in the
    // forwarder (the auth-service checks the session itself); health, keys and the map are
    // public.
    let api = ServiceBuilder::new()
        // Session validation wraps the forwarder directly (no extra router hop): everything it
        // needs (state, cache, limits) is in `Edge`, and what it proves (the verified claims)
        // travels to the forwarder in the request extensions.
        .layer(GuardLayer::new(ValidateGuard::new(edge.clone())))
        .service(forward::to_app.with_state(edge.clone()));
    let session = |route: SessionRoute| {
        move |State(edge): State<Edge>, req: axum::extract::Request| {
            forward::to_auth(edge, route, req)
        }
    };
    use SessionRoute as S;
    // An allow-list: these session routes and `/api/*` are the only targets forwarded
    // (ATTACKS A23); anything else is answered here.
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/v1/placement-map", get(placement_map))
        .route("/v1/sessions", post(session(S::SignIn)))
        .route(
            "/v1/sessions/current",
            get(session(S::Current)).delete(session(S::Current)),
        )
        .route("/v1/sessions/renew", post(session(S::Renew)))
        .route("/v1/sessions/transfer", post(session(S::Transfer)))
        .route(
            protocol::api::TRANSFER_STATUS_PATH,
            post(session(S::TransferStatus)),
        )
        .route("/v1/sessions/rebind", post(session(S::Rebind)))
        .route_service("/api/{*rest}", api)
        .merge(desk::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(edge.clone());
    let checked = ServiceBuilder::new()
        // Counting sits outside everything: every answer, whoever gave it (a guard's refusal,
        // the per-IP limiter's 429, an upstream's answer), is counted once by its outcome and
        // timed from the request's arrival.
        .layer(CountLayer::new(edge.clone()))
        // The browser rules (CORS preflights, foreign origins) sit outermost: every answer, the
        // per-IP limiter's 429 and a refused target included, must carry the CORS headers a
        // fleet page needs to read it, and what this layer does is a few header comparisons.
        .layer(GuardLayer::new(BrowserGuard::new(edge.clone())))
        // Per-IP rate limit next: it also establishes the client address (trusted proxies)
        // once for everything below, and a flood is refused before any parsing, token
        // verification or upstream call is paid for.
        .layer(GuardLayer::new(PerIp(edge.clone())))
        // Canonical targets only, before routing (ATTACKS A23): what is routed is exactly what
        // every upstream, URL library and framework would read, so nothing can be resolved
        // into a route the edge did not choose.
        .layer(GuardLayer::new(CanonicalTarget(edge)))
        .service(routes);
    Router::new().fallback_service(checked)
}

/// The per-IP guard: establishes the client address once (recorded as [`ClientIp`] for the
/// forwarders, see `client_ip`) and takes one request from its bucket.
#[derive(Debug, Clone)]
struct PerIp(Edge);

impl Guard for PerIp {
    type Note = ();

    fn check(&self, mut req: Request<Body>) -> Check<()> {
        let edge = &self.0;
        if let Some(peer) = peer_of(&req) {
            let s = edge.settings();
            let ip = crate::net::client_ip::resolve(
                peer,
                req.headers(),
                &s.trusted_proxies,
                s.serving.client_ip_header,
            );
            req.extensions_mut().insert(ClientIp(ip));
            if let Err(e) = edge.limits().check_ip(ip) {
                return Check::Answer(rescue(&e));
            }
        }
        Check::Pass(req)
    }
}

/// The canonical-target guard (`target`).
#[derive(Debug, Clone)]
struct CanonicalTarget(Edge);

impl Guard for CanonicalTarget {
    type Note = ();

    fn check(&self, req: Request<Body>) -> Check<()> {
        let edge = &self.0;
        match target::check(&req, edge.public_authority()) {
            Ok(()) => Check::Pass(req),
            Err(why) => Check::Answer(rescue(&Refusal::BadRequest(why))),
        }
    }
}

async fn method_not_allowed() -> Response {
    rescue(&Refusal::MethodNotAllowed)
}

/// Liveness: the edge answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "Alive.", body = String, content_type = "text/plain"))
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the edge holds its cell's keys and state.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready.", body = String, content_type = "text/plain"),
        (status = 503, description = "`NOT_READY`: no cell state held yet.")
    )
)]
pub(crate) async fn readyz(State(edge): State<Edge>) -> Response {
    match readiness(&edge) {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            // A probe, not a client refused: counted as answered locally.
            let mut resp = rescue(&e);
            resp.extensions_mut().insert(Outcome::Local);
            resp
        }
    }
}

/// Ready once keys (and with them ownership) are held: the public `/readyz` and the
/// management listener's.
fn readiness(edge: &Edge) -> Result<(), Refusal> {
    match edge.current() {
        Some(s) if !s.keyset.is_empty() => Ok(()),
        _ => Err(Refusal::NotReady),
    }
}

/// What the management listener serves (`runtime::management`): readiness as the public
/// `/readyz` decides it, and the metrics with their gauges brought up to date.
#[derive(Debug, Clone)]
pub struct Management(pub Edge);

impl runtime::management::Probe for Management {
    fn readiness(&self) -> Result<(), protocol::ErrorBody> {
        readiness(&self.0).map_err(|e| crate::error::answer(&e).1)
    }

    fn metrics(&self) -> String {
        self.0.refresh_gauges();
        self.0.metrics().encode()
    }
}

/// The cell's session-signing public keys (RFC 8037 OKP/Ed25519).
#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    tag = "keys",
    responses(
        (status = 200, description = "The key set.", body = protocol::jwks::Jwks),
        (status = 503, description = "`NOT_READY`: no keys held yet.")
    )
)]
pub(crate) async fn jwks(State(edge): State<Edge>) -> Response {
    match edge.current() {
        Some(s) if !s.keyset.is_empty() => (
            [(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=60"),
            )],
            axum::Json(s.keyset.to_jwks()),
        )
            .into_response(),
        _ => rescue(&Refusal::NotReady),
    }
}

/// The fleet's signed placement map, as this cell holds it.
#[utoipa::path(
    get,
    path = "/v1/placement-map",
    tag = "keys",
    responses(
        (status = 200, description = "The signed map.", body = protocol::map::SignedMap),
        (status = 503, description = "`NOT_READY`: no map held yet.")
    )
)]
pub(crate) async fn placement_map(State(edge): State<Edge>) -> Response {
    match edge.current().as_deref().and_then(CellState::map) {
        Some(m) => axum::Json(m).into_response(),
        None => rescue(&Refusal::NotReady),
    }
}

async fn not_found() -> Response {
    rescue(&Refusal::NotFound)
}
