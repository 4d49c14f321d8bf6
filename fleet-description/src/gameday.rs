//! The `[gameday]` section of an inventory: what `cellctl gameday` needs to inject faults into a
//! fleet and to stop when real traffic suffers — where its undo log lives, the stop conditions,
//! each cell's edges' management `/metrics` URLs, and how to take each component down and up
//! (its actuator).
//!
//! ```toml
//! [gameday]
//! state_dir = "gameday"            # the undo log (and reports, by default); relative to this file
//!
//! [gameday.stop]                   # every key optional (the DEFAULT_* constants)
//! max_error_ratio = 0.05           # of REAL (non-synthetic) requests at the edges, over the window
//! max_p99_ms = 2000
//! min_requests = 20                # below this many real requests in the window, nothing is judged
//! window_s = 5
//!
//! [[gameday.edges]]
//! cell = "cell-01"
//! metrics_urls = ["https://edge-a.cell-01.internal:9443/metrics"]
//!
//! [[gameday.actuators]]
//! target = "cell-01/auth-service"  # the most specific entry wins
//! kind = "systemd"                 # local | systemd | command
//! units = ["cellbind-auth-service.service"]
//! # signal = "SIGKILL"             # systemd: `systemctl kill --signal=…` instead of `stop`
//! # down = ["kubectl", "scale", "deploy/cell-01-auth", "--replicas=0"]   # command
//! # up = ["kubectl", "scale", "deploy/cell-01-auth", "--replicas=2"]
//! ```
//!
//! A dev fleet's `fleet.json` has no such section: [`crate::inventory::load_gameday`] synthesises one (every
//! component `local`, the edges' management URLs, the default stop conditions).

use std::path::{Path, PathBuf};

use protocol::CellId;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fleet_file::{FleetFile, FleetManagement};

/// Default bound of the real traffic's error ratio (errors / requests) over the window.
pub const DEFAULT_MAX_ERROR_RATIO: f64 = 0.05;
/// Default bound of the real traffic's p99 latency over the window, in milliseconds.
pub const DEFAULT_MAX_P99_MS: u64 = 2_000;
/// Default number of real requests in the window below which no bound is judged.
pub const DEFAULT_MIN_REQUESTS: u64 = 20;
/// Default length of the window the bounds are judged over, in seconds.
pub const DEFAULT_WINDOW_S: u64 = 5;
/// Default state directory (relative to the inventory, or to `fleet.json`'s directory).
pub const DEFAULT_STATE_DIR: &str = "gameday";

/// What a fault acts on.
///
/// Written `control-plane`, `<cell>` (every component of the cell), `<cell>/auth-service`
/// (every replica), `<cell>/auth-service/<r>` (replica `r`, 0-based), `<cell>/edge`,
/// `<cell>/app`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    ControlPlane,
    /// Every component of the cell.
    Cell(CellId),
    /// Every auth-service replica of the cell.
    AuthService(CellId),
    /// One auth-service replica (0-based).
    AuthReplica(CellId, usize),
    /// The cell's edge(s).
    Edge(CellId),
    /// The cell's app.
    App(CellId),
}

impl Target {
    /// The cell it is in (`None`: the control plane).
    pub fn cell(&self) -> Option<&CellId> {
        match self {
            Target::ControlPlane => None,
            Target::Cell(c)
            | Target::AuthService(c)
            | Target::AuthReplica(c, _)
            | Target::Edge(c)
            | Target::App(c) => Some(c),
        }
    }

    /// The target one level up (`cell-01/auth-service/0` → `cell-01/auth-service` →
    /// `cell-01`); `None` for a cell and the control plane.
    pub fn parent(&self) -> Option<Target> {
        match self {
            Target::ControlPlane | Target::Cell(_) => None,
            Target::AuthReplica(c, _) => Some(Target::AuthService(c.clone())),
            Target::AuthService(c) | Target::Edge(c) | Target::App(c) => {
                Some(Target::Cell(c.clone()))
            }
        }
    }

    /// `true` when `other` is this target or part of it (`cell-01` contains
    /// `cell-01/auth-service/1`).
    pub fn contains(&self, other: &Target) -> bool {
        let mut t = Some(other.clone());
        while let Some(x) = t {
            if &x == self {
                return true;
            }
            t = x.parent();
        }
        false
    }

