//! Cellbind auth-service: one per cell. Signs technicians and dispatchers in, holds the cell's
//! Ed25519 signing-key ring (with rotation and revocation), serves the JWKS, keeps the
//! ownership records and revocations, and hands all of it to the cell's edge instances through
//! the cell state feed.
//!
//! Embedding and tests:
//! - [`Config`]: the TOML configuration ([`Config::load`]).
//! - [`open`]: opens the store, keys and secrets named by a config → [`AppState`].
//! - [`public_router`] and [`internal_router`]: the HTTP routes of the two listeners over an
//!   [`AppState`] (drive them with `tower::ServiceExt::oneshot`). The public listener serves
//!   the client routes only; the internal one serves those plus the feed, the admin API and
//!   metrics. Both write one `access` log line per request.
//! - [`serve`]: serves both routers over TLS on their listeners; [`spawn_background`] starts
//!   key rotation, the placement-map poller and throttle housekeeping; [`run`] does all of it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};

pub mod admin;
pub mod config;
pub mod error;
pub mod feed;
pub mod http;
pub mod keys;
pub mod map;
pub mod metrics;
pub mod migration;
pub mod passwords;
pub mod revocations;
pub mod sessions;
pub mod state;
pub mod store;
pub mod throttle;
pub mod tls;
pub mod transfer;

pub use config::Config;
pub use error::{Error, Result};
pub use protocol::api::SignInResponse;
pub use state::AppState;

/// Body limit of ordinary requests, in bytes.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;
/// Body limit of the bulk user import and bulk ownership seed, in bytes.
pub const BULK_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Body limit of a pushed placement map, in bytes.
pub const MAP_BODY_LIMIT: usize = protocol::map::MAX_MAP_BYTES;
/// How often the key schedule is checked, at most, in seconds.
pub const KEY_TICK_MAX_S: u64 = 60;
/// How often idle throttle buckets are dropped, in seconds.
pub const THROTTLE_HOUSEKEEPING_S: u64 = 60;
/// `Cache-Control` of the JWKS.
pub const JWKS_CACHE_CONTROL: &str = "public, max-age=60";
/// The environment switch that makes the binary exit when stdin reaches EOF.
pub const EXIT_ON_STDIN_EOF_ENV: &str = "CELLBIND_EXIT_ON_STDIN_EOF";

pub use runtime::access::Listener;

/// The routes a client may reach (through the edge): sign-in, the session routes, transfer
/// and rebind, the JWKS, the placement map and health.
fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", post(sessions::sign_in))
        .route(
            "/v1/sessions/current",
            get(sessions::current).delete(sessions::sign_out),
        )
        .route("/v1/sessions/renew", post(sessions::renew))
        .route("/v1/sessions/transfer", post(transfer::transfer))
        .route("/v1/sessions/rebind", post(transfer::rebind))
        .route("/.well-known/jwks.json", get(jwks))
        .route(map::MAP_PATH, get(map::get_map))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The routes only the cell's own components reach: the feed, the admin API and metrics.
fn internal_only_routes() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(metrics))
        .route(protocol::feed::FEED_PATH, get(feed::feed))
        .route("/admin/v1/users", post(admin::create_user))
        .route(
            "/admin/v1/users/import",
            post(admin::import_users).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route(
            "/admin/v1/ownership",
            put(admin::put_ownership_bulk).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route(
            "/admin/v1/ownership/{ctr}",
            put(admin::put_ownership).get(admin::get_ownership),
        )
        .route("/admin/v1/keys", get(admin::keys))
        .route("/admin/v1/keys/rotate", post(admin::rotate))
        .route("/admin/v1/keys/{kid}/revoke", post(admin::revoke_key))
        .route("/admin/v1/revocations", post(revocations::revoke_handler))
        .route(
            "/admin/v1/audit/revocations",
            get(revocations::audit_export),
        )
        .route(
            "/admin/v1/subjects/{sub}/sessions",
            get(revocations::sessions_of_subject),
        )
        .route("/admin/v1/sessions/{jti}", get(revocations::session_record))
        .route(
            "/admin/v1/placement-map",
            put(admin::put_map).layer(DefaultBodyLimit::max(MAP_BODY_LIMIT)),
        )
        .route("/admin/v1/status", get(admin::status))
        .route("/admin/v1/contractors/{ctr}/export", get(migration::export))
        .route(
            "/admin/v1/contractors/{ctr}/import",
            post(migration::import).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route("/admin/v1/drain/{ctr}", get(migration::drain))
}

fn finish(routes: Router<AppState>, listener: Listener, state: AppState) -> Router {
    let routes = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT));
    runtime::access::logged(routes, listener).with_state(state)
}

