//! `cellctl client …` (DESIGN §8): the SDK driven from the command line, the session kept in a
//! file (mode 0600), results as human text or JSON, the password read from stdin. (It lives
//! here, not in the SDK, so the mobile libraries carry no fleet-file or stdin code.)
//!
//! ```text
//! let cfg = CliConfig::from_fleet(Path::new("dev-fleet/fleet.json")).await?;
//! println!("{}", client::sign_in(&cfg, "c-40711", "ana", &password).await?.human);
//! println!("{}", client::get(&cfg, "/api/routes/today").await?.human);
//! println!("{}", client::post(&cfg, "/api/jobs/j-1/complete", Some("{}")).await?.json);
//! ```
//!
//! With a fleet file, the session lives in `client-session.json` and the signed map (fetched
//! from a cell at the first sign-in, verified against the fleet's map key) in
//! `client-map.json`, both beside `fleet.json`. Each sign-in first adopts a newer map when the
//! control plane (or else a cell) serves one, as an app would ship a newer map: a contractor
//! moved twice since the cached map would otherwise be two redirects away, which sign-in does
//! not follow.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fleet_description::{FleetFile, MAP_FILE, SESSION_FILE};
use http::Method;
use protocol::admin::placement::PLACEMENT_MAP_PATH;
use protocol::jwks::PublicKey;
use protocol::map::SignedMap;
use protocol::{ContractorId, Login, Password};
use sdk::{Client, Error, FileStore, SessionInfo};
use zeroize::Zeroizing;

use crate::error::{CtlError, Result as CtlResult};

/// `cellctl client …`.
#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Sign in (the password is read from stdin) at the contractor's cell.
    SignIn { contractor: String, login: String },
    /// GET a path at the session's cell.
    Get { path: String },
    /// POST to a path at the session's cell (with an idempotency key).
    Post {
        path: String,
        /// JSON body.
        #[arg(long)]
        body: Option<String>,
    },
}

/// Longest password read from stdin, in bytes.
pub const MAX_PASSWORD_BYTES: usize = protocol::ids::PASSWORD_MAX_BYTES;

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

/// A result to print: human text, or JSON with `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub human: String,
    pub json: serde_json::Value,
    /// Whether the command succeeded (a 2xx answer; the exit code follows it).
    pub success: bool,
    /// The cell's HTTP status.
    pub status: u16,
    /// The cell's error code, when it answered with an error body.
    pub code: Option<String>,
}

fn config_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Config(format!("{what} {}: {e}", path.display()))
}

impl CliConfig {
    /// Reads `fleet.json`; takes the signed map from `client-map.json` beside it, or fetches it
    /// from the fleet's first reachable cell and caches it there. The map is verified against
    /// the fleet's map key either way.
    pub async fn from_fleet(fleet_json: &Path) -> Result<CliConfig, Error> {
        Self::load(fleet_json, false).await
    }

    /// [`CliConfig::from_fleet`], then the fleet's current map in place of the cached one when
    /// the control plane (or else a cell) serves a newer one (signature verified, strictly
    /// higher version); the cached map is kept when nothing answers.
    pub async fn from_fleet_refreshed(fleet_json: &Path) -> Result<CliConfig, Error> {
        Self::load(fleet_json, true).await
    }

