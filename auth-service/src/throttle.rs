//! Sign-in throttles (governor): one bucket per account and one per client IP.

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::{ContractorId, Login};

use crate::config::Config;
use crate::error::{Error, Result};

/// The sign-in throttles.
#[derive(Debug)]
pub struct Throttle {
    account: DefaultKeyedRateLimiter<(ContractorId, Login)>,
    ip: DefaultKeyedRateLimiter<IpAddr>,
}

fn quota(per_minute: u32, burst: u32) -> Quota {
    let rate = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::per_minute(rate).allow_burst(burst)
}

fn refuse(not_until: governor::NotUntil<governor::clock::QuantaInstant>) -> Error {
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Error::RateLimited {
        retry_after_s: secs.max(1),
    }
}

impl Throttle {
    pub fn new(config: &Config) -> Throttle {
        Throttle {
            account: RateLimiter::keyed(quota(
                config.signin_account_per_minute,
                config.signin_account_burst,
            )),
            ip: RateLimiter::keyed(quota(config.signin_ip_per_minute, config.signin_ip_burst)),
        }
    }

    /// Takes one attempt from the client IP's bucket.
    pub fn check_ip(&self, ip: IpAddr) -> Result<()> {
        self.ip.check_key(&ip).map_err(refuse)
    }

    /// Takes one attempt from the account's bucket.
    pub fn check_account(&self, contractor: &ContractorId, login: &Login) -> Result<()> {
        self.account
            .check_key(&(contractor.clone(), login.clone()))
            .map_err(refuse)
    }

    /// Forgets buckets that are full again (bounds memory).
    pub fn shrink(&self) {
        self.account.retain_recent();
        self.ip.retain_recent();
        self.account.shrink_to_fit();
        self.ip.shrink_to_fit();
    }
}
