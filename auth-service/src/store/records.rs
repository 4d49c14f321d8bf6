//! The records the store keeps, beside the [`Store`](super::Store) trait that reads and writes
//! them. Wire types of the admin API convert from them (`protocol::admin::cell`); these are
//! the storage shapes.

use std::collections::BTreeMap;

use protocol::admin::cell::{Role, SessionRecord, UserStatus};
use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::token::SessionClaims;
use protocol::{
    CellId, ClientKind, ContractorId, Generation, Jkt, Kid, Login, PasswordHash, SessionId,
    SubjectId,
};
use serde::{Deserialize, Serialize};

/// A stored technician or dispatcher. `password_hash` is an argon2id PHC string. A backup
/// writes it in this shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserRecord {
    pub(crate) contractor_id: ContractorId,
    pub(crate) login: Login,
    pub(crate) subject: SubjectId,
    pub(crate) role: Role,
    pub(crate) password_hash: PasswordHash,
    pub(crate) status: UserStatus,
}

/// Lifecycle of a stored signing key (a superset of the published statuses). Its transitions
/// are the state machine of `keys::lifecycle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KeyState {
    Next,
    Current,
    Retired,
    /// Removed from the set: every session it signed fails.
    Revoked,
    /// Retired long enough that every session it signed has expired; removed from the set.
    Expired,
}

impl KeyState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KeyState::Next => "next",
            KeyState::Current => "current",
            KeyState::Retired => "retired",
            KeyState::Revoked => "revoked",
            KeyState::Expired => "expired",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<KeyState> {
        Some(match s {
            "next" => KeyState::Next,
            "current" => KeyState::Current,
            "retired" => KeyState::Retired,
            "revoked" => KeyState::Revoked,
            "expired" => KeyState::Expired,
            _ => return None,
        })
    }

    /// Whether the key is in the published set.
    pub(crate) fn published(self) -> bool {
        matches!(self, KeyState::Next | KeyState::Current | KeyState::Retired)
    }
}

/// A stored signing key. The seed is sealed (AES-256-GCM under the key-encryption key);
/// it is dropped once the key leaves the set.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeyRow {
    pub(crate) kid: Kid,
    pub(crate) state: KeyState,
    pub(crate) public: [u8; 32],
    pub(crate) sealed_seed: Option<Vec<u8>>,
    pub(crate) created_at: UnixSeconds,
    /// When `state` was entered.
    pub(crate) state_at: UnixSeconds,
}

impl std::fmt::Debug for KeyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRow")
            .field("kid", &self.kid)
            .field("state", &self.state)
            .field("created_at", &self.created_at)
            .field("state_at", &self.state_at)
            .finish_non_exhaustive()
    }
}

/// One durable state change.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// Insert or update a key; an update without a seed keeps the stored seed, and a revoked
    /// or expired key loses it.
    Key(KeyRow),
    Ownership {
        contractor: ContractorId,
        record: OwnershipRecord,
    },
    Revocation(Revocation),
    /// A held revocation is withdrawn (the record carries `withdrawn`): it leaves the held set
    /// and its withdrawal is appended to the audit log.
    Withdrawal(Revocation),
    Map(Box<SignedMap>),
}

/// Where an audit entry stands in the audit log: the feed position and time of the change it
/// records (a revocation's own, or its withdrawal's).
pub(crate) fn audit_position(r: &Revocation) -> (u64, UnixSeconds) {
    r.withdrawn
        .as_ref()
        .map_or((r.seq, r.at), |w| (w.seq, w.at))
}

/// State changes, their feed entries and the new feed head, written atomically on top of
/// `base` in `epoch` (see [`Store::commit`](super::Store::commit)).
#[derive(Debug, Clone, Default)]
pub(crate) struct Commit {
    pub(crate) writes: Vec<Write>,
    pub(crate) entries: Vec<FeedEntry>,
    /// The feed head this commit was built on.
    pub(crate) base: u64,
    /// The new feed head.
    pub(crate) head: u64,
    /// The epoch the commit was built in.
    pub(crate) epoch: String,
}

/// Where the stored feed is: its epoch and head.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Position {
    pub(crate) epoch: String,
    pub(crate) head: u64,
}

/// Schema version of a backup file ([`Dump`]).
pub(crate) const BACKUP_SCHEMA: u32 = 1;

/// A stored key as a backup writes it (the seed sealed under the key-encryption key, which is
/// NOT in the backup: restore needs the same `kek_file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DumpKey {
    pub(crate) kid: Kid,
    pub(crate) state: KeyState,
    /// base64url of the public key.
    pub(crate) public: String,
    /// base64url of the sealed seed.
    pub(crate) sealed_seed: Option<String>,
    pub(crate) created_at: UnixSeconds,
    pub(crate) state_at: UnixSeconds,
}

/// A single-use record kept until `until` (burned tickets and session ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DumpBurn {
    pub(crate) id: SessionId,
    pub(crate) until: UnixSeconds,
}

/// A recorded transfer of a session (at a source cell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DumpTransfer {
    pub(crate) sid: SessionId,
    pub(crate) ticket_jti: SessionId,
    pub(crate) iat: UnixSeconds,
    pub(crate) exp: UnixSeconds,
    pub(crate) sexp: UnixSeconds,
}

