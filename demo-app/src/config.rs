//! Configuration: a TOML file, then `CELLBIND_<FIELD>` environment overrides (figment).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;

use crate::error::{AppError, Result};
use protocol::CellId;

/// Environment prefix of configuration overrides.
pub const ENV_PREFIX: &str = "CELLBIND_";

/// The demo app's settings (see docs/INTERNALS.md).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub cell_id: CellId,
    pub listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// Holds `app.db`.
    pub data_dir: PathBuf,
    /// The edge key required on `/api/*`.
    pub app_token_file: PathBuf,
    /// The bearer token of `/internal/*`.
    pub admin_token_file: PathBuf,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        Figment::new()
            .merge(Toml::file_exact(path))
            .merge(Env::prefixed(ENV_PREFIX).ignore(&["exit_on_stdin_eof"]))
            .extract()
            .map_err(|e| AppError::Config(e.to_string()))
    }
}