/// The PUBLIC listener's routes (`listen`): the client routes only. Every other path is a
/// `404 NOT_FOUND` here, the admin API and the feed included.
pub fn public_router(state: AppState) -> Router {
    finish(public_routes(), Listener::Public, state)
}

/// The INTERNAL listener's routes (`internal_listen`): the client routes, the feed, the admin
/// API and metrics.
pub fn internal_router(state: AppState) -> Router {
    finish(
        public_routes().merge(internal_only_routes()),
        Listener::Internal,
        state,
    )
}

pub use runtime::access::ACCESS_LOG_TARGET;

async fn not_found() -> Error {
    Error::NotFound("route".into())
}

async fn method_not_allowed() -> Error {
    Error::BadRequest("method not allowed on this path".into())
}

async fn jwks(State(state): State<AppState>) -> Response {
    let jwks = state.read().ring.jwks();
    let mut resp = axum::Json(jwks).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(JWKS_CACHE_CONTROL),
    );
    resp
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> Result<&'static str> {
    let inner = state.read();
    if inner.ring.current().is_none() {
        return Err(Error::NotReady("no signing key loaded"));
    }
    if state.config.control_plane_url.is_some() && inner.map.is_none() {
        return Err(Error::NotReady("no placement map held yet"));
    }
    Ok("ready\n")
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut resp = state.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

/// Opens everything a config names: the data directory (0700) and SQLite store (0600), the
/// key-encryption key (created 0600 if missing), the admin, feed and edge tokens, and the
/// control-plane client.
pub async fn open(config: Config) -> Result<AppState> {
    open_with_clock(config, protocol::time::system_clock()).await
}

/// [`open`] with a given clock (tests fake days with it).
pub async fn open_with_clock(
    config: Config,
    clock: protocol::time::SharedClock,
) -> Result<AppState> {
    // ATTACKS A30: the data folder is owner-only even when it already existed, and the
    // database exists 0600 before SQLite opens it (its -wal and -shm inherit that mode).
    runtime::private_dir(&config.data_dir)
        .map_err(Error::io(format!("create {}", config.data_dir.display())))?;
    let db = config.db_path();
    runtime::private_sqlite(&db).map_err(Error::io(format!("create {}", db.display())))?;
    let store = state::blocking(move || {
        let store = store::SqliteStore::open(&db)?;
        runtime::private_sqlite(&db).map_err(Error::io(format!("restrict {}", db.display())))?;
        Ok(store)
    })
    .await?;
    let rng = ring::rand::SystemRandom::new();
    let kek = keys::Kek::load_or_create(&config.kek_file, &rng)?;
    let http = match (&config.control_plane_url, &config.ca_cert) {
        (Some(_), Some(ca)) => {
            let pem = std::fs::read(ca).map_err(Error::io(format!("read {}", ca.display())))?;
            Some(tls::client_trusting(&pem)?)
        }
        _ => None,
    };
    let parts = state::Parts {
        store: Arc::new(store),
        kek,
        admin_token: state::Secret::from_file(&config.admin_token_file)?,
        feed_token: state::Secret::from_file(&config.feed_token_file)?,
        edge_token: state::Secret::from_file(&config.edge_token_file)?,
        clock,
        http,
    };
    AppState::open(config, parts).await
}

