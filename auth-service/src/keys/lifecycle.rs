//! The key state machine of `keys` (its diagram is in the module doc there): the allowed
//! transitions ([`KeyEvent`], [`moved`]) and the four operations that drive them through one
//! commit each: [`ensure_keys`], [`rotate`], [`tick_keys`] (scheduled rotation and expiry) and
//! [`revoke_key`].

use std::sync::Arc;

use protocol::Kid;
use protocol::admin::cell::Rotation;
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::token::SigningKey;

use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::keys::kek::generate;
use crate::state::{AppState, Inner};
use crate::store::records::{KeyRow, KeyState};

/// What happens to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyEvent {
    /// next → current: it starts signing.
    Promote,
    /// current → retired: verify only.
    Retire,
    /// retired → expired: every session it signed has expired.
    Expire,
    /// next, current or retired → revoked: every session it signed fails.
    Revoke,
}

/// The state after `event`, or `None` when the diagram has no such arrow.
pub(crate) fn next_state(from: KeyState, event: KeyEvent) -> Option<KeyState> {
    use KeyState::*;
    match (from, event) {
        (Next, KeyEvent::Promote) => Some(Current),
        (Current, KeyEvent::Retire) => Some(Retired),
        (Retired, KeyEvent::Expire) => Some(Expired),
        (Next | Current | Retired, KeyEvent::Revoke) => Some(Revoked),
        _ => None,
    }
}

/// `row` after `event` at `now`. A key leaving the set (revoked, expired) drops its seed.
pub(crate) fn moved(row: &KeyRow, event: KeyEvent, now: UnixSeconds) -> Result<KeyRow> {
    let state = next_state(row.state, event).ok_or_else(|| {
        Error::Internal(format!(
            "key {} cannot go from {} on {event:?}",
            row.kid,
            row.state.as_str()
        ))
    })?;
    Ok(KeyRow {
        state,
        state_at: now,
        sealed_seed: if state.published() {
            row.sealed_seed.clone()
        } else {
            None
        },
        ..row.clone()
    })
}

/// A fresh key, born in `state` (next, or current on a first start).
fn born(
    state: &AppState,
    as_state: KeyState,
    now: UnixSeconds,
) -> Result<(Arc<SigningKey>, KeyRow)> {
    generate(&state.rng, &state.kek, as_state, now)
}

/// Fills `batch` with a rotation: current → retired, next → current (or a new current when
/// there is no next), a new next.
fn rotate_into(
    state: &AppState,
    inner: &Inner,
    batch: &mut Batch,
    now: UnixSeconds,
) -> Result<Rotation> {
    let mut retired = Vec::new();
    if let Some(cur) = inner.ring.current() {
        batch.key(moved(&cur.row, KeyEvent::Retire, now)?, None);
        retired.push(cur.row.kid.clone());
    }
    let current = match inner.ring.next() {
        Some(n) => {
            batch.key(moved(&n.row, KeyEvent::Promote, now)?, None);
            n.row.kid.clone()
        }
        None => {
            let (s, row) = born(state, KeyState::Current, now)?;
            let kid = row.kid.clone();
            batch.key(row, Some(s));
            kid
        }
    };
    let (s, row) = born(state, KeyState::Next, now)?;
    let next = row.kid.clone();
    batch.key(row, Some(s));
    for k in inner.ring.in_state(KeyState::Retired) {
        retired.push(k.row.kid.clone());
    }
    Ok(Rotation {
        current,
        next,
        retired,
    })
}

/// Creates a current and a next key when missing (first start, or after revocations).
pub(crate) async fn ensure_keys(state: &AppState) -> Result<()> {
    let now = state.now();
    state
        .commit_with(|inner, batch| {
            if inner.ring.current().is_none() {
                if let Some(next) = inner.ring.next() {
                    batch.key(moved(&next.row, KeyEvent::Promote, now)?, None);
                } else {
                    let (s, row) = born(state, KeyState::Current, now)?;
                    batch.key(row, Some(s));
                }
                let (s, row) = born(state, KeyState::Next, now)?;
                batch.key(row, Some(s));
            } else if inner.ring.next().is_none() {
                let (s, row) = born(state, KeyState::Next, now)?;
                batch.key(row, Some(s));
            }
            Ok(())
        })
        .await?;
    Ok(())
}

