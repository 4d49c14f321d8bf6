//! The durable store behind one trait, with two backends: SQLite (`sqlite*`, one process, the
//! embedded default) and PostgreSQL (`postgres*`, several replicas of a cell on one database).
//! Its records live beside it (`records.rs`).
//!
//! Every state change that edges must learn about is written together with its feed entries
//! and the new feed head in one transaction ([`Store::commit`]); users are not part of the feed.
//! A commit is conditional: it names the head it was built on ([`Commit::base`]) and fails with
//! [`Error::Stale`](crate::error::Error::Stale), writing nothing, when another replica
//! committed first; the caller catches up ([`Store::entries_after`]) and builds again. So the
//! feed stays gap-free and every replica sees one order of changes.
//!
//! Calls are `async`. PostgreSQL runs on its async driver; SQLite runs on a thread of its own
//! that owns the one connection (`sqlite_thread.rs`), so a caller never blocks the runtime.
//! The cell's store is an `AnyStore` (`any.rs`): the trait is called through it with static
//! dispatch.

use protocol::feed::FeedEntry;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SessionId, SubjectId};

use crate::error::Result;
use crate::store::records::{
    Commit, Dump, KeyRow, Loaded, MintedSession, Position, TicketBurn, TransferRecord, UserRecord,
};

pub(crate) mod any;
#[cfg(test)]
mod contract;
pub(crate) mod portable;
pub(crate) mod postgres;
mod postgres_backup;
mod postgres_coordination;
mod postgres_rows;
#[cfg(test)]
mod postgres_tests;
mod postgres_writes;
pub(crate) mod records;
pub(crate) mod sqlite;
mod sqlite_backup;
mod sqlite_migration;
mod sqlite_revocations;
mod sqlite_rows;
mod sqlite_schema;
#[cfg(test)]
mod sqlite_tests;
mod sqlite_thread;
mod sqlite_writes;

/// The durable store. Bulk inputs (a restore's dump, an import's users) are taken by value: the
/// SQLite thread takes them over without a copy.
pub(crate) trait Store: Send + Sync + std::fmt::Debug {
    /// Loads the state, keeping the newest `retain` feed entries.
    async fn load(&self, retain: u64) -> Result<Loaded>;
    /// Writes a commit atomically and drops feed entries older than the newest `retain`.
    /// `Error::Stale`, and nothing written, when the stored head is not `commit.base` (or the
    /// stored epoch is not `commit.epoch`).
    async fn commit(&self, commit: &Commit, retain: u64) -> Result<()>;
    /// The stored feed position (epoch and head): cheap, polled to notice other replicas'
    /// commits and restores.
    async fn position(&self) -> Result<Position>;
    /// Up to `limit` retained feed entries after `after`, oldest first. An answer that does not
    /// start at `after + 1` means the entries were dropped: reload instead.
    async fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>>;
    /// Every stored key row, oldest first (a replica reloads its ring after a key change).
    async fn keys(&self) -> Result<Vec<KeyRow>>;
    /// Everything the store holds, for a backup.
    async fn dump(&self) -> Result<Dump>;
    /// Replaces everything the store holds with `dump`, under the new `epoch`, in one
    /// transaction; the epochs it replaces stay listed in [`Store::epochs`].
    async fn restore(&self, dump: Dump, epoch: &str) -> Result<()>;
    /// Every epoch this database has had, the current one last.
    async fn epochs(&self) -> Result<Vec<String>>;
    /// Deletes revocations (by feed sequence) that can no longer match an unexpired session.
    async fn delete_revocations(&self, seqs: &[u64]) -> Result<()>;
    /// Inserts or replaces users in one transaction; answers the total number of users.
    async fn upsert_users(&self, users: Vec<UserRecord>) -> Result<u64>;
    /// One user by contractor and login.
    async fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>>;
    /// One user by subject.
    async fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>>;
    /// Every user of a contractor (a migration's export).
    async fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>>;
    /// Burns a transfer ticket's id (until the ticket's `exp`) and the session id it carries
    /// (until the session's `sexp`) in one transaction; then both are forgotten. `false`, and
    /// nothing burned, when either was burned already. Durable before it answers.
    async fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool>;
    /// Records the first transfer of session `sid` (expiring at `sexp`) with the `proposed`
    /// ticket, unless one is recorded; answers the recorded ticket either way. Records of
    /// sessions expired before `now` are forgotten. Durable before it answers.
    async fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord>;
    /// Records a minted session (per-cell revocation: listing a subject's sessions).
    async fn record_session(&self, session: &MintedSession) -> Result<()>;
    /// A subject's recorded sessions expiring after `now`, newest first, at most `limit`.
    async fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>>;
    /// One recorded session.
    async fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>>;
    /// Deletes the records of sessions that expired before `cutoff`; answers how many.
    async fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize>;
    /// The revocation audit log after sequence `after`, oldest first, at most `limit` entries.
    /// Every revocation ever recorded stays in it (compaction does not touch it).
    async fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>>;
}

/// Audit entries read per page by [`withdrawals`].
const AUDIT_SCAN_PAGE: usize = 10_000;

/// Every withdrawal in the audit log (each the withdrawn revocation with its `withdrawn`
/// fields), oldest first.
pub(crate) async fn withdrawals(store: &impl Store) -> Result<Vec<Revocation>> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = store.revocation_audit(after, AUDIT_SCAN_PAGE).await?;
        let Some(last) = page.last() else { break };
        after = records::audit_position(last).0;
        let full = page.len() == AUDIT_SCAN_PAGE;
        out.extend(page.into_iter().filter(|r| r.withdrawn.is_some()));
        if !full {
            break;
        }
    }
    Ok(out)
}
