//! Prometheus metrics (prometheus-client), served on the management listener
//! (`runtime::management`), every series labelled with this edge's `cell`:
//!
//! - `cellbind_edge_requests_total` and `cellbind_edge_request_duration_seconds`: every request
//!   by its [`Outcome`]. `forwarded` (with `upstream` `auth`/`app` and the upstream's status
//!   `class` `2xx`…`5xx`) reached the cell; `refused` (with the protocol error `code` the edge
//!   answered), `rate_limited` and `upstream_unavailable` (with `upstream`) failed before it;
//!   `local` was answered from the edge's own state (health, keys, map, desk assets,
//!   preflights). The split is the point: a failure before the cell and one inside it are
//!   different incidents. Both also carry `synthetic` (`"true"`/`"false"`): a game day's
//!   synthetic traffic ([`Synthetic`]), so a game day's stop condition reads the error ratio
//!   and latency of real traffic alone (`synthetic="false"`); a sum without the label is all
//!   traffic.
//! - per instance (`instance` = `instance_id`): `cellbind_edge_feed_lag` and
//!   `cellbind_edge_last_sync_age_seconds`;
//! - `cellbind_edge_revocation_apply_seconds`: from a revocation's creation (its `at`, as the
//!   feed carries it, whole seconds) to this edge applying it;
//! - `cellbind_edge_map_version`: the placement map version served;
//! - validation latency, state ages, refused feed documents, feed syncs, feed epoch changes
//!   (restores), unknown-kid key refetches and refused connections.
//!
//! Counting is one atomic add: every series of a bounded label set is created once, here, and
//! looked up by index on the request path (no allocation, no lock); the request series once
//! per `synthetic` value (`[RequestSeries; 2]`).

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use protocol::{CellId, ErrorCode};

type Labels = [(&'static str, &'static str); 1];
type RequestLabels = Vec<(&'static str, &'static str)>;
/// `outcome` and `synthetic`.
type LatencyLabels = [(&'static str, &'static str); 2];

/// Every `synthetic` label value, indexed by whether the request is synthetic.
const SYNTHETIC_VALUES: [&str; 2] = ["false", "true"];

/// A game day's synthetic request, as the request counter learns it: put in the answer's
/// extensions (beside its [`Outcome`]) by whoever reads the request's session — validation for
/// `/api/*`, the forwarder for the session routes — when the session's contractor is in the
/// reserved range (`protocol::ContractorId::is_synthetic`, decided once per verified token:
/// `Validated::synthetic`), on the forwarded answer and on a refusal after the token was
/// verified alike. A request that carries no session is synthetic when it says so with
/// `x-cellbind-synthetic: 1` (`protocol::http::SYNTHETIC_HEADER`), which the counter reads
/// itself; a session's request never is by the header. Either way it only changes the
/// `synthetic` label of its request series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Synthetic;

impl Synthetic {
    /// Marks `resp` as the answer to a synthetic request when `synthetic`.
    pub(crate) fn mark(
        synthetic: bool,
        mut resp: axum::response::Response,
    ) -> axum::response::Response {
        if synthetic {
            resp.extensions_mut().insert(Synthetic);
        }
        resp
    }
}

/// The upstream a request was forwarded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// The cell's auth-service (`/v1/sessions*`, the desk's sign-in).
    Auth,
    /// The cell's app (`/api/*`).
    App,
}

impl Upstream {
    /// Every upstream, in label order.
    pub(crate) const ALL: [Upstream; 2] = [Upstream::Auth, Upstream::App];

    /// The `upstream` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Upstream::Auth => "auth",
            Upstream::App => "app",
        }
    }
}

/// The class of the status an upstream answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 2xx (and the 1xx no upstream of ours sends as a final answer).
    Success,
    /// 3xx.
    Redirection,
    /// 4xx.
    ClientError,
    /// 5xx (and anything out of range).
    ServerError,
}

