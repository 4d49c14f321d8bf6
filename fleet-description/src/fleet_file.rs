//! `fleet.json`: where everything of a dev fleet is (DESIGN §8), and the names of the files
//! `cellctl` keeps beside it (a fresh fleet removes them).

use std::path::{Path, PathBuf};

use protocol::{CellId, ContractorId, Endpoint};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use runtime::IoContext as _;
use runtime::Secret;
use runtime::secret::write_private;

/// Schema version of `fleet.json`.
pub const FLEET_SCHEMA: u32 = 1;
/// File name of the fleet description in the fleet directory.
pub const FLEET_FILE: &str = "fleet.json";
/// File name of `cellctl client`'s session, beside `fleet.json`.
pub const SESSION_FILE: &str = "client-session.json";
/// File name of `cellctl client`'s cached signed map, beside `fleet.json`.
pub const MAP_FILE: &str = "client-map.json";
/// File name of `cellctl migrate`'s journal, beside `fleet.json`.
pub const JOURNAL_FILE: &str = "migrations.db";

/// Where the cells' auth-services keep their state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// One SQLite file per auth-service (one replica per cell).
    #[default]
    Sqlite,
    /// One PostgreSQL database per cell on the fleet's private server, shared by the cell's
    /// replicas.
    Postgres,
}

impl StoreKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for StoreKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "sqlite" => Ok(StoreKind::Sqlite),
            "postgres" => Ok(StoreKind::Postgres),
            other => Err(Error::Config(format!(
                "unknown store {other:?} (sqlite or postgres)"
            ))),
        }
    }
}

/// The fleet's private PostgreSQL server (when the store is PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostgresInfo {
    /// The folder of its unix socket (the `host` of the cells' database URLs).
    pub socket_dir: PathBuf,
    /// Its data directory (outside the fleet directory when the fleet runs as root).
    pub data_dir: PathBuf,
}

/// A process reached over HTTPS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    pub url: String,
    pub pid: u32,
}

/// One cell of the fleet. Each cell has its own tokens: a token of one cell is refused by
/// every other cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetCell {
    pub id: CellId,
    /// The cell's public endpoint (its edge).
    pub endpoint: String,
    pub endpoint_pid: u32,
    /// The auth-service: `url` is its INTERNAL listener, which serves every route (the admin
    /// API and the feed as well as the public ones; `/metrics` is on its management listener,
    /// [`FleetManagement`]); `pid` its process. With several replicas: replica 0 (the first of
    /// `auth_services`).
    pub auth_service: Service,
    /// The auth-service's PUBLIC listener (the sessions API, JWKS, the map, health): what the
    /// edge forwards `/v1/sessions*` to. With several replicas: replica 0's.
    pub auth_public_url: String,
    /// Every auth-service replica, replica 0 first: its INTERNAL listener and its pid.
    #[serde(default)]
    pub auth_services: Vec<Service>,
    /// Every auth-service replica's PUBLIC listener, in the order of `auth_services`.
    #[serde(default)]
    pub auth_public_urls: Vec<String>,
    /// The demo app's PUBLIC listener (`/api/*` with the edge key): what the edge forwards to.
    pub app_url: String,
    /// The demo app's INTERNAL listener (`/internal/v1/*`, the migration interface, with the
    /// app's own internal token).
    pub app_internal_url: String,
    pub app_pid: u32,
    /// This cell's admin token: the bearer token of its auth-service's `/admin/v1/*`. Refused
    /// by every other cell, and by the cell's own app.
    pub admin_token: String,
    /// The same token's file (0600, `DIR/secrets/<cell>/admin.token`; the cell's app-internal,
    /// feed, app and edge tokens are beside it).
    pub admin_token_file: PathBuf,
    /// This cell's app's internal token: the bearer token of the app's `/internal/v1/*` (its
    /// migration interface). Refused by the auth-service's admin API and by every other cell.
    /// Empty in a fleet file written before the app had its own token.
    #[serde(default)]
    pub app_internal_token: String,
    /// The same token's file (0600, `DIR/secrets/<cell>/app-internal.token`).
    #[serde(default)]
    pub app_internal_token_file: PathBuf,
}

/// A seeded user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoUser {
    pub contractor_id: ContractorId,
    pub login: String,
    pub password: String,
    pub cell_id: CellId,
}

/// The seeded users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demo {
    pub technicians: Vec<DemoUser>,
    pub dispatchers: Vec<DemoUser>,
}

/// `fleet.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetFile {
    pub schema: u32,
    /// Path of the CA certificate (PEM) every process's certificate chains to.
    pub ca_cert: PathBuf,
    pub control_plane: Service,
    /// The CONTROL PLANE's token: the bearer token of its `/admin/v1/*` (placements,
    /// publication). Not a cell's token: each cell's is `cells[].admin_token`, and no cell
    /// accepts this one.
    pub admin_token: String,
    /// The same token's file (0600, `DIR/secrets/control-plane.token`).
    pub admin_token_file: PathBuf,
    /// The control plane's map key, base64url Ed25519 public key.
    pub map_public_key: String,
    /// Where the auth-services keep their state.
    #[serde(default)]
    pub store: StoreKind,
    /// The private PostgreSQL server, when `store` is `postgres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresInfo>,
    pub cells: Vec<FleetCell>,
    pub demo: Demo,
}

/// The management listeners of a fleet (`/healthz`, `/readyz`, `/metrics`; HTTPS with the
/// fleet's CA), under `management` in `fleet.json` (read with [`FleetManagement::load`]; a
/// file written before management listeners existed has none: empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetManagement {
    /// The control plane's.
    #[serde(default)]
    pub control_plane: String,
    /// Each cell's servers'.
    #[serde(default)]
    pub cells: Vec<CellManagement>,
}

