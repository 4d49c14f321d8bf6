//! The configuration files the dev fleet writes for its children (`DIR/config/*.toml`): the
//! fields of each server's configuration that the fleet sets.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use protocol::CellId;
use serde::Serialize;

use crate::error::{FleetError, Result};
use crate::ports::Listeners;

pub use fleet_description::CONFIG_FILE_MODE;

/// Writes `value` as TOML to `path`.
pub(crate) fn write_toml<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = toml::to_string(value).map_err(|e| FleetError::Internal(format!("toml: {e}")))?;
    Ok(runtime::secret::write_atomic(
        path,
        text.as_bytes(),
        CONFIG_FILE_MODE,
    )?)
}

/// A cell's auth-service.
#[derive(Debug, Serialize)]
pub(crate) struct AuthServiceConfig<'a> {
    pub(crate) cell_id: &'a CellId,
    #[serde(flatten)]
    pub(crate) listeners: Listeners,
    pub(crate) issuer: &'a str,
    pub(crate) data_dir: PathBuf,
    pub(crate) kek_file: PathBuf,
    pub(crate) admin_token_file: PathBuf,
    pub(crate) feed_token_file: PathBuf,
    pub(crate) edge_token_file: PathBuf,
    pub(crate) tls_cert: PathBuf,
    pub(crate) tls_key: PathBuf,
    pub(crate) ca_cert: PathBuf,
    pub(crate) control_plane_url: &'a str,
    pub(crate) map_public_key: &'a str,
    pub(crate) map_poll_interval_ms: u64,
    pub(crate) session_lifetime_s: u64,
    pub(crate) key_rotation_interval_s: u64,
    /// The PostgreSQL keys; absent with SQLite (the auth-service's default store).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) postgres: Option<AuthPostgres>,
}

/// The keys of an auth-service replica on PostgreSQL.
#[derive(Debug, Serialize)]
pub(crate) struct AuthPostgres {
    /// Always `"postgres"`.
    pub(crate) store: &'static str,
    /// The cell's database URL file (0600).
    pub(crate) database_url_file: PathBuf,
    pub(crate) database_max_connections: u32,
    /// `<cell>-r<r>`.
    pub(crate) replica_id: String,
}

/// A URL key that takes one URL or a list of them (replicas, tried in order).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Urls {
    One(String),
    Many(Vec<String>),
}

impl Urls {
    /// One URL as a string, several as a list.
    pub(crate) fn of(mut urls: Vec<String>) -> Urls {
        if urls.len() == 1
            && let Some(one) = urls.pop()
        {
            return Urls::One(one);
        }
        Urls::Many(urls)
    }
}

/// A cell's edge.
#[derive(Debug, Serialize)]
pub(crate) struct EdgeConfig<'a> {
    pub(crate) cell_id: &'a CellId,
    pub(crate) instance_id: &'a str,
    pub(crate) listen: SocketAddr,
    pub(crate) management_listen: SocketAddr,
    pub(crate) public_url: &'a str,
    pub(crate) auth_service_url: Urls,
    pub(crate) feed_url: Urls,
    pub(crate) app_url: &'a str,
    pub(crate) feed_token_file: PathBuf,
    pub(crate) app_token_file: PathBuf,
    pub(crate) edge_token_file: PathBuf,
    pub(crate) state_dir: PathBuf,
    pub(crate) tls_cert: PathBuf,
    pub(crate) tls_key: PathBuf,
    pub(crate) ca_cert: PathBuf,
    pub(crate) write_lease_ms: u64,
    pub(crate) feed_wait_ms: u64,
    pub(crate) session_lifetime_s: u64,
}

/// A cell's demo app.
#[derive(Debug, Serialize)]
pub(crate) struct AppConfig<'a> {
    pub(crate) cell_id: &'a CellId,
    #[serde(flatten)]
    pub(crate) listeners: Listeners,
    pub(crate) tls_cert: PathBuf,
    pub(crate) tls_key: PathBuf,
    pub(crate) data_dir: PathBuf,
    pub(crate) app_token_file: PathBuf,
    /// The app's own internal token (never the cell's admin token).
    pub(crate) internal_token_file: PathBuf,
}
