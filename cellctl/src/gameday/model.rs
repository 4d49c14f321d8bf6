//! The game day report (`gameday-<time>.json`, schema [`REPORT_SCHEMA`]; docs/GAMEDAY.md
//! documents every field). One [`Report`] per `cellctl gameday run`, one [`ScenarioReport`] per
//! scenario run in it. Times are milliseconds: `*_unix_ms` since the Unix epoch, every other
//! `*_ms` since the scenario's start.

use serde::{Deserialize, Serialize};

/// Schema version of the report (a reader refuses another).
pub const REPORT_SCHEMA: u32 = 1;

/// One `cellctl gameday run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub schema: u32,
    /// `cellctl`'s version.
    pub cellctl_version: String,
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    /// The cells the game day ran in (`--cells`, or every cell of the fleet).
    pub cells: Vec<String>,
    /// `--scale` (`small` or `seed`).
    pub scale: String,
    /// Faults a previous, interrupted run left and this run undid before starting.
    pub undone_first: Vec<String>,
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    /// Every scenario passed.
    pub fn passed(&self) -> bool {
        self.scenarios.iter().all(|s| s.outcome == Outcome::Passed)
    }
}

/// How a scenario ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Ran to the end; every bound met.
    Passed,
    /// Ran to the end; at least one bound not met.
    Failed,
    /// Stopped by a stop condition (real traffic burning its SLO); its fault undone.
    Aborted,
    /// Could not run (a fault could not be applied, provisioning failed): `reason` says why.
    Error,
}

/// One scenario's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReport {
    /// Its name (`cellctl gameday list`).
    pub name: String,
    /// What it proves, one sentence.
    pub proves: String,
    pub outcome: Outcome,
    /// Why it aborted or could not run (empty otherwise).
    #[serde(default)]
    pub reason: String,
    pub started_unix_ms: u64,
    pub duration_ms: u64,
    /// When a stop condition stopped it (`None`: it was not stopped by one).
    #[serde(default)]
    pub stopped_ms: Option<u64>,
    /// The faults injected, each with its window.
    pub faults: Vec<FaultWindow>,
    /// The measured figures, in the order they are reported.
    pub figures: Vec<Figure>,
    /// The bounds checked against the figures.
    pub bounds: Vec<BoundCheck>,
    /// The synthetic load, second by second.
    pub timeline: Vec<Bucket>,
}

/// A fault and when it was in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultWindow {
    /// What was done (`cell-03/auth-service down (local: SIGKILL pid 4242)`).
    pub what: String,
    pub start_ms: u64,
    /// When it was undone (`None`: never undone within the scenario, e.g. a key revocation).
    pub end_ms: Option<u64>,
}

/// One measured figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// `snake_case` name (`route_loads_ok`, `read_only_window_p99_ms`).
    pub name: String,
    pub value: f64,
    /// `count`, `ms`, `ratio`, `s`.
    pub unit: String,
}

/// A bound a figure must meet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundCheck {
    /// The figure it reads.
    pub figure: String,
    /// `<=`, `>=` or `==`.
    pub op: String,
    pub limit: f64,
    pub value: f64,
    pub met: bool,
}

impl BoundCheck {
    /// Checks `value op limit`.
    pub fn check(figure: &str, op: &str, limit: f64, value: f64) -> BoundCheck {
        let met = match op {
            "<=" => value <= limit,
            ">=" => value >= limit,
            _ => (value - limit).abs() < f64::EPSILON,
        };
        BoundCheck {
            figure: figure.to_owned(),
            op: op.to_owned(),
            limit,
            value,
            met,
        }
    }
}

/// One second of the synthetic load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    /// Start of the second, since the scenario's start.
    pub t_ms: u64,
    /// Answered as the request meant (2xx, or the expected refusal).
    pub ok: u64,
    /// Failed before reaching a cell: no HTTP answer from the cell's endpoint (connection
    /// refused or reset, TLS, timeout).
    pub failed_before_cell: u64,
    /// Failed inside a cell: the cell answered, with an error (5xx, or a 4xx the request did
    /// not expect).
    pub failed_in_cell: u64,
    /// Latency of the requests that ended in this second.
    pub p50_ms: f64,
    pub p99_ms: f64,
}
