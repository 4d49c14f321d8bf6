//! Cellbind cell-endpoint: the cell's public HTTPS edge.
//!
//! It decides alone, from state it holds (keys, revocations, ownership, placement map synced
//! from the cell's auth-service feed and kept on disk), whether a session is genuine,
//! unrevoked, for this cell and for the current placement generation, and forwards what it
//! serves to the cell's app. [`app`] builds the whole service so tests drive it in-process.

pub mod browser;
pub mod client_ip;
pub mod config;
pub mod conn;
pub mod desk;
pub mod drain;
pub mod error;
pub mod forward;
pub mod limits;
pub mod metrics;
pub mod revocation_compaction;
pub mod revocation_freshness;
pub mod state;
pub mod sync;
pub mod target;
pub mod tls;
pub mod validate;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwapOption;
use axum::Router;
use axum::extract::State;
use axum::handler::Handler as _;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use protocol::feed::{FeedBody, FeedResponse};
use protocol::time::SharedClock;
use tower::ServiceBuilder;

pub use config::{Config, Settings};
pub use error::{EdgeError, answer, rescue};
pub use state::CellState;

use crate::forward::Upstreams;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::validate::{KeyRefetch, TokenCache, ValidateLayer};

/// Everything the request path shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Edge(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    settings: Settings,
    state: ArcSwapOption<CellState>,
    apply_lock: Mutex<()>,
    last_sync: Mutex<Option<Instant>>,
    clock: SharedClock,
    metrics: Metrics,
    cache: TokenCache,
    limits: Limits,
    refetch: KeyRefetch,
    upstreams: Upstreams,
    /// This cell's public authority (`host[:port]`), for absolute-form targets.
    public_authority: String,
    /// Admission of connections (PROXY v2, the per-address cap).
    gate: Arc<conn::ConnectionGate>,
    state_dir: Option<PathBuf>,
    in_flight: Arc<crate::drain::InFlight>,
}

impl std::ops::Deref for Edge {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Edge {
    /// An edge with no state yet (every validated request answers `503 NOT_READY`).
    pub fn new(settings: Settings, clock: SharedClock, upstreams: Upstreams) -> Self {
        let limits = Limits::new(&settings);
        let refetch = KeyRefetch::new(settings.kid_refetch_cooldown);
        let public_authority = target::authority_of(&settings.public_url);
        let metrics = Metrics::new();
        let gate = Arc::new(conn::ConnectionGate::new(
            &settings,
            metrics.connections_refused(),
        ));
        Edge(Arc::new(Inner {
            public_authority,
            gate,
            settings,
            state: ArcSwapOption::empty(),
            apply_lock: Mutex::new(()),
            last_sync: Mutex::new(None),
            clock,
            metrics,
            cache: TokenCache::new(),
            limits,
            refetch,
            upstreams,
            state_dir: None,
            in_flight: Arc::default(),
        }))
    }

    /// Persist applied state under `dir` (the binary sets this; in-process tests may not).
    pub fn with_state_dir(self, dir: PathBuf) -> Self {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.state_dir = Some(dir);
                Edge(Arc::new(inner))
            }
            Err(shared) => Edge(shared),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The admission of this edge's connections (give it to [`tls::serve`]).
    pub fn connection_gate(&self) -> Arc<conn::ConnectionGate> {
        self.gate.clone()
    }

    /// Writes in flight per contractor (the migration drain).
    pub fn in_flight(&self) -> &Arc<crate::drain::InFlight> {
        &self.in_flight
    }

    pub fn state_dir(&self) -> Option<&PathBuf> {
        self.state_dir.as_ref()
    }

    /// The view requests are decided from, if any.
    pub fn current(&self) -> Option<Arc<CellState>> {
        self.state.load_full()
    }

    /// Installs a whole view (start-up from disk, tests).
    pub fn install(&self, state: CellState) {
        let _g = self.apply_lock.lock();
        self.state.store(Some(Arc::new(state)));
    }

    /// Records a successful feed sync now (renews the write lease).
    pub fn mark_synced(&self) {
        if let Ok(mut g) = self.last_sync.lock() {
            *g = Some(Instant::now());
        }
        self.metrics.feed_synced();
    }

