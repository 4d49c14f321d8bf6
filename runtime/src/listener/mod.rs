//! The protections of every listener of every server (ATTACKS A29, A33), one implementation:
//!
//! ```text
//!  accept ─► admission, before any TLS work ─► TLS handshake ─► HTTP/1.1 and HTTP/2
//!            at most max_connections_per_ip      within           every request's headers within
//!            open per client_key(address)        tls_handshake_   header_read_timeout (`phase`);
//!            (IPv6: its /64); over it closed     timeout          a body within
//!            at once and counted in                               body_read_timeout, else 408
//!            connections_refused (`gate`; the                     (`requests`); an idle HTTP/1.1
//!            edge reads its PROXY header first)                   connection closed after
//!                                                                 keep_alive_timeout
//! ```
//!
//! One address can therefore hold at most the cap of a listener, each connection only as long
//! as a timeout allows before it sends a request, and never starve another address: a liveness
//! probe, `cellctl` or a new edge connection from elsewhere is admitted and served. The keys
//! and defaults are [`ListenerConfig`], flattened into every server's configuration.
//!
//! A server builds one [`Protection`] per listener ([`ListenerConfig::protection`]) and serves
//! with [`https_server`] (the edge's public listener: [`https_server_with`] and its own
//! admission, which ends in the same [`Gate`]).

/// `AsyncWrite` for a stream wrapper `$t<S>` whose field `inner: S` does the writing: the
/// listener's wrappers only watch reads.
macro_rules! write_through {
    ($t:ident) => {
        impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $t<S> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
            }
            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }
            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }
            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }
        }
    };
}
use write_through;

mod accept;
pub mod config;
mod gate;
mod phase;
mod requests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use accept::Protected;
pub use config::{ListenerConfig, ListenerKind};
pub use gate::{AdmitFuture, Gate, Gated, PeerGate, Slot, no_delay, too_many};
pub use phase::Phased;
pub use requests::{BODY_TIMEOUT_MESSAGE, RequestBody, ResponseBody, Tracked, TrackedFuture};

/// The timeouts of a listener (see the module doc and [`ListenerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A request's headers, from its first byte (the first request's: from the handshake).
    pub header_read: Duration,
    /// A request's body, from the first wait for it.
    pub body_read: Duration,
    /// The TLS handshake.
    pub tls_handshake: Duration,
    /// An HTTP/1.1 connection with no request in flight.
    pub keep_alive: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        ListenerConfig::<1>::default().timeouts()
    }
}

/// What protects one listener: its timeouts and its own per-address [`Gate`].
#[derive(Debug, Clone)]
pub struct Protection {
    pub timeouts: Timeouts,
    pub gate: Arc<Gate>,
}

/// An HTTPS server whose connections pass admission `A`, then the TLS handshake, then the
/// protections of the module doc.
pub type HttpsServer<A> = axum_server::Server<SocketAddr, Protected<A>>;

/// An HTTPS server on an already bound `listener` (made non-blocking here) with certificate
/// `tls`: each connection is admitted by `admit` (the TCP-level step: [`PeerGate`], or the
/// edge's PROXY-protocol admission), then gets [`Timeouts`] `timeouts`. Set its handle and
/// serve a router with `into_make_service` (or `_with_connect_info`).
pub fn https_server_with<A>(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    timeouts: Timeouts,
    admit: A,
) -> std::io::Result<HttpsServer<A>> {
    listener.set_nonblocking(true)?;
    Ok(axum_server::from_tcp(listener)?.acceptor(Protected::new(admit, tls, timeouts)))
}

/// [`https_server_with`] for a listener whose clients connect directly: the socket peer is
/// counted at `protection`'s gate.
pub fn https_server(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    protection: &Protection,
) -> std::io::Result<HttpsServer<PeerGate>> {
    https_server_with(
        listener,
        tls,
        protection.timeouts,
        PeerGate::new(protection.gate.clone()),
    )
}

/// Labels of [`RefusedConnections`]: the listener (`public`, `internal`, `management`).
type ListenerLabel = [(&'static str, &'static str); 1];

/// A server's `connections_refused` metric: connections closed at once because their address
/// already had the most allowed open, by listener.
#[derive(Debug, Clone, Default)]
pub struct RefusedConnections(Family<ListenerLabel, Counter>);

impl RefusedConnections {
    /// Registers `connections_refused` in `registry` (the series of `listeners` at zero).
    pub fn register(registry: &mut Registry, listeners: &[&'static str]) -> Self {
        let family = Family::<ListenerLabel, Counter>::default();
        registry.register(
            "connections_refused",
            "Connections closed at once because their address already had the most allowed open, by listener",
            family.clone(),
        );
        for l in listeners {
            let _ = family.get_or_create(&[("listener", *l)]);
        }
        Self(family)
    }

    /// The counter of `listener`, for its [`Gate`].
    pub fn of(&self, listener: &'static str) -> Counter {
        self.0.get_or_create(&[("listener", listener)]).clone()
    }
}
