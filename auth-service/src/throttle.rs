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
//!
//! With several replicas (PostgreSQL) the buckets are shared: each attempt takes its tokens
//! from one table in the database (the same GCRA as governor's, one statement per bucket), so
//! a brute force spread over the replicas is throttled exactly like one on a single replica.
//! With one replica they are governor's in memory.

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::{ContractorId, Login};

use crate::config::Config;
use crate::coordination::Coordination;
use crate::error::{Error, Result};
use crate::store::postgres::PgCoordination;

/// One bucket's shape for the shared table: capacity and the time one token takes to come
/// back, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Shape {
    burst: u32,
    interval_ms: u64,
}

impl Shape {
    fn new(burst: u32, per: u32, period_ms: u64) -> Shape {
        Shape {
            burst: burst.max(1),
            interval_ms: (period_ms / u64::from(per.max(1))).max(1),
        }
    }
}

/// The sign-in throttles.
#[derive(Debug)]
pub(crate) struct Throttle {
    ip: DefaultKeyedRateLimiter<IpAddr>,
    account_ip: DefaultKeyedRateLimiter<(ContractorId, Login, IpAddr)>,
    account: DefaultKeyedRateLimiter<(ContractorId, Login)>,
    shapes: [Shape; 3],
    coordination: Coordination,
}

/// Milliseconds since the unix epoch (the shared buckets' clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
    pub(crate) fn new(config: &Config, coordination: Coordination) -> Throttle {
        const MINUTE_MS: u64 = 60_000;
        const HOUR_MS: u64 = 3_600_000;
        let shapes = [
            Shape::new(
                config.signin_ip_burst,
                config.signin_ip_per_minute,
                MINUTE_MS,
            ),
            Shape::new(
                config.signin_account_ip_burst,
                config.signin_account_ip_per_minute,
                MINUTE_MS,
            ),
            Shape::new(
                config.signin_account_burst,
                config.signin_account_per_hour,
                HOUR_MS,
            ),
        ];
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
            shapes,
            coordination,
        }
    }

    /// Takes one token from a shared bucket.
    async fn take(shared: &PgCoordination, key: String, shape: Shape) -> Result<()> {
        match shared
            .take(&key, shape.burst, shape.interval_ms, now_ms())
            .await?
        {
            None => Ok(()),
            Some(retry_after_s) => Err(Error::RateLimited {
                retry_after_s: retry_after_s.max(1),
            }),
        }
    }

    /// Takes one attempt from the client IP's bucket.
    pub(crate) async fn check_ip(&self, ip: IpAddr) -> Result<()> {
        if let Some(shared) = self.coordination.shared() {
            return Self::take(shared, format!("ip/{ip}"), self.shapes[0]).await;
        }
        self.ip.check_key(&ip).map_err(refuse)
    }

    /// Takes one attempt from the (account, client IP) bucket, then, only when that one let it
    /// through, one from the account's ceiling.
    pub(crate) async fn check_account(
        &self,
        contractor: &ContractorId,
        login: &Login,
        ip: IpAddr,
    ) -> Result<()> {
        if let Some(shared) = self.coordination.shared() {
            // Neither an IP nor a contractor id holds a `/` and the login comes last, so two
            // different buckets never share a key.
            let account = format!("{contractor}/{login}");
            Self::take(shared, format!("account-ip/{ip}/{account}"), self.shapes[1]).await?;
            return Self::take(shared, format!("account/{account}"), self.shapes[2]).await;
        }
        self.account_ip
            .check_key(&(contractor.clone(), login.clone(), ip))
            .map_err(refuse)?;
        self.account
            .check_key(&(contractor.clone(), login.clone()))
            .map_err(refuse)
    }

    /// Forgets buckets that are full again (bounds memory; with shared buckets, the table).
    pub(crate) async fn shrink(&self) {
        if let Some(shared) = self.coordination.shared()
            && let Err(e) = shared.shrink_buckets(now_ms()).await
        {
            tracing::warn!(error = %e, "could not drop full sign-in throttle buckets");
        }
        self.ip.retain_recent();
        self.account_ip.retain_recent();
        self.account.retain_recent();
        self.ip.shrink_to_fit();
        self.account_ip.shrink_to_fit();
        self.account.shrink_to_fit();
    }
}
