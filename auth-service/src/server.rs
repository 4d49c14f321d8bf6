//! Wiring: opening what a config names into an [`AppState`], the background tasks, and
//! serving the two routers and the management listener over TLS until
//! `runtime::shutdown_signal`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use protocol::Password;
use protocol::jwks::PublicKey;
use runtime::IoContext as _;
use runtime::access::Listener;
use runtime::dpop::DpopVerifier;
use runtime::listener::ListenerKind;
use runtime::management::ManagementListener;

use crate::binding::MAX_PROOFS_PER_STEP;
use crate::config::{Config, DB_FILE, StoreKind};
use crate::coordination::{Coordination, FOLLOW_POLL_MS, LEADER_CHECK_MAX_S};
use crate::error::{Error, Result};
use crate::keys::kek::{Kek, random};
use crate::keys::lifecycle::{ensure_keys, tick_keys};
use crate::keys::ring::KeyRing;
use crate::revocations::{prune_minted, prune_revocations};
use crate::routes::{Management, internal_router, public_router};
use crate::state::{AppState, FEED_RETAIN_ENTRIES, Parts, Start, Tokens, blocking};
use crate::store::Store as _;
use crate::store::any::AnyStore;
use crate::store::sqlite::SqliteStore;
use crate::{map, tls};

/// How often the key schedule is checked, at most, in seconds.
pub(crate) const KEY_TICK_MAX_S: u64 = 60;
/// How long in-flight requests may finish after a shutdown signal.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Opens the store a config names: the SQLite file in the data directory (0700, the file
/// 0600), or the PostgreSQL database of `database_url_file` with its cross-replica services.
pub(crate) async fn open_store(config: &Config) -> Result<(AnyStore, Coordination)> {
    match config.store {
        StoreKind::Sqlite => {
            // ATTACKS A30: the data folder and the database (with its -wal and -shm) are
            // owner-only.
            let store = SqliteStore::open_in(&config.data_dir, DB_FILE).await?;
            Ok((AnyStore::Sqlite(store), Coordination::Local))
        }
        StoreKind::Postgres => {
            // Nothing of the store lives there, but other files may (the key-encryption key
            // often does): the folder exists and is owner-only either way (ATTACKS A30).
            let dir = config.data_dir.clone();
            runtime::files::private_dir(&dir)
                .with_context(|| format!("create {}", dir.display()))?;
            let file = config.database_url_file.as_deref().ok_or_else(|| {
                Error::Config("store = \"postgres\" needs database_url_file".into())
            })?;
            let url = runtime::Secret::from_file(file)?;
            let (store, coordination) = crate::store::postgres::open(
                &url,
                config.database_ca_cert.as_deref(),
                config.database_max_connections,
                &config.replica(),
            )
            .await?;
            Ok((
                AnyStore::Postgres(store),
                Coordination::Postgres(Arc::new(coordination)),
            ))
        }
    }
}

/// Opens everything a config names: the store ([`open_store`]), the key-encryption key
/// (created 0600 if missing), the admin, feed and edge tokens, and the control-plane client.
pub async fn open(config: Config) -> Result<AppState> {
    open_with_clock(config, protocol::time::system_clock()).await
}

