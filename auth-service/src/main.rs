//! `cellbind-auth-service --config PATH.toml`: wires the library together.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Cellbind per-cell auth-service.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Path of the TOML configuration (overridden by CELLBIND_<FIELD> variables).
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    runtime::logging::init("info");
    let args = Args::parse();
    let result = match cellbind_auth_service::Config::load(&args.config) {
        Ok(config) => cellbind_auth_service::run(config).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "auth-service stopped");
            eprintln!("cellbind-auth-service: {e}");
            ExitCode::FAILURE
        }
    }
}
