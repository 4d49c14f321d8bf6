//! The cell state an edge decides from: an immutable snapshot (keys, ownership, revocations,
//! placement map) built from the auth-service feed, swapped whole, and kept on disk as the
//! last-known-good copy. A view remembers the feed epoch it was built from (`protocol::feed`):
//! after the auth-service was restored from a backup, [`CellState::carry_revocations`] keeps
//! the held revocations the restored state lacks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use protocol::feed::{Change, FeedBody, FeedKey, FeedResponse, Snapshot};
use protocol::jwks::{KeySet, PublicKey};
use protocol::map::SignedMap;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::{Revocation, RevocationKind, RevocationSet};
use protocol::time::UnixSeconds;
use protocol::{CellId, ContractorId, Kid};
use serde::{Deserialize, Serialize};

use crate::error::EdgeError;

/// Schema version of `state.json`.
pub const STATE_SCHEMA: u32 = 1;
/// File name of the persisted state inside `state_dir`.
pub(crate) const STATE_FILE: &str = "state.json";
/// Largest state file read back, in bytes.
pub(crate) const MAX_STATE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// One immutable view of the cell. Derived indexes (key set, revocation matcher) are built
/// once when the view is made. A clone is not installed (its stamp is 0): its fields may
/// still change before it is.
#[derive(Debug, Clone)]
pub struct CellState {
    pub cell: CellId,
    /// Last feed sequence number applied.
    pub seq: u64,
    /// Feed head at the last sync (for the lag metric).
    pub head: u64,
    /// The auth-service's clock when it last confirmed this view (state age).
    pub confirmed_at: UnixSeconds,
    /// The feed epoch this view was built from (empty: from before epochs).
    pub epoch: String,
    pub snapshot: Snapshot,
    pub keyset: KeySet,
    pub revocations: RevocationSet,
    /// `snapshot.ownership` as a hash index: the per-request ownership lookup is one hash
    /// probe, not a walk of string comparisons down a B-tree of every contractor.
    owners: HashMap<ContractorId, OwnershipRecord>,
    /// Which install this view is ([`CellState::stamp`]); 0 until installed.
    stamp: Stamp,
}

/// Which install a view is ([`CellState::stamp`]). A clone is a view not installed (its fields
/// may still change before it is), so cloning gives 0.
#[derive(Debug, Default)]
struct Stamp(u64);

impl Clone for Stamp {
    fn clone(&self) -> Self {
        Stamp(0)
    }
}

/// The last stamp given to an installed view (process-wide, so two edges in one process never
/// share one).
static LAST_STAMP: AtomicU64 = AtomicU64::new(0);

/// The persisted form of a [`CellState`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateFile {
    pub schema: u32,
    pub cell: CellId,
    pub seq: u64,
    pub head: u64,
    pub confirmed_at: UnixSeconds,
    /// Absent in a file written before epochs (read as empty); not written when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub epoch: String,
    pub snapshot: Snapshot,
}

fn build_keyset(keys: &[FeedKey]) -> Result<KeySet, EdgeError> {
    let mut map = BTreeMap::new();
    for k in keys {
        let key = PublicKey::from_b64(&k.x)
            .map_err(|why| EdgeError::Feed(format!("key {}: {why}", k.kid)))?;
        if map.insert(k.kid.clone(), key).is_some() {
            return Err(EdgeError::Feed(format!("key {} listed twice", k.kid)));
        }
    }
    Ok(KeySet::new(map))
}

impl CellState {
    /// Builds a view from a whole snapshot, of no epoch (see [`CellState::with_epoch`]). Any
    /// invalid key refuses all of it (ATTACKS A9).
    pub fn from_snapshot(
        cell: CellId,
        seq: u64,
        head: u64,
        confirmed_at: UnixSeconds,
        snapshot: Snapshot,
    ) -> Result<Self, EdgeError> {
        if let Some(m) = &snapshot.map {
            m.map
                .validate()
                .map_err(|e| EdgeError::Feed(format!("map: {e}")))?;
        }
        let keyset = build_keyset(&snapshot.keys)?;
        let revocations = snapshot.revocations.iter().map(|r| &r.kind).collect();
        let owners = snapshot
            .ownership
            .iter()
            .map(|(c, r)| (c.clone(), r.clone()))
            .collect();
        Ok(Self {
            cell,
            seq,
            head,
            confirmed_at,
            epoch: String::new(),
            snapshot,
            keyset,
            revocations,
            owners,
            stamp: Stamp::default(),
        })
    }

