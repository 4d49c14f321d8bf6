//! The HTTPS client of the servers and tools: a reqwest client that trusts exactly the CA
//! bundle it is given (the cell's or the fleet's CA), never the system's roots. The servers'
//! listeners are [`crate::listener`]'s.

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
