//! The cell state feed (DESIGN §5): how an auth-service hands its edge instances everything
//! they need to decide alone — keys, ownership records, revocations and the placement map.
//!
//! `GET /internal/v1/feed?since=SEQ&instance=ID` (auth-service, bearer feed token) answers a
//! [`FeedResponse`]: the changes after `SEQ` in sequence order, or a full snapshot when `SEQ`
//! is 0, unknown, or older than what the auth-service still keeps. Applying a delta requires
//! `entries[0].seq == since + 1` and consecutive sequence numbers; anything else means "ask
//! for a snapshot". `head` is the auth-service's latest sequence number. Each request also
//! renews the instance's write lease and reports the sequence it has applied (`since`).
//!
//! **Epochs.** Every answer names the feed's `epoch`: an id the auth-service's database got
//! when it was created, and a new one each time it is restored from a backup. Within one epoch
//! the head never goes back, so an edge refuses an older head as a rollback (a disk restored
//! by accident). A snapshot of a *different* epoch is a deliberate restore: the edge takes it
//! whatever its head, keeps enforcing the revocations it held that the restored state lacks,
//! and hands them back to the auth-service ([`REAPPLY_PATH`], [`Reapply`]) so none is lost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{CellId, ContractorId, Kid};
use crate::map::SignedMap;
use crate::ownership::OwnershipRecord;
use crate::revocation::Revocation;
use crate::time::UnixSeconds;

/// Schema version of feed documents and of an edge's persisted copy of them.
pub const FEED_SCHEMA: u32 = 1;
/// Path of the feed on the auth-service.
pub const FEED_PATH: &str = "/internal/v1/feed";
/// Path where an edge hands back, after a restore, the revocations it held from an earlier
/// epoch that the restored state lacks (`POST`, bearer feed token, body [`Reapply`]).
pub const REAPPLY_PATH: &str = "/internal/v1/feed/reapply";
/// Most revocations one [`Reapply`] request carries.
pub const MAX_REAPPLY_REVOCATIONS: usize = 10_000;

/// Lifecycle of a signing key. Revoked keys are not listed: they leave the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    /// Published, not yet signing.
    Next,
    /// Signing.
    Current,
    /// Verify only, until every session it signed has expired.
    Retired,
}

/// A published verification key and its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FeedKey {
    pub kid: Kid,
    /// base64url of the 32-byte Ed25519 public key (as the JWK `x`).
    pub x: String,
    pub status: KeyStatus,
    pub created_at: UnixSeconds,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Change {
    /// A key was added or changed status.
    Key(FeedKey),
    /// A key left the set (revoked, or retired past every session it signed).
    KeyRemoved { kid: Kid },
    /// An ownership record was set.
    Ownership {
        contractor: ContractorId,
        record: OwnershipRecord,
    },
    /// A revocation was recorded.
    Revocation(Revocation),
    /// A revocation was withdrawn by an operator: the held revocation of this `seq` (and any
    /// other held revocation of the same kind, such as one an edge carried over a restore)
    /// matches nothing any more. The record carries `withdrawn`.
    RevocationWithdrawn(Revocation),
    /// A newer verified placement map was accepted by the auth-service.
    Map(Box<SignedMap>),
}

/// A change at its position in the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FeedEntry {
    pub seq: u64,
    pub change: Change,
}

/// The whole state at `head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    pub keys: Vec<FeedKey>,
    pub ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub revocations: Vec<Revocation>,
    pub map: Option<SignedMap>,
}

/// Delta or snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FeedBody {
    Delta { entries: Vec<FeedEntry> },
    Snapshot { snapshot: Box<Snapshot> },
}

/// One answer of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FeedResponse {
    pub schema: u32,
    pub cell: CellId,
    /// Latest sequence number at the auth-service when this was written.
    pub head: u64,
    /// The auth-service's clock when this was written (edges measure state age with it).
    pub issued_at: UnixSeconds,
    /// The feed's epoch (see the module doc). Empty from an auth-service older than epochs.
    #[serde(default)]
    pub epoch: String,
    pub body: FeedBody,
}

/// Revocations an edge held from epoch `from_epoch` that the restored state lacks.
///
/// A handback is not a way to write revocations (ATTACKS A32): the auth-service takes back only
/// a revocation it sealed itself in `from_epoch` (`Revocation::seal`), that is not a key
/// revocation, that was not withdrawn, and that passes the rules of an operator's revocation;
/// it records it again at its own time, naming the instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Reapply {
    /// The epoch the edge held them in: the auth-service takes them only from an epoch its
    /// database was restored over.
    pub from_epoch: String,
    /// The edge instance handing them back: it must be the instance its credential names.
    pub instance: String,
    /// At most [`MAX_REAPPLY_REVOCATIONS`], each as the edge held it (with its seal).
    pub revocations: Vec<Revocation>,
}