    async fn load(fleet_json: &Path, refresh: bool) -> Result<CliConfig, Error> {
        let fleet = fleet_description::inventory::load(fleet_json)
            .map_err(|e| Error::Config(e.to_string()))?;
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
        let map_key = protocol::map_key::parse(&fleet.map_public_key)
            .map_err(|e| Error::Config(format!("map_public_key: {e}")))?;
        let map_path = dir.join(MAP_FILE);
        let map = match std::fs::read(&map_path) {
            Ok(m) if SignedMap::verify_bytes(&m, &map_key).is_ok() => {
                let newer = if refresh {
                    newer_map(&fleet, &ca_pem, &map_key, &m).await
                } else {
                    None
                };
                match newer {
                    Some(newer) => {
                        std::fs::write(&map_path, &newer)
                            .map_err(|e| config_err("cannot write", &map_path, e))?;
                        newer
                    }
                    None => m,
                }
            }
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

/// The fleet's current map when it is newer than `held` (a verified signed map): the control
/// plane's, which it publishes before any cell has polled it (right after a migration the cells
/// may still serve the previous one), else a cell's; `None` when it is not newer, or when
/// nothing answers.
async fn newer_map(
    fleet: &FleetFile,
    ca_pem: &[u8],
    key: &PublicKey,
    held: &[u8],
) -> Option<Vec<u8>> {
    let held = SignedMap::verify_bytes(held, key).ok()?;
    let control_plane = format!(
        "{}{PLACEMENT_MAP_PATH}",
        fleet.control_plane.url.trim_end_matches('/')
    );
    let from_control_plane = match fleet_description::client_trusting(ca_pem) {
        Ok(http) => map_at(&http, &control_plane, key).await.ok(),
        Err(_) => None,
    };
    let current = match from_control_plane {
        Some(m) => m,
        None => fetch_map(fleet, ca_pem, key).await.ok()?,
    };
    let offered = SignedMap::verify_bytes(&current, key).ok()?;
    offered.newer_than(Some(&held)).ok()?;
    Some(current)
}

/// The signed map from the fleet's first cell that serves one over HTTPS that verifies.
pub(crate) async fn fetch_map(
    fleet: &FleetFile,
    ca_pem: &[u8],
    key: &PublicKey,
) -> Result<Vec<u8>, Error> {
    let http =
        fleet_description::client_trusting(ca_pem).map_err(|e| Error::Config(e.to_string()))?;
    let mut last = Error::Config("the fleet file lists no cell".into());
    for cell in &fleet.cells {
        let got = match cell.public_endpoint() {
            Ok(endpoint) => map_at(&http, &endpoint.join(PLACEMENT_MAP_PATH), key).await,
            Err(e) => Err(Error::Config(e.to_string())),
        };
        match got {
            Ok(m) => return Ok(m),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The signed map served at `url` (HTTPS only), verified against `key`.
async fn map_at(http: &reqwest::Client, url: &str, key: &PublicKey) -> Result<Vec<u8>, Error> {
    // The map is verified below anyway; still, never fetch it in the clear.
    if !url.starts_with("https://") {
        return Err(Error::Config(format!("{url} is not an https endpoint")));
    }
    let r = http
        .get(url)
        .send()
        .await
        .map_err(|e| sdk::transport::network_error(&e))?;
    if !r.status().is_success() {
        return Err(Error::InvalidResponse(format!(
            "{url} answered {}",
            r.status()
        )));
    }
    let b = r
        .bytes()
        .await
        .map_err(|e| sdk::transport::network_error(&e))?;
    SignedMap::verify_bytes(&b, key)?;
    Ok(b.to_vec())
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
/// without its line ending; refuses an empty or over-long one.
pub fn read_password(mut input: impl std::io::BufRead) -> Result<Zeroizing<String>, Error> {
    let mut line = Zeroizing::new(String::new());
    input
        .read_line(&mut line)
        .map_err(|e| Error::InvalidInput(format!("cannot read the password: {e}")))?;
    let pw = Zeroizing::new(line.trim_end_matches(['\r', '\n']).to_owned());
    if pw.is_empty() {
        return Err(Error::InvalidInput("no password on standard input".into()));
    }
    if pw.len() > MAX_PASSWORD_BYTES {
        return Err(Error::InvalidInput("the password is too long".into()));
    }
    Ok(pw)
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
        status: http::StatusCode::CREATED.as_u16(),
        code: None,
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
        status: r.status,
        code: serde_json::from_slice::<protocol::ErrorBody>(&r.body)
            .ok()
            .map(|b| b.error.to_string()),
    })
}

/// Runs `cellctl client …`: prints the result (JSON with `--json`); fails unless the cell
/// answered 2xx.
pub async fn run(
    fleet: &Path,
    session_file: Option<PathBuf>,
    command: ClientCommand,
    json: bool,
) -> CtlResult<()> {
    let client_err = |e: Error| CtlError::Client(e.to_string());
    let mut cfg = match command {
        // a sign-in starts from the fleet's current map, as an app with a newer map would
        ClientCommand::SignIn { .. } => CliConfig::from_fleet_refreshed(fleet).await,
        _ => CliConfig::from_fleet(fleet).await,
    }
    .map_err(client_err)?;
    if let Some(p) = session_file {
        cfg.session_file = p;
    }
    let out = match command {
        ClientCommand::SignIn { contractor, login } => {
            let pw = read_password(std::io::stdin().lock()).map_err(client_err)?;
            sign_in(&cfg, &contractor, &login, &pw).await
        }
        ClientCommand::Get { path } => get(&cfg, &path).await,
        ClientCommand::Post { path, body } => post(&cfg, &path, body.as_deref()).await,
    }
    .map_err(client_err)?;
    if json {
        println!("{}", out.json);
    } else {
        println!("{}", out.human);
    }
    if out.success {
        Ok(())
    } else {
        Err(CtlError::Client(
            format!(
                "the cell answered {} {}",
                out.status,
                out.code.unwrap_or_default()
            )
            .trim_end()
            .to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_the_first_line() {
        let pw = |input: &[u8]| read_password(input).map(|p| p.as_str().to_owned());
        assert_eq!(pw(b"s3cret pass\r\nmore").unwrap(), "s3cret pass");
        assert_eq!(pw(b"x").unwrap(), "x");
        assert!(matches!(pw(b"\n"), Err(Error::InvalidInput(_))));
        assert!(matches!(pw(b""), Err(Error::InvalidInput(_))));
        let long = vec![b'a'; MAX_PASSWORD_BYTES + 1];
        assert!(matches!(pw(&long), Err(Error::InvalidInput(_))));
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