/// Starts the background tasks: the key schedule, the placement-map poller (when a control
/// plane is configured) and throttle housekeeping. Abort the handles to stop them.
pub fn spawn_background(state: &AppState) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let s = state.clone();
    tasks.push(tokio::spawn(async move {
        let every = s.config.key_rotation_interval_s.clamp(1, KEY_TICK_MAX_S);
        let mut tick = tokio::time::interval(Duration::from_secs(every));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = s.tick_keys().await {
                tracing::error!(error = %e, "key schedule failed");
            }
            if let Err(e) = s.prune_revocations().await {
                tracing::error!(error = %e, "dropping expired revocations failed");
            }
            if let Err(e) = revocations::prune_minted(&s).await {
                tracing::error!(error = %e, "dropping expired session records failed");
            }
        }
    }));
    if state.config.control_plane_url.is_some() {
        tasks.push(tokio::spawn(map::poll_forever(state.clone())));
    }
    let s = state.clone();
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(THROTTLE_HOUSEKEEPING_S));
        loop {
            tick.tick().await;
            s.throttle.shrink();
        }
    }));
    tasks
}

/// Serves [`public_router`] on `public` and [`internal_router`] on `internal`, both over the
/// TLS certificate and key of the config. The two stop together: when one listener fails, the
/// other is shut down and the first error is returned.
pub async fn serve(
    state: AppState,
    public: std::net::TcpListener,
    internal: std::net::TcpListener,
) -> Result<()> {
    tls::install_crypto_provider();
    let tls = tls::server_config(&state.config.tls_cert, &state.config.tls_key).await?;
    let control = axum_server::Control::new();
    let one = |listener: std::net::TcpListener, which: Listener| {
        let tls = tls.clone();
        let state = state.clone();
        let handle = axum_server::Handle::<SocketAddr>::with_control(control.clone());
        async move {
            listener
                .set_nonblocking(true)
                .map_err(Error::io("configure the listener"))?;
            let addr = listener
                .local_addr()
                .map_err(Error::io("listener address"))?;
            let server = axum_server::from_tcp_rustls(listener, tls)
                .map_err(Error::io("listen"))?
                .handle(handle);
            tracing::info!(
                %addr,
                listener = which.as_str(),
                cell = %state.config.cell_id,
                "auth-service listening"
            );
            let app = match which {
                Listener::Public => public_router(state),
                Listener::Internal => internal_router(state),
            };
            server
                .serve(app.into_make_service_with_connect_info::<SocketAddr>())
                .await
                .map_err(Error::io(format!("serve the {} listener", which.as_str())))
        }
    };
    // Stops both servers and their connections however this function ends (an error of
    // either listener, or the caller dropping the future).
    let _stop_both = StopOnDrop(control.clone());
    let public = one(public, Listener::Public);
    let internal = one(internal, Listener::Internal);
    tokio::pin!(public, internal);
    let (first, public_ended) = tokio::select! {
        r = &mut public => (r, true),
        r = &mut internal => (r, false),
    };
    control.shutdown();
    let other = if public_ended {
        internal.await
    } else {
        public.await
    };
    if let Err(e) = other {
        tracing::warn!(error = %e, "the other listener failed while stopping");
    }
    first
}

/// Shuts the servers of a [`axum_server::Control`] down when dropped.
struct StopOnDrop(axum_server::Control);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// Opens, starts the background tasks, binds `listen` and `internal_listen` and serves both
/// until the process ends.
pub async fn run(config: Config) -> Result<()> {
    tls::install_crypto_provider();
    let (listen, internal_listen) = (config.listen, config.internal_listen);
    let state = open(config).await?;
    let public =
        std::net::TcpListener::bind(listen).map_err(Error::io(format!("bind {listen}")))?;
    let internal = std::net::TcpListener::bind(internal_listen)
        .map_err(Error::io(format!("bind {internal_listen}")))?;
    let _tasks = spawn_background(&state);
    serve(state, public, internal).await
}

/// When `CELLBIND_EXIT_ON_STDIN_EOF=1`, exits the process as soon as stdin reaches EOF (the
/// parent holds the other end of a pipe, so children never outlive it).
pub fn exit_on_stdin_eof_if_asked() {
    if std::env::var(EXIT_ON_STDIN_EOF_ENV).as_deref() != Ok("1") {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("stdin-eof".into())
        .spawn(|| {
            use std::io::Read as _;
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 256];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        tracing::info!("stdin closed: exiting");
                        std::process::exit(0);
                    }
                    Ok(_) => {}
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not watch stdin");
    }
}
