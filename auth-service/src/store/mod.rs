//! The durable store behind a trait, so another database can follow the SQLite one.
//!
//! Every state change that edges must learn about is written together with its feed entries
//! and the new feed head in one transaction ([`Store::commit`]); users are not part of the feed.
//! Calls block: callers run them on the blocking thread pool.

use std::collections::BTreeMap;

use protocol::feed::FeedEntry;
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Kid, Login, SubjectId};
use serde::{Deserialize, Serialize};

use crate::error::Result;

pub mod sqlite;
pub mod sqlite_migration;
pub mod sqlite_revocations;

pub use sqlite::SqliteStore;

/// What a user may do in the product (carried for the app; the token does not distinguish).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Technician,
    Dispatcher,
}

/// Whether a user may sign in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UserStatus {
    #[default]
    Active,
    Disabled,
}

/// A stored technician or dispatcher. `password_hash` is an argon2id PHC string.
#[derive(Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub subject: SubjectId,
    pub role: Role,
    pub password_hash: String,
    pub status: UserStatus,
}

impl std::fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRecord")
            .field("contractor_id", &self.contractor_id)
            .field("login", &self.login)
            .field("subject", &self.subject)
            .field("role", &self.role)
            .field("password_hash", &"<redacted>")
            .field("status", &self.status)
            .finish()
    }
}

/// Lifecycle of a stored signing key (a superset of the published statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    Next,
    Current,
    Retired,
    /// Removed from the set: every session it signed fails.
    Revoked,
    /// Retired long enough that every session it signed has expired; removed from the set.
    Expired,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Next => "next",
            KeyState::Current => "current",
            KeyState::Retired => "retired",
            KeyState::Revoked => "revoked",
            KeyState::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<KeyState> {
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
    pub fn published(self) -> bool {
        matches!(self, KeyState::Next | KeyState::Current | KeyState::Retired)
    }
}

/// A stored signing key. The seed is sealed (AES-256-GCM under the key-encryption key);
/// it is dropped once the key leaves the set.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub kid: Kid,
    pub state: KeyState,
    pub public: [u8; 32],
    pub sealed_seed: Option<Vec<u8>>,
    pub created_at: UnixSeconds,
    /// When `state` was entered.
    pub state_at: UnixSeconds,
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
pub enum Write {
    /// Insert or update a key; an update without a seed keeps the stored seed, and a revoked
    /// or expired key loses it.
    Key(KeyRow),
    Ownership {
        contractor: ContractorId,
        record: OwnershipRecord,
    },
    Revocation(Revocation),
    Map(Box<SignedMap>),
}

/// State changes, their feed entries and the new feed head, written atomically.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub writes: Vec<Write>,
    pub entries: Vec<FeedEntry>,
    pub head: u64,
}

/// Everything loaded at start-up.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub keys: Vec<KeyRow>,
    pub ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub revocations: Vec<Revocation>,
    pub map: Option<SignedMap>,
    pub head: u64,
    /// The retained feed log, oldest first.
    pub log: Vec<FeedEntry>,
    pub users: u64,
}

/// What a rebind burns: the ticket's id and the transferred session's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketBurn {
    /// The ticket's `jti`, kept until `exp`.
    pub jti: protocol::SessionId,
    pub exp: UnixSeconds,
    /// The transferred session's id (the ticket's `sid`), kept until `sexp`.
    pub sid: protocol::SessionId,
    pub sexp: UnixSeconds,
}

/// The one ticket a source cell issues for a transferred session: its `jti`, `iat` and `exp`
/// (every other claim follows from the session and the ownership record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRecord {
    pub ticket_jti: protocol::SessionId,
    pub iat: UnixSeconds,
    pub exp: UnixSeconds,
}

/// The durable store.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Loads the state, keeping the newest `retain` feed entries.
    fn load(&self, retain: u64) -> Result<Loaded>;
    /// Writes a commit atomically and drops feed entries older than the newest `retain`.
    fn commit(&self, commit: &Commit, retain: u64) -> Result<()>;
    /// Deletes revocations (by feed sequence) that can no longer match an unexpired session.
    fn delete_revocations(&self, seqs: &[u64]) -> Result<()>;
    /// Inserts or replaces users in one transaction; answers the total number of users.
    fn upsert_users(&self, users: &[UserRecord]) -> Result<u64>;
    /// One user by contractor and login.
    fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>>;
    /// One user by subject.
    fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>>;
    /// Every user of a contractor (a migration's export).
    fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>>;
    /// Burns a transfer ticket's id (until the ticket's `exp`) and the session id it carries
    /// (until the session's `sexp`) in one transaction; then both are forgotten. `false`, and
    /// nothing burned, when either was burned already. Durable before it answers.
    fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool>;
    /// Records the first transfer of session `sid` (expiring at `sexp`) with the `proposed`
    /// ticket, unless one is recorded; answers the recorded ticket either way. Records of
    /// sessions expired before `now` are forgotten. Durable before it answers.
    fn record_transfer(
        &self,
        sid: &protocol::SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord>;
    /// Records a minted session (per-cell revocation: listing a subject's sessions).
    fn record_session(&self, session: &crate::revocations::MintedSession) -> Result<()>;
    /// A subject's recorded sessions expiring after `now`, newest first, at most `limit`.
    fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<crate::revocations::MintedSession>>;
    /// One recorded session.
    fn session(
        &self,
        jti: &protocol::SessionId,
    ) -> Result<Option<crate::revocations::MintedSession>>;
    /// Deletes the records of sessions that expired before `cutoff`; answers how many.
    fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize>;
    /// The revocation audit log after sequence `after`, oldest first, at most `limit` entries.
    /// Every revocation ever recorded stays in it (compaction does not touch it).
    fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>>;
}
