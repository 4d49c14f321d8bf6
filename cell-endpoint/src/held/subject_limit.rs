//! One subject's rate limit ([`SubjectLimiter`]), the object every cached session of the
//! subject holds (`token_cache::Validated`) and `limits` hands out, one per subject. A part of
//! its own so that the token cache holds it without depending on the limits' configuration.

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::error::Refusal;

/// One subject's rate limit, shared by every cached session of the subject.
#[derive(Debug)]
pub struct SubjectLimiter {
    limiter: DefaultDirectRateLimiter,
}

impl SubjectLimiter {
    /// A full bucket of `quota`, timed by `clock`.
    pub(crate) fn new(quota: Quota, clock: DefaultClock) -> Self {
        Self {
            limiter: RateLimiter::direct_with_clock(quota, clock),
        }
    }

    /// One request of this subject: allowed, or `429` with the wait.
    pub(crate) fn check(&self) -> Result<(), Refusal> {
        self.limiter.check().map_err(|n| Refusal::RateLimited {
            retry_after_s: retry_after(self.limiter.clock(), &n),
        })
    }
}

/// Whole seconds until `not_until` allows a request, rounded up (`Retry-After`).
pub(crate) fn retry_after(
    clock: &DefaultClock,
    not_until: &governor::NotUntil<governor::clock::QuantaInstant>,
) -> u64 {
    let wait = not_until.wait_time_from(clock.now());
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}