/// Everything a store holds: the backup file's content, the same for both backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Dump {
    pub(crate) schema: u32,
    pub(crate) cell: Option<CellId>,
    /// When the backup was taken.
    pub(crate) taken_at: UnixSeconds,
    pub(crate) epoch: String,
    pub(crate) epochs: Vec<String>,
    pub(crate) head: u64,
    pub(crate) feed: Vec<FeedEntry>,
    /// The password hashes included: backups are 0600.
    pub(crate) users: Vec<UserRecord>,
    pub(crate) keys: Vec<DumpKey>,
    pub(crate) ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub(crate) revocations: Vec<Revocation>,
    pub(crate) revocation_audit: Vec<Revocation>,
    pub(crate) map: Option<SignedMap>,
    pub(crate) minted_sessions: Vec<MintedSession>,
    pub(crate) burned_tickets: Vec<DumpBurn>,
    pub(crate) burned_sessions: Vec<DumpBurn>,
    pub(crate) transferred_sessions: Vec<DumpTransfer>,
}

/// Everything loaded at start-up.
#[derive(Debug, Clone, Default)]
pub(crate) struct Loaded {
    pub(crate) keys: Vec<KeyRow>,
    pub(crate) ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub(crate) revocations: Vec<Revocation>,
    pub(crate) map: Option<SignedMap>,
    pub(crate) epoch: String,
    pub(crate) head: u64,
    /// The retained feed log, oldest first.
    pub(crate) log: Vec<FeedEntry>,
    pub(crate) users: u64,
}

/// What a rebind burns: the ticket's id and the transferred session's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TicketBurn {
    /// The ticket's `jti`, kept until `exp`.
    pub(crate) jti: SessionId,
    pub(crate) exp: UnixSeconds,
    /// The transferred session's id (the ticket's `sid`), kept until `sexp`.
    pub(crate) sid: SessionId,
    pub(crate) sexp: UnixSeconds,
}

/// The one ticket a source cell issues for a transferred session: its `jti`, `iat` and `exp`
/// (every other claim follows from the session and the ownership record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TransferRecord {
    pub(crate) ticket_jti: SessionId,
    pub(crate) iat: UnixSeconds,
    pub(crate) exp: UnixSeconds,
}

/// A session as minted, recorded at sign-in and renewal (and rebind) so that an operator can
/// list a subject's sessions. Tokens themselves are never stored. Stored as this JSON shape
/// (the `body` column of both stores, and a backup's `minted_sessions`): a member added later
/// is optional, so older records and backups read as before and need no schema step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MintedSession {
    pub(crate) session_id: SessionId,
    pub(crate) subject: SubjectId,
    pub(crate) contractor: ContractorId,
    pub(crate) client: ClientKind,
    pub(crate) kid: Kid,
    pub(crate) generation: Generation,
    pub(crate) issued_at: UnixSeconds,
    pub(crate) expires_at: UnixSeconds,
    pub(crate) auth_time: UnixSeconds,
    /// The device key the session is bound to (`cnf.jkt`); absent for a bearer session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jkt: Option<Jkt>,
}

impl MintedSession {
    /// The record of a freshly minted session.
    pub(crate) fn of(kid: Kid, c: &SessionClaims) -> MintedSession {
        MintedSession {
            session_id: c.jti.clone(),
            subject: c.sub.clone(),
            contractor: c.ctr.clone(),
            client: c.cli,
            kid,
            generation: c.generation,
            issued_at: c.iat,
            expires_at: c.exp,
            auth_time: c.auth_time,
            jkt: c.jkt().cloned(),
        }
    }

    /// The claims this session carried (enough for the revocation matcher).
    pub(crate) fn claims(&self, issuer: &str, cell: &CellId) -> SessionClaims {
        SessionClaims {
            iss: issuer.to_owned(),
            aud: cell.clone(),
            sub: self.subject.clone(),
            ctr: self.contractor.clone(),
            cell: cell.clone(),
            generation: self.generation,
            iat: self.issued_at,
            nbf: self.issued_at,
            exp: self.expires_at,
            auth_time: self.auth_time,
            jti: self.session_id.clone(),
            cli: self.client,
            cnf: self
                .jkt
                .clone()
                .map(|jkt| protocol::token::Confirmation { jkt }),
        }
    }
}

impl From<MintedSession> for SessionRecord {
    fn from(m: MintedSession) -> SessionRecord {
        SessionRecord {
            session_id: m.session_id,
            subject: m.subject,
            contractor: m.contractor,
            client: m.client,
            kid: m.kid,
            generation: m.generation,
            issued_at: m.issued_at,
            expires_at: m.expires_at,
            auth_time: m.auth_time,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code
    use super::*;

    #[test]
    fn a_session_record_of_before_binding_reads_unbound_and_an_unbound_one_writes_as_before() {
        // A record (or a backup's) written before sessions could be bound: no `jkt`.
        let old = r#"{"session_id":"AAAAAAAAAAAAAAAAAAAAAA","subject":"c-1.ann","contractor":"c-1","client":"field","kid":"k-1","generation":2,"issued_at":100,"expires_at":4000,"auth_time":100}"#;
        let m: MintedSession = serde_json::from_str(old).unwrap();
        assert_eq!(m.jkt, None);
        let cell = CellId::new("cell-01").unwrap();
        assert_eq!(m.claims("https://cell-01.example", &cell).cnf, None);
        // An unbound one is written exactly as before (an older binary reads it).
        assert_eq!(serde_json::to_string(&m).unwrap(), old);
        // A bound one carries its key into its claims.
        let bound = MintedSession {
            jkt: Some(Jkt::from_digest([7; 32])),
            ..m
        };
        let back: MintedSession =
            serde_json::from_str(&serde_json::to_string(&bound).unwrap()).unwrap();
        assert_eq!(back, bound);
        assert_eq!(
            back.claims("https://cell-01.example", &cell).jkt(),
            bound.jkt.as_ref()
        );
    }
}
