//! Serving over TLS until a signal (or, when asked, the end of stdin).

use std::net::SocketAddr;
use std::time::Duration;

use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;

use crate::error::{AppError, Result};
use crate::{Config, state_from_config};

/// Grace period for in-flight requests at shutdown, in milliseconds.
pub const SHUTDOWN_GRACE_MS: u64 = 2_000;
pub use runtime::{EXIT_ON_STDIN_EOF_ENV, install_crypto_provider, shutdown_signal};

/// Binds `addr`, naming it in the error when that fails.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        let what = if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("address {addr} is already in use")
        } else {
            format!("cannot listen on {addr}")
        };
        AppError::io(what, e)
    })?;
    l.set_nonblocking(true)
        .map_err(|e| AppError::io("setting the listener non-blocking", e))?;
    Ok(l)
}

/// Runs the app over TLS until [`shutdown_signal`].
pub async fn run(config: Config) -> Result<()> {
    install_crypto_provider();
    let state = state_from_config(&config)?;
    let tls = RustlsConfig::from_pem_file(&config.tls_cert, &config.tls_key)
        .await
        .map_err(|e| AppError::io("loading the TLS certificate and key", e))?;
    let listener = bind(config.listen)?;
    let handle: Handle<SocketAddr> = Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        h.graceful_shutdown(Some(Duration::from_millis(SHUTDOWN_GRACE_MS)));
    });
    tracing::info!(cell = %config.cell_id, listen = %config.listen, "demo app serving");
    axum_server::from_tcp_rustls(listener, tls)
        .map_err(|e| AppError::io("starting the server", e))?
        .handle(handle)
        .serve(crate::router(state).into_make_service())
        .await
        .map_err(|e| AppError::io("serving", e))
}
