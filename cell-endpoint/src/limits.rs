//! Rate limits (governor): per client IP for every request, per subject for validated ones.
//! Both answer `429 RATE_LIMITED` with `Retry-After`. Also where a request's client address
//! is recorded once established ([`ClientIp`], [`client_ip`]).

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;

use axum::extract::{ConnectInfo, Request};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::SubjectId;

use crate::config::Settings;
use crate::error::EdgeError;

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

    /// Drops idle entries so memory stays bounded (call every [`LIMITER_HOUSEKEEPING_S`]).
    pub fn retain_recent(&self) {
        self.per_ip.retain_recent();
        self.per_subject.retain_recent();
    }
}

/// The client address of a request, as [`per_ip`] established it (see `client_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// The connection's peer: the PROXY v2 source a trusted proxy named, else the socket peer.
pub fn peer_of(req: &Request) -> Option<IpAddr> {
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
