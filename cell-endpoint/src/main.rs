//! `cellbind-cell-endpoint --config PATH.toml`: wiring only.

use std::path::PathBuf;

use cellbind_cell_endpoint::{Config, run};
use clap::Parser;

/// The cell's public HTTPS edge.
#[derive(Debug, Parser)]
#[command(name = "cellbind-cell-endpoint", version)]
struct Args {
    /// TOML configuration file (keys in docs/INTERNALS.md); `CELLBIND_<FIELD>` overrides.
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    runtime::logging::init("info");
    let args = Args::parse();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cellbind-cell-endpoint: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match run(config, runtime::shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellbind-cell-endpoint: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
