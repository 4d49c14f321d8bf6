//! What a revocation reports: each cell's role and outcome.

use protocol::revocation::RevocationKind;
use protocol::{CellId, ContractorId};
use serde::{Deserialize, Serialize};

use crate::edges::EdgesApplied;

/// Why a cell is part of a revocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Named on the command line.
    Named,
    /// Owns the contractor (`active` or `handoff`).
    Owner,
    /// Owned it before (`released`).
    PreviousOwner,
    /// Named by the control plane's placement, without an active record yet (a migration's
    /// target).
    Placement,
    /// Could not be asked whether it holds a record.
    Unknown,
}

/// What happened at one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellOutcome {
    Applied,
    Already,
    Failed,
    Unreachable,
}

impl CellOutcome {
    pub fn confirmed(self) -> bool {
        matches!(self, CellOutcome::Applied | CellOutcome::Already)
    }
}

/// One cell's line of the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    pub cell: CellId,
    pub role: Role,
    pub outcome: CellOutcome,
    /// Sequence number of the revocation in force at that cell.
    pub seq: Option<u64>,
    pub attempts: usize,
    pub error: Option<String>,
    /// With `--wait-edges`: the cell's live edge instances and how many applied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edges: Option<EdgesApplied>,
}

/// What `cellctl revoke` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RevokeReport {
    pub revocation: RevocationKind,
    pub reason: String,
    pub by: String,
    pub cells: Vec<CellResult>,
    /// For `revoke session`: the session's contractor, as its cell recorded it (the cells that
    /// hold it were asked too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contractor: Option<ContractorId>,
    /// Something the operator should know about how the cells were chosen (e.g. the named
    /// cell does not know the session, so no other cell was asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why the cells that matter could not all be determined (then the report is not ok).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresolved: Option<String>,
}

impl RevokeReport {
    /// Whether every cell that matters was determined and confirmed.
    pub fn ok(&self) -> bool {
        self.unresolved.is_none()
            && !self.cells.is_empty()
            && self.cells.iter().all(|c| {
                c.outcome.confirmed() && c.edges.as_ref().is_none_or(EdgesApplied::complete)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_confirmed_cells_make_a_report_ok() {
        let line = |outcome| CellResult {
            cell: CellId::new("cell-01").unwrap(),
            role: Role::Owner,
            outcome,
            seq: Some(1),
            attempts: 1,
            error: None,
            edges: None,
        };
        let report = |cells| RevokeReport {
            revocation: RevocationKind::Cell { before: 1 },
            reason: "r".into(),
            by: "b".into(),
            cells,
            contractor: None,
            note: None,
            unresolved: None,
        };
        assert!(report(vec![line(CellOutcome::Applied), line(CellOutcome::Already)]).ok());
        let mut partial = report(vec![line(CellOutcome::Applied)]);
        partial.unresolved = Some("cell-01 could not be asked".into());
        assert!(
            !partial.ok(),
            "a fan-out that could not be determined is not ok"
        );
        assert!(!report(vec![line(CellOutcome::Applied), line(CellOutcome::Failed)]).ok());
        assert!(!report(vec![line(CellOutcome::Unreachable)]).ok());
        assert!(!report(vec![]).ok());
    }
}
