//! Revocations (DESIGN §6): the five kinds, what each matches, and the matcher the edge and
//! the auth-service run on every request.
//!
//! What a revocation matches is decided once, here, by exhaustive matches on
//! [`RevocationKind`] (none has a catch-all arm, so a new kind does not compile until each rule
//! decides what it does with it):
//!
//! | kind         | matches a session ([`RevocationKind::matches`])        | [`RevocationKind::revokes_issued_before`] |
//! |--------------|--------------------------------------------------------|--------------------------------------------|
//! | `session`    | with that id                                           | —                                          |
//! | `subject`    | of that subject issued strictly before `before`        | `before`, for that subject                 |
//! | `contractor` | of that contractor issued strictly before `before`     | `before`, for that contractor              |
//! | `key`        | signed by that key                                     | —                                          |
//! | `cell`       | issued strictly before `before`                        | `before`                                   |
//!
//! [`RevocationSet`] is the same rule as an index (O(1) per kind); the tests check it against
//! [`RevocationKind::matches`] for one revocation of every kind the wire format knows.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::ids::{ContractorId, Kid, SessionId, SubjectId};
use crate::time::UnixSeconds;
use crate::token::SessionClaims;

/// What is revoked. "before" kinds revoke sessions whose `iat` is strictly earlier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RevocationKind {
    /// One session; kept until `exp`.
    Session { jti: SessionId, exp: UnixSeconds },
    /// Every session of a subject issued before `before`.
    Subject { sub: SubjectId, before: UnixSeconds },
    /// Every session of a contractor issued before `before`.
    Contractor {
        ctr: ContractorId,
        before: UnixSeconds,
    },
    /// Every session signed by a key.
    Key { kid: Kid },
    /// Every session of the cell issued before `before`.
    Cell { before: UnixSeconds },
}

/// A recorded revocation with its audit fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Revocation {
    /// Position in the cell state feed.
    pub seq: u64,
    #[serde(flatten)]
    pub kind: RevocationKind,
    /// When it was recorded.
    pub at: UnixSeconds,
    /// Who asked (operator name or `self` for sign-out).
    pub by: String,
    /// Why.
    pub reason: String,
    /// The recording cell's seal: a MAC, under a key only that cell's auth-service holds, over
    /// [`Revocation::seal_message`] (the cell, the feed epoch and this record). An edge hands a
    /// revocation back after a restore with its seal, and the cell takes back only what it
    /// sealed itself (ATTACKS A32). Absent on records made before seals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
    /// Set on a revocation an edge handed back after a restore: who, and the record as that
    /// edge held it (this record's `at` is when the cell recorded it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_back: Option<HandBack>,
    /// Set on the audit entry (and the feed change) of a withdrawn revocation: who withdrew it,
    /// when and why. A revocation in force never carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Withdrawn>,
}

/// Where a handed-back revocation came from (audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HandBack {
    /// The edge instance that handed it back (named by its credential).
    pub instance: String,
    /// The feed epoch the edge held it in, and its sequence number and time there.
    pub from_epoch: String,
    pub seq: u64,
    pub at: UnixSeconds,
}

/// The withdrawal of a revocation (audit): an operator took it back, so it matches nothing
/// from then on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Withdrawn {
    /// The withdrawal's own position in the cell state feed.
    pub seq: u64,
    pub at: UnixSeconds,
    pub by: String,
    pub reason: String,
}

/// What a seal covers, in this order: the cell, the epoch and the record's own fields.
#[derive(Serialize)]
struct SealMessage<'a> {
    v: u32,
    cell: &'a str,
    epoch: &'a str,
    seq: u64,
    #[serde(flatten)]
    kind: &'a RevocationKind,
    at: UnixSeconds,
    by: &'a str,
    reason: &'a str,
}

/// Version of [`SealMessage`]'s layout.
const SEAL_MESSAGE_VERSION: u32 = 1;

/// A session as revocations see it: its id, owner, signing key and issue time. `jti` and `kid`
/// are `None` where they are not known: a transfer ticket names its session's id and owner but
/// that session was signed at another cell; a session about to be minted has neither yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRef<'a> {
    pub jti: Option<&'a SessionId>,
    pub sub: &'a SubjectId,
    pub ctr: &'a ContractorId,
    pub kid: Option<&'a Kid>,
    pub iat: UnixSeconds,
}

