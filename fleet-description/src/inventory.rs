//! The inventory (`cellctl --inventory cells.toml`): what `cellctl` needs to operate a real
//! fleet — where the control plane and each cell's services are, the CA they chain to, and the
//! files holding each one's OWN token (a cell's admin token opens that cell's auth-service only;
//! its app's internal token that app's migration interface only; the control plane has its
//! own). `cellctl dev` writes one (`inventory.toml`) beside `fleet.json`.
//!
//! ```toml
//! schema = 1
//! ca_cert = "ca.pem"                     # relative paths are relative to this file
//!
//! [control_plane]
//! url = "https://control-plane.internal:8440"
//! token_file = "secrets/control-plane.token"
//! map_public_key = "base64url Ed25519 key"  # `cellctl client` verifies the placement map with it
//!
//! [[cells]]
//! id = "cell-01"
//! endpoint = "https://cell-01.example.com"  # the public endpoint (its edges)
//! auth_service_urls = ["https://auth-a.cell-01.internal:8446", "https://auth-b.cell-01.internal:8446"]
//! app_internal_url = "https://app.cell-01.internal:8448"
//! admin_token_file = "secrets/cell-01/admin.token"
//! app_internal_token_file = "secrets/cell-01/app-internal.token"
//!
//! [gameday]                              # optional: `cellctl gameday` (see [`crate::gameday`])
//! state_dir = "gameday"
//! [[gameday.actuators]]
//! target = "cell-01/auth-service"
//! kind = "systemd"
//! units = ["cellbind-auth-service.service"]
//! ```
//!
//! Every command reads its fleet through [`load`]: an inventory (a `.toml` file) or a dev
//! fleet's `fleet.json`, into one in-memory description.

use std::path::{Path, PathBuf};

use protocol::{CellId, Endpoint};
use runtime::IoContext as _;
use runtime::Secret;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fleet_file::{
    Demo, FLEET_SCHEMA, FleetCell, FleetFile, FleetManagement, Service, StoreKind,
};
use crate::gameday::GamedaySection;

/// Mode of a configuration file that names token files and holds none (the inventory, and the
/// dev fleet's server configurations).
pub const CONFIG_FILE_MODE: u32 = 0o644;

/// Schema version of an inventory.
pub const INVENTORY_SCHEMA: u32 = 1;
/// File name of the inventory `cellctl dev` writes beside `fleet.json`.
pub const INVENTORY_FILE: &str = "inventory.toml";

/// The control plane as an inventory names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlPlaneEntry {
    pub url: Endpoint,
    /// The control plane's own admin token (no cell accepts it).
    pub token_file: PathBuf,
    /// base64url Ed25519 public key of the placement map: the control plane's (`GET
    /// <control plane>/v1/map-public-key`; a published example key is refused).
    pub map_public_key: String,
}

/// One cell as an inventory names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellEntry {
    pub id: CellId,
    /// The cell's public endpoint (its edges, behind their load balancer).
    pub endpoint: Endpoint,
    /// The auth-service's internal listener(s): one URL (a load balancer) or every replica's;
    /// admin calls go to them in turn.
    pub auth_service_urls: Vec<Endpoint>,
    /// The app's internal listener (its migration interface).
    pub app_internal_url: Endpoint,
    /// This cell's own admin token: its auth-service's admin API (every other cell, and the
    /// cell's app, refuse it).
    pub admin_token_file: PathBuf,
    /// The app's own internal token: its migration interface (`app_internal_url`). Not the
    /// admin token: the app holds no key to the auth-service's admin API.
    pub app_internal_token_file: PathBuf,
}

/// `cells.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub schema: u32,
    /// The CA (PEM) every service's certificate chains to.
    pub ca_cert: PathBuf,
    pub control_plane: ControlPlaneEntry,
    pub cells: Vec<CellEntry>,
    /// `cellctl gameday`'s section (actuators, stop conditions, the edges' metrics URLs);
    /// an inventory without one still reads. As written: [`load_gameday`]
    /// resolves its paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gameday: Option<GamedaySection>,
}

fn config(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("{}: {what}", path.display()))
}

