//! The control plane's HTTPS service: the signed map, its public key, and the admin API; and
//! what its management listener serves ([`Management`]: readiness and metrics).

use protocol::openapi::SecuritySchemes;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use axum_server::{Control, Handle};
use protocol::ContractorId;
use protocol::admin::placement::{
    MAP_PUBLIC_KEY_PATH, MapPublicKey, PLACEMENT_MAP_PATH, PLACEMENT_ROUTE, PUBLISH_PATH,
    PlacementAnswer, Published,
};
use protocol::{ErrorBody, ErrorCode};
use runtime::listener::ListenerKind;
use runtime::management::ManagementListener;
use runtime::{IoContext as _, IoError, Secret, install_crypto_provider, shutdown_signal};

use crate::config::Config;
use crate::error::{CpError, Result};
use crate::map_key::{load_or_create_map_key, public_key_b64};
use crate::metrics::Metrics;
use crate::publish::Publisher;
use crate::store::{Placement, Store};

/// Grace period for in-flight requests at shutdown, in milliseconds.
pub const SHUTDOWN_GRACE_MS: u64 = 2_000;
/// `Cache-Control` max-age of the published map, in seconds.
pub const MAP_MAX_AGE_S: u64 = 30;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct CpState {
    pub publisher: Publisher,
    store: Arc<Mutex<Store>>,
    admin_token: Secret,
}

impl CpState {
    pub fn new(publisher: Publisher, store: Arc<Mutex<Store>>, admin_token: Secret) -> Self {
        CpState {
            publisher,
            store,
            admin_token,
        }
    }

    async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let guard = store
                .lock()
                .map_err(|_| CpError::Internal("store lock poisoned".into()))?;
            f(&guard)
        })
        .await
        .map_err(|e| CpError::Internal(format!("store task: {e}")))?
    }
}

/// A caller holding the admin token.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<CpState> for Admin {
    type Rejection = CpError;

    async fn from_request_parts(parts: &mut Parts, state: &CpState) -> Result<Self> {
        if state.admin_token.authorizes(&parts.headers) {
            // Admin actions are logged with the token's name, never its value.
            if !parts.method.is_safe() {
                tracing::info!(token = "admin", method = %parts.method, path = parts.uri.path(), "admin action");
            }
            Ok(Admin)
        } else {
            Err(CpError::AdminToken)
        }
    }
}

/// The fleet's signed placement map.
#[utoipa::path(
    get,
    path = PLACEMENT_MAP_PATH,
    tag = "map",
    responses(
        (status = 200, description = "The signed map.", body = protocol::map::SignedMap),
        (status = 503, description = "`NOT_READY`: no map published yet.")
    )
)]
async fn placement_map(State(st): State<CpState>) -> Result<Response> {
    let map = st.publisher.current().ok_or(CpError::NotReady)?;
    let body = map.to_json()?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CACHE_CONTROL,
                format!("public, max-age={MAP_MAX_AGE_S}"),
            ),
        ],
        body,
    )
        .into_response())
}

/// The public key the map is signed with.
#[utoipa::path(
    get,
    path = MAP_PUBLIC_KEY_PATH,
    tag = "map",
    responses((status = 200, description = "The key.", body = MapPublicKey))
)]
async fn map_public_key(State(st): State<CpState>) -> Response {
    axum::Json(MapPublicKey {
        public_key: public_key_b64(&st.publisher.public_key()),
    })
    .into_response()
}

fn parse_contractor(s: &str) -> Result<ContractorId> {
    ContractorId::new(s).map_err(|e| CpError::BadRequest(e.to_string()))
}

