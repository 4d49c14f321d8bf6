//! `cellctl revoke …` on the command line: its arguments (what it prints: `report`).

use clap::Subcommand;
use protocol::time::UnixSeconds;
use protocol::{CellId, ContractorId, Kid, SessionId, SubjectId};

use crate::edges::operator;

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
