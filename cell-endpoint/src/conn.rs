//! Per-connection admission, before TLS (ATTACKS A27, A29):
//!
//! 1. From a trusted proxy with `proxy_protocol` on, the connection must start with a PROXY
//!    protocol v2 header (read within the header timeout, exactly its declared length, so the
//!    TLS ClientHello behind it is untouched); its source address becomes the client
//!    ([`ProxiedPeer`] in the request extensions). A `LOCAL` header (health checks) names none.
//! 2. The per-client-address cap on open connections: the client is the PROXY source, else the
//!    socket peer; a trusted proxy without PROXY protocol is not counted (everyone behind it
//!    shares its address; the per-IP request rate limit still sees the forwarded client).
//!    Over the cap the connection is closed at once, before any TLS work.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::client_ip::TrustedProxies;
use prometheus_client::metrics::counter::Counter;

/// Largest PROXY v2 header accepted (16 fixed bytes + addresses + TLVs), in bytes.
pub const MAX_PROXY_HEADER_BYTES: usize = 16 + 512;

/// The client address a trusted proxy named in its PROXY v2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxiedPeer(pub SocketAddr);

/// Open connections per client address.
#[derive(Debug)]
pub struct ConnectionGate {
    open: Mutex<HashMap<IpAddr, usize>>,
    max_per_ip: usize,
    trusted: TrustedProxies,
    proxy_protocol: bool,
    header_timeout: Duration,
    refused: Counter,
}

impl ConnectionGate {
    pub fn new(settings: &crate::config::Settings, refused: Counter) -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            max_per_ip: settings.max_connections_per_ip.max(1),
            trusted: settings.trusted_proxies.clone(),
            proxy_protocol: settings.proxy_protocol,
            header_timeout: settings.header_read_timeout,
            refused,
        }
    }

    /// Counts a connection from `ip`; `None` when `ip` already has the most allowed.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return None;
        }
        *n += 1;
        Some(Slot {
            gate: self.clone(),
            ip,
        })
    }

    /// The time a client has to send its request headers (and a trusted proxy its PROXY header).
    pub fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// Open connections counted for `ip` (tests, metrics).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&ip).copied().unwrap_or(0)
    }
}

/// One counted connection; uncounted when dropped (the connection closed).
#[derive(Debug)]
struct Slot {
    gate: Arc<ConnectionGate>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// A TCP stream that holds its connection slot.
#[derive(Debug)]
pub struct GatedStream {
    inner: TcpStream,
    _slot: Option<Slot>,
}

impl AsyncRead for GatedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for GatedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The TCP-level acceptor (inside the TLS acceptor).
#[derive(Debug, Clone)]
pub struct GateAcceptor {
    gate: Arc<ConnectionGate>,
}

impl GateAcceptor {
    pub fn new(gate: Arc<ConnectionGate>) -> Self {
        Self { gate }
    }
}

impl<S: Send + 'static> Accept<TcpStream, S> for GateAcceptor {
    type Stream = GatedStream;
    type Service = AddProxiedPeer<S>;
    type Future =
        Pin<Box<dyn Future<Output = io::Result<(GatedStream, AddProxiedPeer<S>)>> + Send>>;

    fn accept(&self, mut stream: TcpStream, service: S) -> Self::Future {
        let gate = self.gate.clone();
        Box::pin(async move {
            // Answers leave at once (see `runtime::tls::https_server`); a socket that refuses
            // the option still serves.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY not set");
            }
            let peer = stream.peer_addr()?;
            let trusted = gate.trusted.contains(peer.ip());
            let proxied = if trusted && gate.proxy_protocol {
                tokio::time::timeout(gate.header_timeout, read_proxy_v2(&mut stream))
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
                Some(ip) => match gate.enter(ip) {
                    Some(slot) => Some(slot),
                    None => {
                        gate.refused.inc();
                        return Err(io::Error::other("too many connections from one address"));
                    }
                },
                None => None,
            };
            Ok((
                GatedStream {
                    inner: stream,
                    _slot: slot,
                },
                AddProxiedPeer {
                    inner: service,
                    peer: proxied.map(ProxiedPeer),
                },
            ))
        })
    }
}

/// Reads one PROXY protocol v2 header and nothing more. `Ok(None)` for a `LOCAL` command or an
/// unspecified/unix address family (the connection is the proxy's own).
pub async fn read_proxy_v2(stream: &mut TcpStream) -> io::Result<Option<SocketAddr>> {
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

/// Puts the [`ProxiedPeer`] of the connection into every request's extensions.
#[derive(Debug, Clone)]
pub struct AddProxiedPeer<S> {
    inner: S,
    peer: Option<ProxiedPeer>,
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
        if let Some(p) = self.peer {
            req.extensions_mut().insert(p);
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_sends_its_answers_without_delay() {
        let settings = crate::config::Settings::new(
            protocol::CellId::new("cell-01").unwrap(),
            "https://127.0.0.1:8443",
        );
        let gate = Arc::new(ConnectionGate::new(&settings, Counter::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap(), "Linux's default is Nagle on");
        let (gated, _) = GateAcceptor::new(gate).accept(accepted, ()).await.unwrap();
        // Nagle's algorithm off: a small write (an answer's last piece) leaves at once
        // instead of waiting for the client's delayed acknowledgement.
        assert!(gated.inner.nodelay().unwrap());
        drop(client);
    }
}