    /// `true` when one of the two contains the other.
    pub fn overlaps(&self, other: &Target) -> bool {
        self.contains(other) || other.contains(self)
    }

    /// The target as a file name stem (`cell-01/auth-service/0` → `cell-01-auth-service-0`).
    pub fn file_stem(&self) -> String {
        self.to_string().replace('/', "-")
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::ControlPlane => f.write_str("control-plane"),
            Target::Cell(c) => write!(f, "{c}"),
            Target::AuthService(c) => write!(f, "{c}/auth-service"),
            Target::AuthReplica(c, r) => write!(f, "{c}/auth-service/{r}"),
            Target::Edge(c) => write!(f, "{c}/edge"),
            Target::App(c) => write!(f, "{c}/app"),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::Config(format!(
                "{s:?} is not a game day target (control-plane, <cell>, <cell>/auth-service, \
                 <cell>/auth-service/<r>, <cell>/edge or <cell>/app)"
            ))
        };
        if s == "control-plane" {
            return Ok(Target::ControlPlane);
        }
        let mut parts = s.split('/');
        let cell = CellId::new(parts.next().unwrap_or_default()).map_err(|_| bad())?;
        let t = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => Target::Cell(cell),
            (Some("auth-service"), None, _) => Target::AuthService(cell),
            (Some("auth-service"), Some(r), None)
                if !r.is_empty()
                    && r.bytes().all(|b| b.is_ascii_digit())
                    && (r == "0" || !r.starts_with('0')) =>
            {
                Target::AuthReplica(cell, r.parse().map_err(|_| bad())?)
            }
            (Some("edge"), None, _) => Target::Edge(cell),
            (Some("app"), None, _) => Target::App(cell),
            _ => return Err(bad()),
        };
        Ok(t)
    }
}

impl TryFrom<String> for Target {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        t.to_string()
    }
}

/// How an actuator takes a component down and up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActuatorKind {
    /// A dev fleet's process (its pid in `fleet.json`): SIGKILL, then respawn its command line.
    Local,
    /// systemd units: `systemctl stop` (or `kill`), then `systemctl start`.
    Systemd,
    /// Operator-supplied command lines.
    Command,
}

impl ActuatorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActuatorKind::Local => "local",
            ActuatorKind::Systemd => "systemd",
            ActuatorKind::Command => "command",
        }
    }
}

impl std::fmt::Display for ActuatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An actuator, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actuator {
    /// SIGKILL the process(es) named in the dev fleet's `fleet.json`, respawn the recorded
    /// command line.
    Local,
    /// `systemctl stop UNIT…` (or `systemctl kill --signal=SIGNAL UNIT…`), `systemctl start
    /// UNIT…`.
    Systemd {
        units: Vec<String>,
        /// `Some`: kill with this signal (`SIGKILL`) instead of stopping.
        signal: Option<String>,
    },
    /// Run `down`, then `up` (argv; no shell unless the operator writes `sh -c`).
    Command { down: Vec<String>, up: Vec<String> },
}

impl Actuator {
    pub fn kind(&self) -> ActuatorKind {
        match self {
            Actuator::Local => ActuatorKind::Local,
            Actuator::Systemd { .. } => ActuatorKind::Systemd,
            Actuator::Command { .. } => ActuatorKind::Command,
        }
    }
}

/// One `[[gameday.actuators]]` entry: which target, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawActuator", into = "RawActuator")]
pub struct ActuatorEntry {
    pub target: Target,
    pub actuator: Actuator,
}

/// `[[gameday.actuators]]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawActuator {
    target: Target,
    kind: ActuatorKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    units: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    down: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    up: Vec<String>,
}

