//! The dev fleet's local CA and its certificates (rcgen). The HTTPS client that trusts only it
//! is `fleet_description::client_trusting`.

use std::net::IpAddr;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use runtime::secret::{write_atomic, write_private};

use crate::error::Result;

/// Mode of certificate files (public).
pub const CERT_FILE_MODE: u32 = 0o644;

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