/// [`open`] with a given clock (tests fake days with it).
pub async fn open_with_clock(
    config: Config,
    clock: protocol::time::SharedClock,
) -> Result<AppState> {
    let (store, coordination) = open_store(&config).await?;
    let rng = ring::rand::SystemRandom::new();
    let kek = Kek::load_or_create(&config.kek_file, &rng)?;
    let http = match (&config.control_plane_url, &config.ca_cert) {
        (Some(_), Some(ca)) => {
            let pem = std::fs::read(ca).with_context(|| format!("read {}", ca.display()))?;
            Some(tls::client_trusting(&pem)?)
        }
        _ => None,
    };
    let parts = Parts {
        store,
        coordination,
        kek,
        tokens: Tokens::load(&config)?,
        clock,
        http,
    };
    let loaded = parts.store.load(FEED_RETAIN_ENTRIES).await?;
    let ring = KeyRing::from_rows(&loaded.keys, &parts.kek)?;
    let map_key = config
        .map_public_key
        .as_deref()
        .map(PublicKey::from_b64)
        .transpose()
        .map_err(|e| Error::Config(format!("map_public_key: {e}")))?;
    let dummy_hash = {
        let rng = rng.clone();
        blocking(move || {
            let pw = random::<16>(&rng)?;
            let pw = Password::new(base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                pw.as_ref(),
            ))
            .map_err(|e| Error::Internal(e.to_string()))?;
            crate::passwords::hash(&pw, &rng)
        })
        .await?
    };
    // Nonces naming this replica: a proof made for another replica's (or an edge's) nonce is
    // refused here, and the client retries with this one's.
    let dpop = DpopVerifier::new(
        &format!("auth/{}/{}", config.cell_id, config.replica()),
        MAX_PROOFS_PER_STEP,
    )
    .map_err(|e| Error::Internal(format!("the DPoP verifier: {e}")))?;
    let start = Start {
        loaded,
        ring,
        map_key,
        dummy_hash,
        rng,
        dpop,
    };
    let state = AppState::new(config, parts, start);
    ensure_keys(&state).await?;
    Ok(state)
}

/// Starts the background tasks: following the store (other replicas' commits, restores), the
/// scheduled work (key rotation and expiry, dropping expired session records: on the cell's
/// leader only), dropping revocations that match nothing (every replica, in memory and
/// store), the placement-map poller (when a control plane is configured) and throttle
/// housekeeping. Abort the handles to stop them.
pub fn spawn_background(state: &AppState) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![tokio::spawn(follow(state.clone()))];
    let s = state.clone();
    tasks.push(tokio::spawn(async move {
        let every = s
            .config
            .key_rotation_interval_s
            .clamp(1, KEY_TICK_MAX_S.min(LEADER_CHECK_MAX_S));
        let mut tick = tokio::time::interval(Duration::from_secs(every));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leading = false;
        loop {
            tick.tick().await;
            let lead = s.coordination.lead().await;
            if lead != leading {
                tracing::info!(replica = %s.replica, leader = lead, "scheduled-work leadership changed");
                leading = lead;
            }
            if lead {
                if let Err(e) = tick_keys(&s).await {
                    tracing::error!(error = %e, "key schedule failed");
                }
                if let Err(e) = prune_minted(&s).await {
                    tracing::error!(error = %e, "dropping expired session records failed");
                }
                s.throttle.shrink().await;
            }
            if let Err(e) = prune_revocations(&s).await {
                tracing::error!(error = %e, "dropping expired revocations failed");
            }
        }
    }));
    if state.config.control_plane_url.is_some() {
        tasks.push(tokio::spawn(map::poll_forever(state.clone())));
    }
    tasks
}

/// Keeps this replica's memory in step with the store. Never returns.
async fn follow(state: AppState) {
    let poll = Duration::from_millis(FOLLOW_POLL_MS);
    loop {
        tokio::select! {
            () = state.coordination.changed() => {}
            () = tokio::time::sleep(poll) => {}
        }
        if let Err(e) = state.catch_up().await {
            tracing::warn!(error = %e, "could not catch up with the store; serving what is held");
        }
    }
}

/// Serves [`public_router`] on `public`, [`internal_router`] on `internal` and the management
/// routes (`runtime::management`: health, readiness, metrics) on `management`, all over the
/// TLS certificate and key of the config and each with the listener protections of the config
/// (`runtime::listener`: timeouts, its own per-address connection cap), until one fails. They stop together: when one
/// listener fails, the others are shut down and the first error is returned.
pub async fn serve(
    state: AppState,
    public: std::net::TcpListener,
    internal: std::net::TcpListener,
    management: std::net::TcpListener,
) -> Result<()> {
    serve_until(state, public, internal, management, std::future::pending()).await
}

