//! `cellbind-demo-app --config PATH.toml`: wiring only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The Cellbind demo cell app.
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
    let result = match cellbind_demo_app::Config::load(&args.config) {
        Ok(cfg) => cellbind_demo_app::server::run(cfg).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellbind-demo-app: {e}");
            ExitCode::FAILURE
        }
    }
}
