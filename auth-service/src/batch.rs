//! A batch of feed-visible changes being prepared for one commit: each change becomes a store
//! write and a feed entry with the next sequence number. `AppState::commit_with` hands one to
//! its builder, then writes and applies it.

use std::collections::HashMap;
use std::sync::Arc;

use protocol::ContractorId;
use protocol::Kid;
use protocol::feed::{Change, FeedEntry};
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::{Revocation, RevocationKind, Withdrawn};
use protocol::time::UnixSeconds;
use protocol::token::SigningKey;

use crate::keys::ring::KeyRing;
use crate::seal::Sealer;
use crate::store::records::{Commit, KeyRow, Write};

/// Changes being prepared for one commit.
#[derive(Debug)]
pub(crate) struct Batch {
    next_seq: u64,
    commit: Commit,
    signers: HashMap<Kid, Arc<SigningKey>>,
    sealer: Sealer,
}

impl Batch {
    /// An empty batch after feed head `head` of `epoch`; revocations are sealed by `sealer`.
    pub(crate) fn new(head: u64, epoch: String, sealer: Sealer) -> Batch {
        Batch {
            next_seq: head + 1,
            commit: Commit {
                base: head,
                head,
                epoch,
                ..Commit::default()
            },
            signers: HashMap::new(),
            sealer,
        }
    }

    fn entry(&mut self, change: Change) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.commit.head = seq;
        self.commit.entries.push(FeedEntry { seq, change });
        seq
    }

    /// A key row changed (or was created with `signer`).
    pub(crate) fn key(&mut self, row: KeyRow, signer: Option<Arc<SigningKey>>) {
        let change = match KeyRing::feed_key(&row) {
            Some(k) => Change::Key(k),
            None => Change::KeyRemoved {
                kid: row.kid.clone(),
            },
        };
        self.entry(change);
        if let Some(s) = signer {
            self.signers.insert(row.kid.clone(), s);
        }
        self.commit.writes.push(Write::Key(row));
    }

    /// A contractor's ownership record changed.
    pub(crate) fn ownership(&mut self, contractor: ContractorId, record: OwnershipRecord) {
        self.entry(Change::Ownership {
            contractor: contractor.clone(),
            record: record.clone(),
        });
        self.commit
            .writes
            .push(Write::Ownership { contractor, record });
    }

    /// A revocation was recorded (its sequence number is its feed entry's).
    pub(crate) fn revocation(
        &mut self,
        kind: RevocationKind,
        at: UnixSeconds,
        by: String,
        reason: String,
    ) {
        self.record_revocation(Revocation::new(0, kind, at, by, reason));
    }

    /// A revocation was recorded: `r` at the next sequence number, sealed in this epoch (its
    /// `seq` and `seal` are replaced; its other fields are kept).
    pub(crate) fn record_revocation(&mut self, mut r: Revocation) {
        r.seq = self.next_seq;
        r.withdrawn = None;
        let r = self.sealer.sealed(&self.commit.epoch, r);
        self.entry(Change::Revocation(r.clone()));
        self.commit.writes.push(Write::Revocation(r));
    }

    /// The held revocation `held` was withdrawn: it leaves the held set, and the audit log and
    /// the feed record the withdrawal.
    pub(crate) fn withdrawal(
        &mut self,
        held: &Revocation,
        at: UnixSeconds,
        by: String,
        reason: String,
    ) -> Revocation {
        let r = Revocation {
            withdrawn: Some(Withdrawn {
                seq: self.next_seq,
                at,
                by,
                reason,
            }),
            ..held.clone()
        };
        self.entry(Change::RevocationWithdrawn(r.clone()));
        self.commit.writes.push(Write::Withdrawal(r.clone()));
        r
    }

    /// A placement map was accepted.
    pub(crate) fn map(&mut self, map: SignedMap) {
        self.entry(Change::Map(Box::new(map.clone())));
        self.commit.writes.push(Write::Map(Box::new(map)));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.commit.entries.is_empty()
    }

    /// The commit to write and the signers of the keys it creates.
    pub(crate) fn into_parts(self) -> (Commit, HashMap<Kid, Arc<SigningKey>>) {
        (self.commit, self.signers)
    }
}
