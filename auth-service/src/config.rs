//! Configuration: a TOML file, then `CELLBIND_<FIELD>` environment overrides
//! (`runtime::config::load`). The keys are the ones in the project's internal interface
//! document; the throttle keys at the end are optional extras with safe defaults.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use protocol::{CellId, Endpoint};
use runtime::config::{default_u32, default_u64};
pub use runtime::dpop::{Binding, BindingMode};
use runtime::listener::ListenerConfig;
use runtime::listener::config::DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP;
use runtime::logging::LogFormat;
use runtime::server::ConfigFile;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Default placement-map poll interval: 5 s, in milliseconds.
pub const DEFAULT_MAP_POLL_INTERVAL_MS: u64 = 5_000;
/// Default signing-key rotation interval: 30 days, in seconds.
pub const DEFAULT_KEY_ROTATION_INTERVAL_S: u64 = 30 * 24 * 3600;
/// Default session lifetime: 30 days, in seconds.
pub const DEFAULT_SESSION_LIFETIME_S: u64 = protocol::token::DEFAULT_SESSION_LIFETIME_S;
/// Default per-(account, client IP) sign-in burst (attempts).
pub const DEFAULT_SIGNIN_ACCOUNT_IP_BURST: u32 = 10;
/// Default per-(account, client IP) sign-in refill: attempts per minute.
pub const DEFAULT_SIGNIN_ACCOUNT_IP_PER_MINUTE: u32 = 10;
/// Default per-account sign-in ceiling across all addresses: burst (attempts). Burst + hourly
/// refill stay within OWASP ASVS's "at most 100 failed attempts per hour on one account" in
/// every sliding hour, the first included.
pub const DEFAULT_SIGNIN_ACCOUNT_BURST: u32 = 50;
/// Default per-account sign-in ceiling refill: attempts per hour.
pub const DEFAULT_SIGNIN_ACCOUNT_PER_HOUR: u32 = 50;
/// Default per-client-IP sign-in burst (attempts).
pub const DEFAULT_SIGNIN_IP_BURST: u32 = 300;
/// Default per-client-IP sign-in refill: attempts per minute.
pub const DEFAULT_SIGNIN_IP_PER_MINUTE: u32 = 1_200;
/// Default write lease of this cell's edges (their `write_lease_ms`), in milliseconds: the
/// migration drain counts an instance until its lease must have lapsed.
pub const DEFAULT_EDGE_WRITE_LEASE_MS: u64 = 30_000;

/// Default management listener (`/healthz`, `/readyz`, `/metrics`): loopback only.
pub const DEFAULT_MANAGEMENT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9102);

fn default_management_listen() -> SocketAddr {
    DEFAULT_MANAGEMENT_LISTEN
}

/// The SQLite file in `data_dir`.
pub(crate) const DB_FILE: &str = "auth.db";
/// Default size of the PostgreSQL connection pool of one replica (connections).
pub const DEFAULT_DATABASE_MAX_CONNECTIONS: u32 = 16;

/// Where the cell's state is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// One SQLite file in `data_dir`: one replica (the embedded default).
    #[default]
    Sqlite,
    /// A PostgreSQL database named by `database_url_file`: any number of replicas.
    Postgres,
}

