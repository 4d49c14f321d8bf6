//! The dev fleet's local CA and its certificates (rcgen), and HTTPS clients that trust only it.

use std::net::IpAddr;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use runtime::IoContext as _;
use runtime::secret::{write_atomic, write_private};
use runtime::tls::CaError;

use crate::error::{FleetError, Result};

/// Mode of certificate files (public).
pub const CERT_FILE_MODE: u32 = 0o644;
/// Timeout of one request made by a client of [`client_trusting`], in milliseconds.
pub const CLIENT_TIMEOUT_MS: u64 = 10_000;
/// Connect timeout of a client of [`client_trusting`], in milliseconds.
pub const CLIENT_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// A CA that can issue leaf certificates.
#[derive(Debug)]
pub struct LocalCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl LocalCa {
    /// A fresh CA.
    pub fn generate(name: &str) -> Result<LocalCa> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(LocalCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Issues a server certificate for `ips`: returns (certificate PEM, key PEM).
    pub fn issue(
        &self,
        name: &str,
        ips: &[IpAddr],
    ) -> Result<(String, zeroize::Zeroizing<String>)> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(ips.iter().map(|ip| ip.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), zeroize::Zeroizing::new(key.serialize_pem())))
    }

    /// Issues and writes `cert_path` (0644) and `key_path` (0600).
    pub fn issue_to(
        &self,
        name: &str,
        ips: &[IpAddr],
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<()> {
        let (cert, key) = self.issue(name, ips)?;
        write_atomic(cert_path, cert.as_bytes(), CERT_FILE_MODE)?;
        Ok(write_private(key_path, key.as_bytes())?)
    }
}

/// An HTTPS client that trusts only the CA certificates in `ca_pem`
/// ([`runtime::tls::client_trusting`] with this fleet's timeouts): the one client builder of
/// the dev fleet and of `cellctl` (whose admin client adds its retry policy on top).
pub fn client_trusting(ca_pem: &[u8]) -> Result<reqwest::Client> {
    let builder = runtime::tls::client_trusting(ca_pem).map_err(|e| match e {
        CaError::Pem(e) => FleetError::from(e),
        _ => FleetError::Config("the CA file holds no certificate".to_string()),
    })?;
    Ok(builder
        .timeout(std::time::Duration::from_millis(CLIENT_TIMEOUT_MS))
        .connect_timeout(std::time::Duration::from_millis(CLIENT_CONNECT_TIMEOUT_MS))
        .build()?)
}

/// An HTTPS client that trusts only the CA certificate file at `path`.
pub fn client_trusting_file(path: &Path) -> Result<reqwest::Client> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    client_trusting(&pem)
}
