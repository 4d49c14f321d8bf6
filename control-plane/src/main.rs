//! `cellbind-control-plane --config PATH.toml`: the placement store and signed map publication.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The Cellbind control plane: placement store and signed placement map publication.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration file (fields may be overridden by CELLBIND_<FIELD>).
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    runtime::logging::init("info");
    let result = match control_plane::config::Config::load(&args.config) {
        Ok(cfg) => control_plane::server::run(cfg).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellbind-control-plane: {e}");
            ExitCode::FAILURE
        }
    }
}