/// Where a contractor is placed.
#[utoipa::path(
    get,
    path = PLACEMENT_ROUTE,
    tag = "placements",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    responses(
        (status = 200, description = "The placement.", body = protocol::admin::placement::Placement),
        (status = 400, description = "`INVALID_REQUEST`: not a contractor id."),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token."),
        (status = 404, description = "`NOT_FOUND`: the contractor is not placed.")
    )
)]
async fn get_placement(
    State(st): State<CpState>,
    _: Admin,
    Path(c): Path<String>,
) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let p = st
        .with_store(move |s| s.get(&c))
        .await?
        .ok_or(CpError::NotFound)?;
    Ok(axum::Json(p).into_response())
}

/// Places a contractor (and publishes the map).
#[utoipa::path(
    put,
    path = PLACEMENT_ROUTE,
    tag = "placements",
    security(("adminToken" = [])),
    params(("ctr" = protocol::ContractorId, Path, description = "The contractor.")),
    request_body = protocol::admin::placement::Placement,
    responses(
        (status = 200, description = "Placed; the map published.", body = PlacementAnswer),
        (status = 400, description = "`INVALID_REQUEST`: not a contractor id, not a placement, or an unknown cell."),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
async fn put_placement(
    State(st): State<CpState>,
    _: Admin,
    Path(c): Path<String>,
    body: Bytes,
) -> Result<Response> {
    let c = parse_contractor(&c)?;
    let p: Placement =
        serde_json::from_slice(&body).map_err(|e| CpError::BadRequest(format!("body: {e}")))?;
    if !st.publisher.has_cell(&p.cell) {
        return Err(CpError::BadRequest(format!("unknown cell {}", p.cell)));
    }
    let (c2, p2) = (c.clone(), p.clone());
    let changed = st.with_store(move |s| s.put(&c2, &p2)).await?;
    if changed {
        st.publisher.metrics().placement_changed(&p.cell);
    }
    let map = st.publisher.publish().await?;
    Ok(axum::Json(PlacementAnswer {
        contractor_id: c,
        placement: p,
        changed,
        map_version: map.map.version,
    })
    .into_response())
}

/// Publishes the map now.
#[utoipa::path(
    post,
    path = PUBLISH_PATH,
    tag = "placements",
    security(("adminToken" = [])),
    responses(
        (status = 200, description = "Published.", body = Published),
        (status = 403, description = "`FORBIDDEN`: no or a wrong admin token.")
    )
)]
async fn publish_now(State(st): State<CpState>, _: Admin) -> Result<Response> {
    let map = st.publisher.publish().await?;
    Ok(axum::Json(Published {
        version: map.map.version,
    })
    .into_response())
}

/// Liveness.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "Alive: `{\"status\": \"ok\"}`.", body = Object))
)]
async fn healthz() -> Response {
    axum::Json(serde_json::json!({ "status": "ok" })).into_response()
}

async fn not_found() -> CpError {
    CpError::NotFound
}

/// A method a route does not take: a typed `405`.
async fn method_not_allowed() -> Response {
    runtime::error_response(
        405,
        ErrorBody::new(
            ErrorCode::InvalidRequest,
            "method not allowed on this route",
        ),
    )
}

/// The control plane's document (`docs/openapi/control-plane.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Cellbind control plane",
        description = "Placements of contractors on cells, and the signed placement map \
            published from them. The admin routes take the control plane's admin token."
    ),
    paths(healthz, placement_map, map_public_key, get_placement, put_placement, publish_now),
    modifiers(&SecuritySchemes)
)]
#[derive(Debug, Clone, Copy)]
pub struct ControlPlaneApi;