impl StatusClass {
    /// Every class, in label order.
    pub(crate) const ALL: [StatusClass; 4] = [
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    /// The class of `status`.
    pub(crate) fn of(status: u16) -> Self {
        match status {
            0..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// The `class` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

/// How the edge answered one request. Whoever decides puts it in the answer's extensions
/// (`error::rescue` for every refusal, the forwarders for upstream answers); the outermost
/// layer counts it. An answer without one was served locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Forwarded; the upstream answered with a status of `class` (the request reached the cell).
    Forwarded {
        upstream: Upstream,
        class: StatusClass,
    },
    /// Refused by the edge with this protocol error code (never reached the cell).
    Refused(ErrorCode),
    /// Refused by a rate limit (`RATE_LIMITED`).
    RateLimited,
    /// The upstream could not be reached or did not answer in time (`UPSTREAM_UNAVAILABLE`).
    UpstreamUnavailable(Upstream),
    /// Answered from the edge's own state: health, keys, map, desk assets, CORS preflights.
    Local,
}

impl Outcome {
    /// The `outcome` label value.
    pub(crate) fn kind(self) -> &'static str {
        OUTCOME_KINDS[self.kind_index()]
    }

    fn kind_index(self) -> usize {
        match self {
            Outcome::Forwarded { .. } => 0,
            Outcome::Refused(_) => 1,
            Outcome::RateLimited => 2,
            Outcome::UpstreamUnavailable(_) => 3,
            Outcome::Local => 4,
        }
    }

    /// The full label set of its `cellbind_edge_requests_total` series, of synthetic traffic
    /// or real.
    fn labels(self, synthetic: bool) -> RequestLabels {
        let mut l = vec![("outcome", self.kind())];
        match self {
            Outcome::Forwarded { upstream, class } => {
                l.push(("upstream", upstream.as_str()));
                l.push(("class", class.as_str()));
            }
            Outcome::Refused(code) => l.push(("code", code.as_str())),
            Outcome::UpstreamUnavailable(upstream) => l.push(("upstream", upstream.as_str())),
            Outcome::RateLimited | Outcome::Local => {}
        }
        l.push(("synthetic", SYNTHETIC_VALUES[usize::from(synthetic)]));
        l
    }
}

/// Every `outcome` label value, in [`Outcome::kind_index`] order.
pub(crate) const OUTCOME_KINDS: [&str; 5] = [
    "forwarded",
    "refused",
    "rate_limited",
    "upstream_unavailable",
    "local",
];

/// The protocol error codes the edge refuses requests with (`rescue`); `RATE_LIMITED` and
/// `UPSTREAM_UNAVAILABLE` are outcomes of their own.
pub(crate) const REFUSAL_CODES: [ErrorCode; 20] = [
    ErrorCode::InvalidRequest,
    ErrorCode::SessionMissing,
    ErrorCode::SessionInvalid,
    ErrorCode::SessionExpired,
    ErrorCode::SessionRevoked,
    ErrorCode::Forbidden,
    ErrorCode::UnknownContractor,
    ErrorCode::WrongCell,
    ErrorCode::HandoffInProgress,
    ErrorCode::PayloadTooLarge,
    ErrorCode::CellStateStale,
    ErrorCode::NotReady,
    ErrorCode::NotFound,
    ErrorCode::Internal,
    ErrorCode::DpopProofMissing,
    ErrorCode::DpopProofInvalid,
    ErrorCode::DpopProofReplayed,
    ErrorCode::DpopNonceRequired,
    ErrorCode::DpopNonceStale,
    ErrorCode::DpopKeyMismatch,
];

/// The series of `requests` of one `synthetic` value, resolved once, by index.
#[derive(Debug)]
struct RequestSeries {
    /// `[upstream][class]`.
    forwarded: [[Counter; 4]; 2],
    /// In [`REFUSAL_CODES`] order.
    refused: Vec<Counter>,
    rate_limited: Counter,
    /// `[upstream]`.
    unavailable: [Counter; 2],
    local: Counter,
    /// In [`OUTCOME_KINDS`] order.
    latency: Vec<Histogram>,
}

/// The edge's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// `[synthetic]`: real traffic's series, then synthetic traffic's.
    series: [RequestSeries; 2],
    validation: Histogram,
    state_age: Family<Labels, Gauge>,
    feed_lag: Gauge,
    last_sync_age: Gauge,
    revocation_apply: Histogram,
    map_version: Gauge,
    feed_rejected: Counter,
    feed_syncs: Counter,
    feed_epoch_changes: Counter,
    key_refetches: Counter<u64, AtomicU64>,
    /// DPoP proofs accepted: `[signature verified, key remembered on the connection]`.
    dpop_proofs: [Counter<u64, AtomicU64>; 2],
    connections_refused: runtime::listener::RefusedConnections,
}

/// Registers `metric` under `name` and hands it back (the registry keeps a clone).
fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// Buckets of the request latency: 0.5 ms .. ~16 s.
fn request_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Buckets of the revocation apply latency, in seconds (`at` is whole seconds).
const REVOCATION_APPLY_BUCKETS: [f64; 11] = [
    0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

impl Metrics {
    /// The metrics of edge instance `instance` of cell `cell`.
    pub(crate) fn new(cell: &CellId, instance: &str) -> Self {
        let mut registry = Registry::with_prefix_and_labels(
            "cellbind_edge",
            [(Cow::Borrowed("cell"), Cow::Owned(cell.to_string()))].into_iter(),
        );
        let requests = registered(
            &mut registry,
            "requests",
            "Requests by outcome: forwarded (upstream, class of its status), refused (code), rate_limited, upstream_unavailable (upstream), local; and by whether they were a game day's synthetic traffic (synthetic)",
            Family::<RequestLabels, Counter>::default(),
        );
        let latency_family = registered(
            &mut registry,
            "request_duration_seconds",
            "Time from a request's arrival to its answer's headers, by outcome and by whether it was a game day's synthetic traffic (synthetic)",
            Family::<LatencyLabels, Histogram>::new_with_constructor(
                request_buckets as fn() -> Histogram,
            ),
        );
        // Every series exists from the start, so a dashboard sees zeros, not gaps.
        let series = [false, true].map(|synthetic| {
            let counter = |o: Outcome| requests.get_or_create_owned(&o.labels(synthetic));
            let label = SYNTHETIC_VALUES[usize::from(synthetic)];
            RequestSeries {
                forwarded: Upstream::ALL.map(|upstream| {
                    StatusClass::ALL.map(|class| counter(Outcome::Forwarded { upstream, class }))
                }),
                refused: REFUSAL_CODES
                    .iter()
                    .map(|c| counter(Outcome::Refused(*c)))
                    .collect(),
                rate_limited: counter(Outcome::RateLimited),
                unavailable: Upstream::ALL.map(|u| counter(Outcome::UpstreamUnavailable(u))),
                local: counter(Outcome::Local),
                latency: OUTCOME_KINDS
                    .iter()
                    .map(|k| {
                        latency_family.get_or_create_owned(&[("outcome", *k), ("synthetic", label)])
                    })
                    .collect(),
            }
        });
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
        let revocation_apply = registered(
            &mut registry,
            "revocation_apply_seconds",
            "Time from a revocation's creation (as the feed carries it, whole seconds) to this edge applying it",
            Histogram::new(REVOCATION_APPLY_BUCKETS),
        );
        let map_version = registered(
            &mut registry,
            "map_version",
            "Version of the placement map this edge serves (0: none held)",
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
        let dpop_family = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "dpop_proofs",
            "DPoP proofs of bound sessions accepted, by whether their signature was verified \
             (`verified`) or their key had been proved on the connection (`remembered`)",
            dpop_family.clone(),
        );
        // One `get_or_create` per statement: each holds the family's read lock until the end
        // of its statement, and the next needs the write lock.
        let verified = dpop_family
            .get_or_create(&vec![("signature", "verified")])
            .clone();
        let remembered = dpop_family
            .get_or_create(&vec![("signature", "remembered")])
            .clone();
        let dpop_proofs = [verified, remembered];
        let connections_refused = runtime::listener::RefusedConnections::register(
            &mut registry,
            &["public", "management"],
        );
        let per_instance = registry
            .sub_registry_with_label((Cow::Borrowed("instance"), Cow::Owned(instance.to_owned())));
        let feed_lag = registered(
            per_instance,
            "feed_lag",
            "Feed head minus the sequence number this instance applied",
            Gauge::default(),
        );
        let last_sync_age = registered(
            per_instance,
            "last_sync_age_seconds",
            "Seconds since this instance's last successful feed sync (-1: none yet)",
            Gauge::default(),
        );
        Self {
            registry,
            requests,
            series,
            validation,
            state_age,
            feed_lag,
            last_sync_age,
            revocation_apply,
            map_version,
            feed_rejected,
            feed_syncs,
            feed_epoch_changes,
            key_refetches,
            dpop_proofs,
            connections_refused,
        }
    }

    /// The public listener's refused-connections counter (shared with its connection gate).
    pub(crate) fn connections_refused(&self) -> Counter {
        self.connections_refused.of("public")
    }

    /// The management listener's refused-connections counter.
    pub(crate) fn management_connections_refused(&self) -> Counter {
        self.connections_refused.of("management")
    }

    /// The pre-created counter of `outcome` of synthetic traffic or real, if it has one (every
    /// outcome the edge answers).
    fn series(&self, outcome: Outcome, synthetic: bool) -> Option<&Counter> {
        let s = &self.series[usize::from(synthetic)];
        match outcome {
            Outcome::Forwarded { upstream, class } => {
                Some(&s.forwarded[upstream as usize][class as usize])
            }
            Outcome::Refused(code) => REFUSAL_CODES
                .iter()
                .position(|c| *c == code)
                .and_then(|i| s.refused.get(i)),
            Outcome::RateLimited => Some(&s.rate_limited),
            Outcome::UpstreamUnavailable(upstream) => Some(&s.unavailable[upstream as usize]),
            Outcome::Local => Some(&s.local),
        }
    }

    /// Counts one answered request and its latency; `synthetic`: a game day's ([`Synthetic`]).
    pub(crate) fn request(&self, outcome: Outcome, synthetic: bool, elapsed: Duration) {
        match self.series(outcome, synthetic) {
            Some(c) => {
                c.inc();
            }
            None => {
                self.requests
                    .get_or_create(&outcome.labels(synthetic))
                    .inc();
            }
        }
        let latency = &self.series[usize::from(synthetic)].latency;
        if let Some(h) = latency.get(outcome.kind_index()) {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// Requests answered with `outcome` so far, synthetic and real (tests, status).
    pub fn requests(&self, outcome: Outcome) -> u64 {
        self.requests_of(outcome, false) + self.requests_of(outcome, true)
    }

    /// Requests answered with `outcome` so far that were synthetic traffic, or real.
    pub fn requests_of(&self, outcome: Outcome, synthetic: bool) -> u64 {
        match self.series(outcome, synthetic) {
            Some(c) => c.get(),
            None => self
                .requests
                .get(&outcome.labels(synthetic))
                .map_or(0, |c| c.get()),
        }
    }

    pub(crate) fn validation_latency(&self, secs: f64) {
        self.validation.observe(secs);
    }

    pub(crate) fn set_state_ages(&self, keys: i64, ownership: i64, map: i64) {
        self.state_age.get_or_create(&[("part", "keys")]).set(keys);
        self.state_age
            .get_or_create(&[("part", "ownership")])
            .set(ownership);
        self.state_age.get_or_create(&[("part", "map")]).set(map);
    }

    pub(crate) fn set_feed_lag(&self, lag: i64) {
        self.feed_lag.set(lag);
    }

    /// Seconds since the last successful feed sync (-1: none yet).
    pub(crate) fn set_last_sync_age(&self, secs: i64) {
        self.last_sync_age.set(secs);
    }

    /// The version of the placement map served (0: none).
    pub(crate) fn set_map_version(&self, version: u64) {
        self.map_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
    }

    /// A revocation applied `secs` after it was created.
    pub(crate) fn revocation_applied(&self, secs: f64) {
        self.revocation_apply.observe(secs);
    }

    pub(crate) fn feed_rejected(&self) {
        self.feed_rejected.inc();
    }

    pub fn feed_rejected_count(&self) -> u64 {
        self.feed_rejected.get()
    }

    pub(crate) fn feed_synced(&self) {
        self.feed_syncs.inc();
    }

    pub(crate) fn feed_epoch_changed(&self) {
        self.feed_epoch_changes.inc();
    }

    pub fn feed_epoch_change_count(&self) -> u64 {
        self.feed_epoch_changes.get()
    }

    /// One DPoP proof accepted; `signature_checked` false when its connection had proved the key.
    pub(crate) fn dpop_proof(&self, signature_checked: bool) {
        self.dpop_proofs[usize::from(!signature_checked)].inc();
    }

    /// DPoP proofs accepted: (signature verified, key remembered).
    pub fn dpop_proof_counts(&self) -> (u64, u64) {
        (self.dpop_proofs[0].get(), self.dpop_proofs[1].get())
    }

    pub(crate) fn key_refetched(&self) {
        self.key_refetches.inc();
    }

    pub fn key_refetch_count(&self) -> u64 {
        self.key_refetches.get()
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        runtime::management::exposition(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_series_is_labelled_with_the_cell_and_exists_from_the_start() {
        let m = Metrics::new(&CellId::new("cell-07").unwrap(), "edge-2");
        m.request(
            Outcome::Forwarded {
                upstream: Upstream::App,
                class: StatusClass::of(503),
            },
            false,
            Duration::from_millis(3),
        );
        m.request(
            Outcome::Refused(ErrorCode::WrongCell),
            false,
            Duration::from_millis(1),
        );
        let text = m.encode();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.contains("cell=\"cell-07\""), "{line}");
        }
        assert!(
            text.contains(
                "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"forwarded\",upstream=\"app\",class=\"5xx\",synthetic=\"false\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"refused\",code=\"WRONG_CELL\",synthetic=\"false\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"refused\",code=\"SESSION_REVOKED\",synthetic=\"true\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("cellbind_edge_feed_lag{cell=\"cell-07\",instance=\"edge-2\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("cellbind_edge_request_duration_seconds_count{cell=\"cell-07\",outcome=\"forwarded\",synthetic=\"false\"} 1"),
            "{text}"
        );
        assert_eq!(m.requests(Outcome::Refused(ErrorCode::WrongCell)), 1);
        assert_eq!(m.requests(Outcome::RateLimited), 0);
    }

    #[test]
    fn synthetic_traffic_is_counted_and_timed_apart_from_real_traffic() {
        let m = Metrics::new(&CellId::new("cell-07").unwrap(), "edge-2");
        let ok = Outcome::Forwarded {
            upstream: Upstream::App,
            class: StatusClass::Success,
        };
        m.request(ok, true, Duration::from_millis(2));
        m.request(ok, true, Duration::from_millis(2));
        m.request(ok, false, Duration::from_millis(2));
        m.request(Outcome::RateLimited, true, Duration::from_millis(1));
        assert_eq!(m.requests_of(ok, true), 2);
        assert_eq!(m.requests_of(ok, false), 1);
        assert_eq!(m.requests(ok), 3);
        assert_eq!(m.requests_of(Outcome::RateLimited, false), 0);
        assert_eq!(m.requests(Outcome::RateLimited), 1);
        let text = m.encode();
        for want in [
            "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"forwarded\",upstream=\"app\",class=\"2xx\",synthetic=\"true\"} 2",
            "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"forwarded\",upstream=\"app\",class=\"2xx\",synthetic=\"false\"} 1",
            "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"rate_limited\",synthetic=\"true\"} 1",
            "cellbind_edge_requests_total{cell=\"cell-07\",outcome=\"rate_limited\",synthetic=\"false\"} 0",
            "cellbind_edge_request_duration_seconds_count{cell=\"cell-07\",outcome=\"forwarded\",synthetic=\"true\"} 2",
            "cellbind_edge_request_duration_seconds_count{cell=\"cell-07\",outcome=\"forwarded\",synthetic=\"false\"} 1",
            "cellbind_edge_request_duration_seconds_count{cell=\"cell-07\",outcome=\"local\",synthetic=\"true\"} 0",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
        // Every request series, of every outcome, exists once per `synthetic` value.
        let series = |synthetic: &str| {
            text.lines()
                .filter(|l| l.starts_with("cellbind_edge_requests_total{"))
                .filter(|l| l.contains(&format!("synthetic=\"{synthetic}\"")))
                .count()
        };
        assert_eq!(series("true"), series("false"));
        assert_eq!(series("true"), 8 + REFUSAL_CODES.len() + 1 + 2 + 1);
    }

    #[test]
    fn statuses_fall_in_their_class() {
        assert_eq!(StatusClass::of(201), StatusClass::Success);
        assert_eq!(StatusClass::of(303), StatusClass::Redirection);
        assert_eq!(StatusClass::of(409), StatusClass::ClientError);
        assert_eq!(StatusClass::of(504), StatusClass::ServerError);
        assert_eq!(StatusClass::of(700), StatusClass::ServerError);
    }
}
