//! `cellctl`: the operator's command line (DESIGN §8). Human text by default, JSON with
//! `--json`; exit 0 on success, non-zero with a one-line reason otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use protocol::CellId;
use serde::{Deserialize, Serialize};

use crate::dev::{self, FleetFile, FleetOptions, admin_call, client_trusting_file};
use crate::error::{CpError, Result};

/// Default `--fleet`.
pub const DEFAULT_FLEET_FILE: &str = "dev-fleet/fleet.json";

/// Cellbind operator CLI.
#[derive(Debug, Parser)]
#[command(name = "cellctl", version, about)]
pub struct Cli {
    /// The fleet description to act on.
    #[arg(long, global = true, default_value = DEFAULT_FLEET_FILE)]
    pub fleet: PathBuf,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a local fleet of five cells and a control plane; runs until Ctrl-C.
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
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Sign in (the password is read from stdin) at the contractor's cell.
    SignIn { contractor: String, login: String },
    /// GET a path at the session's cell.
    Get { path: String },
    /// POST to a path at the session's cell (with an idempotency key).
    Post {
        path: String,
        /// JSON body.
        #[arg(long)]
        body: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// The fleet directory.
    #[arg(long, default_value = dev::DEFAULT_DIR)]
    pub dir: PathBuf,
    /// First port: control plane at B; cell n on 127.0.0.n: edge B+3, auth-service B+4 (public)
    /// and B+6 (internal), app B+5 (public) and B+7 (internal).
    #[arg(long, default_value_t = dev::DEFAULT_PORT_BASE)]
    pub port_base: u16,
}

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
    match cli.command {
        Command::Dev(args) => run_dev(args, cli.json).await,
        Command::Status => run_status(&cli.fleet, cli.json).await,
        Command::Keys {
            command: KeysCommand::Rotate { cell },
        } => run_rotate(&cli.fleet, &cell, cli.json).await,
        Command::Client {
            session_file,
            command,
        } => run_client(&cli.fleet, session_file, command, cli.json).await,
        Command::Migrate(args) => crate::migrate::run_cli(&cli.fleet, args, cli.json).await,
        Command::Revoke { command } => crate::revoke::run(&cli.fleet, &command, cli.json).await,
    }
}

/// Longest password read from stdin, in bytes.
pub const MAX_PASSWORD_BYTES: usize = protocol::ids::PASSWORD_MAX_BYTES;

fn read_password_from_stdin() -> Result<zeroize::Zeroizing<String>> {
    use std::io::BufRead as _;
    let mut line = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CpError::io("reading the password from stdin", e))?;
    let pw = zeroize::Zeroizing::new(line.trim_end_matches(['\r', '\n']).to_owned());
    if pw.is_empty() {
        return Err(CpError::Client("no password on stdin".into()));
    }
    if pw.len() > MAX_PASSWORD_BYTES {
        return Err(CpError::Client("the password is too long".into()));
    }
    Ok(pw)
}

async fn run_client(
    fleet: &Path,
    session_file: Option<PathBuf>,
    command: ClientCommand,
    json: bool,
) -> Result<()> {
    let client_err = |e: sdk::Error| CpError::Client(e.to_string());
    let mut cfg = sdk::cli::CliConfig::from_fleet(fleet)
        .await
        .map_err(client_err)?;
    if let Some(p) = session_file {
        cfg.session_file = p;
    }
    let out = match command {
        ClientCommand::SignIn { contractor, login } => {
            let pw = read_password_from_stdin()?;
            sdk::cli::sign_in(&cfg, &contractor, &login, &pw).await
        }
        ClientCommand::Get { path } => sdk::cli::get(&cfg, &path).await,
        ClientCommand::Post { path, body } => sdk::cli::post(&cfg, &path, body.as_deref()).await,
    }
    .map_err(client_err)?;
    if json {
        println!("{}", out.json);
    } else {
        println!("{}", out.human);
    }
    if out.success {
        Ok(())
    } else {
        let status = out.json.get("status").cloned().unwrap_or_default();
        let code = out
            .json
            .pointer("/body/error")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        Err(CpError::Client(
            format!("the cell answered {status} {code}")
                .trim_end()
                .to_owned(),
        ))
    }
}

async fn wait_for_stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

async fn run_dev(args: DevArgs, json: bool) -> Result<()> {
    let exe = std::env::current_exe().map_err(|e| CpError::io("locating cellctl", e))?;
    let bin_dir = exe
        .parent()
        .ok_or_else(|| CpError::Config("cellctl has no parent directory".into()))?
        .to_path_buf();
    let opts = FleetOptions::new(&args.dir, bin_dir).port_base(args.port_base);
    let fleet = dev::Fleet::start(opts).await?;
    let f = fleet.file();
    let fleet_path = fleet.fleet_file_path();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "fleet_file": fleet_path,
                "started_in_ms": fleet.started_in().as_millis(),
                "control_plane": f.control_plane,
                "cells": f.cells,
            })
        );
    } else {
        print_dev_summary(&fleet, &fleet_path);
    }
    wait_for_stop_signal().await;
    if !json {
        println!("stopping the fleet…");
    }
    fleet.stop().await;
    if !json {
        println!("stopped.");
    }
    Ok(())
}

