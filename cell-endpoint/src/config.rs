//! Configuration (docs/INTERNALS.md, "cell-endpoint"): a TOML file, then `CELLBIND_<FIELD>`
//! environment overrides (`runtime::config`); the URLs are `protocol::Endpoint`s (parsed and
//! normalised once: a trailing `/` is accepted and dropped). The auth-service's URLs are
//! [`Replicas`]: one URL (a single instance, or a load balancer in front of several) or a
//! non-empty list of its replicas' URLs, tried in order with failover (`upstream`).
//!
//! Every key is defined once, here: its name, type, default (a named constant below) and doc
//! comment (which `docs/CONFIGURATION.md` is generated from). [`Config`] is the file; the keys
//! the request path reads are the group [`Serving`] (and the listener keys every server shares,
//! `runtime::listener::ListenerConfig`), which [`Config`] flattens into its top level and the
//! request path's `Settings` holds as they are.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::{CellId, Endpoint};
use runtime::config::default_u64;
use runtime::listener::ListenerConfig;
use runtime::logging::LogFormat;
use runtime::server::ConfigFile;
use schemars::JsonSchema;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::EdgeError;

/// The listener keys of the edge (`runtime::listener`), with its public listener's default cap.
pub type EdgeListeners = ListenerConfig<DEFAULT_MAX_CONNECTIONS_PER_IP>;

/// Default management listener (`/healthz`, `/readyz`, `/metrics`): loopback only.
pub const DEFAULT_MANAGEMENT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9101);
/// Default write lease: writes are refused once the last feed sync is older, in milliseconds.
pub const DEFAULT_WRITE_LEASE_MS: u64 = 30_000;
/// Default long-poll wait asked of the feed, in milliseconds.
pub const DEFAULT_FEED_WAIT_MS: u64 = 20_000;
/// Default per-client-IP request rate, in requests per second.
pub const DEFAULT_RATE_PER_IP_PER_S: u32 = 200;
/// Default per-IP burst, in requests.
pub const DEFAULT_BURST_PER_IP: u32 = 400;
/// Default per-subject request rate, in requests per second.
pub const DEFAULT_RATE_PER_SUBJECT_PER_S: u32 = 50;
/// Default per-subject burst, in requests.
pub const DEFAULT_BURST_PER_SUBJECT: u32 = 100;
/// Default largest request body forwarded, in bytes.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default cooldown between two key refetches caused by unknown kids, in milliseconds
/// (ATTACKS A4: at most one per 10 s).
pub const DEFAULT_KID_REFETCH_COOLDOWN_MS: u64 = 10_000;
/// Default total timeout of a request forwarded to the auth-service, in milliseconds.
pub const DEFAULT_AUTH_TIMEOUT_MS: u64 = 10_000;
/// Default total timeout of a request forwarded to the app, in milliseconds.
pub const DEFAULT_APP_TIMEOUT_MS: u64 = 30_000;
/// Default connect timeout to an upstream, in milliseconds.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Default interval of the certificate-file watcher, in milliseconds.
pub const DEFAULT_CERT_WATCH_MS: u64 = 2_000;
/// Default most open connections from one client address (an IPv6 client: its /64) to the
/// public listener (ATTACKS A29: connection hoarding; `max_connections_per_ip`). Trusted proxies
/// are not counted, the clients behind them are when PROXY protocol names them. The other
/// listener timeouts and caps are the ones every server shares (`runtime::listener`).
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 256;
/// Default `revocation_max_age_ms`: 0, the fail-closed freshness check is off.
pub const DEFAULT_REVOCATION_MAX_AGE_MS: u64 = 0;
/// Default most verified tokens kept in the cache (`token_cache_capacity`), in entries. More
/// active sessions than this per instance only cost signature checks, never a wrong verdict.
pub const DEFAULT_TOKEN_CACHE_CAPACITY: usize = 32_768;

