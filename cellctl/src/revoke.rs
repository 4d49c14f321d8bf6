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

use std::path::Path;

use clap::Subcommand;
use fleet_description::{FleetCell, FleetFile};
use protocol::admin::cell::{RevokeOutcome, RevokeRequest};
use protocol::ownership::OwnershipRecord;
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::{CellId, ContractorId, Kid, SessionId, SubjectId};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::admin::{AdminClient, AdminError, Api, Attempted};
use crate::edges::{EdgesApplied, operator, wait_edges};
use crate::error::{CtlError, Result};

/// `cellctl revoke …`.
#[derive(Debug, Subcommand)]
pub enum RevokeCommand {
    /// One session (its `jti`) at the cell that minted it and at every cell that holds its
    /// contractor (so no transfer ticket for it can be redeemed elsewhere).
    Session {
        /// 22 base64url characters; one in 64 starts with `-`, taken as the id, not a flag.
        #[arg(allow_hyphen_values = true)]
        jti: SessionId,
        #[arg(long)]
        cell: CellId,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Every session of a subject (`{contractor}.{login}`) issued so far, at every cell that
    /// holds a record of its contractor.
    Subject {
        #[arg(allow_hyphen_values = true)]
        sub: SubjectId,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Every session of a contractor issued so far, at every cell that holds a record of it.
    Contractor {
        ctr: ContractorId,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Every session signed by a key; the key leaves the cell's key set.
    Key {
        #[arg(allow_hyphen_values = true)]
        kid: Kid,
        #[arg(long)]
        cell: CellId,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Every session of a cell issued so far.
    Cell {
        cell: CellId,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// The revocations in force at a cell, with the sequence numbers `withdraw` takes.
    List {
        #[arg(long)]
        cell: CellId,
    },
    /// Withdraw one revocation in force at a cell (a mistaken or planted one): it matches
    /// nothing from then on, at the cell and every edge of it; audited. A key revocation
    /// cannot be withdrawn.
    Withdraw {
        /// Its sequence number at that cell (`cellctl revoke list`).
        seq: u64,
        #[arg(long)]
        cell: CellId,
        /// Why (recorded in the cell's audit log).
        #[arg(long)]
        reason: String,
        /// Who (default: `$USER`, else `cellctl`).
        #[arg(long)]
        by: Option<String>,
        /// Wait (at most 10 s) until every edge instance the cell heard from in the last minute
        /// applied the withdrawal, and report how long it took; fails if some did not.
        #[arg(long)]
        wait_edges: bool,
    },
}

/// Audit fields of every revocation.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// Why (recorded in the cell's audit log).
    #[arg(long)]
    pub reason: String,
    /// Who (default: `$USER`, else `cellctl`).
    #[arg(long)]
    pub by: Option<String>,
    /// For subject, contractor and cell revocations: revoke sessions issued before this Unix
    /// time (default: now + 1 s, i.e. up to and including the current second).
    #[arg(long)]
    pub before: Option<UnixSeconds>,
    /// After a cell confirmed, wait (at most 10 s) until every edge instance it heard from in
    /// the last minute applied the revocation, and report them; fails if some did not.
    #[arg(long)]
    pub wait_edges: bool,
}

impl AuditArgs {
    fn by(&self) -> String {
        operator(self.by.as_ref())
    }
}

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

fn named<'f>(fleet: &'f FleetFile, path: &Path, cell: &CellId) -> Result<&'f FleetCell> {
    fleet
        .cell(cell)
        .ok_or_else(|| CtlError::Config(format!("{cell} is not in {}", path.display())))
}

/// Runs a revocation against the fleet described by `path` and reports every cell's outcome.
/// Fails only when nothing could be attempted (bad arguments, no cell knows the contractor);
/// per-cell failures are in the report (see [`RevokeReport::ok`]).
pub async fn revoke(path: &Path, command: &RevokeCommand) -> Result<RevokeReport> {
    Revoker::load(path)?.revoke(command).await
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

/// What the cell that minted a session says about it.
#[derive(Debug)]
enum SessionLookup {
    /// Its record: the session's contractor and expiry.
    Known {
        contractor: ContractorId,
        expires_at: UnixSeconds,
    },
    /// The cell never minted it (or forgot it).
    Unknown,
    /// The cell could not be asked, or answered something else.
    Failed(String),
}

/// `GET /admin/v1/sessions/{jti}` at the named cell.
async fn look_up_session(admin: &AdminClient, cell: &FleetCell, jti: &SessionId) -> SessionLookup {
    let auth = match Api::auth(cell) {
        Ok(a) => a,
        Err(e) => return SessionLookup::Failed(e.to_string()),
    };
    match admin.session(&auth, jti).await {
        Ok(Some(a)) => SessionLookup::Known {
            contractor: a.session.contractor,
            expires_at: a.session.expires_at,
        },
        Ok(None) => SessionLookup::Unknown,
        Err(e) => SessionLookup::Failed(e.to_string()),
    }
}

/// The revocation and the cells of `revoke session JTI --cell CELL`, with a note or an
/// unresolved fan-out for the report.
async fn session_targets(
    fleet: &Revoker,
    named_cell: &FleetCell,
    jti: &SessionId,
    now: UnixSeconds,
) -> (RevocationKind, Vec<Target>, SessionFanout) {
    let named = (named_cell.clone(), Role::Named, None);
    // Without the record the expiry is unknown: the longest a session can live is an upper
    // bound (the minting cell keeps it until the recorded expiry anyway).
    let longest = now + protocol::token::DEFAULT_SESSION_LIFETIME_S + protocol::token::LEEWAY_S;
    match look_up_session(&fleet.admin, named_cell, jti).await {
        SessionLookup::Known {
            contractor,
            expires_at,
        } => {
            let kind = RevocationKind::Session {
                jti: jti.clone(),
                // Every cell keeps it as long as the session (and so any ticket for it) lives.
                exp: expires_at.saturating_add(protocol::token::LEEWAY_S),
            };
            let mut targets = vec![named];
            targets.extend(
                fleet
                    .cells_of_contractor(&contractor)
                    .await
                    .into_iter()
                    .filter(|(c, _, _)| c.id != named_cell.id),
            );
            (
                kind,
                targets,
                SessionFanout {
                    contractor: Some(contractor),
                    ..SessionFanout::default()
                },
            )
        }
        SessionLookup::Unknown => (
            RevocationKind::Session {
                jti: jti.clone(),
                exp: longest,
            },
            vec![named],
            SessionFanout {
                note: Some(format!(
                    "{} holds no record of this session: revoked there only, no other cell asked",
                    named_cell.id
                )),
                ..SessionFanout::default()
            },
        ),
        SessionLookup::Failed(e) => (
            RevocationKind::Session {
                jti: jti.clone(),
                exp: longest,
            },
            vec![named],
            SessionFanout {
                unresolved: Some(format!(
                    "{} could not be asked which contractor the session belongs to, so the cells \
                     that hold it were not asked: {e}",
                    named_cell.id
                )),
                ..SessionFanout::default()
            },
        ),
    }
}

/// What a session revocation's fan-out adds to the report.
#[derive(Debug, Default)]
struct SessionFanout {
    contractor: Option<ContractorId>,
    note: Option<String>,
    unresolved: Option<String>,
}

/// What [`Revoker::revoke`] does: the cells that matter, then the revocation at each.
async fn revoke_in(fleet: &Revoker, command: &RevokeCommand) -> Result<RevokeReport> {
    let path = fleet.path.as_path();
    let now = protocol::time::system_clock().now();
    let before = |a: &AuditArgs| a.before.unwrap_or(now + 1);
    let mut fanout = SessionFanout::default();
    let (kind, audit, targets): (RevocationKind, &AuditArgs, Vec<Target>) = match command {
        RevokeCommand::Session { jti, cell, audit } => {
            let named_cell = named(&fleet.fleet, path, cell)?;
            let (kind, targets, f) = session_targets(fleet, named_cell, jti, now).await;
            fanout = f;
            (kind, audit, targets)
        }
        RevokeCommand::Key { kid, cell, audit } => (
            RevocationKind::Key { kid: kid.clone() },
            audit,
            vec![(named(&fleet.fleet, path, cell)?.clone(), Role::Named, None)],
        ),
        RevokeCommand::Cell { cell, audit } => (
            RevocationKind::Cell {
                before: before(audit),
            },
            audit,
            vec![(named(&fleet.fleet, path, cell)?.clone(), Role::Named, None)],
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

fn role_text(r: Role) -> &'static str {
    match r {
        Role::Named => "named",
        Role::Owner => "owner",
        Role::PreviousOwner => "previous owner",
        Role::Placement => "placement",
        Role::Unknown => "unknown",
    }
}

/// `cellctl revoke …`: prints each cell's outcome; fails unless every cell confirmed.
pub async fn run(path: &Path, command: &RevokeCommand, json_out: bool) -> Result<()> {
    let report = revoke(path, command).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A session id is random base64url: one in 64 starts with `-`, and a security team
    /// pastes it as it is.
    #[test]
    fn ids_that_start_with_a_hyphen_are_ids_not_flags() {
        use clap::Parser as _;
        let parse = |args: &[&str]| crate::cli::Cli::try_parse_from(args).map(|c| c.command);
        let jti = "-nR2xZq0cV1b4w7yA8dE3f";
        match parse(&[
            "cellctl", "revoke", "session", jti, "--cell", "cell-01", "--reason", "lost",
        ]) {
            Ok(crate::cli::Command::Revoke {
                command:
                    RevokeCommand::Session {
                        jti: got, audit, ..
                    },
            }) => {
                assert_eq!(got.as_str(), jti);
                assert_eq!(audit.reason, "lost");
            }
            other => panic!("{other:?}"),
        }
        match parse(&[
            "cellctl", "revoke", "key", "-k1", "--cell", "cell-01", "--reason", "x",
        ]) {
            Ok(crate::cli::Command::Revoke {
                command: RevokeCommand::Key { kid, .. },
            }) => assert_eq!(kid.as_str(), "-k1"),
            other => panic!("{other:?}"),
        }
        // A flag that is not one is still refused, not taken as an id of bad characters.
        assert!(parse(&["cellctl", "revoke", "session", "--cel", "x"]).is_err());
    }

    #[test]
    fn a_subject_names_its_contractor() {
        let sub = SubjectId::new("c-40711.tech-1").unwrap();
        assert_eq!(contractor_of(&sub).unwrap().as_str(), "c-40711");
        let dotted = SubjectId::new("c-7.ana.maria").unwrap();
        assert_eq!(contractor_of(&dotted).unwrap().as_str(), "c-7");
        assert!(contractor_of(&SubjectId::new("nodot").unwrap()).is_err());
        assert!(contractor_of(&SubjectId::new("C_X.t").unwrap()).is_err());
    }

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
