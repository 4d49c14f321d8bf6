//! What protects one listener: its timeouts and its per-address gate.

use std::sync::Arc;
use std::time::Duration;

use super::gate::Gate;

/// The timeouts of a listener (see the module doc and [`ListenerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A request's headers, from its first byte (the first request's: from the handshake).
    pub header_read: Duration,
    /// A request's body, from the first wait for it.
    pub body_read: Duration,
    /// The TLS handshake.
    pub tls_handshake: Duration,
    /// An HTTP/1.1 connection with no request in flight.
    pub keep_alive: Duration,
}

/// What protects one listener: its timeouts and its own per-address [`Gate`].
#[derive(Debug, Clone)]
pub struct Protection {
    pub timeouts: Timeouts,
    pub gate: Arc<Gate>,
}
