//! Where a dev fleet listens: one port base `B`; the control plane on `127.0.0.1:B`, cell `n`
//! on `127.0.0.n` (edge `B+3`, auth-service public `B+4` and internal `B+6`, app public `B+5`
//! and internal `B+7`). A cell with several auth-service replicas runs replica `r` (0-based)
//! on `127.0.r.n` with the same ports as replica 0, so replicas never collide.
//!
//! Every server also has a management listener (`/healthz`, `/readyz`, `/metrics`): the edge
//! on `B+1` and the app on `B+8` of its cell's address, each auth-service replica on `B+2` of
//! its own, the control plane on `127.0.0.1:B+9` (beside cell 1, whose ports stop at `B+8`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use protocol::CellId;
use runtime::IoError;

use crate::error::{FleetError, Result};

/// Default first port (`--port-base`).
pub const DEFAULT_PORT_BASE: u16 = 8440;
/// Offset of the control plane's port (on 127.0.0.1).
pub const CONTROL_PLANE_PORT_OFFSET: u16 = 0;
/// Offset of each cell's edge port (the cell's public endpoint).
pub const EDGE_PORT_OFFSET: u16 = 3;
/// Offset of each cell's auth-service public listener (what the edge forwards sessions to).
pub const AUTH_PORT_OFFSET: u16 = 4;
/// Offset of each cell's demo app public listener (what the edge forwards `/api/*` to).
pub const APP_PORT_OFFSET: u16 = 5;
/// Offset of each cell's auth-service internal listener (admin API, feed, metrics).
pub const AUTH_INTERNAL_PORT_OFFSET: u16 = 6;
/// Offset of each cell's demo app internal listener (the migration interface).
pub const APP_INTERNAL_PORT_OFFSET: u16 = 7;
/// Offset of each cell's edge management listener.
pub const EDGE_MANAGEMENT_PORT_OFFSET: u16 = 1;
/// Offset of each auth-service replica's management listener (on the replica's address).
pub const AUTH_MANAGEMENT_PORT_OFFSET: u16 = 2;
/// Offset of each cell's demo app management listener.
pub const APP_MANAGEMENT_PORT_OFFSET: u16 = 8;
/// Offset of the control plane's management listener (on 127.0.0.1).
pub const CONTROL_PLANE_MANAGEMENT_PORT_OFFSET: u16 = 9;

/// A server's three listeners, as its configuration names them: `listen` (public: what the
/// edge forwards to), `internal_listen` (admin, internal and migration routes) and
/// `management_listen` (health, readiness, metrics).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Listeners {
    pub listen: SocketAddr,
    pub internal_listen: SocketAddr,
    pub management_listen: SocketAddr,
}

/// Addresses of the fleet for a port base.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub base: u16,
}

