//! `cellbind-cell-endpoint --config PATH.toml`: wiring only.

use std::io::Read as _;
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

async fn shutdown_signal() {
    let exit_on_eof = std::env::var("CELLBIND_EXIT_ON_STDIN_EOF").is_ok_and(|v| v == "1");
    let stdin_eof = async move {
        if !exit_on_eof {
            return std::future::pending::<()>().await;
        }
        let _ = tokio::task::spawn_blocking(|| {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        })
        .await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = stdin_eof => {},
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cellbind-cell-endpoint: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match run(config, shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellbind-cell-endpoint: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
