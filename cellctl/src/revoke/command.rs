//! `cellctl revoke …` on the command line: its arguments and what it prints.

use std::path::Path;

use clap::Subcommand;
use protocol::time::UnixSeconds;
use protocol::{CellId, ContractorId, Kid, SessionId, SubjectId};
use serde_json::json;

use super::report::{CellOutcome, Role};
use super::revoke;
use crate::edges::operator;
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
    pub(super) fn by(&self) -> String {
        operator(self.by.as_ref())
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
}