impl<'a> SessionRef<'a> {
    /// A verified session signed by `kid`.
    pub fn of(claims: &'a SessionClaims, kid: &'a Kid) -> SessionRef<'a> {
        SessionRef {
            jti: Some(&claims.jti),
            sub: &claims.sub,
            ctr: &claims.ctr,
            kid: Some(kid),
            iat: claims.iat,
        }
    }
}

/// The one "before" rule: a session issued at `iat` is cut by `before` when it was issued
/// strictly earlier (a session of the same second as `before` is not).
fn issued_before(iat: UnixSeconds, before: UnixSeconds) -> bool {
    iat < before
}

impl RevocationKind {
    /// Whether a revocation of this kind revokes `session`.
    pub fn matches(&self, session: &SessionRef<'_>) -> bool {
        match self {
            RevocationKind::Session { jti, .. } => session.jti == Some(jti),
            RevocationKind::Key { kid } => session.kid == Some(kid),
            RevocationKind::Subject { .. }
            | RevocationKind::Contractor { .. }
            | RevocationKind::Cell { .. } => self
                .revokes_issued_before(session.sub, session.ctr)
                .is_some_and(|before| issued_before(session.iat, before)),
        }
    }

    /// The time before which this revocation revokes every session of subject `sub` of
    /// contractor `ctr`, whatever its id and key: `Some(before)` for a subject, contractor or
    /// cell revocation that concerns them, `None` otherwise (a session or key revocation
    /// names sessions by id or key, never by owner). A session minted at `before` or later is
    /// not revoked by it.
    pub fn revokes_issued_before(
        &self,
        sub: &SubjectId,
        ctr: &ContractorId,
    ) -> Option<UnixSeconds> {
        match self {
            RevocationKind::Subject { sub: s, before } => (s == sub).then_some(*before),
            RevocationKind::Contractor { ctr: c, before } => (c == ctr).then_some(*before),
            RevocationKind::Cell { before } => Some(*before),
            RevocationKind::Session { .. } | RevocationKind::Key { .. } => None,
        }
    }

    /// The `before` of a subject, contractor or cell revocation; `None` for the kinds that name
    /// sessions by id or key.
    pub fn before(&self) -> Option<UnixSeconds> {
        match self {
            RevocationKind::Subject { before, .. }
            | RevocationKind::Contractor { before, .. }
            | RevocationKind::Cell { before } => Some(*before),
            RevocationKind::Session { .. } | RevocationKind::Key { .. } => None,
        }
    }

    /// The key a key revocation takes out of the signing-key ring. Such a revocation is for
    /// good: it is never withdrawn, and never handed back to the cell after a restore (an
    /// operator revokes the key again).
    pub fn key(&self) -> Option<&Kid> {
        match self {
            RevocationKind::Key { kid } => Some(kid),
            RevocationKind::Session { .. }
            | RevocationKind::Subject { .. }
            | RevocationKind::Contractor { .. }
            | RevocationKind::Cell { .. } => None,
        }
    }
}

/// The in-memory matcher: [`RevocationKind::matches`] over many revocations, indexed so that
/// checking is O(1) per kind.
#[derive(Debug, Clone, Default)]
pub struct RevocationSet {
    sessions: HashSet<SessionId>,
    subjects: HashMap<SubjectId, UnixSeconds>,
    contractors: HashMap<ContractorId, UnixSeconds>,
    keys: HashSet<Kid>,
    cell_before: Option<UnixSeconds>,
    len: usize,
}

impl Revocation {
    /// A revocation recorded at `seq` and `at`, not yet sealed.
    pub fn new(
        seq: u64,
        kind: RevocationKind,
        at: UnixSeconds,
        by: impl Into<String>,
        reason: impl Into<String>,
    ) -> Revocation {
        Revocation {
            seq,
            kind,
            at,
            by: by.into(),
            reason: reason.into(),
            seal: None,
            handed_back: None,
            withdrawn: None,
        }
    }