fn print_dev_summary(fleet: &dev::Fleet, fleet_path: &Path) {
    let f = fleet.file();
    let ca = f.ca_cert.display();
    println!(
        "Cellbind dev fleet: {} cells, {} contractors, started in {:.1} s",
        f.cells.len(),
        f.demo.dispatchers.len(),
        fleet.started_in().as_secs_f64()
    );
    println!("  fleet file     {}", fleet_path.display());
    println!("  CA certificate {ca}");
    println!(
        "  control plane  {} (pid {})",
        f.control_plane.url, f.control_plane.pid
    );
    for c in &f.cells {
        println!(
            "  {}        {}  edge pid {}, auth-service {} (internal {}) pid {}, app {} (internal {}) pid {}",
            c.id,
            c.endpoint,
            c.endpoint_pid,
            c.auth_public_url,
            c.auth_service.url,
            c.auth_service.pid,
            c.app_url,
            c.app_internal_url,
            c.app_pid
        );
    }
    println!(
        "  secrets        {}/secrets/<cell>/{{admin,feed,app,edge}}.token, control-plane.token",
        fleet.dir().display()
    );
    println!("  logs           {}/<component>.log", fleet.dir().display());
    if let Some(u) = f.demo.technicians.first()
        && let Some(cell) = f.cell(&u.cell_id)
    {
        println!();
        println!("Try it:");
        println!(
            "  curl --cacert {ca} -X POST {}/v1/sessions -H 'content-type: application/json' \\\n    -d '{{\"contractor_id\":\"{}\",\"login\":\"{}\",\"password\":\"{}\",\"client\":\"field\"}}'",
            cell.endpoint, u.contractor_id, u.login, u.password
        );
        println!(
            "  curl --cacert {ca} {}/api/routes/today -H \"authorization: Bearer $SESSION\"",
            cell.endpoint
        );
        println!("  cellctl status --fleet {}", fleet_path.display());
    }
    println!();
    println!("Press Ctrl-C to stop every process of the fleet.");
}

/// One auth-service's `GET /admin/v1/status`, as far as `cellctl` reads it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AuthStatus {
    #[serde(default)]
    pub seq: u64,
    #[serde(default)]
    pub kids: Vec<KidStatus>,
    #[serde(default)]
    pub map_version: Option<u64>,
    #[serde(default)]
    pub users: Option<u64>,
    #[serde(default)]
    pub contractors: Option<u64>,
    #[serde(default)]
    pub instances: Vec<InstanceStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KidStatus {
    pub kid: String,
    pub status: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub id: String,
    #[serde(default)]
    pub applied_seq: u64,
    #[serde(default)]
    pub last_seen: u64,
}

/// What `cellctl status` reports for one cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellReport {
    pub id: CellId,
    pub reachable: bool,
    pub endpoint_ready: bool,
    pub kids: Vec<KidStatus>,
    pub map_version: Option<u64>,
    pub feed_seq: Option<u64>,
    pub users: Option<u64>,
    pub contractors: Option<u64>,
    /// Per edge instance: the feed sequence it applied and how long ago it last synced.
    pub instances: Vec<InstanceReport>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceReport {
    pub id: String,
    pub applied_seq: u64,
    pub state_age_s: u64,
}

/// What `cellctl status` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub control_plane: ControlPlaneReport,
    pub cells: Vec<CellReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlPlaneReport {
    pub url: String,
    pub reachable: bool,
    pub map_version: Option<u64>,
}

/// Probe timeout of `cellctl status`, in milliseconds.
pub const STATUS_TIMEOUT_MS: u64 = 3_000;

async fn cell_report(client: &reqwest::Client, cell: &dev::FleetCell, now: u64) -> CellReport {
    let status = admin_call(
        client,
        reqwest::Method::GET,
        &format!("{}/admin/v1/status", cell.auth_service.url),
        &cell.admin(),
        None,
    )
    .await
    .and_then(|v| {
        serde_json::from_value::<AuthStatus>(v)
            .map_err(|e| CpError::Http(format!("status answer: {e}")))
    });
    let ready = client
        .get(format!("{}/readyz", cell.endpoint))
        .timeout(Duration::from_millis(STATUS_TIMEOUT_MS))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    match status {
        Ok(s) => CellReport {
            id: cell.id.clone(),
            reachable: true,
            endpoint_ready: ready,
            kids: s.kids,
            map_version: s.map_version,
            feed_seq: Some(s.seq),
            users: s.users,
            contractors: s.contractors,
            instances: s
                .instances
                .into_iter()
                .map(|i| InstanceReport {
                    id: i.id,
                    applied_seq: i.applied_seq,
                    state_age_s: now.saturating_sub(i.last_seen),
                })
                .collect(),
            error: None,
        },
        Err(e) => CellReport {
            id: cell.id.clone(),
            reachable: false,
            endpoint_ready: ready,
            kids: Vec::new(),
            map_version: None,
            feed_seq: None,
            users: None,
            contractors: None,
            instances: Vec::new(),
            error: Some(e.to_string()),
        },
    }
}