/// `p` relative to the folder of the inventory at `file` (absolute paths unchanged).
fn beside(file: &Path, p: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

impl Inventory {
    /// Reads and checks an inventory (schema, at least one cell, ids unique, at least one
    /// auth-service URL per cell).
    pub fn read(path: &Path) -> Result<Inventory> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let inv: Inventory = toml::from_str(&text).map_err(|e| config(path, e))?;
        if inv.schema != INVENTORY_SCHEMA {
            return Err(config(
                path,
                format_args!(
                    "schema {} is not supported (this build reads {INVENTORY_SCHEMA})",
                    inv.schema
                ),
            ));
        }
        if inv.cells.is_empty() {
            return Err(config(path, "no [[cells]]"));
        }
        protocol::map_key::parse(&inv.control_plane.map_public_key)
            .map_err(|e| config(path, format_args!("control_plane.map_public_key: {e}")))?;
        for (i, c) in inv.cells.iter().enumerate() {
            if inv.cells[..i].iter().any(|o| o.id == c.id) {
                return Err(config(path, format_args!("cell {} is listed twice", c.id)));
            }
            if c.auth_service_urls.is_empty() {
                return Err(config(
                    path,
                    format_args!("cell {}: auth_service_urls is empty", c.id),
                ));
            }
        }
        if let Some(g) = &inv.gameday {
            let cells: Vec<&CellId> = inv.cells.iter().map(|c| &c.id).collect();
            g.check(path, &cells)?;
        }
        Ok(inv)
    }

    /// The fleet description every command works from: token files read (each must exist and
    /// not be empty), paths made relative to the inventory's folder.
    pub fn resolve(&self, path: &Path) -> Result<FleetFile> {
        let token = |f: &Path| -> Result<(String, PathBuf)> {
            let file = beside(path, f);
            let secret = Secret::from_file(&file).map_err(|e| config(path, e))?;
            Ok((secret.expose().to_owned(), file))
        };
        let (cp_token, cp_token_file) = token(&self.control_plane.token_file)?;
        let mut cells = Vec::with_capacity(self.cells.len());
        for c in &self.cells {
            let (admin_token, admin_token_file) = token(&c.admin_token_file)?;
            let (app_internal_token, app_internal_token_file) = token(&c.app_internal_token_file)?;
            let replicas: Vec<Service> = c
                .auth_service_urls
                .iter()
                .map(|u| Service {
                    url: u.as_str().to_owned(),
                    pid: 0,
                })
                .collect();
            cells.push(FleetCell {
                id: c.id.clone(),
                endpoint: c.endpoint.as_str().to_owned(),
                endpoint_pid: 0,
                auth_service: replicas[0].clone(),
                auth_public_url: String::new(),
                auth_services: replicas,
                auth_public_urls: Vec::new(),
                app_url: String::new(),
                app_internal_url: c.app_internal_url.as_str().to_owned(),
                app_pid: 0,
                admin_token,
                admin_token_file,
                app_internal_token,
                app_internal_token_file,
            });
        }
        Ok(FleetFile {
            schema: FLEET_SCHEMA,
            ca_cert: beside(path, &self.ca_cert),
            control_plane: Service {
                url: self.control_plane.url.as_str().to_owned(),
                pid: 0,
            },
            admin_token: cp_token,
            admin_token_file: cp_token_file,
            map_public_key: self.control_plane.map_public_key.clone(),
            store: StoreKind::default(),
            postgres: None,
            cells,
            demo: Demo {
                technicians: Vec::new(),
                dispatchers: Vec::new(),
            },
        })
    }

    /// The inventory of a dev fleet: its services and the token files it wrote.
    pub fn of_fleet(f: &FleetFile) -> Result<Inventory> {
        let url = |field: &str, u: &str| {
            Endpoint::parse(u).map_err(|e| Error::Config(format!("fleet file {field}: {e}")))
        };
        let mut cells = Vec::with_capacity(f.cells.len());
        for c in &f.cells {
            cells.push(CellEntry {
                id: c.id.clone(),
                endpoint: url("cells[].endpoint", &c.endpoint)?,
                auth_service_urls: c
                    .replicas()
                    .iter()
                    .map(|r| url("cells[].auth_services[].url", &r.url))
                    .collect::<Result<_>>()?,
                app_internal_url: url("cells[].app_internal_url", &c.app_internal_url)?,
                admin_token_file: c.admin_token_file.clone(),
                app_internal_token_file: c.app_internal_token_file.clone(),
            });
        }
        Ok(Inventory {
            schema: INVENTORY_SCHEMA,
            ca_cert: f.ca_cert.clone(),
            control_plane: ControlPlaneEntry {
                url: url("control_plane.url", &f.control_plane.url)?,
                token_file: f.admin_token_file.clone(),
                map_public_key: f.map_public_key.clone(),
            },
            cells,
            gameday: None,
        })
    }

    /// Writes the inventory as TOML (it names token files, never holds a token).
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = toml::to_string(self).map_err(|e| Error::Config(format!("inventory: {e}")))?;
        runtime::secret::write_atomic(path, text.as_bytes(), CONFIG_FILE_MODE)
            .map_err(|e| config(path, e))
    }
}

/// The fleet a command acts on: an inventory (`*.toml`) or a dev fleet's `fleet.json`.
pub fn load(path: &Path) -> Result<FleetFile> {
    if path.extension().is_some_and(|e| e == "toml") {
        Inventory::read(path)?.resolve(path)
    } else {
        Ok(FleetFile::load(path)?)
    }
}