/// The control plane's routes.
pub fn router(state: CpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route(PLACEMENT_MAP_PATH, get(placement_map))
        .route(MAP_PUBLIC_KEY_PATH, get(map_public_key))
        .route(PLACEMENT_ROUTE, get(get_placement).put(put_placement))
        .route(PUBLISH_PATH, post(publish_now))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// What the management listener serves (`runtime::management`): ready once the store is open
/// (usable) and a map is published; the metrics.
#[derive(Debug, Clone)]
pub struct Management(pub CpState);

impl runtime::management::Probe for Management {
    fn readiness(&self) -> std::result::Result<(), ErrorBody> {
        let st = &self.0;
        let store_open = match st.store.try_lock() {
            Ok(_) | Err(std::sync::TryLockError::WouldBlock) => true,
            Err(std::sync::TryLockError::Poisoned(_)) => false,
        };
        if !store_open {
            return Err(ErrorBody::new(
                ErrorCode::NotReady,
                "the placement store failed",
            ));
        }
        if st.publisher.current().is_none() {
            return Err(CpError::NotReady.to_body());
        }
        Ok(())
    }

    fn metrics(&self) -> String {
        self.0.publisher.metrics().encode()
    }
}

/// Opens the store, loads (or creates) the key, and publishes a first map.
pub async fn state_from_config(config: &Config) -> Result<CpState> {
    let key = load_or_create_map_key(&config.map_key_file)?;
    let store = Arc::new(Mutex::new(Store::open(&config.data_dir)?));
    let cells = config.cells.clone();
    let cell_ids: Vec<_> = config.cells.iter().map(|c| c.id.clone()).collect();
    let publisher = Publisher::new(
        cells,
        config.bucket_count,
        key,
        store.clone(),
        config.publish_dir.clone(),
        protocol::time::system_clock(),
        Arc::new(Metrics::new(&cell_ids)),
    )?;
    publisher.publish().await?;
    tracing::info!(
        public_key = %public_key_b64(&publisher.public_key()),
        "placement map published"
    );
    Ok(CpState::new(
        publisher,
        store,
        Secret::from_file(&config.admin_token_file)?,
    ))
}

/// Binds `addr`, naming it in the error when that fails.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            CpError::AddrInUse(addr)
        } else {
            IoError::new(format!("cannot listen on {addr}"), e).into()
        }
    })?;
    l.set_nonblocking(true)
        .context("setting the listener non-blocking")?;
    Ok(l)
}

/// Runs the control plane until [`shutdown_signal`]: serves HTTPS (and the management
/// listener), each listener with the protections of the config (`runtime::listener`), and
/// republishes the map every `publish_interval_ms` (and on every change).
pub async fn run(config: Config) -> Result<()> {
    install_crypto_provider();
    config.validate()?;
    let listener = bind(config.listen)?;
    let management = ManagementListener::bind(config.management_listen)?;
    let tls = RustlsConfig::from_pem_file(&config.tls_cert, &config.tls_key)
        .await
        .context("loading the TLS certificate and key")?;
    let state = state_from_config(&config).await?;
    let publisher = state.publisher.clone();
    let interval = Duration::from_millis(config.publish_interval_ms);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = publisher.publish().await {
                tracing::warn!(error = %e, "periodic publication failed");
            }
        }
    });
    let control = Control::new();
    let handle: Handle<SocketAddr> = Handle::with_control(control.clone());
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        h.graceful_shutdown(Some(Duration::from_millis(SHUTDOWN_GRACE_MS)));
    });
    tracing::info!(listen = %config.listen, "control plane serving");
    let metrics = state.publisher.metrics();
    let public_p = config
        .listeners
        .protection(ListenerKind::Service, metrics.connections_refused("public"));
    let management_p = config.listeners.protection(
        ListenerKind::Management,
        metrics.connections_refused("management"),
    );
    let managed = management.serve(
        tls.clone(),
        Handle::with_control(control.clone()),
        Arc::new(Management(state.clone())),
        &management_p,
    );
    let served = async {
        runtime::listener::https_server(listener, tls, &public_p)
            .context("starting the server")?
            .handle(handle)
            .serve(router(state).into_make_service())
            .await
            .context("serving")
    };
    // The two listeners stop together: a failure of either shuts the other down; a graceful
    // shutdown lets the main one drain.
    tokio::pin!(served, managed);
    let result = tokio::select! {
        r = &mut served => r,
        r = &mut managed => match r {
            Ok(()) => served.await,
            Err(e) => Err(e),
        },
    };
    control.shutdown();
    Ok(result?)
}
