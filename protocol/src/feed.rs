//! The cell state feed (DESIGN §5): how an auth-service hands its edge instances everything
//! they need to decide alone — keys, ownership records, revocations and the placement map.
//!
//! `GET /internal/v1/feed?since=SEQ&instance=ID` (auth-service, bearer feed token) answers a
//! [`FeedResponse`]: the changes after `SEQ` in sequence order, or a full snapshot when `SEQ`
//! is 0, unknown, or older than what the auth-service still keeps. Applying a delta requires
//! `entries[0].seq == since + 1` and consecutive sequence numbers; anything else means "ask
//! for a snapshot". `head` is the auth-service's latest sequence number. Each request also
//! renews the instance's write lease and reports the sequence it has applied (`since`).

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

/// Lifecycle of a signing key. Revoked keys are not listed: they leave the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// A newer verified placement map was accepted by the auth-service.
    Map(Box<SignedMap>),
}

/// A change at its position in the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedEntry {
    pub seq: u64,
    pub change: Change,
}

/// The whole state at `head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    pub keys: Vec<FeedKey>,
    pub ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub revocations: Vec<Revocation>,
    pub map: Option<SignedMap>,
}

/// Delta or snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FeedBody {
    Delta { entries: Vec<FeedEntry> },
    Snapshot { snapshot: Box<Snapshot> },
}

/// One answer of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedResponse {
    pub schema: u32,
    pub cell: CellId,
    /// Latest sequence number at the auth-service when this was written.
    pub head: u64,
    /// The auth-service's clock when this was written (edges measure state age with it).
    pub issued_at: UnixSeconds,
    pub body: FeedBody,
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
}

impl FeedResponse {
    /// Checks that this answer can be applied on top of state at `since` for `cell`.
    pub fn check_applicable(&self, cell: &CellId, since: u64) -> Result<(), FeedError> {
        if self.schema != FEED_SCHEMA {
            return Err(FeedError::Schema(self.schema));
        }
        if &self.cell != cell {
            return Err(FeedError::WrongCell {
                expected: cell.clone(),
                got: self.cell.clone(),
            });
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