    /// The bytes a seal is computed over: this record (sequence number, kind, time, audit
    /// text) as recorded by `cell` in feed `epoch`, as one JSON document of fixed field order.
    /// What is not in it (`seal`, `handed_back`, `withdrawn`) is not sealed.
    pub fn seal_message(&self, cell: &crate::CellId, epoch: &str) -> Vec<u8> {
        let m = SealMessage {
            v: SEAL_MESSAGE_VERSION,
            cell: cell.as_str(),
            epoch,
            seq: self.seq,
            kind: &self.kind,
            at: self.at,
            by: &self.by,
            reason: &self.reason,
        };
        // Serialising strings and integers into memory does not fail.
        serde_json::to_vec(&m).unwrap_or_default()
    }

    /// Whether this revocation can still match a session a verifier accepts at `now`, given
    /// the cell's session lifetime: a session revocation until its session expires, the
    /// "before" kinds and key revocations one session lifetime after their time, each plus the
    /// clock leeway. Afterwards it matches nothing and may be dropped (edges and auth-service
    /// apply the same rule).
    pub fn can_match(&self, lifetime_s: u64, now: UnixSeconds) -> bool {
        let until = match &self.kind {
            RevocationKind::Session { exp, .. } => *exp,
            RevocationKind::Subject { before, .. }
            | RevocationKind::Contractor { before, .. }
            | RevocationKind::Cell { before } => before.saturating_add(lifetime_s),
            RevocationKind::Key { .. } => self.at.saturating_add(lifetime_s),
        };
        until.saturating_add(crate::token::LEEWAY_S) > now
    }
}

impl RevocationSet {
    /// Adds a revocation in force.
    pub fn insert(&mut self, kind: &RevocationKind) {
        self.len += 1;
        match kind {
            RevocationKind::Session { jti, .. } => {
                self.sessions.insert(jti.clone());
            }
            RevocationKind::Subject { sub, before } => {
                let e = self.subjects.entry(sub.clone()).or_insert(0);
                *e = (*e).max(*before);
            }
            RevocationKind::Contractor { ctr, before } => {
                let e = self.contractors.entry(ctr.clone()).or_insert(0);
                *e = (*e).max(*before);
            }
            RevocationKind::Key { kid } => {
                self.keys.insert(kid.clone());
            }
            RevocationKind::Cell { before } => {
                self.cell_before = Some(self.cell_before.unwrap_or(0).max(*before));
            }
        }
    }

    /// Whether a verified session signed by `kid` is revoked.
    pub fn is_revoked(&self, claims: &SessionClaims, kid: &Kid) -> bool {
        self.revokes(&SessionRef::of(claims, kid))
    }

    /// Whether any revocation held revokes `session` (what [`RevocationKind::matches`] answers
    /// for one of them).
    pub fn revokes(&self, session: &SessionRef<'_>) -> bool {
        session.jti.is_some_and(|jti| self.sessions.contains(jti))
            || session.kid.is_some_and(|kid| self.keys.contains(kid))
            || self
                .latest_before(session.sub, session.ctr)
                .is_some_and(|before| issued_before(session.iat, before))
    }

    /// The latest [`RevocationKind::revokes_issued_before`] of the revocations held for a
    /// session of `sub` of `ctr` (subject, contractor and cell revocations): a session minted
    /// then or later is revoked by none of them.
    pub fn latest_before(&self, sub: &SubjectId, ctr: &ContractorId) -> Option<UnixSeconds> {
        [
            self.subjects.get(sub).copied(),
            self.contractors.get(ctr).copied(),
            self.cell_before,
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// Whether sessions signed by `kid` are revoked (a key revocation is held).
    pub fn is_key_revoked(&self, kid: &Kid) -> bool {
        self.keys.contains(kid)
    }

    /// Number of revocations inserted.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no revocation was inserted.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'a> FromIterator<&'a RevocationKind> for RevocationSet {
    fn from_iter<T: IntoIterator<Item = &'a RevocationKind>>(iter: T) -> Self {
        let mut s = Self::default();
        for k in iter {
            s.insert(k);
        }
        s
    }
}

#[cfg(test)]
mod tests;
