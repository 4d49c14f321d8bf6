//! Serving over TLS until a signal (or, when asked, the end of stdin).

use std::net::SocketAddr;
use std::time::Duration;

use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;

use crate::error::{AppError, Result};
use crate::{Config, state_from_config};

/// Grace period for in-flight requests at shutdown, in milliseconds.
pub const SHUTDOWN_GRACE_MS: u64 = 2_000;
/// Environment variable: when `1`, exit as soon as stdin reaches end of file.
pub const EXIT_ON_STDIN_EOF_ENV: &str = "CELLBIND_EXIT_ON_STDIN_EOF";

/// Installs the ring crypto provider for rustls (once per process; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Resolves when the process should stop: SIGINT, SIGTERM, or (with
/// `CELLBIND_EXIT_ON_STDIN_EOF=1`) the end of stdin.
pub async fn shutdown_signal() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if std::env::var(EXIT_ON_STDIN_EOF_ENV).is_ok_and(|v| v == "1") {
        // A plain thread: a blocking stdin read must not hold up the runtime's shutdown.
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            loop {
                match stdin.read(&mut sink) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
    } else {
        std::mem::forget(tx);
    }
    let stdin_eof = async {
        let _ = rx.await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
        _ = stdin_eof => {},
    }
}

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
