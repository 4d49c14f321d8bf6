//! `cellctl`: parses the command line, runs it, and prints one line on stderr when it fails.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cellctl::cli::Cli::parse();
    runtime::logging::init("warn");
    match cellctl::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellctl: {e}");
            ExitCode::FAILURE
        }
    }
}