impl TryFrom<RawActuator> for ActuatorEntry {
    type Error = String;
    fn try_from(r: RawActuator) -> std::result::Result<Self, String> {
        let t = &r.target;
        let refuse = |field: &str| {
            Err(format!(
                "actuator of {t}: `{field}` does not apply to kind {:?}",
                r.kind.as_str()
            ))
        };
        let argv_ok = |v: &[String]| v.first().is_some_and(|a| !a.trim().is_empty());
        let actuator = match r.kind {
            ActuatorKind::Local => {
                if !r.units.is_empty() {
                    return refuse("units");
                }
                if r.signal.is_some() {
                    return refuse("signal");
                }
                if !r.down.is_empty() || !r.up.is_empty() {
                    return refuse("down/up");
                }
                Actuator::Local
            }
            ActuatorKind::Systemd => {
                if !r.down.is_empty() || !r.up.is_empty() {
                    return refuse("down/up");
                }
                if r.units.is_empty() || r.units.iter().any(|u| u.trim().is_empty()) {
                    return Err(format!(
                        "actuator of {t}: kind \"systemd\" needs `units` (non-empty unit names)"
                    ));
                }
                if let Some(s) = &r.signal {
                    let ok = s.len() > 3
                        && s.starts_with("SIG")
                        && s.bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
                    if !ok {
                        return Err(format!(
                            "actuator of {t}: signal {s:?} is not a signal name (SIGKILL)"
                        ));
                    }
                }
                Actuator::Systemd {
                    units: r.units,
                    signal: r.signal,
                }
            }
            ActuatorKind::Command => {
                if !r.units.is_empty() {
                    return refuse("units");
                }
                if r.signal.is_some() {
                    return refuse("signal");
                }
                if !argv_ok(&r.down) || !argv_ok(&r.up) {
                    return Err(format!(
                        "actuator of {t}: kind \"command\" needs `down` and `up` (argv arrays, \
                         program first)"
                    ));
                }
                Actuator::Command {
                    down: r.down,
                    up: r.up,
                }
            }
        };
        Ok(ActuatorEntry {
            target: r.target,
            actuator,
        })
    }
}

impl From<ActuatorEntry> for RawActuator {
    fn from(e: ActuatorEntry) -> RawActuator {
        let kind = e.actuator.kind();
        let mut r = RawActuator {
            target: e.target,
            kind,
            units: Vec::new(),
            signal: None,
            down: Vec::new(),
            up: Vec::new(),
        };
        match e.actuator {
            Actuator::Local => {}
            Actuator::Systemd { units, signal } => {
                r.units = units;
                r.signal = signal;
            }
            Actuator::Command { down, up } => {
                r.down = down;
                r.up = up;
            }
        }
        r
    }
}

/// When a game day stops by itself: the bounds real (non-synthetic) traffic at the edges must
/// stay within, judged over the last `window_s` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StopConditions {
    /// Errors / requests (0..=1): upstream unavailable, rate limited, forwarded 5xx.
    pub max_error_ratio: f64,
    /// p99 latency, in milliseconds.
    pub max_p99_ms: u64,
    /// Below this many real requests in the window, no bound is judged.
    pub min_requests: u64,
    /// The window, in seconds.
    pub window_s: u64,
}

impl Default for StopConditions {
    fn default() -> Self {
        StopConditions {
            max_error_ratio: DEFAULT_MAX_ERROR_RATIO,
            max_p99_ms: DEFAULT_MAX_P99_MS,
            min_requests: DEFAULT_MIN_REQUESTS,
            window_s: DEFAULT_WINDOW_S,
        }
    }
}

/// One cell's edges' management `/metrics` URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeMetrics {
    pub cell: CellId,
    pub metrics_urls: Vec<String>,
}

/// The `[gameday]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GamedaySection {
    /// Where the undo log (and reports, by default) live. Relative to the inventory in the
    /// file; [`crate::inventory::load_gameday`] returns it resolved.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    #[serde(default)]
    pub stop: StopConditions,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<EdgeMetrics>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actuators: Vec<ActuatorEntry>,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from(DEFAULT_STATE_DIR)
}

impl Default for GamedaySection {
    fn default() -> Self {
        GamedaySection {
            state_dir: default_state_dir(),
            stop: StopConditions::default(),
            edges: Vec::new(),
            actuators: Vec::new(),
        }
    }
}

impl GamedaySection {
    /// The actuator of `target`: the entry declared for it, else for the nearest target
    /// containing it (`cell-01/auth-service/0`, then `cell-01/auth-service`, then `cell-01`).
    pub fn actuator_for(&self, target: &Target) -> Option<&ActuatorEntry> {
        let mut t = Some(target.clone());
        while let Some(x) = t {
            if let Some(e) = self.actuators.iter().find(|e| e.target == x) {
                return Some(e);
            }
            t = x.parent();
        }
        None
    }

