//! [`Edge`]: everything the request path shares (settings, the held cell state, clock,
//! metrics, token cache, rate limiters, the key-refetch gate, upstreams, the connection gate,
//! in-flight writes), and the state transitions every part relies on: installing a view,
//! applying a feed answer (a restore of the auth-service included), the write lease and the
//! revocation view's age. The request-path modules (browser rules, validation, forwarding, the
//! desk, the feed sync) build on it; it builds on none of them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use protocol::feed::{Change, EpochRelation, FeedBody, FeedResponse, epoch_relation};
use protocol::ownership::Access;
use protocol::revocation::{Revocation, RevocationKind};
use protocol::time::SharedClock;
use runtime::refetch::RefetchGate;

use crate::error::{EdgeError, Refusal};
use crate::held::drain::InFlight;
use crate::held::state::CellState;
use crate::held::token_cache::TokenCache;
use crate::held::{revocation_compaction, revocation_freshness};
use crate::metrics::Metrics;
use crate::net::conn::ConnectionGate;
use crate::net::limits::Limits;
use crate::net::target;
use crate::net::upstreams::Upstreams;
use crate::settings::Settings;

/// What applying a feed answer did ([`Edge::apply_feed`]).
#[derive(Debug, Default)]
pub struct Applied {
    /// The new view, when it changed anything worth persisting.
    pub changed: Option<Arc<CellState>>,
    /// Set when the answer was a snapshot of a new epoch (a restore).
    pub restored: Option<Restored>,
}

/// A restore seen by [`Edge::apply_feed`]: the revocations carried over from the earlier epoch,
/// to hand back to the auth-service (`protocol::feed::Reapply`).
#[derive(Debug, Clone)]
pub struct Restored {
    /// The epoch held before the restore.
    pub from_epoch: String,
    /// The held revocations the restored state lacked that can still match.
    pub carried: Vec<Revocation>,
}

/// Everything the request path shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Edge(Arc<Inner>);

/// What an [`Edge`] shares (reached through `Deref`; the fields are private to this module).
#[derive(Debug)]
pub struct Inner {
    settings: Settings,
    state: ArcSwapOption<CellState>,
    apply_lock: Mutex<()>,
    last_sync: Mutex<Option<Instant>>,
    clock: SharedClock,
    metrics: Metrics,
    cache: TokenCache,
    limits: Limits,
    refetch: RefetchGate,
    upstreams: Upstreams,
    /// This cell's public authority (`host[:port]`), for absolute-form targets.
    public_authority: String,
    /// Admission of connections (PROXY v2, the per-address cap).
    gate: Arc<ConnectionGate>,
    state_dir: Option<PathBuf>,
    in_flight: Arc<InFlight>,
    /// This instance's DPoP nonces and replay set (`runtime::dpop`): nothing shared with the
    /// cell's other edge instances.
    dpop: runtime::dpop::DpopVerifier,
}

impl std::ops::Deref for Edge {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Edge {
    /// An edge with no state yet (every validated request answers `503 NOT_READY`).
    pub fn new(settings: Settings, clock: SharedClock, upstreams: Upstreams) -> Self {
        let limits = Limits::new(&settings.serving);
        let refetch = RefetchGate::new(settings.serving.kid_refetch_cooldown());
        let public_authority = target::authority_of(&settings.public_url);
        let metrics = Metrics::new(&settings.cell_id, &settings.instance_id);
        let gate = Arc::new(ConnectionGate::new(
            settings.trusted_proxies.clone(),
            settings.serving.proxy_protocol,
            &settings.listeners,
            metrics.connections_refused(),
        ));
        let cache = TokenCache::with_capacity(settings.serving.token_cache_capacity);
        // The nonce key is 32 bytes from the system's CSPRNG; without one the edge cannot
        // serve bound sessions safely, and nothing else it does works without randomness
        // either (TLS): an invariant of a working host.
        #[allow(clippy::expect_used)]
        let dpop = runtime::dpop::DpopVerifier::new(
            &settings.instance_id,
            settings.serving.dpop_max_proofs_per_step,
        )
        .expect("the system CSPRNG gives 32 bytes");
        Edge(Arc::new(Inner {
            dpop,
            public_authority,
            gate,
            settings,
            state: ArcSwapOption::empty(),
            apply_lock: Mutex::new(()),
            last_sync: Mutex::new(None),
            clock,
            metrics,
            cache,
            limits,
            refetch,
            upstreams,
            state_dir: None,
            in_flight: Arc::default(),
        }))
    }

