//! The per-address cap on open connections (ATTACKS A29, A33): a [`Gate`] counts the open
//! connections of each client address, keyed by [`protocol::http::client_key`] (an IPv6 client
//! by its /64), and refuses one more once an address holds the most allowed. A refused
//! connection is closed at once, before any TLS work, and counted.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

/// Open connections per client address, at most `max_per_ip` each.
#[derive(Debug)]
pub struct Gate {
    open: Mutex<HashMap<IpAddr, usize>>,
    max_per_ip: usize,
    refused: Counter,
}

impl Gate {
    /// A gate letting at most `max_per_ip` (at least one) connections of one address be open;
    /// each refusal increments `refused`.
    pub fn new(max_per_ip: usize, refused: Counter) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(HashMap::new()),
            max_per_ip: max_per_ip.max(1),
            refused,
        })
    }

    /// Counts a connection from `ip` (under its [`protocol::http::client_key`]); `None`, and
    /// one more refusal counted, when that key already has the most allowed open.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let key = protocol::http::client_key(ip);
        // Every change under the lock is one insert, update or removal: a panic elsewhere
        // leaves the map whole, so a poisoned lock is used as it is.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(key).or_insert(0);
        if *n >= self.max_per_ip {
            drop(open);
            self.refused.inc();
            return None;
        }
        *n += 1;
        Some(Slot {
            gate: self.clone(),
            key,
        })
    }

    /// The connections open from `ip`'s key (tests, metrics).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&protocol::http::client_key(ip))
            .copied()
            .unwrap_or(0)
    }

    /// The most connections one address may hold open.
    pub fn max_per_ip(&self) -> usize {
        self.max_per_ip
    }
}

/// One counted connection; uncounted when dropped (the connection closed).
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    key: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .gate
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A stream that holds its connection's [`Slot`] (none for a connection not counted, e.g. a
/// trusted proxy's own) until it is dropped.
#[derive(Debug)]
pub struct Gated<S> {
    inner: S,
    _slot: Option<Slot>,
}

impl<S> Gated<S> {
    pub fn new(inner: S, slot: Option<Slot>) -> Self {
        Self { inner, _slot: slot }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gated<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

super::write_through::write_through!(Gated);

/// Why a connection was closed at admission.
pub fn too_many() -> io::Error {
    io::Error::other("too many connections from one address")
}

/// Sets `TCP_NODELAY`: answers leave at once. Without it a response written in two pieces
/// (head, then body) waits for the client's delayed acknowledgement, about 40 ms on Linux,
/// before its second piece leaves. A socket that refuses the option still serves.
pub fn no_delay(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

/// The admission of a listener whose clients connect directly: the socket peer's address is
/// counted at the [`Gate`]; over the cap the connection is closed at once.
#[derive(Debug, Clone)]
pub struct PeerGate {
    gate: Arc<Gate>,
}

impl PeerGate {
    pub fn new(gate: Arc<Gate>) -> Self {
        Self { gate }
    }
}

impl<S: Send + 'static> Accept<TcpStream, S> for PeerGate {
    type Stream = Gated<TcpStream>;
    type Service = S;
    type Future = std::future::Ready<io::Result<(Gated<TcpStream>, S)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        std::future::ready(admit_peer(&self.gate, stream).map(|s| (s, service)))
    }
}

fn admit_peer(gate: &Arc<Gate>, stream: TcpStream) -> io::Result<Gated<TcpStream>> {
    let peer = stream.peer_addr()?;
    let slot = gate.admit(peer.ip()).ok_or_else(too_many)?;
    no_delay(&stream);
    Ok(Gated::new(stream, Some(slot)))
}

/// A boxed admission future (the edge's PROXY-protocol admission reads before it decides).
pub type AdmitFuture<St, Sv> = Pin<Box<dyn Future<Output = io::Result<(St, Sv)>> + Send>>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_holds_at_most_the_cap_and_gets_its_slots_back() {
        let refused = Counter::default();
        let gate = Gate::new(2, refused.clone());
        let a = gate.admit(ip("192.0.2.1")).unwrap();
        let _b = gate.admit(ip("192.0.2.1")).unwrap();
        assert!(gate.admit(ip("192.0.2.1")).is_none());
        assert_eq!(refused.get(), 1);
        // Another address has its own count.
        let _c = gate.admit(ip("192.0.2.2")).unwrap();
        drop(a);
        assert_eq!(gate.open_from(ip("192.0.2.1")), 1);
        assert!(gate.admit(ip("192.0.2.1")).is_some());
        assert_eq!(refused.get(), 1);
    }

    #[test]
    fn the_addresses_of_one_ipv6_slash_64_share_one_count() {
        let gate = Gate::new(2, Counter::default());
        let _a = gate.admit(ip("2001:db8:1:2::1")).unwrap();
        let _b = gate.admit(ip("2001:db8:1:2:ffff::9")).unwrap();
        assert!(gate.admit(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).is_none());
        // The next /64 is another client.
        assert!(gate.admit(ip("2001:db8:1:3::1")).is_some());
        // An IPv4-mapped address counts as its IPv4 address.
        let _v4 = gate.admit(ip("192.0.2.9")).unwrap();
        let _v4b = gate.admit(ip("::ffff:192.0.2.9")).unwrap();
        assert!(gate.admit(ip("192.0.2.9")).is_none());
        assert_eq!(gate.open_from(ip("::ffff:192.0.2.9")), 2);
    }
}