    /// Every edge's metrics URL, cell by cell.
    pub fn metrics_urls(&self) -> Vec<String> {
        self.edges
            .iter()
            .flat_map(|e| e.metrics_urls.iter().cloned())
            .collect()
    }

    /// Checks the section of the inventory at `path`, whose cells are `cells`.
    pub(crate) fn check(&self, path: &Path, cells: &[&CellId]) -> Result<()> {
        let bad = |what: String| Error::Config(format!("{}: [gameday] {what}", path.display()));
        let s = &self.stop;
        if !(0.0..=1.0).contains(&s.max_error_ratio) {
            return Err(bad(format!(
                "stop.max_error_ratio {} is not between 0 and 1",
                s.max_error_ratio
            )));
        }
        if s.window_s == 0 {
            return Err(bad("stop.window_s must be at least 1".into()));
        }
        let known = |c: &CellId| cells.contains(&c);
        for (i, a) in self.actuators.iter().enumerate() {
            if let Some(c) = a.target.cell()
                && !known(c)
            {
                return Err(bad(format!(
                    "actuator of {}: {c} is not a cell of the inventory",
                    a.target
                )));
            }
            if self.actuators[..i].iter().any(|o| o.target == a.target) {
                return Err(bad(format!("{} has two actuators", a.target)));
            }
        }
        for e in &self.edges {
            if !known(&e.cell) {
                return Err(bad(format!(
                    "edges: {} is not a cell of the inventory",
                    e.cell
                )));
            }
            if let Some(u) = e
                .metrics_urls
                .iter()
                .find(|u| !(u.starts_with("https://") || u.starts_with("http://")))
            {
                return Err(bad(format!("edges of {}: {u:?} is not a URL", e.cell)));
            }
        }
        Ok(())
    }

    /// The section of a dev fleet (`fleet.json` at `path`): every component `local`, the
    /// edges' management `/metrics`, the default stop conditions, the state in
    /// `<fleet dir>/gameday`.
    pub fn of_fleet(fleet: &FleetFile, management: &FleetManagement, path: &Path) -> Self {
        let mut actuators = vec![ActuatorEntry {
            target: Target::ControlPlane,
            actuator: Actuator::Local,
        }];
        actuators.extend(fleet.cells.iter().map(|c| ActuatorEntry {
            target: Target::Cell(c.id.clone()),
            actuator: Actuator::Local,
        }));
        let edges = management
            .cells
            .iter()
            .filter(|c| !c.edges.is_empty())
            .map(|c| EdgeMetrics {
                cell: c.id.clone(),
                metrics_urls: c.edges.iter().map(|u| metrics_url(u)).collect(),
            })
            .collect();
        GamedaySection {
            state_dir: beside(path, Path::new(DEFAULT_STATE_DIR)),
            stop: StopConditions::default(),
            edges,
            actuators,
        }
    }
}

/// A management listener's `/metrics` URL (the fleet file names the listener's base URL).
fn metrics_url(base: &str) -> String {
    if base.ends_with("/metrics") {
        base.to_owned()
    } else {
        format!("{}/metrics", base.trim_end_matches('/'))
    }
}

