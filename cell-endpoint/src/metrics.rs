//! Prometheus metrics (prometheus-client): request outcomes, validation latency, state ages,
//! feed lag, refused feed documents, feed epoch changes (restores) and unknown-kid key refetches.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = [(&'static str, &'static str); 1];

/// Every outcome label of `cellbind_edge_requests_total`.
pub const OUTCOMES: [&str; 12] = [
    "served",
    "wrong_cell",
    "handoff",
    "revoked",
    "expired",
    "invalid",
    "stale",
    "upstream_error",
    "missing",
    "rate_limited",
    "forbidden",
    "bad_request",
];

/// The edge's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    /// The series of `requests`, resolved once (index = position in [`OUTCOMES`]), so counting
    /// is one atomic add.
    by_outcome: Vec<Counter>,
    validation: Histogram,
    state_age: Family<Labels, Gauge>,
    feed_lag: Gauge,
    feed_rejected: Counter,
    feed_syncs: Counter,
    feed_epoch_changes: Counter,
    key_refetches: Counter<u64, AtomicU64>,
    connections_refused: Counter,
}

/// Registers `metric` under `name` and hands it back (the registry keeps a clone).
fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("cellbind_edge");
        let requests = registered(
            &mut registry,
            "requests",
            "Requests by outcome (served, wrong_cell, handoff, revoked, expired, invalid, stale, upstream_error, missing, rate_limited, forbidden, bad_request)",
            Family::<Labels, Counter>::default(),
        );
        // Every series exists from the start, so a dashboard sees zeros, not gaps.
        let by_outcome = OUTCOMES
            .iter()
            .map(|o| requests.get_or_create_owned(&[("outcome", *o)]))
            .collect();
        let validation = registered(
            &mut registry,
            "validation_seconds",
            "Time to validate a session (signature or cache, revocation, ownership)",
            // 1 µs .. ~16 ms.
            Histogram::new(exponential_buckets(1e-6, 2.0, 15)),
        );
        let state_age = registered(
            &mut registry,
            "state_age_seconds",
            "Seconds since the auth-service last confirmed each part of the held state (-1: none held)",
            Family::<Labels, Gauge>::default(),
        );
        let feed_lag = registered(
            &mut registry,
            "feed_lag",
            "Feed head minus the sequence number applied",
            Gauge::default(),
        );
        let feed_rejected = registered(
            &mut registry,
            "feed_rejected",
            "Feed documents refused (the last-known-good state was kept)",
            Counter::default(),
        );
        let feed_syncs = registered(
            &mut registry,
            "feed_syncs",
            "Successful feed syncs",
            Counter::default(),
        );
        let feed_epoch_changes = registered(
            &mut registry,
            "feed_epoch_changes",
            "Snapshots of a new feed epoch taken (the auth-service was restored from a backup)",
            Counter::default(),
        );
        let key_refetches = registered(
            &mut registry,
            "key_refetches",
            "Key refetches caused by an unknown kid (single-flight, rate-limited)",
            Counter::default(),
        );
        let connections_refused = registered(
            &mut registry,
            "connections_refused",
            "Connections closed at once because their address already had the most allowed open",
            Counter::default(),
        );
        Self {
            registry,
            requests,
            by_outcome,
            validation,
            state_age,
            feed_lag,
            feed_rejected,
            feed_syncs,
            feed_epoch_changes,
            key_refetches,
            connections_refused,
        }
    }

    /// The refused-connections counter (shared with the connection gate).
    pub fn connections_refused(&self) -> Counter {
        self.connections_refused.clone()
    }

    pub fn outcome(&self, outcome: &'static str) {
        match OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => {
                self.by_outcome[i].inc();
            }
            None => {
                self.requests.get_or_create(&[("outcome", outcome)]).inc();
            }
        }
    }

    /// Count of requests with an outcome (for tests and status).
    pub fn outcome_count(&self, outcome: &'static str) -> u64 {
        self.requests.get_or_create(&[("outcome", outcome)]).get()
    }

    pub fn validation_latency(&self, secs: f64) {
        self.validation.observe(secs);
    }

    pub fn set_state_ages(&self, keys: i64, ownership: i64, map: i64) {
        self.state_age.get_or_create(&[("part", "keys")]).set(keys);
        self.state_age
            .get_or_create(&[("part", "ownership")])
            .set(ownership);
        self.state_age.get_or_create(&[("part", "map")]).set(map);
    }

    pub fn set_feed_lag(&self, lag: i64) {
        self.feed_lag.set(lag);
    }

    pub fn feed_rejected(&self) {
        self.feed_rejected.inc();
    }

    pub fn feed_rejected_count(&self) -> u64 {
        self.feed_rejected.get()
    }

    pub fn feed_synced(&self) {
        self.feed_syncs.inc();
    }

    pub fn feed_epoch_changed(&self) {
        self.feed_epoch_changes.inc();
    }

    pub fn feed_epoch_change_count(&self) -> u64 {
        self.feed_epoch_changes.get()
    }

    pub fn key_refetched(&self) {
        self.key_refetches.inc();
    }

    pub fn key_refetch_count(&self) -> u64 {
        self.key_refetches.get()
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
