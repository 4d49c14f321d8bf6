//! The cell's state in memory (a mirror of the store) and the one way to change it:
//! [`AppState::commit_with`] builds a batch of changes under the writer lock, writes it to the
//! store in one transaction together with its feed entries, then applies it in memory and wakes
//! the feed's long-polls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use protocol::feed::{Change, FeedEntry, KeyStatus};
use protocol::jwks::PublicKey;
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::{Revocation, RevocationKind, RevocationSet};
use protocol::time::{SharedClock, UnixSeconds};
use protocol::token::SigningKey;
use protocol::{ContractorId, Kid, Password};
use ring::rand::SystemRandom;
use serde::Serialize;
use tokio::sync::{Semaphore, watch};
use zeroize::Zeroizing;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::{Kek, KeyRing, generate};
use crate::metrics::Metrics;
use crate::store::{Commit, KeyRow, KeyState, Store, Write};
use crate::throttle::Throttle;

/// Feed entries kept for deltas; older `since` values get a snapshot.
pub const FEED_RETAIN_ENTRIES: u64 = 10_000;
/// Most instances remembered for the status page.
pub const MAX_TRACKED_INSTANCES: usize = 4_096;

/// What the cell holds in memory.
#[derive(Debug, Default)]
pub struct Inner {
    pub ring: KeyRing,
    pub ownership: BTreeMap<ContractorId, OwnershipRecord>,
    pub revocations: Vec<Revocation>,
    pub revoked: RevocationSet,
    pub map: Option<SignedMap>,
    pub head: u64,
    pub log: VecDeque<FeedEntry>,
}

/// An edge instance as last seen by the feed.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceSeen {
    pub id: String,
    pub applied_seq: u64,
    pub last_seen: UnixSeconds,
    /// Contractors in handoff for which it reported writes still in flight (migration drain).
    pub busy: Vec<ContractorId>,
}

/// Changes being prepared for one commit.
#[derive(Debug)]
pub struct Batch {
    next_seq: u64,
    commit: Commit,
    signers: HashMap<Kid, Arc<SigningKey>>,
}

impl Batch {
    fn new(head: u64) -> Batch {
        Batch {
            next_seq: head + 1,
            commit: Commit {
                head,
                ..Commit::default()
            },
            signers: HashMap::new(),
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
    pub fn key(&mut self, row: KeyRow, signer: Option<Arc<SigningKey>>) {
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

    pub fn ownership(&mut self, contractor: ContractorId, record: OwnershipRecord) {
        self.entry(Change::Ownership {
            contractor: contractor.clone(),
            record: record.clone(),
        });
        self.commit
            .writes
            .push(Write::Ownership { contractor, record });
    }

    pub fn revocation(
        &mut self,
        kind: RevocationKind,
        at: UnixSeconds,
        by: String,
        reason: String,
    ) {
        let r = Revocation {
            seq: self.next_seq,
            kind,
            at,
            by,
            reason,
        };
        self.entry(Change::Revocation(r.clone()));
        self.commit.writes.push(Write::Revocation(r));
    }

    pub fn map(&mut self, map: SignedMap) {
        self.entry(Change::Map(Box::new(map.clone())));
        self.commit.writes.push(Write::Map(Box::new(map)));
    }

    pub fn is_empty(&self) -> bool {
        self.commit.entries.is_empty()
    }
}

/// Secret bearer tokens; `Debug` never shows them.
pub struct Secret(Zeroizing<String>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// Reads a token file (surrounding whitespace ignored); refuses an empty one.
    pub fn from_file(path: &std::path::Path) -> Result<Secret> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path).map_err(Error::io(format!("read {}", path.display())))?,
        );
        let t = text.trim();
        if t.is_empty() {
            return Err(Error::Config(format!("{} is empty", path.display())));
        }
        Ok(Secret(Zeroizing::new(t.to_owned())))
    }

    pub fn new(s: &str) -> Secret {
        Secret(Zeroizing::new(s.to_owned()))
    }

