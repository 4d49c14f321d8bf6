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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Plain text unless a person is watching: log files are read by tools and tests.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
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
