//! The listener keys every server's configuration shares ([`ListenerConfig`], flattened into
//! it: the keys are top-level, `CELLBIND_<KEY>` overrides them) and their defaults.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gate::Gate;
use super::protection::{Protection, Timeouts};
use crate::config::{default_u64, default_usize};

/// Default time a client has to send a request's headers, from the first byte of the request
/// (the first request's: from the end of the TLS handshake), in milliseconds (ATTACKS A29,
/// A33: a stalled partial header).
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Default time a client has to send a whole request body, from when the server first waits
/// for it, in milliseconds (ATTACKS A29: a declared body that never arrives). A request
/// without a body (a long-poll) has no body clock.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Default time a TLS handshake may take, in milliseconds.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Default time an HTTP/1.1 connection with no request in flight stays open, in milliseconds
/// (nginx's `keepalive_timeout`). Longer than the idle timeout of the edge's upstream pool
/// (60 s), the HTTP/1.1 client of these listeners (the servers' reqwest clients speak HTTP/2):
/// the client closes an idle connection first, so a request is never sent on a connection the
/// server is closing. With the per-address cap it bounds how long idle connections are held.
pub const DEFAULT_KEEP_ALIVE_TIMEOUT_MS: u64 = 75_000;
/// Default most open connections from one address (an IPv6 client: its /64) to one of the
/// listeners that edges, the control plane, `cellctl` and peers call: the auth-service's public
/// and internal listeners, the app's, the control plane's (ATTACKS A33).
///
/// What one edge instance opens to one such listener: over HTTP/2 (what every server offers,
/// and the edge's default `upstream_http`) one connection per thread that sends to it, that is
/// its serving threads (`io_threads`, by default one per CPU) plus the threads of its main
/// runtime (the feed long-poll, the revocation hand-back; one per CPU): at most twice its
/// CPUs. Over HTTP/1.1 (`upstream_http = "http1"`) one per request in flight, at most 256 kept
/// idle per thread. 512 holds, from one source address (a host, a NAT, a mesh sidecar),
/// several HTTP/2 edges of 64 CPUs each plus `cellctl` and the control plane; raise it when
/// more instances share an address or the edges speak HTTP/1.1 at high concurrency.
pub const DEFAULT_INTERNAL_MAX_CONNECTIONS_PER_IP: usize = 512;
/// Default most open connections from one address to a management listener (Prometheus
/// scrapes over one kept-alive connection; each kubelet probe opens one and closes it).
pub const DEFAULT_MANAGEMENT_MAX_CONNECTIONS_PER_IP: usize = 64;

/// The protections of a server's listeners (ATTACKS A29, A33), the same keys on every server.
/// `MAX_CONNECTIONS_PER_IP` is the server's default of `max_connections_per_ip` (the edge's
/// public listener faces the internet, the other servers' listeners face edges and tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ListenerConfig<const MAX_CONNECTIONS_PER_IP: usize> {
    /// Time a client has to send a request's headers, in milliseconds: from the request's
    /// first byte (the first request's: from the end of the TLS handshake). Every listener;
    /// over it the connection is closed.
    #[serde(default = "default_u64::<DEFAULT_HEADER_READ_TIMEOUT_MS>")]
    pub header_read_timeout_ms: u64,
    /// Time a client has to send a whole request body, in milliseconds, from when the server
    /// first waits for it; over it the request is answered `408` and an HTTP/1.1 connection
    /// closed. Every listener. A request without a body (a long-poll) has no body clock.
    #[serde(default = "default_u64::<DEFAULT_BODY_READ_TIMEOUT_MS>")]
    pub body_read_timeout_ms: u64,
    /// Time a TLS handshake may take, in milliseconds. Every listener.
    #[serde(default = "default_u64::<DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS>")]
    pub tls_handshake_timeout_ms: u64,
    /// Time an HTTP/1.1 connection with no request in flight stays open, in milliseconds;
    /// keep it above the clients' own idle timeouts (the edge's upstream pool: 60 s). Every
    /// listener.
    #[serde(default = "default_u64::<DEFAULT_KEEP_ALIVE_TIMEOUT_MS>")]
    pub keep_alive_timeout_ms: u64,
    /// Most open connections from one client address (an IPv6 client: its /64) to each of the
    /// server's listeners but the management one (public, and internal where it has one); more
    /// are closed at once and counted in the `connections_refused` metric.
    #[serde(default = "default_usize::<MAX_CONNECTIONS_PER_IP>")]
    pub max_connections_per_ip: usize,
    /// Most open connections from one address (an IPv6 client: its /64) to the management
    /// listener.
    #[serde(default = "default_usize::<DEFAULT_MANAGEMENT_MAX_CONNECTIONS_PER_IP>")]
    pub management_max_connections_per_ip: usize,
}