/// `true` when `path` names an inventory (`*.toml`), not a dev fleet's `fleet.json` (the
/// rule of [`crate::inventory::load`]).
pub fn is_inventory(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// The game day section of the fleet at `path`: an inventory's `[gameday]` (its defaults when
/// it has none; `state_dir` resolved beside the file), or, for a dev fleet's `fleet.json`, one
/// synthesised by [`GamedaySection::of_fleet`].
pub fn load_gameday(path: &Path) -> Result<GamedaySection> {
    if is_inventory(path) {
        let inv = Inventory::read(path)?;
        let mut g = inv.gameday.unwrap_or_default();
        g.state_dir = beside(path, &g.state_dir);
        Ok(g)
    } else {
        let fleet = FleetFile::load(path)?;
        let management = FleetManagement::load(path)?;
        Ok(GamedaySection::of_fleet(&fleet, &management, path))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SAMPLE: &str = r#"
schema = 1
ca_cert = "ca.pem"

[control_plane]
url = "https://cp.internal:8440/"
token_file = "secrets/control-plane.token"
map_public_key = "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E"

[[cells]]
id = "cell-01"
endpoint = "https://cell-01.example.com"
auth_service_urls = ["https://auth-a.internal:8446", "https://auth-b.internal:8446"]
app_internal_url = "https://app.internal:8448"
admin_token_file = "secrets/cell-01/admin.token"
app_internal_token_file = "secrets/cell-01/app-internal.token"
"#;

    fn dir_with(sample: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("secrets/cell-01")).unwrap();
        std::fs::write(dir.path().join("secrets/control-plane.token"), "cp-token\n").unwrap();
        std::fs::write(
            dir.path().join("secrets/cell-01/admin.token"),
            "cell-01-token",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("secrets/cell-01/app-internal.token"),
            "cell-01-app-internal-token",
        )
        .unwrap();
        let path = dir.path().join("cells.toml");
        std::fs::write(&path, sample).unwrap();
        (dir, path)
    }

    #[test]
    fn an_inventory_resolves_to_its_cells_replicas_and_own_tokens() {
        let (dir, path) = dir_with(SAMPLE);
        let f = load(&path).unwrap();
        assert_eq!(f.ca_cert, dir.path().join("ca.pem"));
        assert_eq!(f.control_plane.url, "https://cp.internal:8440");
        assert_eq!(f.admin_token, "cp-token");
        let c = &f.cells[0];
        assert_eq!(c.admin_token, "cell-01-token");
        assert_eq!(c.app_internal_token, "cell-01-app-internal-token");
        assert_eq!(
            c.app_internal_token_file,
            dir.path().join("secrets/cell-01/app-internal.token")
        );
        assert_eq!(c.replicas().len(), 2);
        assert_eq!(c.auth_service.url, "https://auth-a.internal:8446");
        // Round trip through the dev fleet's writer.
        let again = Inventory::of_fleet(&f).unwrap();
        assert_eq!(again.cells[0].auth_service_urls.len(), 2);
    }

    const GAMEDAY: &str = r#"
[gameday]
state_dir = "state/gameday"
[gameday.stop]
max_error_ratio = 0.1
max_p99_ms = 1500
[[gameday.edges]]
cell = "cell-01"
metrics_urls = ["https://edge-a.cell-01.internal:9443/metrics"]
[[gameday.actuators]]
target = "cell-01/auth-service"
kind = "systemd"
units = ["cellbind-auth-service.service"]
signal = "SIGKILL"
[[gameday.actuators]]
target = "cell-01/edge"
kind = "command"
down = ["kubectl", "scale", "deploy/cell-01-edge", "--replicas=0"]
up = ["kubectl", "scale", "deploy/cell-01-edge", "--replicas=2"]
[[gameday.actuators]]
target = "control-plane"
kind = "local"
"#;

    #[test]
    fn an_inventory_with_a_gameday_section_reads_its_actuators() {
        use crate::gameday::{
            Actuator, ActuatorKind, DEFAULT_MIN_REQUESTS, DEFAULT_WINDOW_S, Target,
        };
        let (dir, path) = dir_with(&format!("{SAMPLE}{GAMEDAY}"));
        let inv = Inventory::read(&path).unwrap();
        let g = inv.gameday.as_ref().unwrap();
        assert_eq!(g.state_dir, Path::new("state/gameday"));
        let cell = CellId::new("cell-01").unwrap();
        let kinds: Vec<(String, ActuatorKind)> = g
            .actuators
            .iter()
            .map(|a| (a.target.to_string(), a.actuator.kind()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("cell-01/auth-service".to_owned(), ActuatorKind::Systemd),
                ("cell-01/edge".to_owned(), ActuatorKind::Command),
                ("control-plane".to_owned(), ActuatorKind::Local),
            ]
        );
        assert_eq!(
            g.actuators[0].actuator,
            Actuator::Systemd {
                units: vec!["cellbind-auth-service.service".into()],
                signal: Some("SIGKILL".into()),
            }
        );
        assert_eq!(
            g.actuator_for(&Target::AuthReplica(cell.clone(), 1))
                .unwrap()
                .target,
            Target::AuthService(cell)
        );
        assert_eq!(g.stop.max_error_ratio, 0.1);
        assert_eq!(g.stop.max_p99_ms, 1500);
        assert_eq!(g.stop.min_requests, DEFAULT_MIN_REQUESTS);
        assert_eq!(g.stop.window_s, DEFAULT_WINDOW_S);
        assert_eq!(
            g.metrics_urls(),
            ["https://edge-a.cell-01.internal:9443/metrics"]
        );
        // The loader resolves the state directory beside the inventory.
        let loaded = load_gameday(&path).unwrap();
        assert_eq!(loaded.state_dir, dir.path().join("state/gameday"));
        // And the fleet still resolves.
        assert_eq!(load(&path).unwrap().cells.len(), 1);
    }

    #[test]
    fn an_inventory_without_a_gameday_section_still_reads() {
        let (dir, path) = dir_with(SAMPLE);
        assert!(Inventory::read(&path).unwrap().gameday.is_none());
        let g = load_gameday(&path).unwrap();
        assert_eq!(g.state_dir, dir.path().join("gameday"));
        assert!(g.actuators.is_empty());
        // What `cellctl dev` writes has none either.
        let f = load(&path).unwrap();
        let text = toml::to_string(&Inventory::of_fleet(&f).unwrap()).unwrap();
        assert!(!text.contains("gameday"), "{text}");
    }

    #[test]
    fn a_bad_gameday_section_is_refused_naming_the_file() {
        for (bad, says) in [
            (
                GAMEDAY.replace("kind = \"systemd\"", "kind = \"sytemd\""),
                "unknown variant `sytemd`",
            ),
            (
                GAMEDAY.replace("\"cell-01/edge\"", "\"cell-01/edge/0\""),
                "\"cell-01/edge/0\" is not a game day target",
            ),
            (
                GAMEDAY.replace("\"cell-01/edge\"", "\"cell-09/edge\""),
                "cell-09 is not a cell of the inventory",
            ),
            (
                GAMEDAY.replace("\"control-plane\"", "\"cell-01/edge\""),
                "cell-01/edge has two actuators",
            ),
            (
                GAMEDAY.replace("units = [\"cellbind-auth-service.service\"]", ""),
                "needs `units`",
            ),
            (
                GAMEDAY.replace("signal = \"SIGKILL\"", "signal = \"kill -9\""),
                "not a signal name",
            ),
            (
                GAMEDAY.replace("kind = \"local\"", "kind = \"local\"\nunits = [\"x\"]"),
                "`units` does not apply",
            ),
            (
                GAMEDAY.replace("max_p99_ms = 1500", "max_p99 = 1500"),
                "max_p99",
            ),
            (
                GAMEDAY.replace("max_error_ratio = 0.1", "max_error_ratio = 5.0"),
                "max_error_ratio 5 is not between 0 and 1",
            ),
        ] {
            let (_dir, path) = dir_with(&format!("{SAMPLE}{bad}"));
            let e = Inventory::read(&path).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
            assert!(e.contains("cells.toml"), "{e}");
        }
    }

    #[test]
    fn a_bad_inventory_is_refused_naming_the_file() {
        for (bad, says) in [
            (SAMPLE.replace("schema = 1", "schema = 7"), "schema 7"),
            (SAMPLE.replace("endpoint =", "endpiont ="), "endpiont"),
            (
                SAMPLE.replace(
                    r#"["https://auth-a.internal:8446", "https://auth-b.internal:8446"]"#,
                    "[]",
                ),
                "auth_service_urls is empty",
            ),
            (
                SAMPLE.replace("secrets/cell-01/admin.token", "secrets/missing.token"),
                "missing.token",
            ),
            // An inventory written before the app had its own token.
            (
                SAMPLE.replace(
                    "app_internal_token_file = \"secrets/cell-01/app-internal.token\"\n",
                    "",
                ),
                "app_internal_token_file",
            ),
            (
                SAMPLE.replace(
                    "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E",
                    protocol::map_key::RFC8037_EXAMPLE_KEY,
                ),
                "control_plane.map_public_key: RFC 8037's example key",
            ),
            (
                SAMPLE.replace("7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E", "REPLACE-ME"),
                "control_plane.map_public_key: not a base64url Ed25519 public key",
            ),
        ] {
            let (_dir, path) = dir_with(&bad);
            let e = load(&path).unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
    }
}
