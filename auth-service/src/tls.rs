//! TLS: the server side (axum-server with rustls/ring), the client that trusts only the
//! configured CA (reqwest with rustls, `tls_certs_only`), and its bounded body read.

use std::path::Path;

use runtime::IoContext as _;

use crate::error::{Error, Result};

/// The server TLS configuration from a PEM chain and key.
pub(crate) async fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<axum_server::tls_rustls::RustlsConfig> {
    let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .with_context(|| {
            format!(
                "load TLS certificate {} and key {}",
                cert.display(),
                key.display()
            )
        })?;
    Ok(config)
}

/// An HTTPS client that trusts exactly the certificates in `ca_pem` (and nothing else).
pub fn client_trusting(ca_pem: &[u8]) -> Result<reqwest::Client> {
    runtime::tls::client_trusting(ca_pem)
        .map_err(|e| Error::Config(e.to_string()))?
        .https_only(true)
        .build()
        .map_err(|e| Error::Config(format!("HTTPS client: {e}")))
}

/// Why a bounded body read failed.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection failed while reading.
    Read(reqwest::Error),
    /// The body is larger than allowed.
    TooLarge,
}

/// Reads at most `max` bytes of a response body; a longer body is refused as soon as it
/// passes `max`, without reading the rest.
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Read)? {
        if body.len() + chunk.len() > max {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
