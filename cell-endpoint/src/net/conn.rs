//! Per-connection admission of the public listener, before TLS (ATTACKS A27, A29, A33): the
//! edge's PROXY-protocol step, ending in the per-address cap every listener of every server
//! has (`runtime::listener`, which also gives the connection its TLS handshake, header, body
//! and keep-alive timeouts):
//!
//! 1. From a trusted proxy with `proxy_protocol` on, the connection must start with a PROXY
//!    protocol v2 header (read within the header timeout, exactly its declared length, so the
//!    TLS ClientHello behind it is untouched); its source address becomes the client
//!    ([`ProxiedPeer`] in the request extensions). A `LOCAL` header (health checks) names none:
//!    the client is then the socket peer.
//! 2. With `proxy_protocol` on, no forwarding header is ever read: [`AddProxiedPeer`] removes
//!    `X-Forwarded-For` and `Forwarded` from every request before any layer sees it, so a
//!    `LOCAL` connection cannot fall back to a client-supplied forwarding header.
//! 3. The per-address cap on open connections (`runtime::listener::Gate`, keyed by
//!    `protocol::http::client_key`: an IPv6 client by its /64): the client is the PROXY source,
//!    else the socket peer; a trusted proxy without PROXY protocol is not counted (everyone
//!    behind it shares its address; the per-IP request rate limit still sees the forwarded
//!    client). Over the cap the connection is closed at once, before any TLS work.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use runtime::dpop::ConnectionProofs;
use runtime::listener::{AdmitFuture, Gate, Gated, Timeouts};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

use crate::config::EdgeListeners;
use crate::net::client_ip::TrustedProxies;

/// Largest PROXY v2 header accepted (16 fixed bytes + addresses + TLVs), in bytes.
pub(crate) const MAX_PROXY_HEADER_BYTES: usize = 16 + 512;

/// The client address a trusted proxy named in its PROXY v2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProxiedPeer(pub SocketAddr);

/// The admission of the public listener: PROXY protocol from trusted proxies, then the
/// per-address [`Gate`]; and the listener's timeouts.
#[derive(Debug)]
pub struct ConnectionGate {
    gate: Arc<Gate>,
    trusted: TrustedProxies,
    proxy_protocol: bool,
    timeouts: Timeouts,
}

impl ConnectionGate {
    /// The admission of a public listener with `listeners`' cap and timeouts, believing the
    /// PROXY header of `trusted` peers when `proxy_protocol` is on; each refused connection
    /// increments `refused`.
    pub fn new(
        trusted: TrustedProxies,
        proxy_protocol: bool,
        listeners: &EdgeListeners,
        refused: Counter,
    ) -> Self {
        Self {
            gate: Gate::new(listeners.max_connections_per_ip, refused),
            trusted,
            proxy_protocol,
            timeouts: listeners.timeouts(),
        }
    }

    /// The public listener's timeouts (the header timeout also bounds a PROXY header).
    pub(crate) fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Open connections counted for `ip`'s key (tests, metrics).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        self.gate.open_from(ip)
    }
}

/// The TCP-level acceptor of the public listener (before TLS).
#[derive(Debug, Clone)]
pub(crate) struct GateAcceptor {
    gate: Arc<ConnectionGate>,
}

impl GateAcceptor {
    pub(crate) fn new(gate: Arc<ConnectionGate>) -> Self {
        Self { gate }
    }
}

impl<S: Send + 'static> Accept<TcpStream, S> for GateAcceptor {
    type Stream = Gated<TcpStream>;
    type Service = AddProxiedPeer<S>;
    type Future = AdmitFuture<Gated<TcpStream>, AddProxiedPeer<S>>;

    fn accept(&self, mut stream: TcpStream, service: S) -> Self::Future {
        let gate = self.gate.clone();
        Box::pin(async move {
            runtime::listener::no_delay(&stream);
            let peer = stream.peer_addr()?;
            let trusted = gate.trusted.contains(peer.ip());
            let proxied = if trusted && gate.proxy_protocol {
                tokio::time::timeout(gate.timeouts.header_read, read_proxy_v2(&mut stream))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no PROXY header"))??
            } else {
                None
            };
            let counted = match proxied {
                Some(client) => Some(client.ip()),
                None if trusted => None,
                None => Some(peer.ip()),
            };
            let slot = match counted {
                Some(ip) => Some(
                    gate.gate
                        .admit(ip)
                        .ok_or_else(runtime::listener::too_many)?,
                ),
                None => None,
            };
            Ok((
                Gated::new(stream, slot),
                AddProxiedPeer {
                    inner: service,
                    peer: proxied.map(ProxiedPeer),
                    drop_forwarding: gate.proxy_protocol,
                    // A trusted proxy without PROXY protocol terminates TLS and carries many
                    // clients on one connection: nothing is remembered for it, every DPoP
                    // proof's signature is verified (`runtime::dpop`).
                    proofs: (!trusted || gate.proxy_protocol).then(ConnectionProofs::new),
                },
            ))
        })
    }
}

/// Reads one PROXY protocol v2 header and nothing more. `Ok(None)` for a `LOCAL` command or an
/// unspecified/unix address family (the connection is the proxy's own).
pub(crate) async fn read_proxy_v2(stream: &mut TcpStream) -> io::Result<Option<SocketAddr>> {
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
    let mut buf = vec![0u8; 16];
    stream.read_exact(&mut buf).await?;
    if &buf[..12] != ppp::v2::PROTOCOL_PREFIX {
        return Err(invalid(
            "the connection does not start with a PROXY v2 header",
        ));
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if 16 + len > MAX_PROXY_HEADER_BYTES {
        return Err(invalid("PROXY v2 header too long"));
    }
    buf.resize(16 + len, 0);
    stream.read_exact(&mut buf[16..]).await?;
    let header =
        ppp::v2::Header::try_from(buf.as_slice()).map_err(|_| invalid("bad PROXY v2 header"))?;
    if header.command == ppp::v2::Command::Local {
        return Ok(None);
    }
    Ok(match header.addresses {
        ppp::v2::Addresses::IPv4(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::IPv6(a) => Some(SocketAddr::from((a.source_address, a.source_port))),
        ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_) => None,
    })
}

/// Puts the [`ProxiedPeer`] of the connection and what the connection proved of DPoP keys
/// ([`ConnectionProofs`]) into every request's extensions; with `proxy_protocol` on, removes
/// every forwarding header first (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct AddProxiedPeer<S> {
    inner: S,
    peer: Option<ProxiedPeer>,
    drop_forwarding: bool,
    proofs: Option<Arc<ConnectionProofs>>,
}

impl<S, B> tower::Service<http::Request<B>> for AddProxiedPeer<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if self.drop_forwarding {
            let h = req.headers_mut();
            h.remove(http::header::FORWARDED);
            h.remove(X_FORWARDED_FOR);
        }
        if let Some(p) = self.peer {
            req.extensions_mut().insert(p);
        }
        if let Some(p) = &self.proofs {
            req.extensions_mut().insert(p.clone());
        }
        self.inner.call(req)
    }
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_sends_its_answers_without_delay() {
        let gate = Arc::new(ConnectionGate::new(
            TrustedProxies::default(),
            false,
            &EdgeListeners::default(),
            Counter::default(),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap(), "Linux's default is Nagle on");
        let (gated, _) = GateAcceptor::new(gate).accept(accepted, ()).await.unwrap();
        // Nagle's algorithm off: a small write (an answer's last piece) leaves at once
        // instead of waiting for the client's delayed acknowledgement.
        assert!(gated.get_ref().nodelay().unwrap());
        drop(client);
    }
}
