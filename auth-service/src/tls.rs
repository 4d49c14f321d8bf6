//! TLS: the server side (axum-server with rustls/ring) and the client that trusts only the
//! configured CA (reqwest with rustls, `tls_certs_only`).

use std::path::Path;

use crate::error::{Error, Result};

/// Installs the ring crypto provider for rustls once per process (later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The server TLS configuration from a PEM chain and key.
pub async fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<axum_server::tls_rustls::RustlsConfig> {
    axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(Error::io(format!(
            "load TLS certificate {} and key {}",
            cert.display(),
            key.display()
        )))
}

/// An HTTPS client that trusts exactly the certificates in `ca_pem` (and nothing else).
pub fn client_trusting(ca_pem: &[u8]) -> Result<reqwest::Client> {
    install_crypto_provider();
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem)
        .map_err(|e| Error::Config(format!("ca_cert: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Config("ca_cert holds no certificate".into()));
    }
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .https_only(true)
        .build()
        .map_err(|e| Error::Config(format!("HTTPS client: {e}")))
}