/// [`serve`] until `shutdown` resolves too: then every listener stops accepting and the
/// requests in flight get [`SHUTDOWN_GRACE`] to finish.
pub async fn serve_until(
    state: AppState,
    public: std::net::TcpListener,
    internal: std::net::TcpListener,
    management: std::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    runtime::install_crypto_provider();
    let tls = tls::server_config(&state.config.tls_cert, &state.config.tls_key).await?;
    let control = axum_server::Control::new();
    let protection = |kind: ListenerKind, name: &'static str| {
        state
            .config
            .listeners
            .protection(kind, state.metrics.connections_refused(name))
    };
    let one = |listener: std::net::TcpListener, which: Listener| {
        let tls = tls.clone();
        let state = state.clone();
        let handle = axum_server::Handle::<SocketAddr>::with_control(control.clone());
        let protection = protection(ListenerKind::Service, which.as_str());
        async move {
            let addr = listener.local_addr().context("listener address")?;
            let server = runtime::listener::https_server(listener, tls, &protection)
                .context("listen")?
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
                .with_context(|| format!("serve the {} listener", which.as_str()))?;
            Ok::<_, Error>(())
        }
    };
    // Stops both servers and their connections however this function ends (an error of
    // either listener, or the caller dropping the future).
    let _stop_both = StopOnDrop(control.clone());
    let graceful = control.clone();
    let watcher = tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        graceful.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    let _stop_watcher = AbortOnDrop(watcher);
    let management = {
        let listener = ManagementListener::from_std(management)?;
        let handle = axum_server::Handle::<SocketAddr>::with_control(control.clone());
        let probe = Arc::new(Management(state.clone()));
        let tls = tls.clone();
        let protection = protection(ListenerKind::Management, "management");
        async move { Ok::<_, Error>(listener.serve(tls, handle, probe, &protection).await?) }
    };
    // Dropped (every listener's task aborted) however this function ends.
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(one(public, Listener::Public));
    servers.spawn(one(internal, Listener::Internal));
    servers.spawn(management);
    let mut first = None;
    while let Some(joined) = servers.join_next().await {
        let ended = joined
            .map_err(|e| Error::Internal(format!("listener task: {e}")))
            .and_then(|r| r);
        match (&first, ended) {
            (None, ended) => {
                if ended.is_err() {
                    control.shutdown();
                }
                first = Some(ended);
            }
            (Some(_), Err(e)) => {
                tracing::warn!(error = %e, "another listener failed while stopping");
            }
            (Some(_), Ok(())) => {}
        }
    }
    first.unwrap_or(Ok(()))
}

/// Shuts the servers of a [`axum_server::Control`] down when dropped.
struct StopOnDrop(axum_server::Control);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens, starts the background tasks, binds `listen`, `internal_listen` and
/// `management_listen` and serves them until `runtime::shutdown_signal` (SIGINT, SIGTERM, or
/// stdin's end with `CELLBIND_EXIT_ON_STDIN_EOF=1`), then stops gracefully.
pub async fn run(config: Config) -> Result<()> {
    runtime::install_crypto_provider();
    let (listen, internal_listen, management_listen) = (
        config.listen,
        config.internal_listen,
        config.management_listen,
    );
    let state = open(config).await?;
    let public = std::net::TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
    let internal = std::net::TcpListener::bind(internal_listen)
        .with_context(|| format!("bind {internal_listen}"))?;
    let management = std::net::TcpListener::bind(management_listen)
        .with_context(|| format!("management listener: bind {management_listen}"))?;
    let tasks = spawn_background(&state);
    let served = serve_until(
        state,
        public,
        internal,
        management,
        runtime::shutdown_signal(),
    )
    .await;
    for t in tasks {
        t.abort();
    }
    served
}
