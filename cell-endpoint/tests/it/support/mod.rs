//! Real-process fixtures: a CA and a loopback certificate made with rcgen, secret files,
//! free ports, spawned binaries that die with the test, HTTPS clients, polling with a deadline.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// Files of a test PKI.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA and a leaf for 127.0.0.1 / localhost under `dir` (`name`-cert.pem, `name`-key.pem).
pub fn make_pki(dir: &Path, name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, &ca_key);
    let pki = Pki {
        ca: dir.join(format!("{name}-ca.pem")),
        cert: dir.join(format!("{name}-cert.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
    leaf(&issuer, &pki.cert, &pki.key);
    pki
}

/// Writes a fresh leaf (new key) signed by `issuer`; returns its DER.
pub fn leaf(issuer: &Issuer<'_, &KeyPair>, cert: &Path, key: &Path) -> Vec<u8> {
    let leaf_key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let c = params.signed_by(&leaf_key, issuer).unwrap();
    write_secret(key, &leaf_key.serialize_pem());
    std::fs::write(cert, c.pem()).unwrap();
    c.der().to_vec()
}

/// Writes a file with mode 0600.
pub fn write_secret(path: &Path, content: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(content.as_bytes()).unwrap();
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A workspace binary built next to this test binary (`cargo build --workspace --bins`
/// runs before the tests in CI).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{name} is not built at {}: run `cargo build --workspace --bins` before the tests",
        path.display()
    );
    path
}

/// A child process killed (SIGKILL) when dropped; its stdin pipe makes it exit if the test
/// process dies first (`CELLBIND_EXIT_ON_STDIN_EOF=1`).
pub struct Proc {
    pub name: String,
    pub child: Child,
}

impl Proc {
    pub fn spawn(
        name: &str,
        bin: &Path,
        config: &Path,
        log_dir: &Path,
        env: &[(&str, &str)],
    ) -> Proc {
        let log = std::fs::File::create(log_dir.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(config)
            .env("CELLBIND_EXIT_ON_STDIN_EOF", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc {
            name: name.to_owned(),
            child: cmd.spawn().unwrap(),
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTPS client trusting only `ca`.
pub fn client(ca: &Path) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Polls `check` until it returns `Some`, or panics with `what` after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