    /// Whether writes may be served: the lease is off, or the last sync is within it.
    pub fn lease_current(&self) -> bool {
        let lease = self.settings.write_lease;
        if lease.is_zero() {
            return true;
        }
        match self.last_sync.lock() {
            Ok(g) => g.is_some_and(|t| t.elapsed() <= lease),
            Err(_) => false,
        }
    }

    /// Applies a feed answer fetched with `since`. Returns the new view when it changed
    /// anything worth persisting, `None` when the answer was stale (a concurrent fetch got
    /// there first) or empty. A refused answer keeps the last-known-good view.
    pub fn apply_feed(
        &self,
        since: u64,
        resp: FeedResponse,
    ) -> Result<Option<Arc<CellState>>, EdgeError> {
        let _g = self
            .apply_lock
            .lock()
            .map_err(|_| EdgeError::Feed("state lock poisoned".into()))?;
        let held = self.state.load_full();
        let held_seq = held.as_ref().map_or(0, |h| h.seq);
        let is_delta = matches!(resp.body, FeedBody::Delta { .. });
        if is_delta && held_seq != since {
            return Ok(None);
        }
        let changed = !matches!(&resp.body, FeedBody::Delta { entries } if entries.is_empty());
        let next = match CellState::apply(held.as_deref(), &self.settings.cell_id, resp) {
            Ok(mut n) => {
                // Revocations that can match nothing this instance accepts are dropped here:
                // the feed never removes them.
                revocation_compaction::compact(
                    &mut n,
                    self.settings.session_lifetime_s,
                    self.clock.now(),
                );
                Arc::new(n)
            }
            Err(e) => {
                self.metrics.feed_rejected();
                return Err(e);
            }
        };
        self.state.store(Some(next.clone()));
        self.metrics
            .set_feed_lag(next.head.saturating_sub(next.seq) as i64);
        drop(_g);
        self.mark_synced();
        Ok(changed.then_some(next))
    }

    fn refresh_gauges(&self) {
        let now = self.clock.now() as i64;
        match self.current() {
            Some(s) => {
                let age = now - s.confirmed_at as i64;
                let map_age = if s.map().is_some() { age } else { -1 };
                self.metrics.set_state_ages(age, age, map_age);
                self.metrics
                    .set_feed_lag(s.head.saturating_sub(s.seq) as i64);
            }
            None => self.metrics.set_state_ages(-1, -1, -1),
        }
    }
}

/// The whole edge service. Layers, outermost first, each with why it sits there.
pub fn app(edge: Edge) -> Router {
    // Only `/api/*` is validated here: the session routes resolve their credential in the
    // forwarder (the auth-service checks the session itself); health, keys and the map are
    // public.
    let api = ServiceBuilder::new()
        // Session validation wraps the forwarder directly (no extra router hop): everything it
        // needs (state, cache, limits) is in `Edge`, and what it proves (the verified claims)
        // travels to the forwarder in the request extensions.
        .layer(ValidateLayer::new(edge.clone()))
        .service(forward::to_app.with_state(edge.clone()));
    let session = |route: forward::SessionRoute| {
        move |State(edge): State<Edge>, req: axum::extract::Request| {
            forward::to_auth(edge, route, req)
        }
    };
    use forward::SessionRoute as S;
    // An allow-list: these session routes and `/api/*` are the only targets forwarded
    // (ATTACKS A23); anything else is answered here.
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/v1/placement-map", get(placement_map))
        .route("/v1/sessions", post(session(S::SignIn)))
        .route(
            "/v1/sessions/current",
            get(session(S::Current)).delete(session(S::Current)),
        )
        .route("/v1/sessions/renew", post(session(S::Renew)))
        .route("/v1/sessions/transfer", post(session(S::Transfer)))
        .route("/v1/sessions/rebind", post(session(S::Rebind)))
        .route_service("/api/{*rest}", api)
        .merge(desk::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(edge.clone());
    let checked = ServiceBuilder::new()
        // The browser rules (CORS preflights, foreign origins) sit outermost: every answer, the
        // per-IP limiter's 429 and a refused target included, must carry the CORS headers a
        // fleet page needs to read it, and what this layer does is a few header comparisons.
        .layer(browser::BrowserLayer::new(edge.clone()))
        // Per-IP rate limit next: it also establishes the client address (trusted proxies)
        // once for everything below, and a flood is refused before any parsing, token
        // verification or upstream call is paid for.
        .layer(axum::middleware::from_fn_with_state(
            edge.clone(),
            limits::per_ip,
        ))
        // Canonical targets only, before routing (ATTACKS A23): what is routed is exactly what
        // every upstream, URL library and framework would read, so nothing can be resolved
        // into a route the edge did not choose.
        .layer(axum::middleware::from_fn_with_state(
            edge.clone(),
            canonical_target,
        ))
        .service(routes);
    Router::new().fallback_service(checked)
}

async fn canonical_target(
    State(edge): State<Edge>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match target::check(&req, &edge.public_authority) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            edge.metrics().outcome("bad_request");
            rescue(&EdgeError::BadRequest(why))
        }
    }
}

