//! What the request path reads ([`Settings`]): this cell's identity, the [`Serving`] and
//! listener keys as the configuration holds them, and `trusted_proxies` parsed. The binary
//! builds it from its [`Config`] ([`Config::settings`]); tests and benchmarks start from every
//! default ([`Settings::new`]) and change the keys they are about.

use protocol::CellId;

use crate::config::{Config, EdgeListeners, Serving};
use crate::error::EdgeError;
use crate::net::client_ip::TrustedProxies;

/// What the request path needs to know, independent of files and sockets.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `cell_id`.
    pub cell_id: CellId,
    /// `instance_id`.
    pub instance_id: String,
    /// `public_url`: the `iss` of this cell's sessions.
    pub public_url: String,
    /// `trusted_proxies`, parsed.
    pub trusted_proxies: TrustedProxies,
    /// The request path's keys.
    pub serving: Serving,
    /// The public and management listeners' keys.
    pub listeners: EdgeListeners,
}

impl Settings {
    /// Every default, for a cell at `public_url` (instance `edge-1`).
    pub fn new(cell_id: CellId, public_url: impl Into<String>) -> Self {
        Self {
            cell_id,
            instance_id: "edge-1".into(),
            public_url: public_url.into(),
            trusted_proxies: TrustedProxies::default(),
            serving: Serving::default(),
            listeners: EdgeListeners::default(),
        }
    }
}

impl Config {
    /// The settings the request path needs (the rest is for the binary's wiring). Fails on a
    /// `trusted_proxies` entry that is not a CIDR or an address.
    pub fn settings(&self) -> Result<Settings, EdgeError> {
        Ok(Settings {
            cell_id: self.cell_id.clone(),
            instance_id: self.instance_id.clone(),
            public_url: self.public_url.to_string(),
            trusted_proxies: TrustedProxies::parse(&self.trusted_proxies)?,
            serving: self.serving.clone(),
            listeners: self.listeners,
        })
    }
}
