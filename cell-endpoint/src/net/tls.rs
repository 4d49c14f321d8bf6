//! HTTPS: rustls via axum-server, HTTP/1.1 and HTTP/2, header limits, certificate reload on
//! file change without dropping connections, graceful shutdown. The connection protections
//! (admission, the TLS handshake, header, body and keep-alive timeouts) are every listener's
//! (`runtime::listener`), with the edge's PROXY-protocol admission (`conn`) in front.
//!
//! Clients resume TLS sessions: TLS 1.3 tickets (stateless; rustls's ring ticketer rotates
//! their keys every six hours, and a reloaded certificate starts new keys) and a server-side
//! cache of [`SESSION_CACHE_ENTRIES`] for TLS 1.2, so a phone that reconnects after a network
//! change, or a client without keep-alive, skips the certificate signature and key exchange of
//! a full handshake.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use std::sync::Arc;

use crate::config::IoListener;
use crate::error::EdgeError;
use crate::net::conn::{ConnectionGate, GateAcceptor};

/// How long in-flight requests may finish after shutdown is asked for.
pub(crate) const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);
/// Largest HTTP/1 read buffer (bounds the request line plus headers), in bytes.
pub(crate) const MAX_HTTP1_BUF_BYTES: usize = 64 * 1024;
/// Most header lines in one HTTP/1 request (more: `431`). hyper's own default, which is why it
/// is not passed to hyper: an explicit limit makes hyper fill a header table of that size for
/// every request (measured in a profile of the request path), its default uses an
/// uninitialised one.
pub const MAX_HEADERS: usize = 100;
/// Largest HTTP/2 header list, in bytes.
pub(crate) const MAX_H2_HEADER_LIST_BYTES: u32 = 32 * 1024;
/// Most concurrent HTTP/2 streams per connection.
pub(crate) const MAX_H2_STREAMS: u32 = 128;
/// Interval of HTTP/2 keep-alive pings (a dead peer's connection is closed).
pub(crate) const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// Time an HTTP/2 keep-alive ping may take before the connection is closed.
pub(crate) const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS 1.2 sessions the server remembers for resumption (about 200 bytes each).
pub(crate) const SESSION_CACHE_ENTRIES: usize = 16_384;

/// The server configuration for a certificate chain and key: ALPN `h2` then `http/1.1`,
/// session resumption (see the module doc).
fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, EdgeError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad =
        |e: &dyn std::fmt::Display, file: &Path| EdgeError::Tls(format!("{}: {e}", file.display()));
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(&e, cert))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e, cert))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(&e, key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&e, cert))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| bad(&e, cert))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| bad(&e, cert))?;
    Ok(Arc::new(config))
}

/// Loads the certificate chain and key.
pub async fn load(cert: &Path, key: &Path) -> Result<RustlsConfig, EdgeError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(RustlsConfig::from_config(server_config(cert, key)?))
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
        match server_config(&cert, &key) {
            Ok(new) => {
                config.reload_from_config(new);
                tracing::info!("reloaded the TLS certificate");
                seen = now;
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate reload failed; keeping the old one")
            }
        }
    }
}

/// Serves `app` on `listen` with `threads` threads (at least one), each a single-threaded
/// runtime accepting from the port as `sharing` says, until `handle` shuts them down; returns
/// when every thread has stopped, or at once with the first one's failure.
///
/// Why not one multi-threaded runtime: a proxied request is a chain of wake-ups (client
/// socket, upstream connection task, response), and a work-stealing scheduler moves them
/// between threads, paying a cross-thread wake-up and cache misses each time. Served per core,
/// a connection, its requests and their upstream connections (`upstream::HttpsClient` keeps a
/// pool per thread) stay on one thread, as an nginx worker's do. Measured in `bench/`.
pub async fn serve_per_core(
    listen: SocketAddr,
    threads: usize,
    sharing: IoListener,
    tls: RustlsConfig,
    handle: Handle<SocketAddr>,
    gate: Arc<ConnectionGate>,
    app: Router,
) -> Result<(), EdgeError> {
    let threads = threads.max(1);
    let listeners = match sharing {
        IoListener::Shared => {
            // Not `SO_REUSEPORT`: no other process can join the port afterwards. Each thread
            // holds a handle of the same socket.
            let one = bind(listen, false)?;
            let mut listeners = Vec::with_capacity(threads);
            for _ in 1..threads {
                listeners.push(one.try_clone()?);
            }
            listeners.push(one);
            listeners
        }
        IoListener::PerThread => {
            // Every listener is bound before any serves: a taken port fails the start at
            // once, also when what holds it is another process's shared listener (which a
            // shared bind would join): the port is first bound alone.
            if listen.port() != 0 {
                drop(std::net::TcpListener::bind(listen)?);
            }
            let first = bind(listen, true)?;
            let listen = first.local_addr()?;
            let mut listeners = vec![first];
            for _ in 1..threads {
                listeners.push(bind(listen, true)?);
            }
            listeners
        }
    };
    let mut stopped = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.into_iter().enumerate() {
        let (done, stop) = tokio::sync::oneshot::channel();
        let (tls, handle, gate, app) = (tls.clone(), handle.clone(), gate.clone(), app.clone());
        std::thread::Builder::new()
            .name(format!("edge-io-{i}"))
            .spawn(move || {
                let served = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(serve_listener(listener, tls, handle, gate, app)),
                    Err(e) => Err(EdgeError::Io(e)),
                };
                let _ = done.send(served);
            })?;
        stopped.push(async move {
            stop.await.unwrap_or_else(|_| {
                Err(EdgeError::Io(std::io::Error::other(
                    "a serving thread ended",
                )))
            })
        });
    }
    futures::future::try_join_all(stopped).await?;
    Ok(())
}

/// A listener on `listen`; with `reuse_port`, one that other listeners of this process may
/// bind beside it (`SO_REUSEPORT`).
fn bind(listen: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(listen),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(reuse_port)?;
    socket.set_nonblocking(true)?;
    socket.bind(&listen.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Connections waiting to be accepted on each listener.
pub(crate) const LISTEN_BACKLOG: i32 = 1024;

/// Serves on an already bound listener (tests bind port 0). Each connection passes the
/// [`ConnectionGate`] (PROXY v2 from trusted proxies, the per-address cap) before TLS, then
/// has the listener timeouts of `runtime::listener` (the TLS handshake, every request's
/// headers, a body, an idle HTTP/1.1 connection).
pub async fn serve_listener(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    handle: Handle<SocketAddr>,
    gate: Arc<ConnectionGate>,
    app: Router,
) -> Result<(), EdgeError> {
    let timeouts = gate.timeouts();
    let mut server =
        runtime::listener::https_server_with(listener, tls, timeouts, GateAcceptor::new(gate))?
            .handle(handle);
    let builder = server.http_builder();
    builder.http1().max_buf_size(MAX_HTTP1_BUF_BYTES);
    builder
        .http2()
        .max_header_list_size(MAX_H2_HEADER_LIST_BYTES)
        .max_concurrent_streams(MAX_H2_STREAMS)
        .keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT);
    server
        .serve(app.into_make_service_with_connect_info::<SocketAddr>())
        .await?;
    Ok(())
}