    /// Constant-time comparison with a presented token.
    pub fn matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(self.0.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// Everything a request handler needs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    pub clock: SharedClock,
    pub store: Arc<dyn Store>,
    pub kek: Kek,
    pub rng: SystemRandom,
    pub inner: RwLock<Inner>,
    writer: tokio::sync::Mutex<()>,
    pub head_tx: watch::Sender<u64>,
    pub instances: Mutex<HashMap<String, InstanceSeen>>,
    pub admin_token: Secret,
    pub feed_token: Secret,
    /// The cell's edge token (`X-Cellbind-Edge-Key` of an authenticated edge).
    pub edge_token: Secret,
    pub map_key: Option<PublicKey>,
    pub throttle: Throttle,
    pub metrics: Metrics,
    /// A hash of a random password, verified for unknown users so they cost the same.
    pub dummy_hash: String,
    /// Bounds concurrent argon2 computations (memory and CPU).
    pub hashing: Semaphore,
    pub users: AtomicU64,
    pub http: Option<reqwest::Client>,
    /// Peer cells' keys, for transfer tickets only.
    pub peers: crate::transfer::PeerKeys,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Runs blocking work (SQLite, argon2) on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("blocking task failed: {e}")))?
}

/// Secrets and collaborators that come from outside the config file's plain values.
#[derive(Debug)]
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub kek: Kek,
    pub admin_token: Secret,
    pub feed_token: Secret,
    pub edge_token: Secret,
    pub clock: SharedClock,
    pub http: Option<reqwest::Client>,
}

