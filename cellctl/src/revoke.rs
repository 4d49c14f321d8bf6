//! `cellctl revoke …` (DESIGN §6, §8): applies a revocation at every cell that matters and
//! reports each cell's outcome; the command fails unless every one of them confirmed.
//!
//! Which cells matter:
//! - `key KID --cell C`, `cell C`: the named cell (a key belongs to the one cell that holds it);
//! - `subject SUB` and `contractor CTR`: every cell whose auth-service holds an ownership record
//!   of the contractor (a subject id is `{contractor}.{login}`): the owner (`active` or
//!   `handoff`) and any previous owner (`released`), which may still hold sessions and must not
//!   sign a transfer ticket for a revoked one; plus the cell the control plane's placement
//!   names, which during a migration is the target before it holds an active record. Every
//!   cell is asked; a cell that cannot be asked is reported, and the command fails, because it
//!   might matter. The control plane is only consulted, never required.
//! - `session JTI --cell C`: C, which minted the session, and every cell that matters for the
//!   session's contractor (as for `contractor`), because a transfer ticket minted at C before
//!   the revocation could otherwise still be redeemed at a migration target (ATTACKS A28): the
//!   target refuses a ticket whose carried session id it holds revoked. The contractor comes
//!   from C's record of the session (`GET /admin/v1/sessions/{jti}`); when C does not know the
//!   session, it is revoked at C only and the report says so.
//!
//! Every call to a cell uses that cell's own admin token (`cells[].admin_token`) at its
//! auth-service's internal listener (`cells[].auth_service.url`); the control plane is asked
//! with its own token (the top-level `admin_token`).
//!
//! Each cell is asked through the admin client with its retry policy (transport errors, 5xx and
//! 429 only; see [`crate::admin`]). The auth-service answers a repeated request with the
//! revocation already in force, so a retry after a lost answer records nothing twice.
//!
//! Per cell:
//!
//! ```text
//!   resolve ──▶ asked ──┬─ 200 applied ─────────────▶ Applied  (confirmed)
//!                       ├─ 200 already in force ────▶ Already  (confirmed)
//!                       ├─ 4xx ─────────────────────▶ Failed   (not retried)
//!                       └─ transport / 5xx / 429 ──▶ retry … ▶ Failed after the last attempt
//!   resolve fails (cell unreachable) ───────────────▶ Unreachable
//! ```

//!
//! Files: this one chooses the cells and applies the revocation at each; `command` is the
//! command line, `report` what a revocation reports and how it is printed, `session` the
//! minting cell's record of a session (which names the contractor whose cells are asked too).

use std::path::Path;

use fleet_description::{FleetCell, FleetFile};
use protocol::admin::cell::{RevokeOutcome, RevokeRequest};
use protocol::ownership::OwnershipRecord;
use protocol::revocation::RevocationKind;
use protocol::{ContractorId, SubjectId};

use crate::admin::{AdminClient, AdminError, Api, Attempted};
use crate::edges::wait_edges;
use crate::error::{CtlError, Result};

mod command;
mod report;
mod session;

pub use command::{AuditArgs, RevokeCommand};
pub use report::{CellOutcome, CellResult, RevokeReport, Role};
use session::{SessionFanout, session_revocation};

/// A cell that matters, why, and why it could not be asked (if so).
type Target = (FleetCell, Role, Option<String>);

/// The contractor of a subject id (`{contractor}.{login}`; contractor ids hold no `.`).
pub fn contractor_of(sub: &SubjectId) -> Result<ContractorId> {
    let (ctr, login) = sub.as_str().split_once('.').ok_or_else(|| {
        CtlError::BadRequest(format!("{sub} is not a {{contractor}}.{{login}} subject"))
    })?;
    if login.is_empty() {
        return Err(CtlError::BadRequest(format!("{sub} has no login")));
    }
    ContractorId::new(ctr)
        .map_err(|e| CtlError::BadRequest(format!("{sub}: the contractor part: {e}")))
}

