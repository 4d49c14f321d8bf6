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
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Plain text when stderr is a file or a pipe, so logs can be read and searched.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    cellbind_auth_service::exit_on_stdin_eof_if_asked();
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
