//! `cellctl-dev`, run as `cellctl dev` (the shipped `cellctl` execs it from its own directory):
//! a local fleet ([`devfleet`]) until Ctrl-C. Parses the command line, runs the fleet, and
//! prints one line on stderr when it fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use devfleet::{
    DEFAULT_DIR, DEFAULT_PORT_BASE, Fleet, FleetError, FleetOptions, Result, StoreKind,
};
use fleet_description::{INVENTORY_FILE, Inventory};
use runtime::IoContext as _;

/// Start a local fleet of five cells and a control plane; runs until Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "cellctl dev", bin_name = "cellctl dev")]
struct DevArgs {
    /// The fleet directory.
    #[arg(long, default_value = DEFAULT_DIR)]
    dir: PathBuf,
    /// First port: control plane at B; cell n on 127.0.0.n: edge B+3, auth-service B+4 (public)
    /// and B+6 (internal), app B+5 (public) and B+7 (internal).
    #[arg(long, default_value_t = DEFAULT_PORT_BASE)]
    port_base: u16,
    /// Where the auth-services keep their state: sqlite (one file per auth-service) or
    /// postgres (a private PostgreSQL server in DIR/postgres, one database per cell).
    #[arg(long, default_value_t = StoreKind::Sqlite)]
    store: StoreKind,
    /// Auth-service replicas per cell (1..=4; more than one needs --store postgres). Replica r
    /// of cell n listens on 127.0.r.n with the ports of replica 0.
    #[arg(long, default_value_t = 1)]
    auth_replicas: u8,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// `cellctl`'s global options, which `cellctl dev` may pass on: accepted and ignored (the
    /// fleet is the one this command starts).
    #[arg(long, hide = true)]
    fleet: Option<PathBuf>,
    #[arg(long, hide = true)]
    inventory: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = DevArgs::parse();
    runtime::logging::init("warn");
    match run_dev(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The operator typed `cellctl dev`: the line reads as `cellctl`'s own.
            eprintln!("cellctl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cellctl dev`: starts a fleet beside this binary's siblings, prints where everything is, and
/// runs until Ctrl-C or SIGTERM, then stops every process it started.
async fn run_dev(args: DevArgs) -> Result<()> {
    let json = args.json;
    let exe = std::env::current_exe().context("locating cellctl-dev")?;
    let bin_dir = exe
        .parent()
        .ok_or_else(|| FleetError::Config("cellctl-dev has no parent directory".into()))?
        .to_path_buf();
    let opts = FleetOptions::new(&args.dir, &bin_dir)
        .port_base(args.port_base)
        .store(args.store)
        .auth_replicas(args.auth_replicas);
    let fleet = Fleet::start(opts).await?;
    let f = fleet.file();
    let fleet_path = fleet.fleet_file_path();
    // The same fleet as an inventory (what a real fleet is described by): `--inventory`.
    let inventory_path = fleet.dir().join(INVENTORY_FILE);
    Inventory::of_fleet(f)?.write(&inventory_path)?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "fleet_file": fleet_path,
                "inventory": inventory_path,
                "started_in_ms": fleet.started_in().as_millis(),
                "store": f.store,
                "postgres": f.postgres,
                "control_plane": f.control_plane,
                "cells": f.cells,
            })
        );
    } else {
        print_dev_summary(&fleet, &fleet_path, &bin_dir);
    }
    runtime::shutdown_signal().await;
    if !json {
        println!("stopping the fleet…");
    }
    fleet.stop().await;
    if !json {
        println!("stopped.");
    }
    Ok(())
}

/// What `cellctl dev` prints: where everything is, and commands to try that work as pasted in
/// a fresh shell (absolute paths, the session captured before it is used), the last one from
/// the repository's root.
fn print_dev_summary(fleet: &Fleet, fleet_path: &Path, bin_dir: &Path) {
    let f = fleet.file();
    let ca = f.ca_cert.display();
    println!(
        "Cellbind dev fleet: {} cells, {} contractors, started in {:.1} s",
        f.cells.len(),
        f.demo.dispatchers.len(),
        fleet.started_in().as_secs_f64()
    );
    println!("  fleet file     {}", fleet_path.display());
    println!(
        "  inventory      {}",
        fleet.dir().join(INVENTORY_FILE).display()
    );
    let replicas = f.cells.first().map_or(1, |c| c.replicas().len());
    match &f.postgres {
        Some(pg) => println!(
            "  store          postgres (socket {}, data {}), {replicas} auth-service replica{} per cell",
            pg.socket_dir.display(),
            pg.data_dir.display(),
            if replicas == 1 { "" } else { "s" }
        ),
        None => println!(
            "  store          {}, {replicas} auth-service per cell",
            f.store
        ),
    }
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
        for (r, (s, public)) in c
            .replicas()
            .iter()
            .zip(&c.auth_public_urls)
            .enumerate()
            .skip(1)
        {
            println!(
                "                 auth-service replica {r} {public} (internal {}) pid {}",
                s.url, s.pid
            );
        }
    }
    println!(
        "  secrets        {}/secrets/<cell>/{{admin,app-internal,feed,app,edge}}.token, control-plane.token",
        fleet.dir().display()
    );
    if f.postgres.is_some() {
        println!(
            "                 {}/secrets/<cell>/{{database.url,kek}}",
            fleet.dir().display()
        );
    }
    println!("  logs           {}/<component>.log", fleet.dir().display());
    if let Some(u) = f.demo.technicians.first()
        && let Some(cell) = f.cell(&u.cell_id)
    {
        println!();
        println!("Try it (in a shell with curl and jq):");
        println!(
            "  SESSION=$(curl -s --cacert {ca} -X POST {}/v1/sessions -H 'content-type: application/json' \\\n    -d '{{\"contractor_id\":\"{}\",\"login\":\"{}\",\"password\":\"{}\",\"client\":\"field\"}}' | jq -r .session)",
            cell.endpoint, u.contractor_id, u.login, u.password
        );
        println!(
            "  curl -s --cacert {ca} {}/api/routes/today -H \"authorization: Bearer $SESSION\"",
            cell.endpoint
        );
        println!(
            "  {} status --fleet {}",
            bin_dir.join("cellctl").display(),
            fleet_path.display()
        );
        println!(
            "  scripts/walkthrough {}    # from the repository's root: the README's walkthrough, each status checked",
            fleet.dir().display()
        );
    }
    println!();
    if f.postgres.is_some() {
        println!("Press Ctrl-C to stop every process of the fleet and its PostgreSQL server.");
    } else {
        println!("Press Ctrl-C to stop every process of the fleet.");
    }
}
