//! `cellctl`: the operator's command line (DESIGN §8). Human text by default, JSON with
//! `--json`; exit 0 on success, non-zero with a one-line reason otherwise.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use protocol::CellId;

use crate::client::ClientCommand;
use crate::dev::DevArgs;
use crate::error::Result;
use crate::revoke::RevokeCommand;
use protocol::admin::cell::WithdrawRequest;

/// Default `--fleet`.
pub const DEFAULT_FLEET_FILE: &str = "dev-fleet/fleet.json";

/// Cellbind operator CLI.
#[derive(Debug, Parser)]
#[command(name = "cellctl", version, about)]
pub struct Cli {
    /// The fleet description to act on: a dev fleet's `fleet.json` (a shortcut for development).
    #[arg(long, global = true, default_value = DEFAULT_FLEET_FILE)]
    pub fleet: PathBuf,
    /// The inventory of a real fleet (`cells.toml`: the control plane, each cell's services and
    /// the files of its own tokens; see `fleet_description::inventory`). Used instead of `--fleet`.
    #[arg(long, global = true)]
    pub inventory: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a local fleet of five cells and a control plane; runs until Ctrl-C.
    // Runs a development build's `cellctl-dev`, beside this binary (`crate::dev`).
    Dev(DevArgs),
    /// Per cell: reachable, key ids, map version, feed sequence, state ages.
    Status,
    /// Signing keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The client SDK from the command line; the session is kept in a file.
    Client {
        /// Where the session is kept (default: `client-session.json` beside the fleet file).
        #[arg(long, global = true)]
        session_file: Option<PathBuf>,
        #[command(subcommand)]
        command: ClientCommand,
    },
    /// Move a contractor to another cell (resumes an interrupted migration).
    Migrate(crate::migrate::MigrateArgs),
    /// Revoke sessions at every cell that matters; prints each cell's outcome.
    Revoke {
        #[command(subcommand)]
        command: crate::revoke::RevokeCommand,
    },
    /// Game days: the seed's exercises on synthetic contractors, with faults, stop conditions
    /// and a report (`list`, `run`, `report`, `undo`).
    Gameday(crate::gameday::GamedayArgs),
    /// Mint an edge instance's own feed credential from the cell's feed secret (offline).
    EdgeCredential(crate::edge_credential::EdgeCredentialArgs),
    /// Contractors: add (placed at a cell), list, disable (`users` for their people).
    Contractors {
        #[command(subcommand)]
        command: crate::provision::ContractorsCommand,
    },
    /// Technicians and dispatchers: add, list, disable, enable, reset-password, import (CSV).
    Users {
        #[command(subcommand)]
        command: crate::provision::UsersCommand,
    },
    /// The signed placement map and its key, for shipping in an app (`map export --out DIR`).
    Map {
        #[command(subcommand)]
        command: MapCommand,
    },
}

/// `cellctl map …`.
#[derive(Debug, Subcommand)]
pub enum MapCommand {
    /// Write the signed map and the map key (and with `--with-ca` the CA) into a directory.
    Export(crate::map_export::ExportArgs),
}

/// `cellctl keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Rotate a cell's signing keys: next becomes current, current becomes retired.
    Rotate {
        #[arg(long)]
        cell: CellId,
    },
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let fleet = cli.inventory.clone().unwrap_or_else(|| cli.fleet.clone());
    let cli = Cli { fleet, ..cli };
    match cli.command {
        Command::Dev(args) => crate::dev::run_dev(args, cli.json),
        Command::Status => crate::status::run_status(&cli.fleet, cli.json).await,
        Command::Keys {
            command: KeysCommand::Rotate { cell },
        } => crate::status::run_rotate(&cli.fleet, &cell, cli.json).await,
        Command::Client {
            session_file,
            command,
        } => crate::client::run(&cli.fleet, session_file, command, cli.json).await,
        Command::Migrate(args) => crate::migrate::run_cli(&cli.fleet, args, cli.json).await,
        Command::Revoke {
            command: RevokeCommand::List { cell },
        } => crate::withdraw::run_list(&cli.fleet, &cell, cli.json).await,
        Command::Revoke {
            command:
                RevokeCommand::Withdraw {
                    seq,
                    cell,
                    reason,
                    by,
                    wait_edges,
                },
        } => {
            let req = WithdrawRequest {
                reason,
                by: crate::edges::operator(by.as_ref()),
            };
            crate::withdraw::run_withdraw(&cli.fleet, &cell, seq, &req, wait_edges, cli.json).await
        }
        Command::Revoke { command } => crate::revoke::run(&cli.fleet, &command, cli.json).await,
        Command::EdgeCredential(args) => crate::edge_credential::run(&args, cli.json),
        Command::Gameday(args) => crate::gameday::run_cli(&cli.fleet, args, cli.json).await,
        Command::Contractors { command } => {
            crate::provision::run_contractors(&cli.fleet, command, cli.json).await
        }
        Command::Users { command } => {
            crate::provision::run_users(&cli.fleet, command, cli.json).await
        }
        Command::Map {
            command: MapCommand::Export(args),
        } => crate::map_export::run(&cli.fleet, &args, cli.json).await,
    }
}