/// The auth-service configuration. Unknown keys are refused (`runtime::config::load`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Config {
    /// This cell (`aud` and `cell` claims).
    #[schemars(with = "String")]
    pub cell_id: CellId,
    /// The PUBLIC listener (HTTPS): only the client routes (sign-in, the session routes,
    /// transfer and rebind, the JWKS, the placement map, health). Reached through the edge.
    pub listen: SocketAddr,
    /// The INTERNAL listener (HTTPS): every route, plus the feed and the admin API. Never
    /// exposed to clients.
    pub internal_listen: SocketAddr,
    /// The management listener (HTTPS, same certificate): `GET /healthz`, `/readyz` and
    /// `/metrics` (Prometheus), nothing else. Loopback by default; never expose it to clients.
    #[serde(default = "default_management_listen")]
    pub management_listen: SocketAddr,
    /// The cell's public endpoint URL (`iss` claim, `endpoint` in sign-in answers); a
    /// trailing `/` is accepted and dropped.
    #[schemars(with = "String")]
    pub issuer: Endpoint,
    /// Directory of the SQLite file `auth.db` (and of nothing else with PostgreSQL).
    pub data_dir: PathBuf,
    /// Where the cell's state is kept: `sqlite` (default) or `postgres`.
    #[serde(default)]
    pub store: StoreKind,
    /// With `store = "postgres"`: a file (0600) holding the database URL
    /// (`postgres://user:password@host/db?sslmode=verify-full`, or `?host=/socket/dir`).
    #[serde(default)]
    pub database_url_file: Option<PathBuf>,
    /// With `store = "postgres"`: the CA (PEM) the database's certificate must chain to; when
    /// set, TLS with full verification is required.
    #[serde(default)]
    pub database_ca_cert: Option<PathBuf>,
    /// With `store = "postgres"`: most open connections of this replica.
    #[serde(default = "default_u32::<DEFAULT_DATABASE_MAX_CONNECTIONS>")]
    pub database_max_connections: u32,
    /// This replica's name in logs and in the database's `application_name`; defaults to
    /// `<hostname>-<pid>`.
    #[serde(default)]
    pub replica_id: Option<String>,
    /// 32-byte key-encryption key; created (0600) if missing.
    pub kek_file: PathBuf,
    /// Bearer token of the admin API.
    pub admin_token_file: PathBuf,
    /// The cell's feed secret. Edge instances do not hold it: each presents its own
    /// credential derived from it (`cellctl edge-credential`), which names the instance.
    pub feed_token_file: PathBuf,
    /// Also accept the feed secret itself as a feed credential, for any instance name: only
    /// while a fleet's edges are being moved to credentials of their own (upgrade order in
    /// `docs/COMPATIBILITY.md`). A made-up instance can then be listed, and a migration's drain
    /// wait for it: leave it `false`.
    #[serde(default)]
    pub accept_shared_feed_token: bool,
    /// The cell's edge token: a request whose `X-Cellbind-Edge-Key` equals it comes from an
    /// authenticated edge (its `X-Cellbind-Client-Ip` and session cookie are then believed).
    pub edge_token_file: PathBuf,
    /// PEM certificate chain served.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// The only CA trusted as a client (control plane).
    #[serde(default)]
    pub ca_cert: Option<PathBuf>,
    /// Control plane base URL; the placement map is polled from it when set.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub control_plane_url: Option<Endpoint>,
    /// base64url Ed25519 public key that signs placement maps: the control plane's
    /// (`GET <control plane>/v1/map-public-key`). A published example key (RFC 8037's, RFC
    /// 8032's test keys) is refused.
    #[serde(default)]
    pub map_public_key: Option<String>,
    /// Placement-map poll interval in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_MAP_POLL_INTERVAL_MS>")]
    pub map_poll_interval_ms: u64,
    /// Session lifetime in seconds.
    #[serde(default = "default_u64::<DEFAULT_SESSION_LIFETIME_S>")]
    pub session_lifetime_s: u64,
    /// Signing-key rotation interval in seconds.
    #[serde(default = "default_u64::<DEFAULT_KEY_ROTATION_INTERVAL_S>")]
    pub key_rotation_interval_s: u64,
    /// Per-(account, client IP) sign-in burst.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_ACCOUNT_IP_BURST>")]
    pub signin_account_ip_burst: u32,
    /// Per-(account, client IP) sign-in attempts per minute.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_ACCOUNT_IP_PER_MINUTE>")]
    pub signin_account_ip_per_minute: u32,
    /// Per-account sign-in ceiling across all addresses: burst.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_ACCOUNT_BURST>")]
    pub signin_account_burst: u32,
    /// Per-account sign-in ceiling across all addresses: attempts per hour.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_ACCOUNT_PER_HOUR>")]
    pub signin_account_per_hour: u32,
    /// Per-client-IP sign-in burst.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_IP_BURST>")]
    pub signin_ip_burst: u32,
    /// Per-client-IP sign-in attempts per minute.
    #[serde(default = "default_u32::<DEFAULT_SIGNIN_IP_PER_MINUTE>")]
    pub signin_ip_per_minute: u32,
    /// The edges' write lease in milliseconds (at least their `write_lease_ms`).
    #[serde(default = "default_u64::<DEFAULT_EDGE_WRITE_LEASE_MS>")]
    pub edge_write_lease_ms: u64,
    /// Device-bound sessions (`DPoP`, RFC 9449) per client kind: the table `[binding]` with
    /// `field` and `desk`, each `"required"` (a sign-in without a valid proof is refused, an
    /// unbound session is refused), `"optional"` (bound when the sign-in carries a valid proof)
    /// or `"off"` (never bound). Defaults: `field = "optional"`, `desk = "off"`. The same
    /// table as the edges'. A bound session is accepted only with a valid proof by its key,
    /// whatever the mode.
    #[serde(default)]
    pub binding: Binding,
    /// Log lines as `text` (default) or `json` (one object per line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// The protections of the three listeners (timeouts, per-address connection caps).
    #[serde(flatten)]
    pub listeners: ListenerConfig<DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP>,
}

