//! The logic of `cellctl client …` (DESIGN §8): the SDK driven from the command line, the
//! session kept in a file (mode 0600), results as human text or JSON.
//!
//! ```text
//! let cfg = CliConfig::from_fleet(Path::new("dev-fleet/fleet.json")).await?;
//! println!("{}", cli::sign_in(&cfg, "c-40711", "ana", &password).await?.human);
//! println!("{}", cli::get(&cfg, "/api/routes/today").await?.human);
//! println!("{}", cli::post(&cfg, "/api/jobs/j-1/complete", Some("{}")).await?.json);
//! ```
//!
//! With a fleet file, the session lives in `client-session.json` and the signed map (fetched
//! from a cell at the first sign-in, verified against the fleet's map key) in
//! `client-map.json`, both beside `fleet.json`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::Method;
use protocol::jwks::PublicKey;
use protocol::map::SignedMap;
use protocol::{ContractorId, Login, Password};
use serde::Deserialize;

use crate::{Client, Error, FileStore, SessionInfo};

/// File name of the session, beside `fleet.json`.
pub const SESSION_FILE: &str = "client-session.json";
/// File name of the cached signed map, beside `fleet.json`.
pub const MAP_FILE: &str = "client-map.json";

/// What the command-line client needs.
#[derive(Debug, Clone)]
pub struct CliConfig {
    /// The signed placement map (JSON bytes).
    pub map: Vec<u8>,
    pub map_key: PublicKey,
    /// CA certificate(s) to trust instead of the built-in roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Where the session is kept (written 0600).
    pub session_file: PathBuf,
}

/// The fields of `fleet.json` this module reads (DESIGN §8).
#[derive(Deserialize)]
struct FleetRef {
    ca_cert: PathBuf,
    map_public_key: String,
    cells: Vec<FleetCellRef>,
}

#[derive(Deserialize)]
struct FleetCellRef {
    endpoint: String,
}

/// A result to print: human text, or JSON with `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub human: String,
    pub json: serde_json::Value,
    /// Whether the command succeeded (a 2xx answer; the exit code follows it).
    pub success: bool,
}

fn config_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Config(format!("{what} {}: {e}", path.display()))
}

impl CliConfig {
    /// Reads `fleet.json`; takes the signed map from `client-map.json` beside it, or fetches it
    /// from the fleet's first reachable cell and caches it there. The map is verified against
    /// the fleet's map key either way.
    pub async fn from_fleet(fleet_json: &Path) -> Result<CliConfig, Error> {
        let bytes =
            std::fs::read(fleet_json).map_err(|e| config_err("cannot read", fleet_json, e))?;
        let fleet: FleetRef = serde_json::from_slice(&bytes)
            .map_err(|e| config_err("not a fleet file:", fleet_json, e))?;
        let dir = fleet_json
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let ca_path = if fleet.ca_cert.is_absolute() {
            fleet.ca_cert.clone()
        } else {
            dir.join(&fleet.ca_cert)
        };
        let ca_pem = std::fs::read(&ca_path).map_err(|e| config_err("cannot read", &ca_path, e))?;
        let map_key = PublicKey::from_b64(&fleet.map_public_key)
            .map_err(|e| Error::Config(format!("map_public_key: {e}")))?;
        let map_path = dir.join(MAP_FILE);
        let map = match std::fs::read(&map_path) {
            Ok(m) if SignedMap::verify_bytes(&m, &map_key).is_ok() => m,
            _ => {
                let m = fetch_map(&fleet, &ca_pem, &map_key).await?;
                std::fs::write(&map_path, &m)
                    .map_err(|e| config_err("cannot write", &map_path, e))?;
                m
            }
        };
        Ok(CliConfig {
            map,
            map_key,
            ca_pem: Some(ca_pem),
            session_file: dir.join(SESSION_FILE),
        })
    }

    /// A client over the session file.
    pub fn client(&self) -> Result<Client, Error> {
        let mut b = Client::builder(self.map.clone(), self.map_key.clone())
            .store(Arc::new(FileStore::new(self.session_file.clone())));
        if let Some(pem) = &self.ca_pem {
            b = b.extra_ca_pem(pem.clone());
        }
        b.build()
    }
}

