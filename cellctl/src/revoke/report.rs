//! What a revocation reports: each cell's role and outcome.

use protocol::revocation::RevocationKind;
use protocol::{CellId, ContractorId};
use serde::{Deserialize, Serialize};

use serde_json::json;

use crate::edges::EdgesApplied;
use crate::error::{CtlError, Result};

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

fn role_text(r: Role) -> &'static str {
    match r {
        Role::Named => "named",
        Role::Owner => "owner",
        Role::PreviousOwner => "previous owner",
        Role::Placement => "placement",
        Role::Unknown => "unknown",
    }
}

impl RevokeReport {
    /// Prints each cell's outcome (one JSON object with `json_out`); fails unless every cell
    /// confirmed.
    pub fn print(&self, json_out: bool) -> Result<()> {
        let report = self;
        if json_out {
            println!(
                "{}",
                serde_json::to_string(&json!({ "ok": report.ok(), "report": report }))
                    .map_err(|e| CtlError::Internal(e.to_string()))?
            );
        } else {
            println!(
                "revoking {} (by {}, reason: {})",
                serde_json::to_string(&report.revocation)
                    .map_err(|e| CtlError::Internal(e.to_string()))?,
                report.by,
                report.reason
            );
            if let Some(c) = &report.contractor {
                println!("  the session's contractor: {c} (every cell that holds it is asked)");
            }
            if let Some(n) = &report.note {
                println!("  note: {n}");
            }
            if let Some(u) = &report.unresolved {
                println!("  NOT ALL CELLS KNOWN: {u}");
            }
            for c in &report.cells {
                let what = match c.outcome {
                    CellOutcome::Applied => format!("revoked, seq {}", c.seq.unwrap_or(0)),
                    CellOutcome::Already => format!("already in force, seq {}", c.seq.unwrap_or(0)),
                    CellOutcome::Failed => format!(
                        "FAILED after {} attempt(s): {}",
                        c.attempts,
                        c.error.as_deref().unwrap_or("no answer")
                    ),
                    CellOutcome::Unreachable => {
                        format!("UNREACHABLE: {}", c.error.as_deref().unwrap_or("no answer"))
                    }
                };
                let edges = c.edges.as_ref().map_or(String::new(), |e| {
                    format!(
                        "; edges {}/{} applied in {} ms",
                        e.applied, e.live, e.waited_ms
                    )
                });
                println!("  {} ({}): {what}{edges}", c.cell, role_text(c.role));
            }
        }
        if report.ok() {
            return Ok(());
        }
        let bad: Vec<String> = report
            .cells
            .iter()
            .filter(|c| !c.outcome.confirmed())
            .map(|c| c.cell.to_string())
            .chain(
                report
                    .cells
                    .iter()
                    .filter(|c| c.edges.as_ref().is_some_and(|e| !e.complete()))
                    .map(|c| format!("{} (edges not all applied)", c.cell)),
            )
            .collect();
        if bad.is_empty()
            && let Some(u) = &report.unresolved
        {
            return Err(CtlError::Failed(format!(
                "the revocation reached only some of the cells that matter: {u}"
            )));
        }
        Err(CtlError::Failed(format!(
            "the revocation was not confirmed by {} of {} cells: {}",
            bad.len(),
            report.cells.len(),
            bad.join(", ")
        )))
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