    /// Persist applied state under `dir` (the binary sets this; in-process tests may not).
    pub(crate) fn with_state_dir(self, dir: PathBuf) -> Self {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.state_dir = Some(dir);
                Edge(Arc::new(inner))
            }
            Err(shared) => Edge(shared),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// This instance's DPoP proof verifier.
    pub(crate) fn dpop(&self) -> &runtime::dpop::DpopVerifier {
        &self.dpop
    }

    pub(crate) fn clock(&self) -> &SharedClock {
        &self.clock
    }

    pub(crate) fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The admission of this edge's connections (give it to [`crate::net::tls::serve_per_core`]).
    pub fn connection_gate(&self) -> Arc<ConnectionGate> {
        self.gate.clone()
    }

    /// Writes in flight per contractor (the migration drain).
    pub fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }

    /// The verified-token cache.
    pub fn token_cache(&self) -> &TokenCache {
        &self.cache
    }

    /// The per-IP and per-subject rate limiters.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The unknown-kid key refetch gate.
    pub(crate) fn key_refetch(&self) -> &RefetchGate {
        &self.refetch
    }

    /// This cell's public authority (`host[:port]`), for absolute-form targets.
    pub(crate) fn public_authority(&self) -> &str {
        &self.public_authority
    }

    pub(crate) fn state_dir(&self) -> Option<&PathBuf> {
        self.state_dir.as_ref()
    }

    /// The view requests are decided from, if any.
    pub fn current(&self) -> Option<Arc<CellState>> {
        self.state.load_full()
    }

    /// Installs a whole view (start-up from disk, tests).
    pub fn install(&self, state: CellState) {
        let _g = self.apply_lock.lock();
        self.state.store(Some(Arc::new(state.stamped())));
    }

    /// Records a successful feed sync now (renews the write lease).
    pub fn mark_synced(&self) {
        if let Ok(mut g) = self.last_sync.lock() {
            *g = Some(Instant::now());
        }
        self.metrics.feed_synced();
    }

    /// Whether writes may be served: the lease is off, or the last sync is within it.
    pub(crate) fn lease_current(&self) -> bool {
        let lease = self.settings.serving.write_lease();
        if lease.is_zero() {
            return true;
        }
        match self.last_sync.lock() {
            Ok(g) => g.is_some_and(|t| t.elapsed() <= lease),
            Err(_) => false,
        }
    }

    /// Applies a feed answer fetched with `since`. [`Applied::changed`] holds the new view when
    /// it changed anything worth persisting, `None` when the answer was stale (a concurrent
    /// fetch got there first) or empty. A refused answer keeps the last-known-good view.
    ///
    /// A snapshot of another epoch than the held one (the auth-service was restored from a
    /// backup) is taken whatever its head, plus the held revocations it lacks that can still
    /// match (`CellState::carry_revocations`); [`Applied::restored`] names them so the
    /// caller hands them back to the auth-service.
    pub fn apply_feed(&self, since: u64, resp: FeedResponse) -> Result<Applied, EdgeError> {
        let _g = self
            .apply_lock
            .lock()
            .map_err(|_| EdgeError::Feed("state lock poisoned".into()))?;
        let held = self.state.load_full();
        let held_seq = held.as_ref().map_or(0, |h| h.seq);
        let is_delta = matches!(resp.body, FeedBody::Delta { .. });
        if is_delta && held_seq != since {
            return Ok(Applied::default());
        }
        let changed = !matches!(&resp.body, FeedBody::Delta { entries } if entries.is_empty());
        let restore_of = held.as_ref().filter(|h| {
            !is_delta && epoch_relation(&h.epoch, &resp.epoch) == EpochRelation::Restored
        });
        let offered_epoch = resp.epoch.clone();
        let now = self.clock.now();
        // When each revocation this delta brings was created: how long it took to reach this
        // instance is measured once it is applied (a snapshot's are not new here).
        let revoked_at: Vec<u64> = match &resp.body {
            FeedBody::Delta { entries } => entries
                .iter()
                .filter(|e| e.seq > held_seq)
                .filter_map(|e| match &e.change {
                    Change::Revocation(r) => Some(r.at),
                    _ => None,
                })
                .collect(),
            FeedBody::Snapshot { .. } => Vec::new(),
        };
        let lifetime_s = self.settings.serving.session_lifetime_s;
        let mut restored = None;
        let next = match CellState::apply(held.as_deref(), &self.settings.cell_id, resp) {
            Ok(mut n) => {
                if let Some(h) = restore_of {
                    let carried = n.carry_revocations(h, lifetime_s, now);
                    self.metrics.feed_epoch_changed();
                    tracing::warn!(
                        held_epoch = %h.epoch,
                        held_seq = h.seq,
                        epoch = %offered_epoch,
                        head = n.head,
                        carried = carried.len(),
                        "the auth-service was restored from a backup: took its snapshot and kept enforcing the revocations it lacks"
                    );
                    restored = Some(Restored {
                        from_epoch: h.epoch.clone(),
                        carried,
                    });
                }
                // Revocations that can match nothing this instance accepts are dropped here:
                // the feed never removes them.
                revocation_compaction::compact(&mut n, lifetime_s, now);
                Arc::new(n.stamped())
            }
            Err(e) => {
                self.metrics.feed_rejected();
                return Err(e);
            }
        };
        self.state.store(Some(next.clone()));
        self.metrics
            .set_feed_lag(next.head.saturating_sub(next.seq) as i64);
        for at in revoked_at {
            self.metrics
                .revocation_applied(now.saturating_sub(at) as f64);
        }
        drop(_g);
        self.mark_synced();
        Ok(Applied {
            changed: changed.then_some(next),
            restored,
        })
    }

