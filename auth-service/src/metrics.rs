//! Prometheus metrics (text exposition): sign-ins by outcome, feed head, map version, refused
//! maps by reason.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// The service's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    signins: Family<Labels, Counter>,
    feed_head: Gauge,
    map_version: Gauge,
    map_refused: Family<Labels, Counter>,
    password_checks: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("cellbind_auth");
        let signins = Family::<Labels, Counter>::default();
        let feed_head = Gauge::default();
        let map_version = Gauge::default();
        let map_refused = Family::<Labels, Counter>::default();
        let password_checks = Counter::default();
        registry.register("signins", "Sign-in attempts by outcome", signins.clone());
        registry.register(
            "feed_head_seq",
            "Latest cell state feed sequence number",
            feed_head.clone(),
        );
        registry.register(
            "map_version",
            "Version of the placement map held",
            map_version.clone(),
        );
        registry.register(
            "map_refused",
            "Placement maps refused, by reason",
            map_refused.clone(),
        );
        registry.register(
            "password_verifications",
            "argon2id verifications run by sign-in (one per attempt that reaches credentials)",
            password_checks.clone(),
        );
        Metrics {
            password_checks,
            registry,
            signins,
            feed_head,
            map_version,
            map_refused,
        }
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Metrics {
    pub(crate) fn signin(&self, outcome: &'static str) {
        self.signins
            .get_or_create(&vec![("outcome", outcome)])
            .inc();
    }
    pub(crate) fn password_checked(&self) {
        self.password_checks.inc();
    }
    pub(crate) fn feed_head(&self, seq: u64) {
        self.feed_head.set(gauge_value(seq));
    }
    pub(crate) fn map_version(&self, version: u64) {
        self.map_version.set(gauge_value(version));
    }
    pub(crate) fn map_refused(&self, reason: &'static str) {
        self.map_refused
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }
    /// The text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