impl Ports {
    /// The address of cell `n`'s listener at `offset` from the base.
    fn at(self, n: u8, offset: u16) -> Result<SocketAddr> {
        self.replica_at(n, 0, offset)
    }
    /// The address of the listener at `offset` of cell `n`'s replica `r`.
    fn replica_at(self, n: u8, r: u8, offset: u16) -> Result<SocketAddr> {
        let port = self
            .base
            .checked_add(offset)
            .ok_or_else(|| FleetError::Config(format!("--port-base {} is too high", self.base)))?;
        Ok(SocketAddr::new(Self::replica_ip(n, r), port))
    }
    /// The loopback address of cell `n` (`127.0.0.n`).
    pub fn cell_ip(n: u8) -> IpAddr {
        Self::replica_ip(n, 0)
    }
    /// The loopback address of cell `n`'s auth-service replica `r` (`127.0.r.n`; replica 0 is
    /// on the cell's own address).
    pub fn replica_ip(n: u8, r: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, r, n))
    }
    /// The control plane (on `127.0.0.1`).
    pub fn control_plane(self) -> Result<SocketAddr> {
        self.at(1, CONTROL_PLANE_PORT_OFFSET)
    }
    /// The control plane's management listener (on `127.0.0.1`).
    pub fn control_plane_management(self) -> Result<SocketAddr> {
        self.at(1, CONTROL_PLANE_MANAGEMENT_PORT_OFFSET)
    }
    /// Cell `n`'s edge (its public endpoint).
    pub fn edge(self, n: u8) -> Result<SocketAddr> {
        self.at(n, EDGE_PORT_OFFSET)
    }
    /// Cell `n`'s edge management listener.
    pub fn edge_management(self, n: u8) -> Result<SocketAddr> {
        self.at(n, EDGE_MANAGEMENT_PORT_OFFSET)
    }
    /// Cell `n`'s auth-service public listener.
    pub fn auth(self, n: u8) -> Result<SocketAddr> {
        self.at(n, AUTH_PORT_OFFSET)
    }
    /// Cell `n`'s app public listener.
    pub fn app(self, n: u8) -> Result<SocketAddr> {
        self.at(n, APP_PORT_OFFSET)
    }
    /// Cell `n`'s auth-service internal listener.
    pub fn auth_internal(self, n: u8) -> Result<SocketAddr> {
        self.at(n, AUTH_INTERNAL_PORT_OFFSET)
    }
    /// Cell `n`'s app internal listener.
    pub fn app_internal(self, n: u8) -> Result<SocketAddr> {
        self.at(n, APP_INTERNAL_PORT_OFFSET)
    }
    /// Cell `n`'s auth-service: its public and internal listeners.
    pub fn auth_listeners(self, n: u8) -> Result<Listeners> {
        self.replica_listeners(n, 0)
    }
    /// Cell `n`'s auth-service replica `r`: its public, internal and management listeners.
    pub fn replica_listeners(self, n: u8, r: u8) -> Result<Listeners> {
        Ok(Listeners {
            listen: self.replica_at(n, r, AUTH_PORT_OFFSET)?,
            internal_listen: self.replica_at(n, r, AUTH_INTERNAL_PORT_OFFSET)?,
            management_listen: self.replica_at(n, r, AUTH_MANAGEMENT_PORT_OFFSET)?,
        })
    }
    /// Cell `n`'s app: its public, internal and management listeners.
    pub fn app_listeners(self, n: u8) -> Result<Listeners> {
        Ok(Listeners {
            listen: self.app(n)?,
            internal_listen: self.app_internal(n)?,
            management_listen: self.at(n, APP_MANAGEMENT_PORT_OFFSET)?,
        })
    }
    /// Every address the fleet listens on (one auth-service per cell).
    pub fn all(self, cells: u8) -> Result<Vec<SocketAddr>> {
        self.all_with_replicas(cells, 1)
    }
    /// Every address the fleet listens on with `replicas` auth-services per cell.
    pub fn all_with_replicas(self, cells: u8, replicas: u8) -> Result<Vec<SocketAddr>> {
        let mut v = vec![self.control_plane()?, self.control_plane_management()?];
        for n in 1..=cells {
            let app = self.app_listeners(n)?;
            v.extend([
                self.edge(n)?,
                self.edge_management(n)?,
                app.listen,
                app.internal_listen,
                app.management_listen,
            ]);
            for r in 0..replicas {
                let l = self.replica_listeners(n, r)?;
                v.extend([l.listen, l.internal_listen, l.management_listen]);
            }
        }
        Ok(v)
    }
}

/// The HTTPS URL of a listener.
pub(crate) fn https(addr: SocketAddr) -> String {
    format!("https://{addr}")
}

/// The cell id of cell `n` (`cell-01` …).
pub fn cell_id(n: u8) -> Result<CellId> {
    CellId::new(format!("cell-{n:02}")).map_err(|e| FleetError::Internal(e.to_string()))
}

/// Refuses with a one-line error naming the first address that is already taken.
pub fn check_ports_free(addrs: &[SocketAddr]) -> Result<()> {
    for a in addrs {
        match std::net::TcpListener::bind(a) {
            Ok(l) => drop(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(FleetError::AddrInUse(*a));
            }
            Err(e) => return Err(IoError::new(format!("cannot listen on {a}"), e).into()),
        }
    }
    Ok(())
}
