//! Configuration: a TOML file, then `CELLBIND_<FIELD>` environment overrides
//! (`runtime::config`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use runtime::listener::ListenerConfig;
use runtime::listener::config::DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP;
use runtime::logging::LogFormat;
use runtime::server::ConfigFile;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, Result};
use protocol::CellId;

/// Default management listener (`/healthz`, `/readyz`, `/metrics`): loopback only.
pub const DEFAULT_MANAGEMENT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9104);

fn default_management_listen() -> SocketAddr {
    DEFAULT_MANAGEMENT_LISTEN
}

/// The demo app's settings (see docs/INTERNALS.md). Unknown keys are refused
/// (`runtime::config::load`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Config {
    /// This cell (the app serves its users only).
    #[schemars(with = "String")]
    pub cell_id: CellId,
    /// The public listener: `/api/*` (edge key required) and `/healthz`. The edge forwards to it.
    pub listen: SocketAddr,
    /// The internal listener: `/internal/v1/*` (internal token required) and `/healthz`. Never
    /// reachable through the edge; the migration orchestrator (`cellctl migrate`) calls it.
    pub internal_listen: SocketAddr,
    /// The management listener (HTTPS, same certificate): `GET /healthz`, `/readyz` and
    /// `/metrics` (Prometheus), nothing else. Loopback by default; never reachable through the
    /// edge.
    #[serde(default = "default_management_listen")]
    pub management_listen: SocketAddr,
    /// PEM certificate chain served.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// Holds `app.db` (the folder is made 0700 and the database files 0600).
    pub data_dir: PathBuf,
    /// The cell's app token: the edge key required on `/api/*`.
    pub app_token_file: PathBuf,
    /// The app's own internal token (one per cell): the bearer token of `/internal/*`, the
    /// migration interface. Not the cell's admin token, which opens the auth-service's admin
    /// API and is never given to the app (ATTACKS A35).
    pub internal_token_file: PathBuf,
    /// Refused when set: the app's internal listener takes its own token,
    /// `internal_token_file`; the cell's admin token must not be given to the app.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// Log lines as `text` (default) or `json` (one object per line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// The protections of the three listeners (timeouts, per-address connection caps).
    #[serde(flatten)]
    pub listeners: ListenerConfig<DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP>,
}

impl runtime::server::ServerConfig for Config {
    type Error = AppError;

    fn load(path: &Path) -> Result<Config> {
        Config::load(path)
    }

    fn log_format(&self) -> LogFormat {
        self.log_format
    }

    fn files(&self) -> Vec<ConfigFile<'_>> {
        vec![
            ConfigFile::secret("app_token_file", &self.app_token_file),
            ConfigFile::secret("internal_token_file", &self.internal_token_file),
            ConfigFile::read("tls_cert", &self.tls_cert),
            ConfigFile::secret("tls_key", &self.tls_key),
        ]
    }
}

impl Config {
    /// Loads `path`, then the `CELLBIND_*` overrides, and [`Config::validate`]s the result.
    pub fn load(path: &Path) -> Result<Config> {
        let cfg: Config =
            runtime::config::load(path).map_err(|e| AppError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Refuses settings that would serve the internal routes (or the management ones) where
    /// public traffic arrives, and a zero listener timeout or cap.
    pub fn validate(&self) -> Result<()> {
        if self.admin_token_file.is_some() {
            return Err(AppError::Config(
                "admin_token_file is refused: the app's internal listener takes its own token, \
                 internal_token_file (the cell's admin token opens the auth-service's admin API \
                 and must not be given to the app)"
                    .into(),
            ));
        }
        runtime::config::distinct_listeners(&[
            ("listen", self.listen),
            ("internal_listen", self.internal_listen),
            ("management_listen", self.management_listen),
        ])
        .map_err(AppError::Config)?;
        self.listeners.validate().map_err(AppError::Config)
    }
}
