//! The cell's state in memory (a mirror of the store) and the one way to change it:
//! [`AppState::commit_with`] builds a [`Batch`] of changes under the writer lock, writes it to
//! the store in one transaction together with its feed entries, then applies it in memory and
//! wakes the feed's long-polls. What a change means (keys, ownership, revocations, the map)
//! is decided by the domain modules that fill the batch.
//!
//! Several replicas may share the store (PostgreSQL). A commit is conditional on the feed head
//! it was built on: when another replica committed first, the store refuses it
//! (`Error::Stale`), this replica catches up ([`AppState::catch_up`]: the entries it missed, or
//! a whole reload after a restore) and the batch is built again on the new state — so a
//! decision (a rotation being due, a revocation already in force) is always taken on the
//! newest state, and the feed is one gap-free sequence whichever replica serves it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use protocol::feed::{Change, FeedEntry};
use protocol::jwks::{KeySet, PublicKey};
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::{Revocation, RevocationSet};
use protocol::time::{SharedClock, UnixSeconds};
use protocol::token::SigningKey;
use protocol::{CellId, ContractorId, Endpoint, Kid};
use ring::rand::SystemRandom;
use runtime::Secret;
use runtime::dpop::DpopVerifier;
use tokio::sync::{Semaphore, watch};

use crate::batch::Batch;
use crate::config::Config;
use crate::coordination::Coordination;
use crate::error::{Error, Result};
use crate::instances::Instances;
use crate::keys::kek::Kek;
use crate::keys::ring::KeyRing;
use crate::metrics::Metrics;
use crate::peers::PeerKeys;
use crate::seal::Sealer;
use crate::store::Store as _;
use crate::store::any::AnyStore;
use crate::store::records::{Commit, Loaded, Write};
use crate::throttle::Throttle;

/// Feed entries kept for deltas; older `since` values get a snapshot.
pub(crate) const FEED_RETAIN_ENTRIES: u64 = 10_000;
/// Most times one change is built again because other replicas kept committing first.
pub(crate) const MAX_COMMIT_ATTEMPTS: u32 = 16;
/// Most feed entries read from the store in one catch-up step.
pub(crate) const CATCH_UP_BATCH_ENTRIES: usize = 1_000;

/// What the cell holds in memory.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) ring: KeyRing,
    pub(crate) ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub(crate) revocations: Vec<Revocation>,
    pub(crate) revoked: RevocationSet,
    pub(crate) map: Option<SignedMap>,
    /// The feed's epoch (a new one after each restore).
    pub(crate) epoch: String,
    pub(crate) head: u64,
    pub(crate) log: VecDeque<FeedEntry>,
}

impl Inner {
    /// A revocation in force from now on.
    fn add_revocation(&mut self, r: Revocation) {
        self.revoked.insert(&r.kind);
        self.revocations.push(r);
    }

    /// A withdrawn revocation (the held one of its sequence number) no longer in force; the
    /// matcher is rebuilt from what stays.
    fn withdraw_revocation(&mut self, withdrawn: &Revocation) {
        self.revocations.retain(|r| r.seq != withdrawn.seq);
        self.revoked = self.revocations.iter().map(|r| &r.kind).collect();
    }

    /// Appends feed entries (keeping the newest [`FEED_RETAIN_ENTRIES`]) and moves the head.
    fn advance(&mut self, entries: Vec<FeedEntry>, head: u64) {
        self.log.extend(entries);
        while self.log.len() as u64 > FEED_RETAIN_ENTRIES {
            self.log.pop_front();
        }
        self.head = head;
    }

    /// The state a store load describes.
    fn from_loaded(loaded: Loaded, ring: KeyRing) -> Inner {
        let revoked: RevocationSet = loaded.revocations.iter().map(|r| &r.kind).collect();
        Inner {
            ring,
            ownership: loaded.ownership,
            revocations: loaded.revocations,
            revoked,
            map: loaded.map,
            epoch: loaded.epoch,
            head: loaded.head,
            log: loaded.log.into(),
        }
    }
}

/// Everything a request handler needs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

