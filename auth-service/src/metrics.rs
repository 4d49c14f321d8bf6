//! Prometheus metrics (prometheus-client), served on the management listener
//! (`runtime::management`), every series labelled with this service's `cell`: sign-ins by
//! outcome, argon2id verifications, feed head, placement map version held, refused maps by
//! reason, and the migration steps this cell performs (export, import, handoff, activate,
//! release) by result, with their durations. Every series of a bounded label set exists from
//! the start, so a dashboard sees zeros, not gaps.

use std::borrow::Cow;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use protocol::CellId;
use protocol::ownership::OwnershipRecord;

type Labels = Vec<(&'static str, &'static str)>;

/// Every outcome label of `cellbind_auth_signins_total` (`routes::sessions`).
pub(crate) const SIGNIN_OUTCOMES: [&str; 9] = [
    "success",
    "invalid_credentials",
    "rate_limited",
    "wrong_cell",
    "unknown_contractor",
    "handoff_in_progress",
    "bad_request",
    "dpop_refused",
    "error",
];

/// Every reason label of `cellbind_auth_map_refused_total` (`map`).
pub(crate) const MAP_REFUSALS: [&str; 6] = [
    "bad_signature",
    "not_newer",
    "too_large",
    "malformed",
    "invalid",
    "other",
];

/// A step of a contractor migration (DESIGN §5) as this cell performs it, through its admin
/// API: the source exports and hands off and releases, the target imports and activates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MigrationStep {
    /// The contractor's credentials and revocations read out (`GET …/export`).
    Export,
    /// Such a document taken in (`POST …/import`).
    Import,
    /// The ownership record set to `handoff` (reads only).
    Handoff,
    /// The ownership record set to `active` (at the new generation, on the target).
    Activate,
    /// The ownership record set to `released` (to the successor).
    Release,
}

impl MigrationStep {
    const ALL: [MigrationStep; 5] = [
        MigrationStep::Export,
        MigrationStep::Import,
        MigrationStep::Handoff,
        MigrationStep::Activate,
        MigrationStep::Release,
    ];

    /// The `step` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MigrationStep::Export => "export",
            MigrationStep::Import => "import",
            MigrationStep::Handoff => "handoff",
            MigrationStep::Activate => "activate",
            MigrationStep::Release => "release",
        }
    }

    /// The step that setting `record` is.
    pub(crate) fn of(record: &OwnershipRecord) -> Self {
        match record {
            OwnershipRecord::Active { .. } => MigrationStep::Activate,
            OwnershipRecord::Handoff { .. } => MigrationStep::Handoff,
            OwnershipRecord::Released { .. } => MigrationStep::Release,
        }
    }
}

/// Buckets of a migration step's duration: 1 ms .. ~33 s.
fn step_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The service's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    signins: Family<Labels, Counter>,
    feed_head: Gauge,
    map_version: Gauge,
    map_refused: Family<Labels, Counter>,
    password_checks: Counter,
    migration_steps: Family<Labels, Counter>,
    migration_durations: Family<Labels, Histogram>,
    reapply_refused: Family<Labels, Counter>,
    feed_refused: Counter,
    connections_refused: runtime::listener::RefusedConnections,
}

impl Metrics {
    /// The metrics of cell `cell`'s auth-service.
    pub(crate) fn new(cell: &CellId) -> Self {
        let mut registry = Registry::with_prefix_and_labels(
            "cellbind_auth",
            [(Cow::Borrowed("cell"), Cow::Owned(cell.to_string()))].into_iter(),
        );
        let signins = Family::<Labels, Counter>::default();
        let feed_head = Gauge::default();
        let map_version = Gauge::default();
        let map_refused = Family::<Labels, Counter>::default();
        let password_checks = Counter::default();
        let migration_steps = Family::<Labels, Counter>::default();
        let migration_durations =
            Family::<Labels, Histogram>::new_with_constructor(step_buckets as fn() -> Histogram);
        let reapply_refused = Family::<Labels, Counter>::default();
        let feed_refused = Counter::default();
        registry.register(
            "reapply_refused",
            "Revocations an edge handed back after a restore that were not taken back, by reason",
            reapply_refused.clone(),
        );
        registry.register(
            "feed_credentials_refused",
            "Feed and handback requests refused for their credential (a wrong or made-up instance)",
            feed_refused.clone(),
        );
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
        registry.register(
            "migration_steps",
            "Migration steps this cell performed (export, import, handoff, activate, release), by result (ok, error)",
            migration_steps.clone(),
        );
        registry.register(
            "migration_step_duration_seconds",
            "Time this cell took to perform each migration step",
            migration_durations.clone(),
        );
        let connections_refused = runtime::listener::RefusedConnections::register(
            &mut registry,
            &["public", "internal", "management"],
        );
        for o in SIGNIN_OUTCOMES {
            let _ = signins.get_or_create(&vec![("outcome", o)]);
        }
        for r in MAP_REFUSALS {
            let _ = map_refused.get_or_create(&vec![("reason", r)]);
        }
        for step in MigrationStep::ALL {
            for result in ["ok", "error"] {
                let _ = migration_steps
                    .get_or_create(&vec![("step", step.as_str()), ("result", result)]);
            }
            let _ = migration_durations.get_or_create(&vec![("step", step.as_str())]);
        }
        Metrics {
            password_checks,
            registry,
            signins,
            feed_head,
            map_version,
            map_refused,
            migration_steps,
            migration_durations,
            reapply_refused,
            feed_refused,
            connections_refused,
        }
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Metrics {
    /// The refused-connections counter of `listener` (`public`, `internal`, `management`).
    pub(crate) fn connections_refused(
        &self,
        listener: &'static str,
    ) -> prometheus_client::metrics::counter::Counter {
        self.connections_refused.of(listener)
    }
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
    /// One migration step performed, successfully or not, in `took`.
    pub(crate) fn migration_step(&self, step: MigrationStep, ok: bool, took: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.migration_steps
            .get_or_create(&vec![("step", step.as_str()), ("result", result)])
            .inc();
        self.migration_durations
            .get_or_create(&vec![("step", step.as_str())])
            .observe(took.as_secs_f64());
    }
    /// A handed-back revocation not taken back, for `reason`.
    pub(crate) fn reapply_refused(&self, reason: &'static str) {
        self.reapply_refused
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }
    /// A feed or handback request refused for its credential.
    pub(crate) fn feed_credential_refused(&self) {
        self.feed_refused.inc();
    }
    /// The text exposition.
    pub(crate) fn render(&self) -> String {
        runtime::management::exposition(&self.registry)
    }
}
