//! The `main` of every Cellbind server binary: `--config PATH.toml` on the command line (read
//! strictly, see [`crate::config`]), logging to stderr in the configured format, run until
//! stopped, and one line on stderr (plus a log line) when it fails. `--check-config` validates
//! the file exactly as a start would, prints the effective configuration (secrets redacted) as
//! TOML on stdout and exits. Both check every file the configuration names
//! ([`ServerConfig::files`]): it must exist and be readable (unless the start creates it), and a
//! secret file must grant nothing to others (ATTACKS A30); the first that fails stops them, one
//! line naming the key and the file.

use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::logging::LogFormat;
use crate::secret::SecretError;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};

/// What [`main`] needs of a server's configuration type: how to load (and validate) it from
/// its file, the log format it asks for, and the files it names. It is printed by
/// `--check-config`.
pub trait ServerConfig: serde::Serialize + Sized {
    /// Why a configuration could not be loaded.
    type Error: Display;
    /// Reads and validates the file (and the `CELLBIND_*` overrides), as a start does.
    fn load(path: &Path) -> Result<Self, Self::Error>;
    /// The `log_format` key.
    fn log_format(&self) -> LogFormat;
    /// Every file the configuration names and a start reads (certificates, CAs, tokens, keys,
    /// a database URL), by its key, with how the start uses it ([`FileUse`]). Folders (data,
    /// state, publication) are not files: a start makes them.
    fn files(&self) -> Vec<ConfigFile<'_>>;
    /// The files of [`ServerConfig::files`] holding a secret: a start and `--check-config`
    /// refuse one that others may read.
    fn secret_files(&self) -> Vec<ConfigFile<'_>> {
        self.files().into_iter().filter(|f| f.is_secret()).collect()
    }
}

/// How a start uses a file its configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUse {
    /// Read at start (a certificate, a CA): it must exist and be readable.
    Read,
    /// A secret read at start (a token, a TLS key, a database URL): it must exist, be readable
    /// and grant nothing to others.
    Secret,
    /// A secret the start creates (0600) when it is missing (the auth-service's key-encryption
    /// key, the control plane's map signing key): it may be missing; when present it must be
    /// readable and grant nothing to others.
    SecretMadeAtStart,
}

/// A file a configuration names: the key that names it (`tls_key`, `cells[1].tls_cert_file`),
/// the path, and how the start uses it.
#[derive(Debug, Clone)]
pub struct ConfigFile<'a> {
    pub key: String,
    pub path: &'a Path,
    pub used: FileUse,
}

/// Why a file a configuration names would stop the start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    #[error("{} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("{} is not a file", path.display())]
    NotAFile { path: PathBuf },
    #[error("{} cannot be read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Secret(#[from] SecretError),
}

impl<'a> ConfigFile<'a> {
    /// A file read at start ([`FileUse::Read`]).
    pub fn read(key: impl Into<String>, path: &'a Path) -> Self {
        Self::new(key, path, FileUse::Read)
    }

    /// A secret read at start ([`FileUse::Secret`]).
    pub fn secret(key: impl Into<String>, path: &'a Path) -> Self {
        Self::new(key, path, FileUse::Secret)
    }

    /// A secret the start creates when missing ([`FileUse::SecretMadeAtStart`]).
    pub fn secret_made_at_start(key: impl Into<String>, path: &'a Path) -> Self {
        Self::new(key, path, FileUse::SecretMadeAtStart)
    }

    fn new(key: impl Into<String>, path: &'a Path, used: FileUse) -> Self {
        Self {
            key: key.into(),
            path,
            used,
        }
    }

    /// Whether the file holds a secret.
    pub fn is_secret(&self) -> bool {
        matches!(self.used, FileUse::Secret | FileUse::SecretMadeAtStart)
    }

    /// Refuses the file as the start would: missing (unless the start creates it), not a
    /// regular file (symbolic links are followed: a mounted secret is one), not readable by
    /// this process, or, for a secret, granting any permission to others.
    pub fn check(&self) -> Result<(), FileError> {
        let path = self.path.to_owned();
        let meta = match std::fs::metadata(self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return match self.used {
                    FileUse::SecretMadeAtStart => Ok(()),
                    FileUse::Read | FileUse::Secret => Err(FileError::Missing { path }),
                };
            }
            Err(source) => return Err(FileError::Unreadable { path, source }),
        };
        if !meta.is_file() {
            return Err(FileError::NotAFile { path });
        }
        if self.is_secret() {
            crate::secret::refuse_readable_by_others(self.path)?;
        }
        // Opening it is what tells whether this process may read it (its user, its groups,
        // ACLs); nothing is read.
        std::fs::File::open(self.path)
            .map(drop)
            .map_err(|source| FileError::Unreadable { path, source })
    }
}

/// Refuses the first file `config` names that would stop its start ([`ConfigFile::check`]):
/// the key and the file in the message.
pub fn check_files<C: ServerConfig>(config: &C) -> Result<(), String> {
    for f in config.files() {
        f.check().map_err(|e| format!("{}: {e}", f.key))?;
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
    let config = match C::load(path) {
        Ok(config) => config,
        Err(e) if check_config => {
            eprintln!("{}: {e}", binary.name);
            return ExitCode::FAILURE;
        }
        Err(e) => {
            crate::logging::init("info");
            return failed(binary, &e.to_string());
        }
    };
    if let Err(e) = check_files(&config) {
        if check_config {
            eprintln!("{}: {e}", binary.name);
            return ExitCode::FAILURE;
        }
        crate::logging::init_with("info", config.log_format());
        return failed(binary, &e);
    }
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
