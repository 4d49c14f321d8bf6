//! Prometheus metrics (prometheus-client), served on the management listener
//! (`runtime::management`): placement-map publications by result (`new_version`: a new
//! version was signed; `unchanged`: the held one was written again, as every periodic
//! publication without a change does; `failed`), the version published, and placement changes
//! by the `cell` they move a contractor to. Every series exists from the start.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use protocol::CellId;

type Labels = [(&'static str, String); 1];

/// How one publication of the map ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// A new version was signed (the content changed).
    NewVersion,
    /// The held version was written again (nothing changed).
    Unchanged,
    /// Building, signing or writing the map failed.
    Failed,
}

impl Publication {
    const ALL: [Publication; 3] = [
        Publication::NewVersion,
        Publication::Unchanged,
        Publication::Failed,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Publication::NewVersion => "new_version",
            Publication::Unchanged => "unchanged",
            Publication::Failed => "failed",
        }
    }
}

/// The control plane's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// In [`Publication::ALL`] order.
    publications: [Counter; 3],
    map_version: Gauge,
    placement_changes: Family<Labels, Counter>,
    connections_refused: runtime::listener::RefusedConnections,
}

impl Metrics {
    /// The metrics of a control plane placing contractors on `cells`.
    pub fn new(cells: &[CellId]) -> Self {
        let mut registry = Registry::with_prefix("cellbind_control_plane");
        let publications_family = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let map_version = Gauge::default();
        let placement_changes = Family::<Labels, Counter>::default();
        registry.register(
            "map_publications",
            "Placement-map publications by result (new_version, unchanged, failed)",
            publications_family.clone(),
        );
        registry.register(
            "map_version",
            "Version of the placement map published (0: none yet)",
            map_version.clone(),
        );
        registry.register(
            "placement_changes",
            "Placements changed through the admin API, by the cell the contractor now belongs to",
            placement_changes.clone(),
        );
        let connections_refused = runtime::listener::RefusedConnections::register(
            &mut registry,
            &["public", "management"],
        );
        let publications = Publication::ALL
            .map(|p| publications_family.get_or_create_owned(&[("result", p.as_str())]));
        for c in cells {
            let _ = placement_changes.get_or_create(&[("cell", c.to_string())]);
        }
        Metrics {
            registry,
            publications,
            map_version,
            placement_changes,
            connections_refused,
        }
    }

    /// The refused-connections counter of `listener` (`public`, `management`).
    pub fn connections_refused(&self, listener: &'static str) -> Counter {
        self.connections_refused.of(listener)
    }

    /// One publication, ended as `how`.
    pub fn published(&self, how: Publication) {
        if let Some(c) = self.publications.get(how as usize) {
            c.inc();
        }
    }

    /// The version now published.
    pub fn set_map_version(&self, version: u64) {
        self.map_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
    }

    /// A placement changed: the contractor now belongs to `cell`.
    pub fn placement_changed(&self, cell: &CellId) {
        self.placement_changes
            .get_or_create(&[("cell", cell.to_string())])
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        runtime::management::exposition(&self.registry)
    }
}