/// `p` relative to the folder of `file` (absolute paths unchanged; a bare file name's folder
/// is `.`).
pub(crate) fn beside(file: &Path, p: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if p.is_relative() && !dir.as_os_str().is_empty() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cell(s: &str) -> CellId {
        CellId::new(s).unwrap()
    }

    #[test]
    fn targets_parse_and_print_back() {
        for s in [
            "control-plane",
            "cell-01",
            "cell-01/auth-service",
            "cell-01/auth-service/0",
            "cell-01/auth-service/12",
            "cell-01/edge",
            "cell-01/app",
        ] {
            let t: Target = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
        for bad in [
            "",
            "cp",
            "cell-01/",
            "cell-01/db",
            "cell-01/auth-service/",
            "cell-01/auth-service/01",
            "cell-01/auth-service/+1",
            "cell-01/auth-service/-1",
            "cell-01/edge/0",
            "Cell-01",
        ] {
            let e = bad.parse::<Target>().unwrap_err().to_string();
            assert!(e.contains("not a game day target"), "{bad}: {e}");
        }
    }

    #[test]
    fn containment_and_the_most_specific_actuator() {
        let c = cell("cell-01");
        let r0 = Target::AuthReplica(c.clone(), 0);
        assert!(Target::Cell(c.clone()).contains(&r0));
        assert!(Target::AuthService(c.clone()).contains(&r0));
        assert!(!Target::Edge(c.clone()).contains(&r0));
        assert!(!r0.contains(&Target::AuthService(c.clone())));
        assert!(r0.overlaps(&Target::Cell(c.clone())));
        assert!(!Target::ControlPlane.overlaps(&Target::Cell(c.clone())));
        let g = GamedaySection {
            actuators: vec![
                ActuatorEntry {
                    target: Target::Cell(c.clone()),
                    actuator: Actuator::Local,
                },
                ActuatorEntry {
                    target: Target::AuthService(c.clone()),
                    actuator: Actuator::Systemd {
                        units: vec!["a.service".into()],
                        signal: None,
                    },
                },
            ],
            ..GamedaySection::default()
        };
        assert_eq!(
            g.actuator_for(&r0).unwrap().target,
            Target::AuthService(c.clone())
        );
        assert_eq!(
            g.actuator_for(&Target::Edge(c.clone())).unwrap().target,
            Target::Cell(c)
        );
        assert!(g.actuator_for(&Target::ControlPlane).is_none());
    }

    /// A dev fleet's `fleet.json` with one cell of two replicas (the pids are the caller's).
    pub(crate) fn sample_fleet(dir: &Path, pids: [u32; 5]) -> (FleetFile, FleetManagement) {
        use crate::fleet_file::{CellManagement, Demo, FLEET_SCHEMA, FleetCell, Service};
        let service = |url: &str, pid| Service {
            url: url.into(),
            pid,
        };
        let replicas = vec![
            service("https://127.0.0.1:8446", pids[1]),
            service("https://127.0.0.1:8456", pids[2]),
        ];
        let f = FleetFile {
            schema: FLEET_SCHEMA,
            ca_cert: dir.join("ca.pem"),
            control_plane: service("https://127.0.0.1:8440", pids[0]),
            admin_token: "cp".into(),
            admin_token_file: dir.join("secrets/control-plane.token"),
            map_public_key: "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E".into(),
            store: Default::default(),
            postgres: None,
            cells: vec![FleetCell {
                id: cell("cell-01"),
                endpoint: "https://127.0.0.1:8443".into(),
                endpoint_pid: pids[3],
                auth_service: replicas[0].clone(),
                auth_public_url: "https://127.0.0.1:8445".into(),
                auth_services: replicas,
                auth_public_urls: Vec::new(),
                app_url: "https://127.0.0.1:8447".into(),
                app_internal_url: "https://127.0.0.1:8448".into(),
                app_pid: pids[4],
                admin_token: "a".into(),
                admin_token_file: dir.join("secrets/cell-01/admin.token"),
                app_internal_token: String::new(),
                app_internal_token_file: PathBuf::new(),
            }],
            demo: Demo {
                technicians: Vec::new(),
                dispatchers: Vec::new(),
            },
        };
        let m = FleetManagement {
            control_plane: "https://127.0.0.1:9440".into(),
            cells: vec![CellManagement {
                id: cell("cell-01"),
                edges: vec!["https://127.0.0.1:9443".into()],
                auth_services: Vec::new(),
                app: String::new(),
            }],
        };
        (f, m)
    }

    #[test]
    fn a_dev_fleet_gets_a_local_section() {
        let dir = tempfile::tempdir().unwrap();
        let (f, m) = sample_fleet(dir.path(), [1, 2, 3, 4, 5]);
        let path = dir.path().join(crate::FLEET_FILE);
        let g = GamedaySection::of_fleet(&f, &m, &path);
        assert_eq!(g.state_dir, dir.path().join("gameday"));
        assert_eq!(g.stop, StopConditions::default());
        assert_eq!(g.metrics_urls(), ["https://127.0.0.1:9443/metrics"]);
        for t in ["control-plane", "cell-01/auth-service/1", "cell-01/edge"] {
            let a = g.actuator_for(&t.parse().unwrap()).unwrap();
            assert_eq!(a.actuator, Actuator::Local, "{t}");
        }
    }
}