/// Asks every cell for its ownership record of `ctr` (each with its own admin token), and the
/// control plane (with its token) for its placement: the cells that matter with their role.
async fn cells_of_contractor(
    admin: &AdminClient,
    control_plane: Option<&Api>,
    fleet: &FleetFile,
    ctr: &ContractorId,
) -> Vec<Target> {
    let asks = fleet.cells.iter().map(|c| async move {
        let record = match Api::auth(c) {
            Ok(auth) => admin.ownership(&auth, ctr).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match record {
            Ok(Some(OwnershipRecord::Released { .. })) => {
                Some((c.clone(), Role::PreviousOwner, None))
            }
            Ok(Some(_)) => Some((c.clone(), Role::Owner, None)),
            Ok(None) => None,
            Err(e) => Some((
                c.clone(),
                Role::Unknown,
                Some(format!("ownership record: {e}")),
            )),
        }
    });
    let mut cells: Vec<Target> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    // Only consulted, never required: no answer means no extra cell.
    let placed = match control_plane {
        Some(cp) => admin.placement(cp, ctr).await.ok().flatten(),
        None => None,
    };
    if let Some(p) = placed
        && !cells.iter().any(|(c, _, _)| c.id == p.cell)
        && let Some(c) = fleet.cell(&p.cell)
    {
        cells.push((c.clone(), Role::Placement, None));
    }
    cells
}

/// Applies a revocation at one cell, with that cell's admin token.
async fn apply_at(
    admin: &AdminClient,
    cell: &FleetCell,
    role: Role,
    req: &RevokeRequest,
    wait: bool,
) -> CellResult {
    let auth = match Api::auth(cell) {
        Ok(a) => a,
        Err(e) => {
            return CellResult {
                cell: cell.id.clone(),
                role,
                outcome: CellOutcome::Failed,
                seq: None,
                attempts: 0,
                error: Some(e.to_string()),
                edges: None,
            };
        }
    };
    let Attempted { result, attempts } = admin.revoke(&auth, req).await;
    let (outcome, seq, error) = match result {
        Ok(a) => match a.outcome {
            RevokeOutcome::Applied => (CellOutcome::Applied, Some(a.seq), None),
            RevokeOutcome::Already => (CellOutcome::Already, Some(a.seq), None),
        },
        Err(e) => (CellOutcome::Failed, None, Some(failure_text(&e))),
    };
    let edges = match (wait, outcome.confirmed(), seq) {
        (true, true, Some(seq)) => Some(wait_edges(admin, &auth, seq).await),
        _ => None,
    };
    CellResult {
        cell: cell.id.clone(),
        role,
        outcome,
        seq,
        attempts,
        error,
        edges,
    }
}

/// A failed call as the report shows it: the status and the cell's error when it answered.
fn failure_text(e: &AdminError) -> String {
    match e {
        AdminError::Refused { status, detail, .. } => format!("answered {status}: {detail}"),
        AdminError::Decode { message, .. } => format!("unexpected answer: {message}"),
        other => other.to_string(),
    }
}

/// Runs a revocation against the fleet described by `path` and reports every cell's outcome.
/// Fails only when nothing could be attempted (bad arguments, no cell knows the contractor);
/// per-cell failures are in the report (see [`RevokeReport::ok`]).
pub async fn revoke(path: &Path, command: &RevokeCommand) -> Result<RevokeReport> {
    Revoker::load(path)?.revoke(command).await
}

/// `cellctl revoke …`: prints each cell's outcome; fails unless every cell confirmed.
pub async fn run(path: &Path, command: &RevokeCommand, json_out: bool) -> Result<()> {
    revoke(path, command).await?.print(json_out)
}

/// A loaded fleet description with its admin client, for callers that revoke many times.
#[derive(Debug)]
pub struct Revoker {
    path: std::path::PathBuf,
    fleet: FleetFile,
    admin: AdminClient,
    /// The control plane's admin API (its placements; its own token), when the fleet file
    /// names it well. Each cell is asked with its own token.
    control_plane: Option<Api>,
}

impl Revoker {
    /// Loads the fleet description at `path` and builds a client trusting its CA.
    pub fn load(path: &Path) -> Result<Revoker> {
        let fleet = fleet_description::inventory::load(path)?;
        let admin = AdminClient::for_fleet(&fleet)?;
        let control_plane = Api::control_plane(&fleet).ok();
        Ok(Revoker {
            path: path.to_owned(),
            fleet,
            admin,
            control_plane,
        })
    }

    /// [`revoke`] with the loaded description.
    pub async fn revoke(&self, command: &RevokeCommand) -> Result<RevokeReport> {
        revoke_in(self, command).await
    }

    async fn cells_of_contractor(&self, ctr: &ContractorId) -> Vec<Target> {
        cells_of_contractor(&self.admin, self.control_plane.as_ref(), &self.fleet, ctr).await
    }
}

/// What [`Revoker::revoke`] does: the cells that matter, then the revocation at each.
async fn revoke_in(fleet: &Revoker, command: &RevokeCommand) -> Result<RevokeReport> {
    let path = fleet.path.as_path();
    let now = protocol::time::system_clock().now();
    let before = |a: &AuditArgs| a.before.unwrap_or(now + 1);
    let mut fanout = SessionFanout::default();
    let (kind, audit, targets): (RevocationKind, &AuditArgs, Vec<Target>) = match command {
        RevokeCommand::Session { jti, cell, audit } => {
            let named_cell = fleet.fleet.named_cell(cell, path)?;
            let (kind, f) = session_revocation(&fleet.admin, named_cell, jti, now).await;
            let mut targets = vec![(named_cell.clone(), Role::Named, None)];
            if let Some(contractor) = &f.contractor {
                targets.extend(
                    fleet
                        .cells_of_contractor(contractor)
                        .await
                        .into_iter()
                        .filter(|(c, _, _)| c.id != named_cell.id),
                );
            }
            fanout = f;
            (kind, audit, targets)
        }
        RevokeCommand::Key { kid, cell, audit } => (
            RevocationKind::Key { kid: kid.clone() },
            audit,
            vec![(
                fleet.fleet.named_cell(cell, path)?.clone(),
                Role::Named,
                None,
            )],
        ),
        RevokeCommand::Cell { cell, audit } => (
            RevocationKind::Cell {
                before: before(audit),
            },
            audit,
            vec![(
                fleet.fleet.named_cell(cell, path)?.clone(),
                Role::Named,
                None,
            )],
        ),
        RevokeCommand::Subject { sub, audit } => {
            let ctr = contractor_of(sub)?;
            (
                RevocationKind::Subject {
                    sub: sub.clone(),
                    before: before(audit),
                },
                audit,
                fleet.cells_of_contractor(&ctr).await,
            )
        }
        RevokeCommand::Contractor { ctr, audit } => (
            RevocationKind::Contractor {
                ctr: ctr.clone(),
                before: before(audit),
            },
            audit,
            fleet.cells_of_contractor(ctr).await,
        ),
        RevokeCommand::List { .. } | RevokeCommand::Withdraw { .. } => {
            return Err(CtlError::BadRequest(
                "`revoke list` and `revoke withdraw` record no revocation".into(),
            ));
        }
    };
    if targets.is_empty() {
        return Err(CtlError::Failed(format!(
            "no cell of {} holds a record of this contractor: nothing to revoke",
            path.display()
        )));
    }
    let by = audit.by();
    let req = RevokeRequest {
        kind: kind.clone(),
        reason: audit.reason.clone(),
        by: by.clone(),
    };
    let applies = targets.iter().map(|(cell, role, err)| {
        let req = &req;
        async move {
            match err {
                Some(e) => CellResult {
                    cell: cell.id.clone(),
                    role: *role,
                    outcome: CellOutcome::Unreachable,
                    seq: None,
                    attempts: 0,
                    error: Some(e.clone()),
                    edges: None,
                },
                None => apply_at(&fleet.admin, cell, *role, req, audit.wait_edges).await,
            }
        }
    });
    let mut cells = futures::future::join_all(applies).await;
    cells.sort_by(|a, b| a.cell.cmp(&b.cell));
    Ok(RevokeReport {
        revocation: kind,
        reason: audit.reason.clone(),
        by,
        cells,
        contractor: fanout.contractor,
        note: fanout.note,
        unresolved: fanout.unresolved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_names_its_contractor() {
        let sub = SubjectId::new("c-40711.tech-1").unwrap();
        assert_eq!(contractor_of(&sub).unwrap().as_str(), "c-40711");
        let dotted = SubjectId::new("c-7.ana.maria").unwrap();
        assert_eq!(contractor_of(&dotted).unwrap().as_str(), "c-7");
        assert!(contractor_of(&SubjectId::new("nodot").unwrap()).is_err());
        assert!(contractor_of(&SubjectId::new("C_X.t").unwrap()).is_err());
    }
}