async fn method_not_allowed() -> Response {
    rescue(&EdgeError::MethodNotAllowed)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(edge): State<Edge>) -> Response {
    match edge.current() {
        Some(s) if !s.keyset.is_empty() => (StatusCode::OK, "ready").into_response(),
        _ => rescue(&EdgeError::NotReady),
    }
}

async fn metrics_text(State(edge): State<Edge>) -> Response {
    edge.refresh_gauges();
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        edge.metrics.encode(),
    )
        .into_response()
}

async fn jwks(State(edge): State<Edge>) -> Response {
    match edge.current() {
        Some(s) if !s.keyset.is_empty() => (
            [(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=60"),
            )],
            axum::Json(s.keyset.to_jwks()),
        )
            .into_response(),
        _ => rescue(&EdgeError::NotReady),
    }
}

async fn placement_map(State(edge): State<Edge>) -> Response {
    match edge.current().as_deref().and_then(CellState::map) {
        Some(m) => axum::Json(m).into_response(),
        None => rescue(&EdgeError::NotReady),
    }
}

async fn not_found() -> Response {
    rescue(&EdgeError::NotFound)
}

/// Runs the edge binary: loads the disk copy, starts the feed sync, the certificate watcher
/// and the HTTPS server; returns after `shutdown` resolves and connections drained.
pub async fn run(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), EdgeError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing::info!(
        cell = %config.cell_id,
        instance = %config.instance_id,
        write_lease_ms = config.write_lease_ms,
        feed_wait_ms = config.feed_wait_ms,
        rate_per_ip_per_s = config.rate_per_ip_per_s,
        rate_per_subject_per_s = config.rate_per_subject_per_s,
        "cell-endpoint starting"
    );
    let upstreams = Upstreams::from_config(&config)?;
    let edge = Edge::new(
        config.settings()?,
        protocol::time::system_clock(),
        upstreams,
    )
    .with_state_dir(config.state_dir.clone());
    match state::load(&config.state_dir, &config.cell_id) {
        Ok(Some(s)) => {
            tracing::info!(
                seq = s.seq,
                "serving from the persisted state until the feed answers"
            );
            edge.install(s);
        }
        Ok(None) => tracing::info!("no persisted state; not ready until the feed answers"),
        Err(e) => tracing::warn!(error = %e, "persisted state refused; waiting for the feed"),
    }
    let sync_task = tokio::spawn(sync::run(edge.clone(), config.feed_wait_ms));
    let limits_task = tokio::spawn(limits::housekeeping(edge.clone()));
    let tls = tls::load(&config.tls_cert, &config.tls_key).await?;
    let watch_task = tokio::spawn(tls::watch(
        tls.clone(),
        config.tls_cert.clone(),
        config.tls_key.clone(),
        std::time::Duration::from_millis(config.cert_watch_ms),
    ));
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        h.graceful_shutdown(Some(tls::GRACEFUL_SHUTDOWN));
    });
    let gate = edge.connection_gate();
    let result = tls::serve(config.listen, tls, handle, gate, app(edge)).await;
    sync_task.abort();
    limits_task.abort();
    watch_task.abort();
    result
}
