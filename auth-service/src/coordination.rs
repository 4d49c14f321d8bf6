//! What the replicas of one cell share besides the store: a wake-up when another replica
//! committed, the leadership of scheduled work, sign-in throttle buckets and the feed's view of
//! the edge instances. With SQLite there is one replica, and each of these is local; with
//! PostgreSQL they live in the database (`store::postgres`): LISTEN/NOTIFY, a session-level
//! advisory lock, a GCRA table and an instances table.
//!
//! Every replica also follows the store (`server::follow`): on a wake-up, or every
//! [`FOLLOW_POLL_MS`] without one, it catches its in-memory state up (`AppState::catch_up`). The
//! poll bounds how late a replica can be when a notification is lost (a listener reconnecting),
//! and notices a restore.

use std::sync::Arc;

use crate::store::postgres::PgCoordination;

/// How often a replica compares its feed head with the store's without a wake-up, in
/// milliseconds.
pub(crate) const FOLLOW_POLL_MS: u64 = 1_000;
/// How often scheduled work is offered to the leader, at most, in seconds: leadership is
/// re-checked (and taken over after a leader died) at this pace.
pub(crate) const LEADER_CHECK_MAX_S: u64 = 5;

/// The cross-replica services of a cell.
#[derive(Debug, Clone)]
pub(crate) enum Coordination {
    /// One replica (SQLite): everything is local.
    Local,
    /// Several replicas on one PostgreSQL database.
    Postgres(Arc<PgCoordination>),
}

impl Coordination {
    /// Resolves when another replica may have committed (never, with one replica).
    pub(crate) async fn changed(&self) {
        match self {
            Coordination::Local => std::future::pending().await,
            Coordination::Postgres(c) => c.changed().await,
        }
    }

    /// Whether this replica runs the cell's scheduled work (key rotation, expiry) now.
    pub(crate) async fn lead(&self) -> bool {
        match self {
            Coordination::Local => true,
            Coordination::Postgres(c) => c.lead().await,
        }
    }

    /// The shared services, when the cell has several replicas.
    pub(crate) fn shared(&self) -> Option<&PgCoordination> {
        match self {
            Coordination::Local => None,
            Coordination::Postgres(c) => Some(c),
        }
    }
}