async fn fetch_map(fleet: &FleetRef, ca_pem: &[u8], key: &PublicKey) -> Result<Vec<u8>, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem)
        .map_err(|e| Error::Config(format!("CA certificate: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Config(
            "CA certificate PEM holds no certificate".into(),
        ));
    }
    let http = reqwest::Client::builder()
        .tls_certs_only(certs)
        .https_only(true)
        .timeout(crate::DEFAULT_REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Error::Config(e.to_string()))?;
    let mut last = Error::Config("the fleet file lists no cell".into());
    for cell in &fleet.cells {
        let url = format!("{}/v1/placement-map", cell.endpoint.trim_end_matches('/'));
        let got = async {
            let r = http
                .get(&url)
                .send()
                .await
                .map_err(|e| Error::Network(e.to_string()))?;
            if !r.status().is_success() {
                return Err(Error::InvalidResponse(format!(
                    "{url} answered {}",
                    r.status()
                )));
            }
            let b = r.bytes().await.map_err(|e| Error::Network(e.to_string()))?;
            SignedMap::verify_bytes(&b, key)?;
            Ok(b.to_vec())
        }
        .await;
        match got {
            Ok(m) => return Ok(m),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn info_json(i: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "session_id": i.session_id.as_str(),
        "contractor_id": i.contractor_id.as_str(),
        "subject": i.subject.as_str(),
        "cell_id": i.cell_id.as_str(),
        "endpoint": i.endpoint,
        "generation": i.generation.get(),
        "expires_at": i.expires_at,
    })
}

/// Reads a password as `cellctl client sign-in` takes it: the first line of `input` (stdin),
/// without its line ending.
pub fn read_password(mut input: impl std::io::BufRead) -> Result<String, Error> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(|e| Error::InvalidInput(format!("cannot read the password: {e}")))?;
    let pw = line.strip_suffix('\n').unwrap_or(&line);
    let pw = pw.strip_suffix('\r').unwrap_or(pw);
    if pw.is_empty() {
        return Err(Error::InvalidInput("no password on standard input".into()));
    }
    Ok(pw.to_owned())
}

/// `cellctl client sign-in CONTRACTOR LOGIN` (password read from stdin by the caller, e.g.
/// with [`read_password`]).
pub async fn sign_in(
    cfg: &CliConfig,
    contractor: &str,
    login: &str,
    password: &str,
) -> Result<Output, Error> {
    let contractor = ContractorId::new(contractor)?;
    let login = Login::new(login)?;
    let password = Password::new(password)?;
    let client = cfg.client()?;
    let info = client.sign_in(&contractor, &login, &password).await?;
    Ok(Output {
        human: format!(
            "signed in as {} at {} ({}), generation {}, expires at {} (unix); session in {}",
            info.subject,
            info.cell_id,
            info.endpoint,
            info.generation,
            info.expires_at,
            cfg.session_file.display()
        ),
        json: info_json(&info),
        success: true,
    })
}

/// `cellctl client get PATH`: a read at the session's cell.
pub async fn get(cfg: &CliConfig, path: &str) -> Result<Output, Error> {
    send(cfg, Method::GET, path, None).await
}

/// `cellctl client post PATH [BODY]`: a write at the session's cell (with an idempotency key).
pub async fn post(cfg: &CliConfig, path: &str, body: Option<&str>) -> Result<Output, Error> {
    send(cfg, Method::POST, path, body.map(|b| b.as_bytes().to_vec())).await
}

