//! The `main` of every Cellbind server binary: `--config PATH.toml` on the command line, logging
//! to stderr, run until stopped, and one line on stderr (plus a log line) when it fails.

use std::fmt::Display;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};

/// The command line of a server binary.
#[derive(Debug, Parser)]
pub struct ServerArgs {
    /// TOML configuration file (fields may be overridden by CELLBIND_<FIELD>).
    #[arg(long)]
    pub config: PathBuf,
}

/// What a server binary says about itself in `--help` and `--version`; [`crate::binary!`]
/// fills it from the binary's own Cargo metadata.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    /// The binary's name (`cellbind-auth-service`), also the prefix of its failure line.
    pub name: &'static str,
    /// Its version.
    pub version: &'static str,
    /// The one-line description of `--help`.
    pub about: &'static str,
}

/// The [`Binary`] of the binary being compiled: its name, its package's version and
/// description (a macro, so that `env!` reads the calling crate's metadata, not this one's).
#[macro_export]
macro_rules! binary {
    () => {
        $crate::server::Binary {
            name: env!("CARGO_BIN_NAME"),
            version: env!("CARGO_PKG_VERSION"),
            about: env!("CARGO_PKG_DESCRIPTION"),
        }
    };
}

/// The command line of a server binary with subcommands (`backup`, `restore`): `--config`
/// and, optionally, one command `C`.
#[derive(Debug, Parser)]
pub struct ServerArgsWith<C: clap::Subcommand> {
    /// TOML configuration file (fields may be overridden by CELLBIND_<FIELD>); given before
    /// the command.
    #[arg(long)]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Option<C>,
}

/// Parses the command line (clap prints help, version and usage errors and exits), installs
/// logging (`info` unless `RUST_LOG` says otherwise), then runs `run` with the configuration
/// path on a multi-threaded tokio runtime. A failure is logged and printed as
/// `{name}: {error}` on stderr, and the exit code is 1.
pub fn main<F, Fut, E>(binary: Binary, run: F) -> ExitCode
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let command = ServerArgs::command()
        .name(binary.name)
        .version(binary.version)
        .about(binary.about);
    let args = match ServerArgs::from_arg_matches(&command.get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    run_main(binary, run(args.config))
}

/// [`main`] for a binary with subcommands `C`: `run` gets the configuration path and the
/// command given, if any.
pub fn main_with<C, F, Fut, E>(binary: Binary, run: F) -> ExitCode
where
    C: clap::Subcommand,
    F: FnOnce(PathBuf, Option<C>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let command = ServerArgsWith::<C>::command()
        .name(binary.name)
        .version(binary.version)
        .about(binary.about);
    let args = match ServerArgsWith::<C>::from_arg_matches(&command.get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    run_main(binary, run(args.config, args.command))
}

/// Logging, a runtime, `fut` on it, and the exit code.
fn run_main<Fut, E>(binary: Binary, fut: Fut) -> ExitCode
where
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    crate::logging::init("info");
    let result = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(fut).map_err(|e| e.to_string()),
        Err(e) => Err(format!("cannot start the async runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{} stopped", binary.name);
            eprintln!("{}: {e}", binary.name);
            ExitCode::FAILURE
        }
    }
}