/// The management listeners of one cell's servers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellManagement {
    pub id: CellId,
    /// Each edge instance's, in instance order.
    #[serde(default)]
    pub edges: Vec<String>,
    /// Each auth-service replica's, replica 0 first.
    #[serde(default)]
    pub auth_services: Vec<String>,
    /// The app's.
    #[serde(default)]
    pub app: String,
}

/// What `fleet.json` holds beside the [`FleetFile`]'s fields.
#[derive(Debug, Default, Deserialize)]
struct Extra {
    #[serde(default)]
    management: FleetManagement,
}

/// `fleet.json` as the dev fleet writes it: the [`FleetFile`] and its management listeners.
#[derive(Debug, Serialize)]
struct Written<'a> {
    #[serde(flatten)]
    file: &'a FleetFile,
    management: &'a FleetManagement,
}

impl FleetManagement {
    /// The `management` of a fleet file (empty when it has none).
    pub fn load(path: &Path) -> Result<FleetManagement> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let extra: Extra = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Config(format!("{} is not a fleet file: {e}", path.display())))?;
        Ok(extra.management)
    }

    /// Every management URL: the control plane's, then per cell its edges', auth-services'
    /// and app's.
    pub fn urls(&self) -> Vec<&str> {
        let mut v = vec![self.control_plane.as_str()];
        for c in &self.cells {
            v.extend(c.edges.iter().map(String::as_str));
            v.extend(c.auth_services.iter().map(String::as_str));
            v.push(c.app.as_str());
        }
        v
    }

    /// A cell's.
    pub fn cell(&self, id: &CellId) -> Option<&CellManagement> {
        self.cells.iter().find(|c| &c.id == id)
    }
}

/// A URL field of a fleet file as an [`Endpoint`].
fn endpoint(field: &str, url: &str) -> Result<Endpoint> {
    Endpoint::parse(url).map_err(|e| Error::Config(format!("fleet file {field}: {e}")))
}

impl FleetCell {
    /// This cell's own admin token (every other cell refuses it).
    pub fn admin(&self) -> Secret {
        Secret::new(self.admin_token.clone())
    }

    /// This cell's app's own internal token (its migration interface).
    pub fn app_internal(&self) -> Secret {
        Secret::new(self.app_internal_token.clone())
    }

    /// The auth-service's internal listener (its admin API), parsed.
    pub fn auth_admin_endpoint(&self) -> Result<Endpoint> {
        endpoint("cells[].auth_service.url", &self.auth_service.url)
    }

    /// The app's internal listener (its migration interface), parsed.
    pub fn app_internal_endpoint(&self) -> Result<Endpoint> {
        endpoint("cells[].app_internal_url", &self.app_internal_url)
    }

    /// The cell's public endpoint (its edge), parsed.
    pub fn public_endpoint(&self) -> Result<Endpoint> {
        endpoint("cells[].endpoint", &self.endpoint)
    }

    /// Every auth-service replica, replica 0 first (a fleet file without `auth_services`: the
    /// one `auth_service`).
    pub fn replicas(&self) -> &[Service] {
        if self.auth_services.is_empty() {
            std::slice::from_ref(&self.auth_service)
        } else {
            &self.auth_services
        }
    }
}

impl FleetFile {
    /// The control plane's admin token (no cell accepts it).
    pub fn control_plane_admin(&self) -> Secret {
        Secret::new(self.admin_token.clone())
    }

    /// The control plane's URL, parsed.
    pub fn control_plane_endpoint(&self) -> Result<Endpoint> {
        endpoint("control_plane.url", &self.control_plane.url)
    }

    pub fn load(path: &Path) -> Result<FleetFile> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let f: FleetFile = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Config(format!("{} is not a fleet file: {e}", path.display())))?;
        if f.schema != FLEET_SCHEMA {
            return Err(Error::Config(format!(
                "{} has schema {}, this build reads {FLEET_SCHEMA}",
                path.display(),
                f.schema
            )));
        }
        protocol::map_key::parse(&f.map_public_key)
            .map_err(|e| Error::Config(format!("{}: map_public_key: {e}", path.display())))?;
        Ok(f)
    }

    /// Writes the file 0600 (it holds the admin tokens and the demo password).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(write_private(path, &bytes)?)
    }

    /// [`FleetFile::save`] with the fleet's management listeners under `management`.
    pub fn save_with(&self, path: &Path, management: &FleetManagement) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(&Written {
            file: self,
            management,
        })
        .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(write_private(path, &bytes)?)
    }

    pub fn cell(&self, id: &CellId) -> Option<&FleetCell> {
        self.cells.iter().find(|c| &c.id == id)
    }

    /// The cell an operator named, or a configuration error naming `path` (the file this
    /// description was read from).
    pub fn named_cell(&self, id: &CellId, path: &Path) -> Result<&FleetCell> {
        self.cell(id)
            .ok_or_else(|| Error::Config(format!("{id} is not in {}", path.display())))
    }

    /// Every pid of the fleet (control plane, then per cell: its auth-service replicas, edge,
    /// app).
    pub fn pids(&self) -> Vec<u32> {
        let mut v = vec![self.control_plane.pid];
        for c in &self.cells {
            v.extend(c.replicas().iter().map(|s| s.pid));
            v.extend([c.endpoint_pid, c.app_pid]);
        }
        v
    }
}
