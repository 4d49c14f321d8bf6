//! The store a cell runs on: one of the two backends behind the [`Store`] trait, called with
//! static dispatch (no boxed futures: the trait's methods are `async fn`s).

use protocol::feed::FeedEntry;
use protocol::revocation::Revocation;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login, SessionId, SubjectId};

use crate::error::Result;
use crate::store::Store;
use crate::store::postgres::PgStore;
use crate::store::records::{
    Commit, Dump, KeyRow, Loaded, MintedSession, Position, TicketBurn, TransferRecord, UserRecord,
};
use crate::store::sqlite::SqliteStore;

/// The store a cell runs on: one of the two backends.
#[derive(Debug)]
pub(crate) enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// The same call on whichever backend `$store` is.
macro_rules! on_backend {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            AnyStore::Sqlite($s) => $call.await,
            AnyStore::Postgres($s) => $call.await,
        }
    };
}

impl Store for AnyStore {
    async fn load(&self, retain: u64) -> Result<Loaded> {
        on_backend!(self, s => s.load(retain))
    }
    async fn commit(&self, commit: &Commit, retain: u64) -> Result<()> {
        on_backend!(self, s => s.commit(commit, retain))
    }
    async fn position(&self) -> Result<Position> {
        on_backend!(self, s => s.position())
    }
    async fn entries_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>> {
        on_backend!(self, s => s.entries_after(after, limit))
    }
    async fn keys(&self) -> Result<Vec<KeyRow>> {
        on_backend!(self, s => s.keys())
    }
    async fn dump(&self) -> Result<Dump> {
        on_backend!(self, s => s.dump())
    }
    async fn restore(&self, dump: Dump, epoch: &str) -> Result<()> {
        on_backend!(self, s => s.restore(dump, epoch))
    }
    async fn epochs(&self) -> Result<Vec<String>> {
        on_backend!(self, s => s.epochs())
    }
    async fn delete_revocations(&self, seqs: &[u64]) -> Result<()> {
        on_backend!(self, s => s.delete_revocations(seqs))
    }
    async fn upsert_users(&self, users: Vec<UserRecord>) -> Result<u64> {
        on_backend!(self, s => s.upsert_users(users))
    }
    async fn user(&self, contractor: &ContractorId, login: &Login) -> Result<Option<UserRecord>> {
        on_backend!(self, s => s.user(contractor, login))
    }
    async fn user_by_subject(&self, subject: &SubjectId) -> Result<Option<UserRecord>> {
        on_backend!(self, s => s.user_by_subject(subject))
    }
    async fn users_of(&self, contractor: &ContractorId) -> Result<Vec<UserRecord>> {
        on_backend!(self, s => s.users_of(contractor))
    }
    async fn burn_ticket(&self, ticket: &TicketBurn, now: UnixSeconds) -> Result<bool> {
        on_backend!(self, s => s.burn_ticket(ticket, now))
    }
    async fn record_transfer(
        &self,
        sid: &SessionId,
        sexp: UnixSeconds,
        proposed: &TransferRecord,
        now: UnixSeconds,
    ) -> Result<TransferRecord> {
        on_backend!(self, s => s.record_transfer(sid, sexp, proposed, now))
    }
    async fn record_session(&self, session: &MintedSession) -> Result<()> {
        on_backend!(self, s => s.record_session(session))
    }
    async fn sessions_of(
        &self,
        subject: &SubjectId,
        now: UnixSeconds,
        limit: usize,
    ) -> Result<Vec<MintedSession>> {
        on_backend!(self, s => s.sessions_of(subject, now, limit))
    }
    async fn session(&self, jti: &SessionId) -> Result<Option<MintedSession>> {
        on_backend!(self, s => s.session(jti))
    }
    async fn delete_sessions_expired_before(&self, cutoff: UnixSeconds) -> Result<usize> {
        on_backend!(self, s => s.delete_sessions_expired_before(cutoff))
    }
    async fn revocation_audit(&self, after: u64, limit: usize) -> Result<Vec<Revocation>> {
        on_backend!(self, s => s.revocation_audit(after, limit))
    }
}
