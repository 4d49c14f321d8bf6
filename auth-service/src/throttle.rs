//! Sign-in throttles (governor), built so that a third party cannot turn them into a lockout
//! of the account's owner (ATTACKS A31, OWASP ASVS V6):
//!
//! ```text
//!   attempt ──▶ client IP bucket ──▶ (account, client IP) bucket ──▶ account ceiling ──▶ password
//!               every attempt         10 burst, 10/min by default     50 burst, 50/h
//! ```
//!
//! - The per-IP bucket bounds what one address can try across all accounts.
//! - The per-(account, IP) bucket is the one an attacker at one address exhausts: the owner at
//!   another address has a bucket of their own and still signs in.
//! - The per-account ceiling bounds guesses on one account from all addresses together (ASVS:
//!   at most 100 attempts on one account in any hour, burst + hourly rate). It is only reached
//!   by attempts the first two buckets let through, so one address hammering an account does
//!   not drain it.
//!
//! The client IP is the socket peer, or the edge's `X-Cellbind-Client-Ip` from an
//! authenticated edge only (`routes::extract::client_ip`).

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::{ContractorId, Login};

use crate::config::Config;
use crate::error::{Error, Result};

/// The sign-in throttles.
#[derive(Debug)]
pub(crate) struct Throttle {
    ip: DefaultKeyedRateLimiter<IpAddr>,
    account_ip: DefaultKeyedRateLimiter<(ContractorId, Login, IpAddr)>,
    account: DefaultKeyedRateLimiter<(ContractorId, Login)>,
}

fn nonzero(n: u32) -> NonZeroU32 {
    // The config refuses zero; a zero here would only ever mean "as strict as possible".
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn refuse(not_until: governor::NotUntil<governor::clock::QuantaInstant>) -> Error {
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Error::RateLimited {
        retry_after_s: secs.max(1),
    }
}

impl Throttle {
    pub(crate) fn new(config: &Config) -> Throttle {
        let per_minute = |rate, burst| Quota::per_minute(nonzero(rate)).allow_burst(nonzero(burst));
        Throttle {
            ip: RateLimiter::keyed(per_minute(
                config.signin_ip_per_minute,
                config.signin_ip_burst,
            )),
            account_ip: RateLimiter::keyed(per_minute(
                config.signin_account_ip_per_minute,
                config.signin_account_ip_burst,
            )),
            account: RateLimiter::keyed(
                Quota::per_hour(nonzero(config.signin_account_per_hour))
                    .allow_burst(nonzero(config.signin_account_burst)),
            ),
        }
    }

    /// Takes one attempt from the client IP's bucket.
    pub(crate) fn check_ip(&self, ip: IpAddr) -> Result<()> {
        self.ip.check_key(&ip).map_err(refuse)
    }

    /// Takes one attempt from the (account, client IP) bucket, then, only when that one let it
    /// through, one from the account's ceiling.
    pub(crate) fn check_account(
        &self,
        contractor: &ContractorId,
        login: &Login,
        ip: IpAddr,
    ) -> Result<()> {
        self.account_ip
            .check_key(&(contractor.clone(), login.clone(), ip))
            .map_err(refuse)?;
        self.account
            .check_key(&(contractor.clone(), login.clone()))
            .map_err(refuse)
    }

    /// Forgets buckets that are full again (bounds memory).
    pub(crate) fn shrink(&self) {
        self.ip.retain_recent();
        self.account_ip.retain_recent();
        self.account.retain_recent();
        self.ip.shrink_to_fit();
        self.account_ip.shrink_to_fit();
        self.account.shrink_to_fit();
    }
}