impl runtime::server::ServerConfig for Config {
    type Error = Error;

    fn load(path: &Path) -> Result<Config> {
        Config::load(path)
    }

    fn log_format(&self) -> LogFormat {
        self.log_format
    }

    /// The key-encryption key may be missing: the first start creates it (0600). A named
    /// `ca_cert` or `database_ca_cert` is checked even where this store or this setting does
    /// not read it (a wrong path is a mistake either way).
    fn files(&self) -> Vec<ConfigFile<'_>> {
        let mut files = vec![
            ConfigFile::secret_made_at_start("kek_file", &self.kek_file),
            ConfigFile::secret("admin_token_file", &self.admin_token_file),
            ConfigFile::secret("feed_token_file", &self.feed_token_file),
            ConfigFile::secret("edge_token_file", &self.edge_token_file),
            ConfigFile::read("tls_cert", &self.tls_cert),
            ConfigFile::secret("tls_key", &self.tls_key),
        ];
        if let Some(url) = &self.database_url_file {
            files.push(ConfigFile::secret("database_url_file", url));
        }
        if let Some(ca) = &self.database_ca_cert {
            files.push(ConfigFile::read("database_ca_cert", ca));
        }
        if let Some(ca) = &self.ca_cert {
            files.push(ConfigFile::read("ca_cert", ca));
        }
        files
    }
}

