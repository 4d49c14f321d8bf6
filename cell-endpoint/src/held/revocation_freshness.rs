//! Fail-closed revocation freshness (DESIGN §6): an instance whose revocation view is older
//! than `revocation_max_age_ms` can be made to refuse writes, or everything, with
//! `503 CELL_STATE_STALE`, so that a partitioned instance cannot keep serving a session that
//! was revoked while it could not hear about it.
//!
//! The view's age is the time since the last successful feed sync (the same instant that
//! renews the write lease). A healthy instance long-polls the feed, and the poll is capped at
//! half the bound ([`effective_wait_ms`]) so that silence on the feed never ages the view past
//! it. Off by default (`revocation_max_age_ms = 0`): static stability (serving on while the
//! auth-service is down) is the default trade-off.
//!
//! ```text
//!   bound off ─────────────────────────────────────────────▶ serve
//!   bound on ── age ≤ bound ───────────────────────────────▶ serve
//!            └─ age > bound ─┬─ mode "all" ────────────────▶ 503 CELL_STATE_STALE
//!                            ├─ mode "writes", a write ────▶ 503 CELL_STATE_STALE
//!                            └─ mode "writes", a read ─────▶ serve
//! ```

use std::time::Duration;

use protocol::ownership::Access;

use crate::config::FailClosed;
use crate::error::Refusal;

/// The feed long-poll wait with the freshness bound applied: at most half the bound, so a
/// quiet feed still confirms the view in time.
pub(crate) fn effective_wait_ms(wait_ms: u64, bound: Option<Duration>) -> u64 {
    match bound {
        Some(b) => wait_ms.min((b.as_millis() / 2).max(1) as u64),
        None => wait_ms,
    }
}

/// The decision of the diagram above.
pub(crate) fn decide(
    age: Option<Duration>,
    bound: Option<Duration>,
    mode: FailClosed,
    access: Access,
) -> Result<(), Refusal> {
    let Some(bound) = bound else {
        return Ok(());
    };
    // Never synced since start (serving from the disk copy): treat as older than any bound.
    let stale = age.is_none_or(|a| a > bound);
    match (stale, mode, access) {
        (false, _, _) => Ok(()),
        (true, FailClosed::All, _) | (true, FailClosed::Writes, Access::Write) => {
            Err(Refusal::RevocationsStale)
        }
        (true, FailClosed::Writes, Access::Read) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Option<Duration> = Some(Duration::from_secs(5));

    #[test]
    fn off_never_refuses() {
        for mode in [FailClosed::Writes, FailClosed::All] {
            for access in [Access::Read, Access::Write] {
                assert!(decide(None, None, mode, access).is_ok());
                assert!(decide(Some(Duration::from_secs(9_999)), None, mode, access).is_ok());
            }
        }
    }

    #[test]
    fn a_fresh_view_serves_everything() {
        let age = Some(Duration::from_secs(5));
        for mode in [FailClosed::Writes, FailClosed::All] {
            for access in [Access::Read, Access::Write] {
                assert!(decide(age, B, mode, access).is_ok());
            }
        }
    }

    #[test]
    fn a_stale_view_refuses_writes_or_everything() {
        let age = Some(Duration::from_millis(5_001));
        assert!(decide(age, B, FailClosed::Writes, Access::Read).is_ok());
        assert!(matches!(
            decide(age, B, FailClosed::Writes, Access::Write),
            Err(Refusal::RevocationsStale)
        ));
        assert!(matches!(
            decide(age, B, FailClosed::All, Access::Read),
            Err(Refusal::RevocationsStale)
        ));
        // Never synced counts as stale.
        assert!(decide(None, B, FailClosed::All, Access::Read).is_err());
    }

    #[test]
    fn the_long_poll_is_capped_at_half_the_bound() {
        assert_eq!(effective_wait_ms(20_000, None), 20_000);
        assert_eq!(effective_wait_ms(20_000, B), 2_500);
        assert_eq!(effective_wait_ms(1_000, B), 1_000);
        assert_eq!(effective_wait_ms(20_000, Some(Duration::from_millis(1))), 1);
    }
}