async fn send(
    cfg: &CliConfig,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Output, Error> {
    let client = cfg.client()?;
    if client.restore()?.is_none() {
        return Err(Error::NotSignedIn);
    }
    let r = client.request(method, path, body).await?;
    let parsed = serde_json::from_slice::<serde_json::Value>(&r.body).ok();
    let human = match &parsed {
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
        None => String::from_utf8_lossy(&r.body).into_owned(),
    };
    Ok(Output {
        human,
        json: serde_json::json!({
            "status": r.status,
            "body": parsed.unwrap_or_else(|| serde_json::Value::String(String::from_utf8_lossy(&r.body).into_owned())),
        }),
        success: (200..300).contains(&r.status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{DAY, FakeFleet, Reply};

    async fn fleet_file(f: &FakeFleet, dir: &Path, map_version: u64) -> PathBuf {
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &f.ca_pem).unwrap();
        let map = f.map(map_version, &[]);
        f.cells[0].always(
            "GET /v1/placement-map",
            Reply::json(200, serde_json::to_value(&map).unwrap()),
        );
        let fleet = serde_json::json!({
            "ca_cert": "ca.pem",
            "map_public_key": base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                f.map_key.public_bytes()
            ),
            "cells": f.cells.iter().map(|c| serde_json::json!({"id": c.id.as_str(), "endpoint": c.endpoint})).collect::<Vec<_>>(),
            "demo": {"technicians": []},
        });
        let path = dir.join("fleet.json");
        std::fs::write(&path, serde_json::to_vec(&fleet).unwrap()).unwrap();
        path
    }

    #[tokio::test]
    async fn sign_in_then_get_and_post_across_invocations() {
        let f = FakeFleet::start(1).await;
        // real time here: the CLI uses the system clock
        let now = protocol::time::Clock::now(&protocol::time::SystemClock);
        f.cells[0].accept_sign_in(now + 30 * DAY);
        f.cells[0].always(
            "GET /api/routes/today",
            Reply::json(
                200,
                serde_json::json!({"contractor_id": "c-40711", "jobs": []}),
            ),
        );
        f.cells[0].always(
            "POST /api/jobs/j-1/complete",
            Reply::json(200, serde_json::json!({"replayed": false})),
        );
        let dir = tempfile::tempdir().unwrap();
        let fleet = fleet_file(&f, dir.path(), 3).await;

        let cfg = CliConfig::from_fleet(&fleet).await.unwrap();
        assert!(matches!(
            get(&cfg, "/api/routes/today").await,
            Err(Error::NotSignedIn)
        ));
        let out = sign_in(&cfg, "c-40711", "ana", "pw-pw-pw").await.unwrap();
        assert!(out.human.contains("cell-01"), "{}", out.human);
        assert_eq!(out.json["cell_id"], "cell-01");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(SESSION_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        // a later invocation: a new config and client, the session from the file
        let cfg2 = CliConfig::from_fleet(&fleet).await.unwrap();
        assert_eq!(
            f.cells[0].hits("GET /v1/placement-map").len(),
            1,
            "map cached"
        );
        let out = get(&cfg2, "/api/routes/today").await.unwrap();
        assert!(out.success);
        assert_eq!(out.json["status"], 200);
        assert_eq!(out.json["body"]["contractor_id"], "c-40711");
        let out = post(&cfg2, "/api/jobs/j-1/complete", Some("{}"))
            .await
            .unwrap();
        assert!(out.success);
        let hit = &f.cells[0].hits("POST /api/jobs/j-1/complete")[0];
        assert!(hit.idempotency_key().is_some());
        assert_eq!(hit.bearer().as_deref(), Some("tok.sign.in"));
    }

    #[test]
    fn password_is_the_first_line() {
        assert_eq!(
            read_password(&b"s3cret pass\r\nmore"[..]).unwrap(),
            "s3cret pass"
        );
        assert_eq!(read_password(&b"x"[..]).unwrap(), "x");
        assert!(matches!(
            read_password(&b"\n"[..]),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(
            read_password(&b""[..]),
            Err(Error::InvalidInput(_))
        ));
    }

    #[tokio::test]
    async fn a_bad_fleet_file_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fleet.json");
        assert!(matches!(
            CliConfig::from_fleet(&p).await,
            Err(Error::Config(_))
        ));
        std::fs::write(&p, b"{}").unwrap();
        assert!(matches!(
            CliConfig::from_fleet(&p).await,
            Err(Error::Config(_))
        ));
    }
}