fn load_fleet(path: &Path) -> Result<(FleetFile, reqwest::Client)> {
    let f = FleetFile::load(path)?;
    let client = client_trusting_file(&f.ca_cert)?;
    Ok((f, client))
}

/// Gathers the status of every cell of a fleet.
pub async fn status(path: &Path) -> Result<StatusReport> {
    let (f, client) = load_fleet(path)?;
    let now = protocol::time::system_clock().now();
    let cells =
        futures::future::join_all(f.cells.iter().map(|c| cell_report(&client, c, now))).await;
    let cp_map = client
        .get(format!("{}/v1/placement-map", f.control_plane.url))
        .timeout(Duration::from_millis(STATUS_TIMEOUT_MS))
        .send()
        .await;
    let (reachable, map_version) = match cp_map {
        Ok(r) => (
            true,
            r.json::<protocol::map::SignedMap>()
                .await
                .ok()
                .map(|m| m.map.version),
        ),
        Err(_) => (false, None),
    };
    Ok(StatusReport {
        control_plane: ControlPlaneReport {
            url: f.control_plane.url,
            reachable,
            map_version,
        },
        cells,
    })
}

async fn run_status(path: &Path, json: bool) -> Result<()> {
    let report = status(path).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| CpError::Internal(e.to_string()))?
        );
    } else {
        let cp = &report.control_plane;
        println!(
            "control plane  {}  {}  map v{}",
            cp.url,
            if cp.reachable { "up" } else { "UNREACHABLE" },
            cp.map_version.map_or("?".into(), |v| v.to_string())
        );
        for c in &report.cells {
            if !c.reachable {
                println!(
                    "{}  auth-service UNREACHABLE ({}), edge {}",
                    c.id,
                    c.error.as_deref().unwrap_or("no answer"),
                    if c.endpoint_ready {
                        "ready"
                    } else {
                        "NOT READY"
                    }
                );
                continue;
            }
            let kids: Vec<String> = c
                .kids
                .iter()
                .map(|k| format!("{} ({})", k.kid, k.status))
                .collect();
            println!(
                "{}  auth-service up, edge {}, map v{}, feed seq {}, keys: {}",
                c.id,
                if c.endpoint_ready {
                    "ready"
                } else {
                    "NOT READY"
                },
                c.map_version.map_or("?".into(), |v| v.to_string()),
                c.feed_seq.unwrap_or(0),
                kids.join(", ")
            );
            for i in &c.instances {
                println!(
                    "    instance {}: applied seq {}, state age {} s",
                    i.id, i.applied_seq, i.state_age_s
                );
            }
        }
    }
    let down: Vec<String> = report
        .cells
        .iter()
        .filter(|c| !c.reachable || !c.endpoint_ready)
        .map(|c| c.id.to_string())
        .collect();
    if down.is_empty() {
        Ok(())
    } else {
        Err(CpError::Fleet(format!(
            "{} of {} cells are not fully reachable: {}",
            down.len(),
            report.cells.len(),
            down.join(", ")
        )))
    }
}

/// The answer of `POST /admin/v1/keys/rotate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rotated {
    pub current: String,
    pub next: String,
    #[serde(default)]
    pub retired: Vec<String>,
}

/// Rotates one cell's keys.
pub async fn rotate(path: &Path, cell: &CellId) -> Result<Rotated> {
    let (f, client) = load_fleet(path)?;
    let c = f
        .cell(cell)
        .ok_or_else(|| CpError::Config(format!("{cell} is not in {}", path.display())))?;
    let v = admin_call(
        &client,
        reqwest::Method::POST,
        &format!("{}/admin/v1/keys/rotate", c.auth_service.url),
        &c.admin(),
        None,
    )
    .await?;
    serde_json::from_value(v).map_err(|e| CpError::Http(format!("rotate answer: {e}")))
}

async fn run_rotate(path: &Path, cell: &CellId, json: bool) -> Result<()> {
    let r = rotate(path, cell).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "cell": cell, "current": r.current, "next": r.next, "retired": r.retired })
        );
    } else {
        println!(
            "{cell}: current key {}, next key {}, retired: {}",
            r.current,
            r.next,
            if r.retired.is_empty() {
                "none".to_string()
            } else {
                r.retired.join(", ")
            }
        );
    }
    Ok(())
}