    /// Writes an installed view as the last-known-good copy (when this edge keeps one), on
    /// the blocking pool; a failure is logged (the view in memory stays what is served).
    pub(crate) async fn persist(&self, view: Arc<CellState>) {
        let Some(dir) = self.state_dir().cloned() else {
            return;
        };
        let res =
            tokio::task::spawn_blocking(move || crate::held::state::persist(&dir, &view)).await;
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not persist the cell state"),
            Err(e) => tracing::warn!(error = %e, "state persistence task failed"),
        }
    }

    /// Stops enforcing the held revocations of `kinds`: ones this instance carried over a
    /// restore and handed back, which the auth-service says an operator withdrew. Answers the
    /// new view when it changed.
    pub(crate) fn drop_withdrawn(&self, kinds: &[RevocationKind]) -> Option<Arc<CellState>> {
        let _g = self.apply_lock.lock().ok()?;
        let held = self.state.load_full()?;
        let mut next = (*held).clone();
        let dropped = next.drop_withdrawn(kinds);
        if dropped == 0 {
            return None;
        }
        tracing::warn!(
            dropped,
            "stopped enforcing revocations an operator withdrew while this instance held them over a restore"
        );
        let next = Arc::new(next.stamped());
        self.state.store(Some(next.clone()));
        Some(next)
    }

    /// Brings the gauges up to date (before the metrics are read): state ages, feed lag, the
    /// age of the last sync and the map version served.
    pub(crate) fn refresh_gauges(&self) {
        let now = self.clock.now() as i64;
        match self.current() {
            Some(s) => {
                let age = now - s.confirmed_at as i64;
                let map_age = if s.map().is_some() { age } else { -1 };
                self.metrics.set_state_ages(age, age, map_age);
                self.metrics
                    .set_feed_lag(s.head.saturating_sub(s.seq) as i64);
                self.metrics
                    .set_map_version(s.map().map_or(0, |m| m.map.version));
            }
            None => {
                self.metrics.set_state_ages(-1, -1, -1);
                self.metrics.set_map_version(0);
            }
        }
        let synced = self
            .revocation_view_age()
            .map_or(-1, |a| i64::try_from(a.as_secs()).unwrap_or(i64::MAX));
        self.metrics.set_last_sync_age(synced);
    }

    /// Time since the last successful feed sync, if there was one.
    pub(crate) fn revocation_view_age(&self) -> Option<Duration> {
        self.last_sync
            .lock()
            .ok()
            .and_then(|g| g.map(|t| t.elapsed()))
    }

    /// Refuses a request when the revocation view is too old for it (`revocation_freshness`).
    pub(crate) fn check_revocation_freshness(&self, access: Access) -> Result<(), Refusal> {
        let s = self.settings();
        revocation_freshness::decide(
            self.revocation_view_age(),
            s.serving.revocation_max_age(),
            s.serving.revocation_fail_closed,
            access,
        )
    }
}