/// The edge's configuration. Unknown keys in the file are refused, naming the nearest valid
/// key (`runtime::config::load`); only `CELLBIND_<KEY>` variables of known keys are read, so
/// the shared `CELLBIND_*` environment (e.g. `CELLBIND_EXIT_ON_STDIN_EOF`) does not break
/// loading.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Config {
    /// This cell (sessions of other cells are refused).
    #[schemars(with = "String")]
    pub cell_id: CellId,
    /// This edge instance's name (in the feed's instance list and the logs).
    pub instance_id: String,
    /// The public listener (HTTPS).
    pub listen: SocketAddr,
    /// The management listener (HTTPS, same certificate): `GET /healthz`, `/readyz` and
    /// `/metrics` (Prometheus), nothing else. Loopback by default; never expose it to clients.
    #[serde(default = "default_management_listen")]
    pub management_listen: SocketAddr,
    /// This cell's public endpoint URL: the `iss` of its sessions.
    #[schemars(with = "String")]
    pub public_url: Endpoint,
    /// The auth-service's public listener (or its replicas'): `/v1/sessions*` is forwarded
    /// there.
    pub auth_service_url: Replicas,
    /// The auth-service's internal listener (or its replicas'): the cell state feed is read
    /// there.
    pub feed_url: Replicas,
    /// The app's public listener: validated `/api/*` is forwarded there.
    #[schemars(with = "String")]
    pub app_url: Endpoint,
    /// Bearer token of the feed (this cell's).
    pub feed_token_file: PathBuf,
    /// This cell's app token, presented to the app as `X-Cellbind-Edge-Key`.
    pub app_token_file: PathBuf,
    /// This cell's edge token, presented to the auth-service as `X-Cellbind-Edge-Key`: with it
    /// the auth-service believes `X-Cellbind-Client-Ip` and the session cookie.
    pub edge_token_file: PathBuf,
    /// Directory of the edge's persisted state (the revocation view and feed position).
    pub state_dir: PathBuf,
    /// PEM certificate chain served (reloaded when the file changes).
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// The CA (PEM) the upstreams' certificates must chain to.
    pub ca_cert: PathBuf,
    /// Long-poll wait asked of the feed, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_FEED_WAIT_MS>")]
    pub feed_wait_ms: u64,
    /// Total timeout of a request forwarded to the auth-service, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_AUTH_TIMEOUT_MS>")]
    pub auth_timeout_ms: u64,
    /// Total timeout of a request forwarded to the app, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_APP_TIMEOUT_MS>")]
    pub app_timeout_ms: u64,
    /// Connect timeout to an upstream, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_CONNECT_TIMEOUT_MS>")]
    pub connect_timeout_ms: u64,
    /// Interval of the certificate-file watcher, in milliseconds.
    #[serde(default = "default_u64::<DEFAULT_CERT_WATCH_MS>")]
    pub cert_watch_ms: u64,
    /// The keys the request path reads (session lifetime, write lease, rate limits, body
    /// size, key refetch, revocation freshness, the client address header, the token cache).
    #[serde(flatten)]
    pub serving: Serving,
    /// Peers (CIDRs, e.g. `"10.0.0.0/8"`, `"192.0.2.7/32"`) whose forwarding header or PROXY
    /// protocol header names the client. Empty (the default): the socket peer is the client.
    /// An entry that is neither a CIDR nor an address stops the start, naming this key.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Threads serving the public listener, each a single-threaded runtime accepting from the
    /// port (`io_listener`) with its own upstream connections; 0 (the default) is one per CPU
    /// the process may use. Feed sync and the management listener run beside them.
    #[serde(default)]
    pub io_threads: usize,
    /// How the serving threads share the public port: `"shared"` (default): one listening
    /// socket they all accept from, a new connection going to a thread free to take it;
    /// `"per-thread"`: one `SO_REUSEPORT` listener each, the kernel spreading connections by a
    /// hash of the client's address and port.
    #[serde(default)]
    pub io_listener: IoListener,
    /// Which HTTP versions the edge offers its upstreams (ALPN in the TLS handshake):
    /// `"http2-or-http1"` (default): HTTP/2 where the upstream accepts it, one connection per
    /// serving thread and upstream carrying every request of that thread; HTTP/1.1 kept-alive
    /// connections, one request at a time on each, where it does not. `"http1"`: HTTP/1.1 only.
    #[serde(default)]
    pub upstream_http: UpstreamHttp,
    /// Log lines as `text` (default) or `json` (one object per line).
    #[serde(default)]
    pub log_format: LogFormat,
    /// The protections of the public and management listeners (timeouts, per-address
    /// connection caps).
    #[serde(flatten)]
    pub listeners: EdgeListeners,
}

