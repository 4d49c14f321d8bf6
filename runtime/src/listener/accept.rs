//! The acceptor of a protected listener ([`Protected`]): admission (the per-address cap, or the
//! edge's PROXY-protocol admission that ends in it), then the TLS handshake within its timeout,
//! then the connection's [`Phase`] around its stream and its requests.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use axum_server::accept::Accept;
use axum_server::tls_rustls::RustlsConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::phase::{Phase, Phased};
use super::protection::Timeouts;
use super::requests::Tracked;

/// Admission `A` (on the TCP stream, before any TLS work), TLS with the listener's certificate
/// (read per connection: a reloaded certificate serves new connections), then the phase.
#[derive(Debug, Clone)]
pub struct Protected<A> {
    admit: A,
    tls: RustlsConfig,
    timeouts: Timeouts,
}

impl<A> Protected<A> {
    pub fn new(admit: A, tls: RustlsConfig, timeouts: Timeouts) -> Self {
        Self {
            admit,
            tls,
            timeouts,
        }
    }
}

impl<A, S> Accept<TcpStream, S> for Protected<A>
where
    A: Accept<TcpStream, S>,
    A::Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A::Service: Send + 'static,
    A::Future: Send + 'static,
{
    type Stream = Phased<TlsStream<A::Stream>>;
    type Service = Tracked<A::Service>;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let admitted = self.admit.accept(stream, service);
        let config = self.tls.get_inner();
        let t = self.timeouts;
        Box::pin(async move {
            let (stream, service) = admitted.await?;
            let handshake = tokio_rustls::TlsAcceptor::from(config).accept(stream);
            let tls = tokio::time::timeout(t.tls_handshake, handshake)
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            let http1 = tls.get_ref().1.alpn_protocol() != Some(b"h2");
            let phase = Arc::new(Phase::new(http1));
            Ok((
                Phased::new(tls, phase.clone(), t.header_read, t.keep_alive),
                Tracked::new(service, phase, t.body_read),
            ))
        })
    }
}
