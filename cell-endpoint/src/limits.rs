//! Rate limits (governor): per client IP for every request, per subject for validated ones.
//! Both answer `429 RATE_LIMITED` with `Retry-After`.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::SubjectId;

use crate::Edge;
use crate::config::Settings;
use crate::error::{EdgeError, rescue};

/// How often idle limiter entries are dropped, in seconds.
pub const LIMITER_HOUSEKEEPING_S: u64 = 60;

/// The keyed limiters.
#[derive(Debug)]
pub struct Limits {
    per_ip: DefaultKeyedRateLimiter<IpAddr>,
    per_subject: DefaultKeyedRateLimiter<SubjectId>,
    clock: DefaultClock,
}

fn quota(per_s: u32, burst: u32) -> Quota {
    let per_s = NonZeroU32::new(per_s).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(per_s);
    Quota::per_second(per_s).allow_burst(burst)
}

impl Limits {
    pub fn new(s: &Settings) -> Self {
        Self {
            per_ip: RateLimiter::keyed(quota(s.rate_per_ip_per_s, s.burst_per_ip)),
            per_subject: RateLimiter::keyed(quota(s.rate_per_subject_per_s, s.burst_per_subject)),
            clock: DefaultClock::default(),
        }
    }

    fn retry_after(&self, not_until: &governor::NotUntil<governor::clock::QuantaInstant>) -> u64 {
        let wait = not_until.wait_time_from(self.clock.now());
        wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
    }

    pub fn check_ip(&self, ip: IpAddr) -> Result<(), EdgeError> {
        self.per_ip
            .check_key(&ip)
            .map_err(|n| EdgeError::RateLimited {
                retry_after_s: self.retry_after(&n),
            })
    }

    pub fn check_subject(&self, sub: &SubjectId) -> Result<(), EdgeError> {
        self.per_subject
            .check_key(sub)
            .map_err(|n| EdgeError::RateLimited {
                retry_after_s: self.retry_after(&n),
            })
    }

    fn retain_recent(&self) {
        self.per_ip.retain_recent();
        self.per_subject.retain_recent();
    }
}

/// The client address of a request, as [`per_ip`] established it (see `client_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// The connection's peer: the PROXY v2 source a trusted proxy named, else the socket peer.
fn peer_of(req: &Request) -> Option<IpAddr> {
    req.extensions()
        .get::<crate::conn::ProxiedPeer>()
        .map(|p| p.0.ip())
        .or_else(|| {
            req.extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
}

/// The client IP of a request, as [`per_ip`] established it (ATTACKS A27); without that
/// record, the connection's peer. `None` only for in-process requests without a connection.
pub fn client_ip(req: &Request) -> Option<IpAddr> {
    match req.extensions().get::<ClientIp>() {
        Some(ClientIp(ip)) => Some(*ip),
        None => peer_of(req),
    }
}

/// Per-IP middleware: establishes the client address once (recorded for the forwarders) and
/// takes one request from its bucket.
pub async fn per_ip(State(edge): State<Edge>, mut req: Request, next: Next) -> Response {
    if let Some(peer) = peer_of(&req) {
        let s = edge.settings();
        let ip =
            crate::client_ip::resolve(peer, req.headers(), &s.trusted_proxies, s.client_ip_header);
        req.extensions_mut().insert(ClientIp(ip));
        if let Err(e) = edge.limits.check_ip(ip) {
            edge.metrics().outcome(e.outcome());
            return rescue(&e);
        }
    }
    next.run(req).await
}

/// Drops idle limiter entries so memory stays bounded.
pub async fn housekeeping(edge: Edge) {
    let mut tick = tokio::time::interval(Duration::from_secs(LIMITER_HOUSEKEEPING_S));
    loop {
        tick.tick().await;
        edge.limits.retain_recent();
    }
}