/// The keys the request path reads, each defined once: [`Config`] flattens them into the
/// file's top level, the request path's `Settings` holds them as they are. A key missing from
/// the file takes its value from [`Serving::default`] (the named constants above).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Serving {
    /// Session lifetime in seconds (as the auth-service's).
    pub session_lifetime_s: u64,
    /// Writes are refused once the last feed sync is older than this, in milliseconds (0 =
    /// off).
    pub write_lease_ms: u64,
    /// Per-client-IP request rate, in requests per second.
    pub rate_per_ip_per_s: u32,
    /// Per-client-IP burst, in requests.
    pub burst_per_ip: u32,
    /// Per-subject request rate, in requests per second.
    pub rate_per_subject_per_s: u32,
    /// Per-subject burst, in requests.
    pub burst_per_subject: u32,
    /// Largest request body forwarded, in bytes.
    pub max_body_bytes: usize,
    /// Cooldown between two key refetches caused by unknown kids, in milliseconds.
    pub kid_refetch_cooldown_ms: u64,
    /// Fail closed when the revocation view is older than this, in milliseconds (0 = off,
    /// the default): the time since the last successful feed sync (an instance serving from
    /// its disk copy that has not synced since it started is stale). See
    /// `cell-endpoint/README.md`.
    pub revocation_max_age_ms: u64,
    /// What a stale revocation view refuses: `"writes"` (default: unsafe methods; reads are
    /// served) or `"all"` (every validated `/api/*` request).
    pub revocation_fail_closed: FailClosed,
    /// The forwarding header trusted proxies set: `"x-forwarded-for"` (default) or
    /// `"forwarded"` (RFC 7239). Only this one is read; a client's copy of the other is dropped.
    pub client_ip_header: ClientIpHeader,
    /// Whether connections from trusted proxies start with a PROXY protocol v2 header naming
    /// the client (default false). No forwarding header is then read; after a `LOCAL` header
    /// (a balancer's health check) the client is the socket peer.
    pub proxy_protocol: bool,
    /// Most verified tokens the edge caches (a repeat token skips the signature check). The
    /// cache's table is allocated at start: the bound rounded up to a power of two slots of 64
    /// bytes (32768 → 2 MiB; 1M → 64 MiB; 1.25M → 128 MiB); each session held adds about 700
    /// bytes (1M ≈ 670 MiB; together at most `CACHED_SESSION_BYTES` of `held::token_cache` a
    /// session). Allow ~25% headroom over the sessions you want held; a session beyond the
    /// bound costs a signature check, never a wrong verdict.
    pub token_cache_capacity: usize,
    /// Device binding per client kind (`[binding]`: `field`, `desk`; each `"required"`,
    /// `"optional"` or `"off"`). The edge refuses an unbound session of a `"required"` kind;
    /// a bound session always needs a valid DPoP proof by its key, whatever the mode.
    pub binding: runtime::dpop::Binding,
    /// Verify every DPoP proof's signature, even on a connection that proved its key already
    /// (default false). Connections from `trusted_proxies` without PROXY protocol (a proxy
    /// that terminates TLS and multiplexes clients) are always verified per request.
    pub dpop_verify_per_request: bool,
    /// Most DPoP proofs this instance accepts per nonce step (60 s): the bound of its replay
    /// set (16 bytes a proof, two steps held); past it new proofs get 429 until the step ends.
    pub dpop_max_proofs_per_step: usize,
}

