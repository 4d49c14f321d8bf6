//! What a scenario is ([`Scenario`]: a plan, its faults, its body) and the helpers the
//! scenarios share. The scenarios themselves are in `scenarios/`, one file each.
//!
//! A scenario's body runs inside the engine (`gameday::run_one`), which races it against the
//! guard and SIGINT/SIGTERM and undoes every fault still in force when it ends, however it
//! ends; a body therefore applies its faults through [`Run::down`]/[`Run::up`] and never
//! undoes by hand on an error path.

use std::time::Duration;

use futures::future::BoxFuture;
use protocol::CellId;

use super::fault::Target;
use super::run::{Run, Scale};
use crate::error::{CtlError, Result};

/// One scenario.
#[derive(Debug)]
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it proves, one sentence.
    pub proves: &'static str,
    /// Its plan, step by step, for `--dry-run`.
    pub plan: fn(&[CellId], Scale, Duration) -> Vec<String>,
    /// The faults it applies (for `--dry-run`: each actuator says what it would do).
    pub targets: fn(&[CellId]) -> Vec<Target>,
    /// Its body.
    pub run: fn(&mut Run) -> BoxFuture<'_, Result<()>>,
}

/// The cell a single-cell scenario acts on: the last of the game day's cells.
pub(crate) fn victim(cells: &[CellId]) -> Result<CellId> {
    cells
        .last()
        .cloned()
        .ok_or_else(|| CtlError::BadRequest("the game day has no cells".to_owned()))
}

/// A target naming `cell`'s `component` (`edge`, `auth-service`, `app`, or `""` for the cell).
pub(crate) fn target(cell: &CellId, component: &str) -> Result<Target> {
    let s = if component.is_empty() {
        cell.to_string()
    } else {
        format!("{cell}/{component}")
    };
    s.parse::<Target>()
        .map_err(|e| CtlError::Internal(format!("target {s}: {e}")))
}

/// No fault targets.
pub(crate) fn none(_: &[CellId]) -> Vec<Target> {
    Vec::new()
}