/// The state behind an [`AppState`] (its parts are the crate's own).
#[derive(Debug)]
pub struct Shared {
    pub(crate) config: Config,
    pub(crate) clock: SharedClock,
    pub(crate) store: AnyStore,
    /// What this replica shares with the others of its cell.
    pub(crate) coordination: Coordination,
    /// This replica's name (logs, the database's `application_name`).
    pub(crate) replica: String,
    pub(crate) kek: Kek,
    pub(crate) rng: SystemRandom,
    inner: RwLock<Inner>,
    writer: tokio::sync::Mutex<()>,
    pub(crate) head_tx: watch::Sender<u64>,
    pub(crate) instances: Instances,
    pub(crate) tokens: Tokens,
    pub(crate) map_key: Option<PublicKey>,
    pub(crate) throttle: Throttle,
    pub(crate) metrics: Metrics,
    /// A hash of a random password, verified for unknown users so they cost the same.
    pub(crate) dummy_hash: String,
    /// Bounds concurrent argon2 computations (memory and CPU).
    pub(crate) hashing: Semaphore,
    pub(crate) users: AtomicU64,
    pub(crate) http: Option<reqwest::Client>,
    /// Peer cells' keys, for transfer tickets only.
    pub(crate) peers: PeerKeys,
    /// This replica's `DPoP` proof verifier (its own nonces and replay set), for the proofs
    /// sent straight to its listeners (those through the edge the edge verifies).
    pub(crate) dpop: DpopVerifier,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Runs CPU-heavy work (argon2 password hashing) on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("blocking task failed: {e}")))?
}

/// The cell's bearer secrets, read from the files the config names.
#[derive(Debug)]
pub(crate) struct Tokens {
    /// Bearer token of the admin API.
    pub(crate) admin: Secret,
    /// Bearer token of the internal feed.
    pub(crate) feed: Secret,
    /// The cell's edge token (`X-Cellbind-Edge-Key` of an authenticated edge).
    pub(crate) edge: Secret,
}

impl Tokens {
    /// Reads `admin_token_file`, `feed_token_file` and `edge_token_file`.
    pub(crate) fn load(config: &Config) -> Result<Tokens> {
        Ok(Tokens {
            admin: Secret::from_file(&config.admin_token_file)?,
            feed: Secret::from_file(&config.feed_token_file)?,
            edge: Secret::from_file(&config.edge_token_file)?,
        })
    }
}

/// Secrets and collaborators that come from outside the config file's plain values.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) store: AnyStore,
    pub(crate) coordination: Coordination,
    pub(crate) kek: Kek,
    pub(crate) tokens: Tokens,
    pub(crate) clock: SharedClock,
    pub(crate) http: Option<reqwest::Client>,
}

/// What [`AppState::new`] builds the in-memory state from: the store's contents and what was
/// derived from them.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) loaded: Loaded,
    pub(crate) ring: KeyRing,
    pub(crate) map_key: Option<PublicKey>,
    pub(crate) dummy_hash: String,
    pub(crate) rng: SystemRandom,
    pub(crate) dpop: DpopVerifier,
}

impl AppState {
    /// The state over what was loaded (no keys are made here: see `keys::lifecycle`).
    pub(crate) fn new(config: Config, parts: Parts, start: Start) -> AppState {
        let Start {
            loaded,
            ring,
            map_key,
            dummy_hash,
            rng,
            dpop,
        } = start;
        let metrics = Metrics::new(&config.cell_id);
        metrics.feed_head(loaded.head);
        if let Some(m) = &loaded.map {
            metrics.map_version(m.map.version);
        }
        let (head_tx, _) = watch::channel(loaded.head);
        let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
        let users = loaded.users;
        AppState(Arc::new(Shared {
            throttle: Throttle::new(&config, parts.coordination.clone(), &parts.kek),
            clock: parts.clock,
            store: parts.store,
            replica: config.replica(),
            coordination: parts.coordination,
            kek: parts.kek,
            rng,
            inner: RwLock::new(Inner::from_loaded(loaded, ring)),
            writer: tokio::sync::Mutex::new(()),
            head_tx,
            instances: Instances::default(),
            tokens: parts.tokens,
            map_key,
            metrics,
            dummy_hash,
            hashing: Semaphore::new(parallel * 2),
            users: AtomicU64::new(users),
            http: parts.http,
            peers: PeerKeys::default(),
            dpop,
            config,
        }))
    }

