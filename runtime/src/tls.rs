//! HTTPS for the servers: the listener every server (and management listener) serves on,
//! and a reqwest client that trusts exactly the CA bundle it is given (the cell's or the
//! fleet's CA), never the system's roots.

use std::net::SocketAddr;

use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};

/// An HTTPS server on an already bound `listener`: rustls with `tls`, and `TCP_NODELAY` on
/// every accepted connection. Without it a response written in two pieces (head, then body)
/// waits for the client's delayed acknowledgement, about 40 ms on Linux, before its second
/// piece leaves.
pub fn https_server(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
) -> std::io::Result<axum_server::Server<SocketAddr, RustlsAcceptor<NoDelayAcceptor>>> {
    Ok(axum_server::from_tcp(listener)?
        .acceptor(RustlsAcceptor::new(tls).acceptor(NoDelayAcceptor::new())))
}

/// Why a CA bundle cannot back a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// The PEM bundle does not parse.
    #[error("ca_cert: {0}")]
    Pem(reqwest::Error),
    /// The bundle holds no certificate.
    #[error("ca_cert holds no certificate")]
    Empty,
}

/// A client builder that trusts exactly the certificates in `ca_pem` (and nothing else); the
/// caller adds its timeouts and builds it. Installs the crypto provider first.
pub fn client_trusting(ca_pem: &[u8]) -> Result<reqwest::ClientBuilder, CaError> {
    crate::install_crypto_provider();
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem).map_err(CaError::Pem)?;
    if certs.is_empty() {
        return Err(CaError::Empty);
    }
    Ok(reqwest::Client::builder().tls_certs_only(certs))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bundle_without_certificates_is_refused() {
        let e = super::client_trusting(b"").err();
        assert!(matches!(e, Some(super::CaError::Empty)), "{e:?}");
    }
}