/// Rotates the signing key now.
pub(crate) async fn rotate(state: &AppState) -> Result<Rotation> {
    let now = state.now();
    let (_, r) = state
        .commit_with(|inner, batch| rotate_into(state, inner, batch, now))
        .await?;
    tracing::info!(current = %r.current, next = %r.next, "rotated signing keys");
    Ok(r)
}

/// The scheduled part of key management: rotate when the current key is older than the
/// rotation interval, and expire retired keys once every session they signed has expired.
pub async fn tick_keys(state: &AppState) -> Result<Option<Rotation>> {
    let now = state.now();
    let interval = state.config.key_rotation_interval_s;
    let keep = state
        .config
        .session_lifetime_s
        .saturating_add(protocol::token::LEEWAY_S);
    let (_, rotated) = state
        .commit_with(|inner, batch| {
            for k in inner.ring.in_state(KeyState::Retired) {
                if k.row.state_at.saturating_add(keep) <= now {
                    batch.key(moved(&k.row, KeyEvent::Expire, now)?, None);
                }
            }
            let due = inner
                .ring
                .current()
                .is_none_or(|c| c.row.state_at.saturating_add(interval) <= now);
            if due {
                return rotate_into(state, inner, batch, now).map(Some);
            }
            Ok(None)
        })
        .await?;
    if let Some(r) = &rotated {
        tracing::info!(current = %r.current, next = %r.next, "scheduled key rotation");
    }
    Ok(rotated)
}

/// Revokes a key: it leaves the set and a key revocation enters the feed. Revoking the
/// current key promotes the next one first; revoking the next key makes a new one.
/// Answers `false` when the key was already revoked.
pub(crate) async fn revoke_key(
    state: &AppState,
    kid: &Kid,
    by: String,
    reason: String,
) -> Result<bool> {
    let now = state.now();
    let (_, changed) = state
        .commit_with(|inner, batch| {
            let Some(key) = inner.ring.get(kid) else {
                if inner.revoked.is_key_revoked(kid) {
                    return Ok(false);
                }
                return Err(Error::NotFound(format!("key {kid}")));
            };
            match key.row.state {
                KeyState::Current => {
                    rotate_into(state, inner, batch, now)?;
                }
                KeyState::Next => {
                    let (s, row) = born(state, KeyState::Next, now)?;
                    batch.key(row, Some(s));
                }
                _ => {}
            }
            batch.key(moved(&key.row, KeyEvent::Revoke, now)?, None);
            batch.revocation(
                RevocationKind::Key { kid: kid.clone() },
                now,
                by.clone(),
                reason.clone(),
            );
            Ok(true)
        })
        .await?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_arrows_of_the_diagram_exist() {
        use KeyEvent::*;
        use KeyState::*;
        let all_states = [Next, Current, Retired, Revoked, Expired];
        let all_events = [Promote, Retire, Expire, Revoke];
        let allowed = [
            (Next, Promote, Current),
            (Current, Retire, Retired),
            (Retired, Expire, Expired),
            (Next, Revoke, Revoked),
            (Current, Revoke, Revoked),
            (Retired, Revoke, Revoked),
        ];
        for from in all_states {
            for event in all_events {
                let want = allowed
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                assert_eq!(next_state(from, event), want, "{from:?} on {event:?}");
            }
        }
    }

    #[test]
    fn leaving_the_set_drops_the_seed() {
        let row = KeyRow {
            kid: Kid::new("k-1").unwrap(),
            state: KeyState::Current,
            public: [1; 32],
            sealed_seed: Some(vec![1, 2]),
            created_at: 1,
            state_at: 1,
        };
        let retired = moved(&row, KeyEvent::Retire, 5).unwrap();
        assert_eq!((retired.state, retired.state_at), (KeyState::Retired, 5));
        assert_eq!(retired.sealed_seed, Some(vec![1, 2]));
        let revoked = moved(&row, KeyEvent::Revoke, 6).unwrap();
        assert_eq!(revoked.sealed_seed, None);
        assert!(moved(&revoked, KeyEvent::Promote, 7).is_err());
    }
}
