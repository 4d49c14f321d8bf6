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

mod accept;
pub mod config;
mod gate;
mod phase;
mod protection;
mod requests;
mod write_through;

use std::net::SocketAddr;

use axum_server::tls_rustls::RustlsConfig;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use accept::Protected;
pub use config::{ListenerConfig, ListenerKind};
pub use gate::{AdmitFuture, Gate, Gated, PeerGate, Slot, no_delay, too_many};
pub use phase::Phased;
pub use protection::{Protection, Timeouts};
pub use requests::{BODY_TIMEOUT_MESSAGE, RequestBody, ResponseBody, Tracked, TrackedFuture};

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
