//! The HTTPS client that trusts only a fleet's CA: the one client builder of `cellctl` (whose
//! admin client adds its retry policy on top) and of the dev fleet.

use std::path::Path;
use std::time::Duration;

use runtime::IoContext as _;
use runtime::tls::CaError;

use crate::error::{Error, Result};

/// Timeout of one request made by a client of [`client_trusting`], in milliseconds.
pub const CLIENT_TIMEOUT_MS: u64 = 10_000;
/// Connect timeout of a client of [`client_trusting`], in milliseconds.
pub const CLIENT_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// An HTTPS client that trusts only the CA certificates in `ca_pem`
/// ([`runtime::tls::client_trusting`] with these timeouts).
pub fn client_trusting(ca_pem: &[u8]) -> Result<reqwest::Client> {
    let builder = runtime::tls::client_trusting(ca_pem).map_err(|e| match e {
        CaError::Pem(e) => Error::from(e),
        _ => Error::Config("the CA file holds no certificate".to_string()),
    })?;
    Ok(builder
        .timeout(Duration::from_millis(CLIENT_TIMEOUT_MS))
        .connect_timeout(Duration::from_millis(CLIENT_CONNECT_TIMEOUT_MS))
        .build()?)
}

/// An HTTPS client that trusts only the CA certificate file at `path`.
pub fn client_trusting_file(path: &Path) -> Result<reqwest::Client> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    client_trusting(&pem)
}
