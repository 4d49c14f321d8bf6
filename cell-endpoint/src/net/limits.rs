//! Rate limits (governor): per client IP for every request, per subject for validated ones.
//! Both answer `429 RATE_LIMITED` with `Retry-After`. A client IP is counted under its
//! `protocol::http::client_key` (ATTACKS A36): an IPv6 client by its /64, so rotating through
//! the addresses of one prefix does not buy a fresh bucket. Also where a request's client address
//! is recorded once established ([`ClientIp`], [`client_ip`]).
//!
//! A subject's limiter is one shared object ([`SubjectLimiter`]) that every cached session of
//! the subject holds (`token_cache::Validated`): a request checks it directly, without hashing
//! the subject and probing a map of every subject (at a million cached sessions those probes
//! were cache misses costing about a microsecond per request). The map of subjects here is
//! only consulted when a token is verified, and a subject leaves it when no cached session
//! holds its limiter any more (housekeeping), so two sessions of one subject always share one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{ConnectInfo, Request};
use governor::clock::DefaultClock;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::SubjectId;

use crate::config::Serving;
use crate::error::Refusal;
pub(crate) use crate::held::subject_limit::SubjectLimiter;
use crate::held::subject_limit::retry_after;

/// How often idle limiter entries are dropped, in seconds.
pub(crate) const LIMITER_HOUSEKEEPING_S: u64 = 60;

/// The limiters: per client key (an IPv4 address, an IPv6 /64) and per subject (one shared
/// [`SubjectLimiter`] each).
#[derive(Debug)]
pub struct Limits {
    per_ip: DefaultKeyedRateLimiter<IpAddr>,
    subject_quota: Quota,
    /// Every subject whose limiter a cached session may hold. Locked only when a token is
    /// verified (after a signature check) and by housekeeping, never on a cached request.
    subjects: Mutex<HashMap<SubjectId, Arc<SubjectLimiter>>>,
    clock: DefaultClock,
}

fn quota(per_s: u32, burst: u32) -> Quota {
    let per_s = NonZeroU32::new(per_s).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(per_s);
    Quota::per_second(per_s).allow_burst(burst)
}

impl Limits {
    /// The limiters of the rate keys of `s`.
    pub(crate) fn new(s: &Serving) -> Self {
        Self {
            per_ip: RateLimiter::keyed(quota(s.rate_per_ip_per_s, s.burst_per_ip)),
            subject_quota: quota(s.rate_per_subject_per_s, s.burst_per_subject),
            subjects: Mutex::new(HashMap::new()),
            clock: DefaultClock::default(),
        }
    }

    /// Takes one request from the bucket of `ip`'s client key.
    pub(crate) fn check_ip(&self, ip: IpAddr) -> Result<(), Refusal> {
        self.per_ip
            .check_key(&protocol::http::client_key(ip))
            .map_err(|n| Refusal::RateLimited {
                retry_after_s: retry_after(&self.clock, &n),
            })
    }

    /// The limiter of `sub`: the one its other cached sessions hold, else a new one.
    pub fn subject(&self, sub: &SubjectId) -> Arc<SubjectLimiter> {
        // A panic elsewhere while holding the lock leaves the map whole (every change is one
        // insert or retain), so a poisoned lock is used as it is.
        let mut subjects = self.subjects.lock().unwrap_or_else(PoisonError::into_inner);
        subjects
            .entry(sub.clone())
            .or_insert_with(|| {
                Arc::new(SubjectLimiter::new(self.subject_quota, self.clock.clone()))
            })
            .clone()
    }

    /// Subjects whose limiter some cached session holds.
    #[cfg(test)]
    fn subjects_held(&self) -> usize {
        self.subjects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Drops idle per-IP entries, and the subjects no cached session holds any more, so memory
    /// stays bounded (call every [`LIMITER_HOUSEKEEPING_S`]). A subject still held stays: a new
    /// session of it must share the limiter its other sessions use.
    pub(crate) fn retain_recent(&self) {
        self.per_ip.retain_recent();
        // Under the lock no one can take another handle from the map, so a count of one
        // (the map's own) cannot grow before the entry goes.
        self.subjects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, l| Arc::strong_count(l) > 1);
    }
}

/// The client address of a request, as [`per_ip`] established it (see `client_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientIp(pub IpAddr);

/// The connection's peer: the PROXY v2 source a trusted proxy named, else the socket peer.
pub(crate) fn peer_of(req: &Request) -> Option<IpAddr> {
    req.extensions()
        .get::<crate::net::conn::ProxiedPeer>()
        .map(|p| p.0.ip())
        .or_else(|| {
            req.extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
}

/// The client IP of a request, as [`per_ip`] established it (ATTACKS A27); without that
/// record, the connection's peer. `None` only for in-process requests without a connection.
pub(crate) fn client_ip(req: &Request) -> Option<IpAddr> {
    match req.extensions().get::<ClientIp>() {
        Some(ClientIp(ip)) => Some(*ip),
        None => peer_of(req),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(burst: u32) -> Limits {
        let s = Serving {
            rate_per_subject_per_s: 1,
            burst_per_subject: burst,
            ..Serving::default()
        };
        Limits::new(&s)
    }

    #[test]
    fn the_addresses_of_one_ipv6_slash_64_share_one_rate_limit_bucket() {
        let s = Serving {
            rate_per_ip_per_s: 1,
            burst_per_ip: 3,
            ..Serving::default()
        };
        let l = Limits::new(&s);
        let ip = |v: &str| v.parse::<IpAddr>().unwrap();
        // A client rotating through its /64: one bucket of three.
        for a in [
            "2001:db8:7:1::1",
            "2001:db8:7:1::2",
            "2001:db8:7:1:ffff:1:2:3",
        ] {
            l.check_ip(ip(a)).unwrap();
        }
        assert!(matches!(
            l.check_ip(ip("2001:db8:7:1:abcd::42")),
            Err(Refusal::RateLimited { .. })
        ));
        // The next /64 is another client; an IPv4 address is its own.
        l.check_ip(ip("2001:db8:7:2::1")).unwrap();
        l.check_ip(ip("192.0.2.1")).unwrap();
    }

    #[test]
    fn the_sessions_of_one_subject_share_one_limiter_while_any_holds_it() {
        let l = limits(2);
        let alice = SubjectId::new("c-1.tech1").unwrap();
        let bob = SubjectId::new("c-1.tech2").unwrap();
        let (a1, a2, b) = (l.subject(&alice), l.subject(&alice), l.subject(&bob));
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(!Arc::ptr_eq(&a1, &b));
        // The burst of two is the subject's, whichever session spends it.
        a1.check().unwrap();
        a2.check().unwrap();
        assert!(matches!(
            a1.check(),
            Err(Refusal::RateLimited { retry_after_s: 1 })
        ));
        b.check().unwrap();
        // Housekeeping keeps a subject some session holds: a new session of it shares the
        // spent limiter instead of getting a fresh burst.
        drop(a2);
        l.retain_recent();
        assert_eq!(l.subjects_held(), 2);
        assert!(l.subject(&alice).check().is_err());
        // Once no session holds it, it goes.
        drop((a1, b));
        l.retain_recent();
        assert_eq!(l.subjects_held(), 0);
    }
}