impl Default for Serving {
    fn default() -> Self {
        Self {
            session_lifetime_s: protocol::token::DEFAULT_SESSION_LIFETIME_S,
            write_lease_ms: DEFAULT_WRITE_LEASE_MS,
            rate_per_ip_per_s: DEFAULT_RATE_PER_IP_PER_S,
            burst_per_ip: DEFAULT_BURST_PER_IP,
            rate_per_subject_per_s: DEFAULT_RATE_PER_SUBJECT_PER_S,
            burst_per_subject: DEFAULT_BURST_PER_SUBJECT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            kid_refetch_cooldown_ms: DEFAULT_KID_REFETCH_COOLDOWN_MS,
            revocation_max_age_ms: DEFAULT_REVOCATION_MAX_AGE_MS,
            revocation_fail_closed: FailClosed::default(),
            client_ip_header: ClientIpHeader::default(),
            proxy_protocol: false,
            token_cache_capacity: DEFAULT_TOKEN_CACHE_CAPACITY,
            binding: runtime::dpop::Binding::default(),
            dpop_verify_per_request: false,
            dpop_max_proofs_per_step: runtime::dpop::DEFAULT_MAX_PROOFS_PER_STEP,
        }
    }
}

impl Serving {
    /// `write_lease_ms`; zero turns the write lease off.
    pub fn write_lease(&self) -> Duration {
        Duration::from_millis(self.write_lease_ms)
    }

    /// `kid_refetch_cooldown_ms`.
    pub fn kid_refetch_cooldown(&self) -> Duration {
        Duration::from_millis(self.kid_refetch_cooldown_ms)
    }

    /// `revocation_max_age_ms`; `None` when the check is off (0).
    pub fn revocation_max_age(&self) -> Option<Duration> {
        (self.revocation_max_age_ms > 0).then(|| Duration::from_millis(self.revocation_max_age_ms))
    }
}

/// What an instance with a stale revocation view refuses (`revocation_fail_closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailClosed {
    /// Writes (unsafe methods) only; reads keep being served.
    #[default]
    Writes,
    /// Every validated request.
    All,
}

/// The forwarding header trusted proxies set (`client_ip_header`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// How the serving threads share the public port (`io_listener`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IoListener {
    /// One listening socket that every serving thread accepts from: a new connection goes to
    /// a thread that is free to take it (nginx's default). A lightly loaded edge keeps its
    /// connections on few threads, which is cheaper where it shares its cores with the app.
    #[default]
    Shared,
    /// One listener per thread on the same port (`SO_REUSEPORT`): the kernel spreads new
    /// connections over the threads by a hash of the client's address and port, whatever each
    /// thread's load (nginx's `reuseport`). Even for many clients on a dedicated host.
    PerThread,
}

/// The HTTP versions the edge offers an upstream in its TLS handshake (ALPN); the upstream
/// picks one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamHttp {
    /// HTTP/2 if the upstream accepts it, else HTTP/1.1.
    #[default]
    Http2OrHttp1,
    /// HTTP/1.1 only.
    Http1,
}

impl runtime::server::ServerConfig for Config {
    type Error = EdgeError;

    fn load(path: &Path) -> Result<Self, EdgeError> {
        Config::load(path)
    }

    fn log_format(&self) -> LogFormat {
        self.log_format
    }

    fn files(&self) -> Vec<ConfigFile<'_>> {
        vec![
            ConfigFile::secret("feed_token_file", &self.feed_token_file),
            ConfigFile::secret("app_token_file", &self.app_token_file),
            ConfigFile::secret("edge_token_file", &self.edge_token_file),
            ConfigFile::read("tls_cert", &self.tls_cert),
            ConfigFile::secret("tls_key", &self.tls_key),
            ConfigFile::read("ca_cert", &self.ca_cert),
        ]
    }
}

fn default_management_listen() -> SocketAddr {
    DEFAULT_MANAGEMENT_LISTEN
}

