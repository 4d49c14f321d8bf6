//! `cellctl revoke list --cell C` and `cellctl revoke withdraw SEQ --cell C --reason …`: what is
//! in force at a cell, and taking one revocation back (ATTACKS A32: a mistaken revocation, or
//! one planted through a compromised credential, is not permanent). A withdrawal is audited at
//! the cell and reaches every edge of the cell through the feed; `--wait-edges` waits until
//! every live instance has applied it and prints how long that took.
//!
//! A withdrawal is one cell's: a subject or contractor revocation recorded at several cells is
//! withdrawn at each (each has its own sequence numbers; `revoke list` shows them).

use std::path::Path;

use protocol::CellId;
use protocol::admin::cell::{HeldRevocations, WithdrawAnswer, WithdrawRequest};
use serde::Serialize;

use crate::admin::{AdminClient, Api};
use crate::edges::{EdgesApplied, wait_edges};
use crate::error::{CtlError, Result};

/// What `cellctl revoke withdraw` reports.
#[derive(Debug, Clone, Serialize)]
pub struct WithdrawReport {
    pub cell: CellId,
    #[serde(flatten)]
    pub answer: WithdrawAnswer,
    /// With `--wait-edges`: the cell's live edge instances and how many applied it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edges: Option<EdgesApplied>,
}

impl WithdrawReport {
    /// Whether the withdrawal is in force (and, when asked, applied by every live edge).
    pub fn ok(&self) -> bool {
        self.edges.as_ref().is_none_or(EdgesApplied::complete)
    }
}

fn cell_api(path: &Path, cell: &CellId) -> Result<(AdminClient, Api)> {
    let fleet = fleet_description::inventory::load(path)?;
    let api = Api::auth(fleet.named_cell(cell, path)?)?;
    Ok((AdminClient::for_fleet(&fleet)?, api))
}

/// The revocations in force at `cell`.
pub async fn list(path: &Path, cell: &CellId) -> Result<HeldRevocations> {
    let (admin, api) = cell_api(path, cell)?;
    Ok(admin.held_revocations(&api).await?)
}

/// Withdraws the revocation `seq` at `cell`; with `wait_edges`, waits for the cell's edges.
pub async fn withdraw(
    path: &Path,
    cell: &CellId,
    seq: u64,
    req: &WithdrawRequest,
    wait: bool,
) -> Result<WithdrawReport> {
    let (admin, api) = cell_api(path, cell)?;
    let answer = admin.withdraw(&api, seq, req).await?;
    let edges = if wait {
        Some(wait_edges(&admin, &api, answer.seq).await)
    } else {
        None
    };
    Ok(WithdrawReport {
        cell: cell.clone(),
        answer,
        edges,
    })
}

fn json_text<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| CtlError::Internal(e.to_string()))
}

/// `cellctl revoke list`.
pub async fn run_list(path: &Path, cell: &CellId, json_out: bool) -> Result<()> {
    let held = list(path, cell).await?;
    if json_out {
        println!("{}", json_text(&held)?);
        return Ok(());
    }
    println!(
        "{cell}: {} revocation(s) in force (feed head {})",
        held.revocations.len(),
        held.head
    );
    for r in &held.revocations {
        println!(
            "  seq {}: {} (at {}, by {}, reason: {})",
            r.seq,
            json_text(&r.kind)?,
            r.at,
            r.by,
            r.reason
        );
    }
    Ok(())
}

/// `cellctl revoke withdraw`: fails unless the cell withdrew it (and, with `--wait-edges`,
/// every live edge applied it).
pub async fn run_withdraw(
    path: &Path,
    cell: &CellId,
    seq: u64,
    req: &WithdrawRequest,
    wait: bool,
    json_out: bool,
) -> Result<()> {
    let report = withdraw(path, cell, seq, req, wait).await?;
    if json_out {
        println!(
            "{}",
            json_text(&serde_json::json!({ "ok": report.ok(), "report": report }))?
        );
    } else {
        println!(
            "{cell}: withdrew revocation {seq} {} (withdrawal at seq {}, by {}, reason: {})",
            json_text(&report.answer.withdrawn.kind)?,
            report.answer.seq,
            req.by,
            req.reason
        );
        if let Some(e) = &report.edges {
            println!(
                "  edges {}/{} applied in {} ms",
                e.applied, e.live, e.waited_ms
            );
        }
    }
    if report.ok() {
        Ok(())
    } else {
        Err(CtlError::Failed(format!(
            "{cell}: not every live edge applied the withdrawal in time"
        )))
    }
}
