//! Revocations (DESIGN §6): the five kinds and the matcher the edge runs on every request.

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

/// The in-memory matcher. Checking is O(1) per kind.
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

    /// Whether a verified session is revoked.
    pub fn is_revoked(&self, claims: &SessionClaims, kid: &Kid) -> bool {
        let iat = claims.iat;
        self.sessions.contains(&claims.jti)
            || self.keys.contains(kid)
            || self.cell_before.is_some_and(|b| iat < b)
            || self.subjects.get(&claims.sub).is_some_and(|b| iat < *b)
            || self.contractors.get(&claims.ctr).is_some_and(|b| iat < *b)
    }

    pub fn is_key_revoked(&self, kid: &Kid) -> bool {
        self.keys.contains(kid)
    }

    /// Number of revocations inserted.
    pub fn len(&self) -> usize {
        self.len
    }

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
