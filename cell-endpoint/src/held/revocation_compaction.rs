//! Compaction of the revocations an edge holds (DESIGN §6: kept until every session they could
//! match has expired). The auth-service drops such revocations from its own list, but the feed
//! has no "removed" change, so an instance that only ever applies deltas would keep every
//! sign-out it ever saw, in memory and in the state file it rewrites on every change. Each
//! applied view therefore drops what can no longer match a session *this instance* accepts:
//! the rule uses the instance's own clock and session lifetime, the same ones its verifier uses,
//! so nothing it could still accept loses its revocation.
//!
//! A revocation can match nothing once `until + leeway ≤ now`, with `until` = a session
//! revocation's `exp`; a "before" revocation's `before + lifetime`; a key revocation's
//! `at + lifetime` (the key has left the set anyway).

use protocol::revocation::RevocationSet;
use protocol::time::UnixSeconds;

use crate::held::state::CellState;

/// Drops the revocations of `state` that can no longer match anything and rebuilds its
/// matcher when it did. Answers how many were dropped.
pub(crate) fn compact(state: &mut CellState, lifetime_s: u64, now: UnixSeconds) -> usize {
    let before = state.snapshot.revocations.len();
    if state
        .snapshot
        .revocations
        .iter()
        .all(|r| r.can_match(lifetime_s, now))
    {
        return 0;
    }
    state
        .snapshot
        .revocations
        .retain(|r| r.can_match(lifetime_s, now));
    state.revocations = state
        .snapshot
        .revocations
        .iter()
        .map(|r| &r.kind)
        .collect::<RevocationSet>();
    before - state.snapshot.revocations.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::feed::Snapshot;
    use protocol::revocation::{Revocation, RevocationKind};
    use protocol::token::LEEWAY_S;
    use protocol::{CellId, SessionId, SubjectId};

    const LIFE: u64 = 1_000;

    fn rev(seq: u64, kind: RevocationKind) -> Revocation {
        Revocation {
            seq,
            kind,
            at: 100,
            by: "t".into(),
            reason: "t".into(),
            seal: None,
            handed_back: None,
            withdrawn: None,
        }
    }

    fn state(revs: Vec<Revocation>) -> CellState {
        let snapshot = Snapshot {
            revocations: revs,
            ..Snapshot::default()
        };
        CellState::from_snapshot(CellId::new("cell-01").unwrap(), 1, 1, 0, snapshot).unwrap()
    }

    #[test]
    fn only_what_can_match_nothing_is_dropped() {
        let jti = SessionId::from_random([1; 16]);
        let sub = SubjectId::new("c-1.t").unwrap();
        let mut s = state(vec![
            rev(1, RevocationKind::Session { jti, exp: 500 }),
            rev(2, RevocationKind::Subject { sub, before: 200 }),
            rev(3, RevocationKind::Cell { before: 100 }),
        ]);
        // Nothing expired yet: nothing dropped (the session revocation lives to 500 + leeway).
        assert_eq!(compact(&mut s, LIFE, 500 + LEEWAY_S - 1), 0);
        assert_eq!(s.revocations.len(), 3);
        assert_eq!(compact(&mut s, LIFE, 500 + LEEWAY_S), 1);
        assert_eq!(s.snapshot.revocations.len(), 2);
        assert_eq!(s.revocations.len(), 2, "the matcher is rebuilt");
        // The cell revocation goes at 100 + lifetime + leeway, the subject one 100 s later.
        assert_eq!(compact(&mut s, LIFE, 1_100 + LEEWAY_S), 1);
        assert_eq!(s.snapshot.revocations[0].seq, 2);
        assert_eq!(compact(&mut s, LIFE, 1_200 + LEEWAY_S), 1);
        assert!(s.revocations.is_empty());
    }
}