impl Config {
    /// Loads `path` (TOML), then `CELLBIND_*` environment overrides (`runtime::config`), and
    /// [`Config::validate`]s the result.
    pub fn load(path: &Path) -> Result<Self, EdgeError> {
        let config: Config =
            runtime::config::load(path).map_err(|e| EdgeError::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Refuses a management listener on the public listener's address, and a zero listener
    /// timeout or cap.
    pub fn validate(&self) -> Result<(), EdgeError> {
        runtime::config::distinct_listeners(&[
            ("listen", self.listen),
            ("management_listen", self.management_listen),
        ])
        .map_err(EdgeError::Config)?;
        self.listeners.validate().map_err(EdgeError::Config)
    }
}

/// One upstream URL or a non-empty list of replicas' URLs (TOML: a string or an array of
/// strings). An empty list is refused when the configuration is read, naming the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicas(Vec<Endpoint>);

impl Replicas {
    /// A list of replicas; `None` when it is empty.
    pub fn new(urls: Vec<Endpoint>) -> Option<Self> {
        (!urls.is_empty()).then_some(Self(urls))
    }

    /// One URL.
    pub fn one(url: Endpoint) -> Self {
        Self(vec![url])
    }

    /// The URLs, in the order they are tried (never empty).
    pub fn urls(&self) -> &[Endpoint] {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OneOrMany;
        impl<'de> Visitor<'de> for OneOrMany {
            type Value = Replicas;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a URL or a non-empty list of URLs")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Replicas, E> {
                Endpoint::parse(v).map(Replicas::one).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Replicas, A::Error> {
                let mut urls = Vec::new();
                while let Some(u) = seq.next_element::<Endpoint>()? {
                    urls.push(u);
                }
                Replicas::new(urls).ok_or_else(|| de::Error::invalid_length(0, &self))
            }
        }
        d.deserialize_any(OneOrMany)
    }
}

impl Serialize for Replicas {
    /// One URL as a string, several as a list (the way they are written).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }
}

impl JsonSchema for Replicas {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Replicas".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" }, "minItems": 1 }
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::Figment;
    use figment::providers::{Format as _, Toml};

    #[test]
    fn env_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge.toml");
        std::fs::write(
            &path,
            r#"cell_id = "cell-03"
instance_id = "edge-1"
listen = "127.0.0.1:8443"
public_url = "https://127.0.0.3:8443"
auth_service_url = "https://127.0.0.3:8444"
feed_url = "https://127.0.0.3:8446"
edge_token_file = "edge.token"
app_url = "https://127.0.0.3:8445"
feed_token_file = "feed.token"
app_token_file = "app.token"
state_dir = "state"
tls_cert = "cert.pem"
tls_key = "key.pem"
ca_cert = "ca.pem"
"#,
        )
        .unwrap();
        // SAFETY-free: this test is the only one in the crate touching this variable.
        let c = Config::load(&path).unwrap();
        assert_eq!(c.serving.write_lease_ms, DEFAULT_WRITE_LEASE_MS);
        assert_eq!(c.feed_wait_ms, DEFAULT_FEED_WAIT_MS);
        assert_eq!(c.serving.rate_per_ip_per_s, DEFAULT_RATE_PER_IP_PER_S);
        assert_eq!(c.serving.token_cache_capacity, DEFAULT_TOKEN_CACHE_CAPACITY);
        let figment =
            Figment::new()
                .merge(Toml::file(&path))
                .merge(figment::providers::Serialized::default(
                    "rate_per_ip_per_s",
                    7u32,
                ));
        let c: Config = figment.extract().unwrap();
        assert_eq!(c.serving.rate_per_ip_per_s, 7);
        assert_eq!(c.feed_url.urls().len(), 1);
        assert_eq!(c.management_listen, DEFAULT_MANAGEMENT_LISTEN);
        std::fs::write(
            &path,
            std::fs::read_to_string(&path).unwrap() + "management_listen = \"127.0.0.1:8443\"\n",
        )
        .unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("management_listen and listen"), "{e}");
    }

    #[test]
    fn modes_parse_from_the_config_words() {
        #[derive(serde::Deserialize)]
        struct C {
            m: FailClosed,
        }
        let w: C = serde_json::from_str(r#"{"m":"writes"}"#).unwrap();
        let a: C = serde_json::from_str(r#"{"m":"all"}"#).unwrap();
        assert_eq!((w.m, a.m), (FailClosed::Writes, FailClosed::All));
        assert!(serde_json::from_str::<C>(r#"{"m":"reads"}"#).is_err());
    }
}