/// What the auth-service did with a [`Reapply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reapplied {
    /// Recorded again (new sequence numbers, in the feed).
    pub recorded: u64,
    /// Already in force here (the same kind), or unable to match any session any more.
    pub skipped: u64,
    /// Not taken back: not sealed by this cell in that epoch, a key revocation, withdrawn, or
    /// outside an operator revocation's rules (each logged with its reason).
    #[serde(default)]
    pub refused: u64,
    /// Of those refused, the ones an operator withdrew (their `seq` as the edge sent them): the
    /// edge stops enforcing them. The edge keeps enforcing every other refused one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<u64>,
}

/// Why a feed answer cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    #[error("feed schema {0} is not supported")]
    Schema(u32),
    #[error("feed is for {got}, this instance serves {expected}")]
    WrongCell { expected: CellId, got: CellId },
    #[error("feed delta does not continue from {since} (first entry {first})")]
    Gap { since: u64, first: u64 },
    #[error("feed went backwards: held {held}, offered {offered}")]
    Rollback { held: u64, offered: u64 },
    #[error("feed epoch changed from {held:?} to {offered:?}: a snapshot is needed")]
    EpochChanged { held: String, offered: String },
}

/// How a feed answer's epoch relates to the one an edge holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochRelation {
    /// The same epoch (or one side predates epochs): the head may not go back.
    Same,
    /// A different epoch: the auth-service was restored from a backup.
    Restored,
}

/// Compares the `held` epoch (empty: none held yet, or from before epochs) with an `offered` one.
pub fn epoch_relation(held: &str, offered: &str) -> EpochRelation {
    if held.is_empty() || offered.is_empty() || held == offered {
        EpochRelation::Same
    } else {
        EpochRelation::Restored
    }
}

impl FeedResponse {
    /// Checks that this answer can be applied on top of state at `since` of epoch
    /// `held_epoch` for `cell`. A snapshot of another epoch is applicable whatever its head
    /// (a deliberate restore); a delta of another epoch is not.
    pub fn check_applicable(
        &self,
        cell: &CellId,
        since: u64,
        held_epoch: &str,
    ) -> Result<(), FeedError> {
        if self.schema != FEED_SCHEMA {
            return Err(FeedError::Schema(self.schema));
        }
        if &self.cell != cell {
            return Err(FeedError::WrongCell {
                expected: cell.clone(),
                got: self.cell.clone(),
            });
        }
        if epoch_relation(held_epoch, &self.epoch) == EpochRelation::Restored {
            return match &self.body {
                FeedBody::Snapshot { .. } => Ok(()),
                FeedBody::Delta { .. } => Err(FeedError::EpochChanged {
                    held: held_epoch.to_owned(),
                    offered: self.epoch.clone(),
                }),
            };
        }
        match &self.body {
            FeedBody::Snapshot { .. } => {
                if self.head < since {
                    return Err(FeedError::Rollback {
                        held: since,
                        offered: self.head,
                    });
                }
            }
            FeedBody::Delta { entries } => {
                for (expect, e) in (since + 1..).zip(entries) {
                    if e.seq != expect {
                        return Err(FeedError::Gap {
                            since,
                            first: e.seq,
                        });
                    }
                }
                if self.head < since {
                    return Err(FeedError::Rollback {
                        held: since,
                        offered: self.head,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answer(head: u64, epoch: &str, delta: bool) -> FeedResponse {
        FeedResponse {
            schema: FEED_SCHEMA,
            cell: CellId::new("cell-01").unwrap(),
            head,
            issued_at: 1,
            epoch: epoch.into(),
            body: if delta {
                FeedBody::Delta { entries: vec![] }
            } else {
                FeedBody::Snapshot {
                    snapshot: Box::default(),
                }
            },
        }
    }

    #[test]
    fn an_older_head_is_a_rollback_within_an_epoch_and_a_restore_across_epochs() {
        let cell = CellId::new("cell-01").unwrap();
        // An accidental rollback: same epoch, older head.
        assert!(matches!(
            answer(5, "e1", false).check_applicable(&cell, 9, "e1"),
            Err(FeedError::Rollback {
                held: 9,
                offered: 5
            })
        ));
        // A deliberate restore: a snapshot of a new epoch, whatever its head.
        assert_eq!(
            answer(5, "e2", false).check_applicable(&cell, 9, "e1"),
            Ok(())
        );
        // A delta of another epoch cannot continue the held state.
        assert!(matches!(
            answer(9, "e2", true).check_applicable(&cell, 9, "e1"),
            Err(FeedError::EpochChanged { .. })
        ));
        // Nothing held yet, or an auth-service from before epochs: the head rule alone.
        assert_eq!(
            answer(9, "e2", false).check_applicable(&cell, 0, ""),
            Ok(())
        );
        assert!(
            answer(5, "", false)
                .check_applicable(&cell, 9, "e1")
                .is_err()
        );
    }

    #[test]
    fn an_answer_without_an_epoch_still_parses() {
        let json = r#"{"schema":1,"cell":"cell-01","head":3,"issued_at":1,
            "body":{"kind":"delta","entries":[]}}"#;
        let r: FeedResponse = serde_json::from_str(json).unwrap();
        assert_eq!(r.epoch, "");
    }
}