impl AppState {
    /// Loads the state from the store and makes sure a current and a next key exist.
    pub async fn open(config: Config, parts: Parts) -> Result<AppState> {
        let store = parts.store.clone();
        let loaded = blocking(move || store.load(FEED_RETAIN_ENTRIES)).await?;
        let ring = KeyRing::from_rows(&loaded.keys, &parts.kek)?;
        let revoked: RevocationSet = loaded.revocations.iter().map(|r| &r.kind).collect();
        let map_key = config
            .map_public_key
            .as_deref()
            .map(PublicKey::from_b64)
            .transpose()
            .map_err(|e| Error::Config(format!("map_public_key: {e}")))?;
        let rng = SystemRandom::new();
        let dummy_hash = {
            let rng = rng.clone();
            blocking(move || {
                let pw = crate::keys::random::<16>(&rng)?;
                let pw = Password::new(base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    pw.as_ref(),
                ))
                .map_err(|e| Error::Internal(e.to_string()))?;
                crate::passwords::hash(&pw, &rng)
            })
            .await?
        };
        let metrics = Metrics::default();
        metrics.feed_head(loaded.head);
        if let Some(m) = &loaded.map {
            metrics.map_version(m.map.version);
        }
        let (head_tx, _) = watch::channel(loaded.head);
        let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
        let state = AppState(Arc::new(Shared {
            throttle: Throttle::new(&config),
            clock: parts.clock,
            store: parts.store,
            kek: parts.kek,
            rng,
            inner: RwLock::new(Inner {
                ring,
                ownership: loaded.ownership,
                revocations: loaded.revocations,
                revoked,
                map: loaded.map,
                head: loaded.head,
                log: loaded.log.into(),
            }),
            writer: tokio::sync::Mutex::new(()),
            head_tx,
            instances: Mutex::new(HashMap::new()),
            admin_token: parts.admin_token,
            feed_token: parts.feed_token,
            edge_token: parts.edge_token,
            map_key,
            metrics,
            dummy_hash,
            hashing: Semaphore::new(parallel * 2),
            users: AtomicU64::new(loaded.users),
            http: parts.http,
            peers: crate::transfer::PeerKeys::default(),
            config,
        }));
        state.ensure_keys().await?;
        Ok(state)
    }

    /// A read view of the in-memory state.
    pub fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now(&self) -> UnixSeconds {
        self.clock.now()
    }

    /// The one way to change feed-visible state. `build` sees the current state and fills a
    /// batch (or fails, changing nothing). Answers the feed head after the commit.
    pub async fn commit_with<T>(
        &self,
        build: impl FnOnce(&Inner, &mut Batch) -> Result<T>,
    ) -> Result<(u64, T)> {
        let _writer = self.writer.lock().await;
        let (batch, out) = {
            let inner = self.read();
            let mut batch = Batch::new(inner.head);
            let out = build(&inner, &mut batch)?;
            (batch, out)
        };
        if batch.is_empty() {
            return Ok((self.read().head, out));
        }
        let Batch {
            commit, signers, ..
        } = batch;
        let store = self.store.clone();
        let commit =
            blocking(move || store.commit(&commit, FEED_RETAIN_ENTRIES).map(|()| commit)).await?;
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
                    Write::Revocation(r) => {
                        inner.revoked.insert(&r.kind);
                        inner.revocations.push(r);
                    }
                    Write::Map(m) => {
                        self.metrics.map_version(m.map.version);
                        inner.map = Some(*m);
                    }
                }
            }
            inner.log.extend(commit.entries);
            while inner.log.len() as u64 > FEED_RETAIN_ENTRIES {
                inner.log.pop_front();
            }
            inner.head = head;
        }
        self.metrics.feed_head(head);
        self.head_tx.send_replace(head);
        Ok((head, out))
    }

    fn new_key(&self, state: KeyState, now: UnixSeconds) -> Result<(Arc<SigningKey>, KeyRow)> {
        generate(&self.rng, &self.kek, state, now)
    }

    /// Creates a current and a next key when missing (first start, or after revocations).
    pub async fn ensure_keys(&self) -> Result<()> {
        let now = self.now();
        self.commit_with(|inner, batch| {
            if inner.ring.current().is_none() {
                if let Some(next) = inner.ring.next() {
                    let row = KeyRow {
                        state: KeyState::Current,
                        state_at: now,
                        ..next.row.clone()
                    };
                    batch.key(row, None);
                } else {
                    let (s, row) = self.new_key(KeyState::Current, now)?;
                    batch.key(row, Some(s));
                }
                let (s, row) = self.new_key(KeyState::Next, now)?;
                batch.key(row, Some(s));
            } else if inner.ring.next().is_none() {
                let (s, row) = self.new_key(KeyState::Next, now)?;
                batch.key(row, Some(s));
            }
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Fills `batch` with a rotation: current → retired, next → current, a new next.
    fn rotate_into(&self, inner: &Inner, batch: &mut Batch, now: UnixSeconds) -> Result<Rotation> {
        let mut retired = Vec::new();
        if let Some(cur) = inner.ring.current() {
            batch.key(
                KeyRow {
                    state: KeyState::Retired,
                    state_at: now,
                    ..cur.row.clone()
                },
                None,
            );
            retired.push(cur.row.kid.clone());
        }
        let current = match inner.ring.next() {
            Some(n) => {
                batch.key(
                    KeyRow {
                        state: KeyState::Current,
                        state_at: now,
                        ..n.row.clone()
                    },
                    None,
                );
                n.row.kid.clone()
            }
            None => {
                let (s, row) = self.new_key(KeyState::Current, now)?;
                let kid = row.kid.clone();
                batch.key(row, Some(s));
                kid
            }
        };
        let (s, row) = self.new_key(KeyState::Next, now)?;
        let next = row.kid.clone();
        batch.key(row, Some(s));
        for k in inner.ring.in_state(KeyState::Retired) {
            retired.push(k.row.kid.clone());
        }
        Ok(Rotation {
            current,
            next,
            retired,
        })
    }

    /// Rotates the signing key now.
    pub async fn rotate(&self) -> Result<Rotation> {
        let now = self.now();
        let (_, r) = self
            .commit_with(|inner, batch| self.rotate_into(inner, batch, now))
            .await?;
        tracing::info!(current = %r.current, next = %r.next, "rotated signing keys");
        Ok(r)
    }

    /// The scheduled part of key management: rotate when the current key is older than the
    /// rotation interval, and drop retired keys once every session they signed has expired.
    pub async fn tick_keys(&self) -> Result<Option<Rotation>> {
        let now = self.now();
        let interval = self.config.key_rotation_interval_s;
        let keep = self
            .config
            .session_lifetime_s
            .saturating_add(protocol::token::LEEWAY_S);
        let (_, rotated) = self
            .commit_with(|inner, batch| {
                for k in inner.ring.in_state(KeyState::Retired) {
                    if k.row.state_at.saturating_add(keep) <= now {
                        batch.key(
                            KeyRow {
                                state: KeyState::Expired,
                                state_at: now,
                                sealed_seed: None,
                                ..k.row.clone()
                            },
                            None,
                        );
                    }
                }
                let due = inner
                    .ring
                    .current()
                    .is_none_or(|c| c.row.state_at.saturating_add(interval) <= now);
                if due {
                    return self.rotate_into(inner, batch, now).map(Some);
                }
                Ok(None)
            })
            .await?;
        if let Some(r) = &rotated {
            tracing::info!(current = %r.current, next = %r.next, "scheduled key rotation");
        }
        Ok(rotated)
    }

    /// Revokes a key: it leaves the set and a key revocation enters the feed. Revoking the
    /// current key promotes the next one first; revoking the next key makes a new one.
    /// Answers `false` when the key was already revoked.
    pub async fn revoke_key(&self, kid: &Kid, by: String, reason: String) -> Result<bool> {
        let now = self.now();
        let (_, changed) = self
            .commit_with(|inner, batch| {
                let Some(key) = inner.ring.get(kid) else {
                    if inner.revoked.is_key_revoked(kid) {
                        return Ok(false);
                    }
                    return Err(Error::NotFound(format!("key {kid}")));
                };
                match key.row.state {
                    KeyState::Current => {
                        self.rotate_into(inner, batch, now)?;
                    }
                    KeyState::Next => {
                        let (s, row) = self.new_key(KeyState::Next, now)?;
                        batch.key(row, Some(s));
                    }
                    _ => {}
                }
                batch.key(
                    KeyRow {
                        state: KeyState::Revoked,
                        state_at: now,
                        sealed_seed: None,
                        ..key.row.clone()
                    },
                    None,
                );
                batch.revocation(RevocationKind::Key { kid: kid.clone() }, now, by, reason);
                Ok(true)
            })
            .await?;
        Ok(changed)
    }

    /// Drops revocations that can no longer match an unexpired session (DESIGN §6: kept until
    /// every session they could match has expired): a session revocation after its `exp`, the
    /// "before" kinds and key revocations one session lifetime after their time, each plus the
    /// clock leeway. This does not move the feed head: a snapshot at the same head differs only
    /// by revocations that match nothing. Answers how many were dropped.
    pub async fn prune_revocations(&self) -> Result<usize> {
        let _writer = self.writer.lock().await;
        let now = self.now();
        let life = self.config.session_lifetime_s;
        let leeway = protocol::token::LEEWAY_S;
        let expired = |r: &Revocation| {
            let until = match &r.kind {
                RevocationKind::Session { exp, .. } => *exp,
                RevocationKind::Subject { before, .. }
                | RevocationKind::Contractor { before, .. }
                | RevocationKind::Cell { before } => before.saturating_add(life),
                RevocationKind::Key { .. } => r.at.saturating_add(life),
            };
            until.saturating_add(leeway) <= now
        };
        let seqs: std::collections::HashSet<u64> = self
            .read()
            .revocations
            .iter()
            .filter(|r| expired(r))
            .map(|r| r.seq)
            .collect();
        if seqs.is_empty() {
            return Ok(0);
        }
        let store = self.store.clone();
        let gone: Vec<u64> = seqs.iter().copied().collect();
        blocking(move || store.delete_revocations(&gone)).await?;
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.revocations.retain(|r| !seqs.contains(&r.seq));
        inner.revoked = inner.revocations.iter().map(|r| &r.kind).collect();
        tracing::info!(dropped = seqs.len(), "dropped expired revocations");
        Ok(seqs.len())
    }

    /// Records that an edge instance asked for the feed with `since`, reporting writes in
    /// flight for the contractors in `busy`.
    pub fn saw_instance(&self, id: &str, since: u64, busy: Vec<ContractorId>) {
        let now = self.now();
        let mut map = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED_INSTANCES
            && !map.contains_key(id)
            && let Some(oldest) = map
                .values()
                .min_by_key(|i| i.last_seen)
                .map(|i| i.id.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.to_owned(),
            InstanceSeen {
                id: id.to_owned(),
                applied_seq: since,
                last_seen: now,
                busy,
            },
        );
    }

    /// Published key ids with their status, for the status page.
    pub fn kid_statuses(&self) -> Vec<(Kid, KeyStatus)> {
        self.read()
            .ring
            .feed_keys()
            .into_iter()
            .map(|k| (k.kid, k.status))
            .collect()
    }

    pub fn user_count(&self) -> u64 {
        self.users.load(Ordering::Relaxed)
    }
}

/// The outcome of a rotation.
#[derive(Debug, Clone, Serialize)]
pub struct Rotation {
    pub current: Kid,
    pub next: Kid,
    pub retired: Vec<Kid>,
}