impl<const N: usize> Default for ListenerConfig<N> {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            body_read_timeout_ms: DEFAULT_BODY_READ_TIMEOUT_MS,
            tls_handshake_timeout_ms: DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS,
            keep_alive_timeout_ms: DEFAULT_KEEP_ALIVE_TIMEOUT_MS,
            max_connections_per_ip: N,
            management_max_connections_per_ip: DEFAULT_MANAGEMENT_MAX_CONNECTIONS_PER_IP,
        }
    }
}

/// Which of a server's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// A public or internal listener (`max_connections_per_ip`).
    Service,
    /// The management listener (`management_max_connections_per_ip`).
    Management,
}

impl<const N: usize> ListenerConfig<N> {
    /// Refuses a zero timeout or cap, naming its key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, v) in [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("tls_handshake_timeout_ms", self.tls_handshake_timeout_ms),
            ("keep_alive_timeout_ms", self.keep_alive_timeout_ms),
        ] {
            if v == 0 {
                return Err(format!("{key} must be positive"));
            }
        }
        for (key, v) in [
            ("max_connections_per_ip", self.max_connections_per_ip),
            (
                "management_max_connections_per_ip",
                self.management_max_connections_per_ip,
            ),
        ] {
            if v == 0 {
                return Err(format!("{key} must be positive"));
            }
        }
        Ok(())
    }

    /// The timeouts of every listener.
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            header_read: Duration::from_millis(self.header_read_timeout_ms),
            body_read: Duration::from_millis(self.body_read_timeout_ms),
            tls_handshake: Duration::from_millis(self.tls_handshake_timeout_ms),
            keep_alive: Duration::from_millis(self.keep_alive_timeout_ms),
        }
    }

    /// The cap of a listener of kind `kind`.
    pub fn max_per_ip(&self, kind: ListenerKind) -> usize {
        match kind {
            ListenerKind::Service => self.max_connections_per_ip,
            ListenerKind::Management => self.management_max_connections_per_ip,
        }
    }

    /// The protection of one listener of kind `kind`: its own gate (counting its refusals in
    /// `refused`) and the timeouts.
    pub fn protection(
        &self,
        kind: ListenerKind,
        refused: prometheus_client::metrics::counter::Counter,
    ) -> Protection {
        Protection {
            timeouts: self.timeouts(),
            gate: Gate::new(self.max_per_ip(kind), refused),
        }
    }
}

/// The timeouts of the default listener configuration.
impl Default for Timeouts {
    fn default() -> Self {
        ListenerConfig::<1>::default().timeouts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize, JsonSchema)]
    struct Server {
        /// Where.
        listen: String,
        #[serde(flatten)]
        listeners: ListenerConfig<123>,
    }

    #[test]
    fn the_keys_are_top_level_with_the_servers_default_cap() {
        let s: Server =
            crate::config::parse_str("listen = \"x\"\nheader_read_timeout_ms = 5\n", "t")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.listeners.header_read_timeout_ms, 5);
        assert_eq!(s.listeners.max_connections_per_ip, 123);
        assert_eq!(
            s.listeners.management_max_connections_per_ip,
            DEFAULT_MANAGEMENT_MAX_CONNECTIONS_PER_IP
        );
        let e =
            crate::config::parse_str::<Server>("listen = \"x\"\nheader_read_timeout = 5\n", "t")
                .err()
                .map(|e| e.0)
                .unwrap_or_default();
        assert!(e.contains("did you mean `header_read_timeout_ms`"), "{e}");
        let md = crate::config::reference_markdown::<Server>();
        assert!(
            md.contains("| `max_connections_per_ip` | integer | `123` |"),
            "{md}"
        );
        let zero = ListenerConfig::<1> {
            keep_alive_timeout_ms: 0,
            ..ListenerConfig::default()
        };
        assert_eq!(
            zero.validate().err().as_deref(),
            Some("keep_alive_timeout_ms must be positive")
        );
    }
}
