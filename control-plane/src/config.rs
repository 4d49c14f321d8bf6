//! The control plane's configuration: a TOML file, then `CELLBIND_<FIELD>` overrides.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use protocol::CellId;
use runtime::config::{default_u64, default_usize};
use runtime::listener::ListenerConfig;
use runtime::listener::config::DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP;
use runtime::logging::LogFormat;
use runtime::server::ConfigFile;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{CpError, Result};

/// Default number of buckets of the placement map.
pub const DEFAULT_BUCKET_COUNT: usize = 1024;
/// Default interval between two publications of the map, in milliseconds.
pub const DEFAULT_PUBLISH_INTERVAL_MS: u64 = 30_000;

/// Default management listener (`/healthz`, `/readyz`, `/metrics`): loopback only.
pub const DEFAULT_MANAGEMENT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9103);

fn default_management_listen() -> SocketAddr {
    DEFAULT_MANAGEMENT_LISTEN
}

/// One cell as the control plane knows it (a `[[cells]]` table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CellConfig {
    /// The cell's id (`cell-01`).
    #[schemars(with = "String")]
    pub id: CellId,
    /// The cell's public endpoint (what clients address).
    pub endpoint: String,
    /// The cell's auth-service (admin API).
    pub auth_service_url: String,
    /// A copy of the PEM certificate chain that the cell's edges serve; its first certificate
    /// is the end-entity one. Read at every publication: the map pins its public key
    /// (`tls_pins.current`), and clients refuse the cell if its certificate matches no pin.
    pub tls_cert_file: PathBuf,
    /// PEM certificate chain the cell's edge will serve next (a rotation), pinned as
    /// `tls_pins.next` so that clients accept both. Read at every publication: write the new
    /// certificate here, publish, wait until clients hold that map, then install it as
    /// `tls_cert_file` and publish again. While it holds the served certificate, there is no
    /// next pin. A named file that cannot be read fails the publication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_next_cert_file: Option<PathBuf>,
}

/// `cellbind-control-plane --config` (see docs/INTERNALS.md). Unknown keys are refused
/// (`runtime::config::load`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Config {
    /// The listener (HTTPS) of the admin API and the placement map.
    pub listen: SocketAddr,
    /// The management listener (HTTPS, same certificate): `GET /healthz`, `/readyz` and
    /// `/metrics` (Prometheus), nothing else. Loopback by default.
    #[serde(default = "default_management_listen")]
    pub management_listen: SocketAddr,
    /// Holds `placements.db`.
    pub data_dir: PathBuf,
    /// The map signing key: a 32-byte Ed25519 seed, created 0600 if missing.
    pub map_key_file: PathBuf,
    /// Where `placement-map.json` is written on every publication.
    pub publish_dir: PathBuf,
    /// Bearer token of the admin API.
    pub admin_token_file: PathBuf,
    /// PEM certificate chain served.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// The cells (at least one), as `[[cells]]` tables.
    pub cells: Vec<CellConfig>,
    /// Number of buckets of the placement map.
    #[serde(default = "default_usize::<DEFAULT_BUCKET_COUNT>")]
    pub bucket_count: usize,
    /// Interval between two publications of the map, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_PUBLISH_INTERVAL_MS>")]
    pub publish_interval_ms: u64,
    /// Log lines as `text` (default) or `json` (one object per line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// The protections of the two listeners (timeouts, per-address connection caps).
    #[serde(flatten)]
    pub listeners: ListenerConfig<DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP>,
}

impl runtime::server::ServerConfig for Config {
    type Error = CpError;

    fn load(path: &Path) -> Result<Config> {
        Config::load(path)
    }

    fn log_format(&self) -> LogFormat {
        self.log_format
    }

    /// The map signing key may be missing: the first start creates it (0600). The cells'
    /// certificates are read by the first publication, which the start makes; their key names
    /// the cell (`cells[cell-01].tls_cert_file`).
    fn files(&self) -> Vec<ConfigFile<'_>> {
        let mut files = vec![
            ConfigFile::secret_made_at_start("map_key_file", &self.map_key_file),
            ConfigFile::secret("admin_token_file", &self.admin_token_file),
            ConfigFile::read("tls_cert", &self.tls_cert),
            ConfigFile::secret("tls_key", &self.tls_key),
        ];
        for c in &self.cells {
            files.push(ConfigFile::read(
                format!("cells[{}].tls_cert_file", c.id),
                &c.tls_cert_file,
            ));
            if let Some(next) = &c.tls_next_cert_file {
                files.push(ConfigFile::read(
                    format!("cells[{}].tls_next_cert_file", c.id),
                    next,
                ));
            }
        }
        files
    }
}

impl Config {
    /// Reads `path`, then `CELLBIND_<FIELD>` overrides ([`runtime::config::load`]), and
    /// validates the result.
    pub fn load(path: &Path) -> Result<Config> {
        let cfg: Config = runtime::config::load(path).map_err(|e| CpError::Config(e.0))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Refuses a configuration without cells, with a bucket count out of range, a zero
    /// publication interval, the management listener on the listener's address or a zero
    /// listener timeout or cap.
    pub fn validate(&self) -> Result<()> {
        runtime::config::distinct_listeners(&[
            ("listen", self.listen),
            ("management_listen", self.management_listen),
        ])
        .map_err(CpError::Config)?;
        self.listeners.validate().map_err(CpError::Config)?;
        if self.cells.is_empty() {
            return Err(CpError::Config("at least one cell is required".into()));
        }
        if self.bucket_count == 0 || self.bucket_count > protocol::map::MAX_BUCKETS {
            return Err(CpError::Config(format!(
                "bucket_count must be in 1..={}",
                protocol::map::MAX_BUCKETS
            )));
        }
        if self.publish_interval_ms == 0 {
            return Err(CpError::Config(
                "publish_interval_ms must be positive".into(),
            ));
        }
        Ok(())
    }
}