    /// The same view, of feed epoch `epoch`.
    pub fn with_epoch(mut self, epoch: impl Into<String>) -> Self {
        self.epoch = epoch.into();
        self
    }

    /// After a restore: adds to this view the revocations `held` (the view of the earlier
    /// epoch) had whose kind this view lacks and that can still match a session
    /// (`Revocation::can_match`, the rule of `revocation_compaction`), so they keep being
    /// enforced; rebuilds the matcher. Answers the ones carried over.
    pub(crate) fn carry_revocations(
        &mut self,
        held: &CellState,
        lifetime_s: u64,
        now: UnixSeconds,
    ) -> Vec<Revocation> {
        let present: HashSet<&RevocationKind> =
            self.snapshot.revocations.iter().map(|r| &r.kind).collect();
        let mut seen = HashSet::new();
        let carried: Vec<Revocation> = held
            .snapshot
            .revocations
            .iter()
            .filter(|r| !present.contains(&r.kind) && r.can_match(lifetime_s, now))
            .filter(|r| seen.insert(&r.kind))
            .cloned()
            .collect();
        if !carried.is_empty() {
            for r in &carried {
                self.revocations.insert(&r.kind);
            }
            self.snapshot.revocations.extend(carried.iter().cloned());
        }
        carried
    }

    /// After the auth-service said an operator withdrew them: drops the held revocations of
    /// `kinds` (ones this view carried over a restore); rebuilds the matcher. Answers how many.
    pub(crate) fn drop_withdrawn(&mut self, kinds: &[RevocationKind]) -> usize {
        let before = self.snapshot.revocations.len();
        self.snapshot
            .revocations
            .retain(|r| !kinds.contains(&r.kind));
        let dropped = before - self.snapshot.revocations.len();
        if dropped > 0 {
            self.revocations = self.snapshot.revocations.iter().map(|r| &r.kind).collect();
        }
        dropped
    }

    /// The placement map, if one is held.
    pub(crate) fn map(&self) -> Option<&SignedMap> {
        self.snapshot.map.as_ref()
    }

    pub(crate) fn ownership(&self, ctr: &ContractorId) -> Option<&OwnershipRecord> {
        self.owners.get(ctr)
    }

    /// The endpoint the held map gives for a cell, or the empty string when it names none.
    pub fn endpoint_of(&self, cell: &CellId) -> String {
        self.map()
            .and_then(|m| m.map.cell(cell))
            .map(|c| c.endpoint.clone())
            .unwrap_or_default()
    }

    /// Applies one feed answer on top of this view (or on nothing), returning the new view.
    /// The answer is taken whole or not at all. A snapshot of another epoch than the held one
    /// is taken whatever its head (a restore; the caller carries revocations over); a delta of
    /// another epoch is refused (ask for a snapshot).
    pub(crate) fn apply(
        held: Option<&CellState>,
        cell: &CellId,
        resp: FeedResponse,
    ) -> Result<CellState, EdgeError> {
        let since = held.map_or(0, |h| h.seq);
        let held_epoch = held.map_or("", |h| h.epoch.as_str());
        resp.check_applicable(cell, since, held_epoch)
            .map_err(|e| EdgeError::Feed(e.to_string()))?;
        // An answer from an auth-service older than epochs keeps the epoch held.
        let epoch = if resp.epoch.is_empty() {
            held_epoch.to_owned()
        } else {
            resp.epoch
        };
        match resp.body {
            FeedBody::Snapshot { snapshot } => CellState::from_snapshot(
                cell.clone(),
                resp.head,
                resp.head,
                resp.issued_at,
                *snapshot,
            )
            .map(|s| s.with_epoch(epoch)),
            FeedBody::Delta { entries } => {
                let Some(held) = held else {
                    return Err(EdgeError::Feed(
                        "a delta with no state to apply it to".into(),
                    ));
                };
                let mut next = held.clone();
                next.epoch = epoch;
                next.head = resp.head;
                next.confirmed_at = resp.issued_at.max(held.confirmed_at);
                if entries.is_empty() {
                    return Ok(next);
                }
                let mut snap = held.snapshot.clone();
                let mut seq = held.seq;
                for e in entries {
                    seq = e.seq;
                    apply_change(&mut snap, e.change);
                }
                let mut built = CellState::from_snapshot(
                    cell.clone(),
                    seq,
                    resp.head,
                    next.confirmed_at,
                    snap,
                )?
                .with_epoch(next.epoch);
                built.head = resp.head.max(seq);
                Ok(built)
            }
        }
    }