    /// A read view of the in-memory state.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn now(&self) -> UnixSeconds {
        self.clock.now()
    }

    /// The one way to change feed-visible state. `build` sees the current state and fills a
    /// batch (or fails, changing nothing); it runs again on the newer state when another
    /// replica committed first. Answers the feed head after the commit.
    pub(crate) async fn commit_with<T>(
        &self,
        mut build: impl FnMut(&Inner, &mut Batch) -> Result<T>,
    ) -> Result<(u64, T)> {
        let _writer = self.writer.lock().await;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let (batch, out) = {
                let inner = self.read();
                let mut batch = Batch::new(inner.head, inner.epoch.clone(), self.sealer());
                let out = build(&inner, &mut batch)?;
                (batch, out)
            };
            if batch.is_empty() {
                return Ok((self.read().head, out));
            }
            let (commit, signers) = batch.into_parts();
            match self.store.commit(&commit, FEED_RETAIN_ENTRIES).await {
                Ok(()) => {
                    let head = commit.head;
                    self.apply_commit(commit, &signers);
                    return Ok((head, out));
                }
                Err(Error::Stale { stored, base }) => {
                    tracing::debug!(
                        stored,
                        base,
                        "another replica committed first; building again"
                    );
                    self.catch_up_locked().await?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Internal(format!(
            "other replicas committed first {MAX_COMMIT_ATTEMPTS} times in a row"
        )))
    }

    /// The sealer of this cell's revocations (`crate::seal`).
    pub(crate) fn sealer(&self) -> Sealer {
        Sealer::new(&self.kek, &self.config.cell_id)
    }

    /// Applies a written commit in memory and wakes the feed's long-polls.
    fn apply_commit(&self, commit: Commit, signers: &HashMap<Kid, Arc<SigningKey>>) {
        let head = commit.head;
        {
            let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
            for w in commit.writes {
                match w {
                    Write::Key(row) => {
                        let signer = signers.get(&row.kid).cloned();
                        inner.ring.apply(&row, signer);
                    }
                    Write::Ownership { contractor, record } => {
                        inner.ownership.insert(contractor, record);
                    }
                    Write::Revocation(r) => inner.add_revocation(r),
                    Write::Withdrawal(r) => inner.withdraw_revocation(&r),
                    Write::Map(m) => {
                        self.metrics.map_version(m.map.version);
                        inner.map = Some(*m);
                    }
                }
            }
            inner.advance(commit.entries, head);
        }
        self.announce(head);
    }

    /// Publishes a new feed head: the metric, and the wake-up of the feed's long-polls.
    fn announce(&self, head: u64) {
        self.metrics.feed_head(head);
        self.head_tx.send_replace(head);
    }

    /// Brings this replica's memory up to the store: the feed entries other replicas wrote
    /// since its head, or, after a restore (another epoch, an older head) or when the entries
    /// were already dropped, a whole reload. Answers whether anything changed. The background
    /// task `coordination::follow` calls it; embedders and tests may too.
    pub async fn catch_up(&self) -> Result<bool> {
        let _writer = self.writer.lock().await;
        self.catch_up_locked().await
    }

    /// [`AppState::catch_up`] with the writer lock held.
    async fn catch_up_locked(&self) -> Result<bool> {
        let stored = self.store.position().await?;
        let (epoch, mut head) = {
            let inner = self.read();
            (inner.epoch.clone(), inner.head)
        };
        if stored.epoch == epoch && stored.head == head {
            return Ok(false);
        }
        if stored.epoch != epoch || stored.head < head {
            tracing::warn!(
                held_epoch = %epoch, held_head = head,
                stored_epoch = %stored.epoch, stored_head = stored.head,
                "the store was restored; reloading the whole state"
            );
            self.reload().await?;
            return Ok(true);
        }
        while head < stored.head {
            let entries = self
                .store
                .entries_after(head, CATCH_UP_BATCH_ENTRIES)
                .await?;
            if entries.first().map(|e| e.seq) != Some(head + 1) {
                // Dropped already (far behind), or the store moved under us: start over.
                self.reload().await?;
                return Ok(true);
            }
            head = self.apply_entries(entries).await?;
        }
        Ok(true)
    }

    /// Applies feed entries another replica wrote (consecutive, after the held head) and
    /// answers the new head. A key change reloads the ring from the store (the feed carries
    /// public keys only; the sealed seeds are in the store).
    async fn apply_entries(&self, entries: Vec<FeedEntry>) -> Result<u64> {
        let keys_changed = entries
            .iter()
            .any(|e| matches!(e.change, Change::Key(_) | Change::KeyRemoved { .. }));
        let ring = if keys_changed {
            let rows = self.store.keys().await?;
            Some(KeyRing::from_rows(&rows, &self.kek)?)
        } else {
            None
        };
        let head = {
            let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
            if let Some(ring) = ring {
                inner.ring = ring;
            }
            for e in &entries {
                match &e.change {
                    Change::Key(_) | Change::KeyRemoved { .. } => {}
                    Change::Ownership { contractor, record } => {
                        inner.ownership.insert(contractor.clone(), record.clone());
                    }
                    // Entries after the held head: none of them is held yet.
                    Change::Revocation(r) => inner.add_revocation(r.clone()),
                    Change::RevocationWithdrawn(r) => inner.withdraw_revocation(r),
                    Change::Map(m) => {
                        self.metrics.map_version(m.map.version);
                        inner.map = Some((**m).clone());
                    }
                }
            }
            let head = entries.last().map_or(inner.head, |e| e.seq);
            inner.advance(entries, head);
            head
        };
        self.announce(head);
        Ok(head)
    }

    /// Replaces the whole in-memory state with the store's.
    async fn reload(&self) -> Result<()> {
        let loaded = self.store.load(FEED_RETAIN_ENTRIES).await?;
        let ring = KeyRing::from_rows(&loaded.keys, &self.kek)?;
        let head = loaded.head;
        if let Some(m) = &loaded.map {
            self.metrics.map_version(m.map.version);
        }
        self.users
            .store(loaded.users, std::sync::atomic::Ordering::Relaxed);
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = Inner::from_loaded(loaded, ring);
        self.announce(head);
        Ok(())
    }

    /// Changes the in-memory revocations outside the feed, under the writer lock: `select`
    /// gets the held list and answers what to change, `persist` writes that to the store
    /// (answering it back) and `keep` then filters the held list; the matcher is rebuilt after.
    /// Used to drop revocations that match nothing.
    pub(crate) async fn replace_revocations<T, F>(
        &self,
        select: impl FnOnce(&[Revocation]) -> Option<T>,
        persist: impl FnOnce(T) -> F,
        keep: impl Fn(&Revocation, &T) -> bool,
    ) -> Result<Option<T>>
    where
        F: Future<Output = Result<T>>,
    {
        let _writer = self.writer.lock().await;
        let Some(selected) = select(&self.read().revocations) else {
            return Ok(None);
        };
        let selected = persist(selected).await?;
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.revocations.retain(|r| keep(r, &selected));
        inner.revoked = inner.revocations.iter().map(|r| &r.kind).collect();
        Ok(Some(selected))
    }

    /// Every instance seen by any replica of the cell, sorted by id: the shared table with
    /// several replicas, this replica's memory with one.
    pub(crate) async fn instances_seen(&self) -> Result<Vec<protocol::admin::cell::InstanceSeen>> {
        match self.coordination.shared() {
            Some(shared) => shared.instances().await,
            None => Ok(self.instances.sorted()),
        }
    }

    /// The endpoint the held placement map gives `cell`, as the map writes it.
    pub(crate) fn map_endpoint_of(&self, cell: &CellId) -> Option<String> {
        self.read()
            .map
            .as_ref()
            .and_then(|m| m.map.cell(cell))
            .map(|c| c.endpoint.clone())
    }

    // ---- for embedding and tests ------------------------------------------------------------

    /// The signing key sessions are minted with now.
    pub fn current_signer(&self) -> Option<Arc<SigningKey>> {
        self.read().ring.current().map(|k| k.signer.clone())
    }

    /// The verification set (next + current + retired keys).
    pub fn key_set(&self) -> KeySet {
        self.read().ring.key_set().clone()
    }

    /// The feed head: the sequence number of the latest change.
    pub fn feed_head(&self) -> u64 {
        self.read().head
    }

    /// The revocations in force at this cell.
    pub fn revocations(&self) -> Vec<Revocation> {
        self.read().revocations.clone()
    }

    /// The ownership record held for a contractor.
    pub fn ownership_of(&self, ctr: &ContractorId) -> Option<OwnershipRecord> {
        self.read().ownership.get(ctr).cloned()
    }

    /// How many users this cell holds.
    pub fn user_count(&self) -> u64 {
        self.users.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The version of the placement map held, if any.
    pub fn map_version(&self) -> Option<u64> {
        self.read().map.as_ref().map(|m| m.map.version)
    }

    /// Seeds a peer cell's key set for transfer tickets (operators pre-seeding, tests).
    pub fn seed_peer_keys(&self, cell: CellId, endpoint: Endpoint, keys: KeySet) {
        self.peers.insert(cell, endpoint, keys);
    }
}
