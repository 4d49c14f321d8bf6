//! The `main` of every Cellbind server binary: `--config PATH.toml` on the command line (read
//! strictly, see [`crate::config`]), logging to stderr in the configured format, run until
//! stopped, and one line on stderr (plus a log line) when it fails. `--check-config` validates
//! the file exactly as a start would, prints the effective configuration (secrets redacted) as
//! TOML on stdout and exits. Both refuse a configuration naming a secret file that others may
//! read ([`ServerConfig::secret_files`], ATTACKS A30), naming the key and the file.

use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::logging::LogFormat;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};

/// What [`main`] needs of a server's configuration type: how to load (and validate) it from
/// its file, the log format it asks for, and the secret files it names. It is printed by
/// `--check-config`.
pub trait ServerConfig: serde::Serialize + Sized {
    /// Why a configuration could not be loaded.
    type Error: Display;
    /// Reads and validates the file (and the `CELLBIND_*` overrides), as a start does.
    fn load(path: &Path) -> Result<Self, Self::Error>;
    /// The `log_format` key.
    fn log_format(&self) -> LogFormat;
    /// Every file holding a secret the configuration names (tokens, keys, the TLS private key,
    /// a database URL), by its key: a start and `--check-config` refuse one that others may
    /// read.
    fn secret_files(&self) -> Vec<SecretFile<'_>>;
}

/// A secret file a configuration names, and the key that names it.
#[derive(Debug, Clone, Copy)]
pub struct SecretFile<'a> {
    pub key: &'static str,
    pub path: &'a Path,
}

impl<'a> SecretFile<'a> {
    pub fn new(key: &'static str, path: &'a Path) -> Self {
        Self { key, path }
    }
}

/// Refuses the first secret file of `config` that others may read (the key and the file in the
/// message). A file that does not exist is left to the start, which reads it (or creates it
/// 0600).
pub fn check_secret_files<C: ServerConfig>(config: &C) -> Result<(), String> {
    for f in config.secret_files() {
        crate::secret::refuse_readable_by_others(f.path).map_err(|e| format!("{}: {e}", f.key))?;
    }
    Ok(())
}

/// The command line of a server binary.
#[derive(Debug, Parser)]
pub struct ServerArgs {
    /// TOML configuration file (fields may be overridden by CELLBIND_<FIELD>).
    #[arg(long)]
    pub config: PathBuf,
    /// Validate the configuration, print it (defaults filled in, environment overrides
    /// applied, secrets redacted) as TOML and exit: 0 when valid, 1 otherwise.
    #[arg(long)]
    pub check_config: bool,
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
    /// Validate the configuration, print it (defaults filled in, environment overrides
    /// applied, secrets redacted) as TOML and exit: 0 when valid, 1 otherwise. Takes no
    /// command.
    #[arg(long)]
    pub check_config: bool,
    #[command(subcommand)]
    pub command: Option<C>,
}

/// Parses the command line (clap prints help, version and usage errors and exits), loads the
/// configuration `C` (`--check-config`: prints it and exits), installs logging in its format
/// (`info` unless `RUST_LOG` says otherwise), then runs `run` with it on a multi-threaded tokio
/// runtime. A failure is logged and printed as `{name}: {error}` on stderr, and the exit code
/// is 1.
pub fn main<C, F, Fut, E>(binary: Binary, run: F) -> ExitCode
where
    C: ServerConfig,
    F: FnOnce(C) -> Fut,
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
    start(binary, &args.config, args.check_config, run)
}

/// [`main`] for a binary with subcommands `Cmd`: `run` gets the configuration and the command
/// given, if any. `--check-config` works without a command.
pub fn main_with<Cmd, C, F, Fut, E>(binary: Binary, run: F) -> ExitCode
where
    Cmd: clap::Subcommand,
    C: ServerConfig,
    F: FnOnce(C, Option<Cmd>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let command = ServerArgsWith::<Cmd>::command()
        .name(binary.name)
        .version(binary.version)
        .about(binary.about);
    let args = match ServerArgsWith::<Cmd>::from_arg_matches(&command.get_matches()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    if args.check_config && args.command.is_some() {
        eprintln!("{}: --check-config takes no command", binary.name);
        return ExitCode::from(2);
    }
    let cmd = args.command;
    start(binary, &args.config, args.check_config, move |c| {
        run(c, cmd)
    })
}

/// Loads the configuration; then either prints it (`check_config`) or installs logging and
/// runs `run` with it.
fn start<C, F, Fut, E>(binary: Binary, path: &Path, check_config: bool, run: F) -> ExitCode
where
    C: ServerConfig,
    F: FnOnce(C) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let config = match C::load(path)
        .map_err(|e| e.to_string())
        .and_then(|c| check_secret_files(&c).map(|()| c))
    {
        Ok(config) => config,
        Err(e) if check_config => {
            eprintln!("{}: {e}", binary.name);
            return ExitCode::FAILURE;
        }
        Err(e) => {
            crate::logging::init("info");
            return failed(binary, &e);
        }
    };
    if check_config {
        return match crate::config::effective_toml(&config) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", binary.name);
                ExitCode::FAILURE
            }
        };
    }
    crate::logging::init_with("info", config.log_format());
    let result = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run(config)).map_err(|e| e.to_string()),
        Err(e) => Err(format!("cannot start the async runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(binary, &e),
    }
}

/// Logs and prints the failure; exit code 1.
fn failed(binary: Binary, e: &str) -> ExitCode {
    tracing::error!(error = %e, "{} stopped", binary.name);
    eprintln!("{}: {e}", binary.name);
    ExitCode::FAILURE
}
