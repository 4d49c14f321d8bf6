//! The edge binary's life ([`run`]): load the disk copy, start the feed sync, the limiter
//! housekeeping, the certificate watcher, the HTTPS server and the management listener
//! (health, readiness, metrics; same certificate, reloaded with it), both with the listener
//! protections of `runtime::listener`; stop when told, after draining.

use std::time::Duration;

use runtime::management::ManagementListener;

use crate::config::Config;
use crate::edge::Edge;
use crate::error::EdgeError;
use crate::feed::sync;
use crate::held::state;
use crate::net::limits::LIMITER_HOUSEKEEPING_S;
use crate::net::tls;
use crate::net::upstreams::Upstreams;
use crate::service::{Management, app};

/// Runs the edge binary: loads the disk copy, starts the feed sync, the certificate watcher
/// and the HTTPS server; returns after `shutdown` resolves and connections drained.
pub async fn run(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), EdgeError> {
    runtime::install_crypto_provider();
    tracing::info!(
        cell = %config.cell_id,
        instance = %config.instance_id,
        write_lease_ms = config.serving.write_lease_ms,
        feed_wait_ms = config.feed_wait_ms,
        rate_per_ip_per_s = config.serving.rate_per_ip_per_s,
        rate_per_subject_per_s = config.serving.rate_per_subject_per_s,
        "cell-endpoint starting"
    );
    // Bound first: a taken management address stops the start at once, naming it.
    let management = ManagementListener::bind(config.management_listen).map_err(io_error)?;
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
    let limits_task = tokio::spawn(limiter_housekeeping(edge.clone()));
    let tls = tls::load(&config.tls_cert, &config.tls_key).await?;
    let watch_task = tokio::spawn(tls::watch(
        tls.clone(),
        config.tls_cert.clone(),
        config.tls_key.clone(),
        Duration::from_millis(config.cert_watch_ms),
    ));
    let control = axum_server::Control::new();
    let handle = axum_server::Handle::with_control(control.clone());
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        h.graceful_shutdown(Some(tls::GRACEFUL_SHUTDOWN));
    });
    let gate = edge.connection_gate();
    let threads = match config.io_threads {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    };
    let served = tls::serve_per_core(
        config.listen,
        threads,
        config.io_listener,
        tls.clone(),
        handle,
        gate,
        app(edge.clone()),
    );
    let management_protection = config.listeners.protection(
        runtime::listener::ListenerKind::Management,
        edge.metrics().management_connections_refused(),
    );
    let managed = management.serve(
        tls,
        axum_server::Handle::with_control(control.clone()),
        std::sync::Arc::new(Management(edge)),
        &management_protection,
    );
    // The two listeners stop together: a failure of either shuts the other down; a graceful
    // shutdown lets the public one drain.
    tokio::pin!(served, managed);
    let result = tokio::select! {
        r = &mut served => r,
        r = &mut managed => match r {
            Ok(()) => served.await,
            Err(e) => Err(io_error(e)),
        },
    };
    control.shutdown();
    sync_task.abort();
    limits_task.abort();
    watch_task.abort();
    result
}

/// Drops idle rate-limiter entries every [`LIMITER_HOUSEKEEPING_S`] so memory stays bounded.
async fn limiter_housekeeping(edge: Edge) {
    let mut tick = tokio::time::interval(Duration::from_secs(LIMITER_HOUSEKEEPING_S));
    loop {
        tick.tick().await;
        edge.limits().retain_recent();
    }
}

/// A management listener's failure as the edge's I/O error (its context kept in the message).
fn io_error(e: runtime::IoError) -> EdgeError {
    EdgeError::Io(std::io::Error::new(e.source.kind(), e.to_string()))
}