impl Config {
    /// This replica's name: `replica_id`, else `<hostname>-<pid>`.
    pub fn replica(&self) -> String {
        self.replica_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "auth".to_owned());
            format!("{host}-{}", std::process::id())
        })
    }

    /// Loads the TOML file, then the `CELLBIND_*` environment overrides.
    pub fn load(path: &Path) -> Result<Config> {
        runtime::config::load::<Config>(path)
            .map_err(|e| Error::Config(e.0))
            .and_then(Config::validated)
    }

    /// Parses a TOML string (no environment; unknown keys refused), for tests and embedding.
    pub fn from_toml(text: &str) -> Result<Config> {
        runtime::config::parse_str::<Config>(text, "the configuration")
            .map_err(|e| Error::Config(e.0))
            .and_then(Config::validated)
    }

    fn validated(self) -> Result<Config> {
        if !self.issuer.as_str().starts_with("https://") {
            return Err(Error::Config("issuer must be an https URL".into()));
        }
        if self.session_lifetime_s == 0
            || self.session_lifetime_s > protocol::token::DEFAULT_ABSOLUTE_LIFETIME_S
        {
            return Err(Error::Config(
                "session_lifetime_s must be between 1 s and 90 days".into(),
            ));
        }
        if self.key_rotation_interval_s == 0 || self.map_poll_interval_ms == 0 {
            return Err(Error::Config(
                "key_rotation_interval_s and map_poll_interval_ms must be positive".into(),
            ));
        }
        runtime::config::distinct_listeners(&[
            ("listen", self.listen),
            ("internal_listen", self.internal_listen),
            ("management_listen", self.management_listen),
        ])
        .map_err(Error::Config)?;
        self.listeners.validate().map_err(Error::Config)?;
        if self.control_plane_url.is_some()
            && (self.map_public_key.is_none() || self.ca_cert.is_none())
        {
            return Err(Error::Config(
                "control_plane_url needs map_public_key and ca_cert".into(),
            ));
        }
        if let Some(k) = &self.map_public_key {
            protocol::map_key::parse(k)
                .map_err(|e| Error::Config(format!("map_public_key: {e}")))?;
        }
        match (self.store, &self.database_url_file) {
            (StoreKind::Postgres, None) => {
                return Err(Error::Config(
                    "store = \"postgres\" needs database_url_file".into(),
                ));
            }
            (StoreKind::Sqlite, Some(_)) => {
                return Err(Error::Config(
                    "database_url_file is only read with store = \"postgres\"".into(),
                ));
            }
            _ => {}
        }
        if self.database_max_connections == 0 {
            return Err(Error::Config(
                "database_max_connections must be positive".into(),
            ));
        }
        if let Some(r) = &self.replica_id
            && (r.is_empty()
                || r.len() > 48
                || !r
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
        {
            return Err(Error::Config(
                "replica_id must be 1 to 48 characters of [A-Za-z0-9._-]".into(),
            ));
        }
        if [
            self.signin_account_ip_burst,
            self.signin_account_ip_per_minute,
            self.signin_account_burst,
            self.signin_account_per_hour,
            self.signin_ip_burst,
            self.signin_ip_per_minute,
        ]
        .contains(&0)
        {
            return Err(Error::Config(
                "sign-in throttle settings must be positive".into(),
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code
    use super::*;

    fn with_map_key(key: &str) -> String {
        format!(
            r#"cell_id = "cell-01"
issuer = "https://cell-01.example.com"
listen = "127.0.0.1:1"
internal_listen = "127.0.0.1:2"
data_dir = "data"
kek_file = "kek"
admin_token_file = "admin.token"
feed_token_file = "feed.token"
edge_token_file = "edge.token"
tls_cert = "cert.pem"
tls_key = "key.pem"
map_public_key = "{key}""#
        )
    }

    #[test]
    fn binding_defaults_to_optional_for_field_and_off_for_desk_and_unknown_values_are_refused() {
        let base = with_map_key(&{
            let key =
                protocol::token::SigningKey::from_seed(protocol::Kid::new("cp").unwrap(), &[3; 32])
                    .unwrap()
                    .public_bytes();
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, key)
        });
        let c = Config::from_toml(&base).unwrap();
        assert_eq!(c.binding, Binding::default());
        assert_eq!(
            c.binding.of(protocol::ClientKind::Field),
            BindingMode::Optional
        );
        assert_eq!(c.binding.of(protocol::ClientKind::Desk), BindingMode::Off);
        let c = Config::from_toml(&format!("{base}\n[binding]\nfield = \"required\"")).unwrap();
        assert_eq!(
            (c.binding.field, c.binding.desk),
            (BindingMode::Required, BindingMode::Off)
        );
        // The effective configuration (`--check-config`) prints the table.
        let printed = runtime::config::effective_toml(&c).unwrap();
        let table = printed.split("[binding]").nth(1).unwrap_or_default();
        assert!(
            table.contains("field = \"required\"") && table.contains("desk = \"off\""),
            "{printed}"
        );
        // An unknown mode or kind: refused.
        let e = Config::from_toml(&format!("{base}\n[binding]\nfield = \"maybe\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("maybe"), "{e}");
        let e = Config::from_toml(&format!("{base}\n[binding]\nfeild = \"off\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("binding.feild") && e.contains("field"), "{e}");
    }

    #[test]
    fn a_published_example_map_key_is_refused_naming_it() {
        let e = Config::from_toml(&with_map_key(protocol::map_key::RFC8037_EXAMPLE_KEY))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("map_public_key") && e.contains("RFC 8037"),
            "{e}"
        );
        let e = Config::from_toml(&with_map_key("REPLACE-ME"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("map_public_key"), "{e}");
        // The control plane's own key loads.
        let key =
            protocol::token::SigningKey::from_seed(protocol::Kid::new("cp").unwrap(), &[3; 32])
                .unwrap()
                .public_bytes();
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, key);
        Config::from_toml(&with_map_key(&b64)).unwrap();
    }
}
