use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = control_plane::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Plain text unless a person is watching: log files are read by tools and tests.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match control_plane::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellctl: {e}");
            ExitCode::FAILURE
        }
    }
}