    pub(crate) fn to_file(&self) -> StateFile {
        StateFile {
            schema: STATE_SCHEMA,
            cell: self.cell.clone(),
            seq: self.seq,
            head: self.head,
            confirmed_at: self.confirmed_at,
            epoch: self.epoch.clone(),
            snapshot: self.snapshot.clone(),
        }
    }

    /// Whether a kid is in the key set.
    pub fn has_kid(&self, kid: &Kid) -> bool {
        self.keyset.contains(kid.as_str())
    }

    /// This view's install: distinct for every view the edge installs (never reused in the
    /// process), 0 for a view not installed. A cached session remembers the stamp of the view
    /// it passed the view's checks under (`token_cache::ServedUnder`).
    pub fn stamp(&self) -> u64 {
        self.stamp.0
    }

    /// This view with a fresh stamp: called by the edge when it installs it, after the last
    /// change to it, so a stamp names one content.
    pub(crate) fn stamped(mut self) -> Self {
        self.stamp = Stamp(LAST_STAMP.fetch_add(1, Ordering::Relaxed) + 1);
        self
    }
}

fn apply_change(snap: &mut Snapshot, change: Change) {
    match change {
        Change::Key(k) => {
            snap.keys.retain(|h| h.kid != k.kid);
            snap.keys.push(k);
        }
        Change::KeyRemoved { kid } => snap.keys.retain(|h| h.kid != kid),
        Change::Ownership { contractor, record } => {
            snap.ownership.insert(contractor, record);
        }
        Change::Revocation(r) => push_revocation(&mut snap.revocations, r),
        // Every held revocation of the withdrawn kind goes, a copy carried over a restore
        // included: the kind is what a revocation matches.
        Change::RevocationWithdrawn(w) => snap.revocations.retain(|r| r.kind != w.kind),
        Change::Map(m) => {
            // The auth-service verified the signature; the edge only refuses a rollback.
            if m.newer_than(snap.map.as_ref()).is_ok() {
                snap.map = Some(*m);
            }
        }
    }
}

fn push_revocation(list: &mut Vec<Revocation>, r: Revocation) {
    if !list.iter().any(|h| h.seq == r.seq && h.kind == r.kind) {
        list.push(r);
    }
}

/// Path of the state file in `dir`.
pub fn state_path(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Writes the state atomically: a temp file in the same directory (0600), fsync, rename,
/// fsync of the directory.
pub fn persist(dir: &Path, state: &CellState) -> Result<(), EdgeError> {
    std::fs::create_dir_all(dir)?;
    let bytes =
        serde_json::to_vec(&state.to_file()).map_err(|e| EdgeError::StateFile(e.to_string()))?;
    // tempfile creates the file with mode 0600 on unix.
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(state_path(dir))
        .map_err(|e| EdgeError::StateFile(e.to_string()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        // Best effort: makes the rename durable on filesystems that need it.
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads the last-known-good state back. `Ok(None)` when there is none.
pub fn load(dir: &Path, cell: &CellId) -> Result<Option<CellState>, EdgeError> {
    let path = state_path(dir);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if file.metadata()?.len() > MAX_STATE_FILE_BYTES {
        return Err(EdgeError::StateFile("state file too large".into()));
    }
    let parsed: StateFile = serde_json::from_reader(std::io::BufReader::new(file))
        .map_err(|e| EdgeError::StateFile(e.to_string()))?;
    if parsed.schema != STATE_SCHEMA {
        return Err(EdgeError::StateFile(format!(
            "schema {} is not supported",
            parsed.schema
        )));
    }
    if &parsed.cell != cell {
        return Err(EdgeError::StateFile(format!(
            "state is for {}, this edge serves {cell}",
            parsed.cell
        )));
    }
    CellState::from_snapshot(
        parsed.cell,
        parsed.seq,
        parsed.head,
        parsed.confirmed_at,
        parsed.snapshot,
    )
    .map(|s| Some(s.with_epoch(parsed.epoch)))
}
