//! HTTPS: rustls via axum-server, HTTP/1.1 and HTTP/2, header limits, certificate reload on
//! file change without dropping connections, graceful shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;

use crate::error::EdgeError;

/// How long in-flight requests may finish after shutdown is asked for.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);
/// Largest HTTP/1 read buffer (bounds the request line plus headers), in bytes.
pub const MAX_HTTP1_BUF_BYTES: usize = 64 * 1024;
/// Most headers in one HTTP/1 request.
pub const MAX_HEADERS: usize = 100;
/// Largest HTTP/2 header list, in bytes.
pub const MAX_H2_HEADER_LIST_BYTES: u32 = 32 * 1024;
/// Time allowed for a client to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Loads the certificate chain and key.
pub async fn load(cert: &Path, key: &Path) -> Result<RustlsConfig, EdgeError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|e| EdgeError::Tls(format!("{}: {e}", cert.display())))
}

fn mtimes(cert: &Path, key: &Path) -> Option<(SystemTime, SystemTime)> {
    let c = std::fs::metadata(cert).and_then(|m| m.modified()).ok()?;
    let k = std::fs::metadata(key).and_then(|m| m.modified()).ok()?;
    Some((c, k))
}

/// Reloads the certificate when either file's mtime changes. Existing connections keep
/// their session; new handshakes use the new certificate. A bad file keeps the old one.
pub async fn watch(config: RustlsConfig, cert: PathBuf, key: PathBuf, every: Duration) {
    let mut seen = mtimes(&cert, &key);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = mtimes(&cert, &key);
        if now.is_none() || now == seen {
            continue;
        }
        match config.reload_from_pem_file(&cert, &key).await {
            Ok(()) => {
                tracing::info!("reloaded the TLS certificate");
                seen = now;
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate reload failed; keeping the old one")
            }
        }
    }
}

/// Serves `app` on `listen` until `handle` shuts it down.
pub async fn serve(
    listen: SocketAddr,
    tls: RustlsConfig,
    handle: Handle<SocketAddr>,
    app: Router,
) -> Result<(), EdgeError> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    serve_listener(listener, tls, handle, app).await
}

/// Serves on an already bound listener (tests bind port 0).
pub async fn serve_listener(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    handle: Handle<SocketAddr>,
    app: Router,
) -> Result<(), EdgeError> {
    let mut server = axum_server::from_tcp_rustls(listener, tls)?.handle(handle);
    let builder = server.http_builder();
    builder
        .http1()
        .max_buf_size(MAX_HTTP1_BUF_BYTES)
        .max_headers(MAX_HEADERS)
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .max_header_list_size(MAX_H2_HEADER_LIST_BYTES);
    server
        .serve(app.into_make_service_with_connect_info::<SocketAddr>())
        .await?;
    Ok(())
}
