//! [`PgServer`]: a private PostgreSQL server for a dev fleet or a test, so that nothing depends
//! on a system cluster. It is initialised with `initdb -A scram-sha-256 -U cellbind` (only when
//! its data directory is not initialised yet), listens on a unix socket only
//! (`listen_addresses=''`), and is stopped with `pg_ctl stop -m fast` by [`PgServer::stop`] or,
//! best effort, on drop.
//!
//! Roles: every connection authenticates with a password (SCRAM-SHA-256; nothing is trusted,
//! since every process of a fleet runs as the same OS user and could reach the socket). The
//! superuser `cellbind` (its password in `<dir>/superuser.password`, 0600) is used only by this
//! module, to create roles and databases and for [`PgServer::psql`]. Each database
//! [`PgServer::create_database`] makes is owned by a role of the same name, which may log in and
//! own that database only (no superuser, no role or database creation; `CONNECT` on every
//! database is revoked from `PUBLIC`), and [`PgServer::url`] is that role's URL: a cell's
//! auth-services reach their own database and no other.
//!
//! Where it lives:
//! - As an ordinary user: the data directory is `<dir>/data`, the socket directory `<dir>/run`,
//!   the server's log `<dir>/postgres.log`.
//! - Unix socket paths are limited to about 100 bytes: when `<dir>/run` is too long the socket
//!   goes to a short private temporary directory instead (removed at stop).
//! - PostgreSQL refuses to run as root. When this process is root, `initdb`, `pg_ctl` and the
//!   server run as the `postgres` user (`runuser -u postgres --`) and the data and socket
//!   directories go to a temporary directory that user owns (0700), removed at stop: a fleet
//!   directory is 0700 and owned by root, so that user could not enter it. The log stays in
//!   `<dir>` (this process opens it and hands it to the server).
//!
//! Two ways to run it:
//! - [`PgServer::start`]: `pg_ctl start -w`; the server runs on its own until
//!   [`PgServer::stop`] or drop (`pg_ctl stop -m fast`).
//! - [`PgServer::start_for_process`] (a dev fleet, or a test binary that keeps one server in a
//!   process-wide static, which is never dropped): the server runs in the foreground under a
//!   small shell watchdog that reads a pipe from this process; when this process exits,
//!   however it exits (SIGKILL included), the pipe closes and the watchdog stops the server
//!   (SIGINT: fast shutdown) and removes the temporary directory it used. [`PgServer::stop`]
//!   closes the pipe and waits for the watchdog.
//!
//! The tools are looked up in `PATH`, then in the highest `/usr/lib/postgresql/<version>/bin`
//! (where Debian's packages put them).
//!
//! Not for production: `fsync` is off (a dev fleet's data is thrown away at its next start; a
//! server that is killed still loses nothing, only a machine crash could).
//!
//! Layout: this file is the server's life (start, initialise, launch, stop); `roles` its
//! databases, roles and `psql`; `tools` the tools it runs and how.

mod roles;
mod tools;

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use runtime::IoContext as _;
use runtime::Secret;
use runtime::secret::write_private;

use crate::error::{FleetError, Result};
use crate::layout::mkdir;
pub use tools::{PG_LIB_DIR, PG_SYSTEM_USER};
use tools::{
    TEMP_PREFIX, Tools, find_tool, give_to_system_user, private_temp_dir, run, running_as_root,
};

/// The superuser `initdb` creates (roles and databases, [`PgServer::psql`]; never in a URL).
pub const PG_USER: &str = "cellbind";
/// File name of the superuser's password in the server's directory (0600).
pub const SUPERUSER_PASSWORD_FILE: &str = "superuser.password";
/// PostgreSQL's own default connection limit.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 100;
/// Longest socket directory used as is: `<dir>/.s.PGSQL.5432` must fit a unix socket address
/// (107 bytes on Linux).
pub const MAX_SOCKET_DIR_LEN: usize = 90;
/// File name of the server's log in its directory.
pub const PG_LOG_FILE: &str = "postgres.log";

/// How long a server may take to accept connections, in seconds.
pub const START_TIMEOUT_S: u64 = 60;
/// Interval between two readiness probes of a process-owned server, in milliseconds.
const READY_PROBE_MS: u64 = 100;

/// The watchdog of [`PgServer::start_for_process`]: runs the server (`$1`, data `$2`, socket
/// folder `$3`, `max_connections` `$4`) in the background, waits for the end of its own stdin
/// (a pipe from the process that owns the server), then stops the server with SIGINT (fast
/// shutdown), waits for it and removes the temporary folder `$5` if one is named.
const WATCHDOG: &str = r#""$1" -D "$2" -k "$3" -c listen_addresses= -c max_connections="$4" -c fsync=off &
p=$!
read -r _ || true
kill -INT "$p" 2>/dev/null
wait "$p"
if [ -n "$5" ]; then rm -rf "$5"; fi
"#;

/// How the server runs.
#[derive(Debug)]
enum Mode {
    /// Started by `pg_ctl start`; runs until `pg_ctl stop`.
    Detached { running: bool },
    /// Under the watchdog (a child of this process); runs until `stdin` closes.
    Watched {
        watchdog: std::process::Child,
        stdin: Option<std::process::ChildStdin>,
    },
}

/// A running private PostgreSQL server. Stopped by [`PgServer::stop`], or on drop.
#[derive(Debug)]
pub struct PgServer {
    tools: Tools,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    /// Run the tools as [`PG_SYSTEM_USER`] (this process is root).
    as_system_user: bool,
    /// A temporary directory this server made for itself, removed at stop.
    temp: Option<PathBuf>,
    /// The superuser's password, and its file (`<dir>/superuser.password`, 0600).
    superuser_password: Secret,
    password_file: PathBuf,
    mode: Mode,
}

impl PgServer {
    /// Starts a server for `dir` (see the module doc for where its files go), allowing
    /// PostgreSQL's default number of connections.
    pub fn start(dir: &Path) -> Result<PgServer> {
        Self::start_with_connections(dir, DEFAULT_MAX_CONNECTIONS)
    }

    /// [`PgServer::start`] allowing `max_connections` connections.
    pub fn start_with_connections(dir: &Path, max_connections: u32) -> Result<PgServer> {
        let mut server = Self::prepare(dir)?;
        // On failure `server` is dropped, which removes its temporary directory (and stops the
        // server if it did start).
        server.init()?;
        server.launch(max_connections)?;
        Ok(server)
    }

    /// A server owned by this process (see the module doc): it stops when this process exits
    /// even if the `PgServer` is never dropped (a test binary's process-wide static). Allows
    /// `max_connections` connections.
    pub fn start_for_process(dir: &Path, max_connections: u32) -> Result<PgServer> {
        let mut server = Self::prepare(dir)?;
        server.init()?;
        server.launch_watched(max_connections)?;
        Ok(server)
    }

    /// Finds the tools and decides where the data and the socket go; starts nothing.
    fn prepare(dir: &Path) -> Result<PgServer> {
        let tools = Tools::find()?;
        mkdir(dir)?;
        let dir =
            std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
        let as_system_user = running_as_root();
        let (data_dir, socket_dir, temp) = if as_system_user {
            let temp = private_temp_dir()?;
            give_to_system_user(&temp)?;
            (temp.join("data"), temp.clone(), Some(temp))
        } else {
            let run = dir.join("run");
            if run.as_os_str().len() <= MAX_SOCKET_DIR_LEN {
                mkdir(&run)?;
                (dir.join("data"), run, None)
            } else {
                let temp = private_temp_dir()?;
                (dir.join("data"), temp.clone(), Some(temp))
            }
        };
        // The superuser's password: the one an earlier start in `dir` chose (its data may be
        // initialised with it), else a new one.
        let password_file = dir.join(SUPERUSER_PASSWORD_FILE);
        let superuser_password = if password_file.is_file() {
            Secret::from_file(&password_file)?
        } else {
            let p = runtime::secret::random_token();
            write_private(&password_file, p.as_bytes())?;
            Secret::new(p.as_str())
        };
        Ok(PgServer {
            tools,
            data_dir,
            socket_dir,
            log: dir.join(PG_LOG_FILE),
            as_system_user,
            temp,
            superuser_password,
            password_file,
            mode: Mode::Detached { running: false },
        })
    }

    /// `initdb` with password authentication only, unless the data directory is initialised
    /// already.
    fn init(&self) -> Result<()> {
        if self.data_dir.join("PG_VERSION").is_file() {
            return Ok(());
        }
        // initdb reads the superuser's password from a file its user can read: as root, a copy
        // in the server user's private temporary directory, removed right after.
        let pwfile = match &self.temp {
            Some(temp) if self.as_system_user => {
                let copy = temp.join(SUPERUSER_PASSWORD_FILE);
                write_private(&copy, self.superuser_password.expose().as_bytes())?;
                give_to_system_user(&copy)?;
                copy
            }
            _ => self.password_file.clone(),
        };
        let mut cmd = self.command(&self.tools.initdb);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .args([
                "-A",
                "scram-sha-256",
                "-U",
                PG_USER,
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            // Its files are thrown away with the fleet: no need to wait for the disk.
            .arg("--no-sync");
        let done = run(cmd, "initdb").map(drop);
        if self.as_system_user {
            let _ = std::fs::remove_file(&pwfile);
        }
        done
    }

    /// `pg_ctl start -w`: returns once the server accepts connections.
    fn launch(&mut self, max_connections: u32) -> Result<()> {
        let (log, log2) = self.log_handles()?;
        let options = format!(
            "-k '{}' -c listen_addresses='' -c max_connections={max_connections} -c fsync=off",
            self.socket_dir.display()
        );
        let mut cmd = self.command(&self.tools.pg_ctl);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-o")
            .arg(options)
            .args(["-w", "-t"])
            .arg(START_TIMEOUT_S.to_string())
            .arg("start")
            // The server inherits these (see `log_handles`).
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        self.mode = Mode::Detached { running: true };
        let status = cmd.status().context("running pg_ctl start")?;
        if status.success() {
            Ok(())
        } else {
            Err(self.start_failed("pg_ctl start", status.to_string()))
        }
    }

    /// Starts the server under the watchdog and waits until it accepts connections.
    fn launch_watched(&mut self, max_connections: u32) -> Result<()> {
        let (log, log2) = self.log_handles()?;
        let temp = self
            .temp
            .as_deref()
            .map(|t| t.as_os_str().to_owned())
            .unwrap_or_default();
        let mut cmd = self.command(Path::new("sh"));
        cmd.args(["-c", WATCHDOG, "pg-watchdog"])
            .arg(&self.tools.postgres)
            .arg(&self.data_dir)
            .arg(&self.socket_dir)
            .arg(max_connections.to_string())
            .arg(temp)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            // Its own process group: a terminal's Ctrl-C reaches only the owning process,
            // which stops the server after the processes that use it.
            .process_group(0);
        let mut watchdog = cmd.spawn().context("starting the PostgreSQL watchdog")?;
        let stdin = watchdog.stdin.take();
        self.mode = Mode::Watched { watchdog, stdin };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(START_TIMEOUT_S);
        loop {
            if self.psql("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if let Mode::Watched { watchdog, .. } = &mut self.mode
                && let Ok(Some(status)) = watchdog.try_wait()
            {
                return Err(self.start_failed("postgres", status.to_string()));
            }
            if std::time::Instant::now() >= deadline {
                return Err(self.start_failed("postgres", "not ready in time".into()));
            }
            std::thread::sleep(std::time::Duration::from_millis(READY_PROBE_MS));
        }
    }

    /// The server's log, opened for writing twice (its stdout and stderr). This process opens
    /// it: the server's user may not be able to open a file in `dir`. Never a pipe: the server
    /// keeps it open.
    fn log_handles(&self) -> Result<(File, File)> {
        let log =
            File::create(&self.log).with_context(|| format!("creating {}", self.log.display()))?;
        let log2 = log.try_clone().context("duplicating a log handle")?;
        Ok((log, log2))
    }

    /// A start-up failure, with the end of the server's log.
    fn start_failed(&self, command: &str, status: String) -> FleetError {
        let tail = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        FleetError::PostgresCommand {
            command: command.into(),
            status,
            output: format!("{tail} (see {})", self.log.display()),
        }
    }

    /// A tool's command, as the server's user, in a directory that user may enter.
    fn command(&self, tool: &Path) -> Command {
        let mut cmd = if self.as_system_user {
            let mut c = Command::new("runuser");
            c.args(["-u", PG_SYSTEM_USER, "--"]).arg(tool);
            c
        } else {
            Command::new(tool)
        };
        cmd.current_dir(self.temp.as_deref().unwrap_or(&self.socket_dir))
            .stdin(Stdio::null());
        cmd
    }

    /// The folder holding the server's unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `pg_ctl stop -m fast`, then removes the temporary directory it made, if any.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let mut result = Ok(());
        match &mut self.mode {
            Mode::Detached { running } => {
                if *running {
                    *running = false;
                    let mut cmd = self.command(&self.tools.pg_ctl);
                    cmd.arg("-D")
                        .arg(&self.data_dir)
                        .args(["-m", "fast", "-w", "stop"]);
                    result = run(cmd, "pg_ctl stop").map(drop);
                }
            }
            Mode::Watched { watchdog, stdin } => {
                // The end of its stdin: the watchdog stops the server and waits for it.
                if stdin.take().is_some() {
                    result = watchdog
                        .wait()
                        .context("waiting for the PostgreSQL watchdog")
                        .map(drop)
                        .map_err(FleetError::from);
                }
            }
        }
        if let Some(temp) = self.temp.take()
            && temp.exists()
        {
            let removed = std::fs::remove_dir_all(&temp)
                .with_context(|| format!("removing {}", temp.display()));
            if result.is_ok() {
                result = removed.map_err(FleetError::from);
            }
        }
        result
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Best effort: a server left running would outlive its fleet.
        let _ = self.shutdown();
    }
}

/// Best effort: stops a server an earlier fleet left running (it was killed before it could
/// stop it) and removes the temporary directories it had made. Errors are ignored.
pub(crate) fn stop_leftover(data_dir: &Path, socket_dir: &Path) {
    if data_dir.join("postmaster.pid").is_file()
        && let Ok(pg_ctl) = find_tool("pg_ctl")
    {
        let as_system_user = running_as_root();
        let mut cmd = if as_system_user {
            let mut c = Command::new("runuser");
            c.args(["-u", PG_SYSTEM_USER, "--"]).arg(pg_ctl);
            c
        } else {
            Command::new(pg_ctl)
        };
        cmd.arg("-D")
            .arg(data_dir)
            .args(["-m", "immediate", "-w", "stop"])
            .current_dir(data_dir);
        let _ = run(cmd, "pg_ctl stop");
    }
    for d in [data_dir.parent(), Some(socket_dir)].into_iter().flatten() {
        let ours = d
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX));
        if ours && d.starts_with(std::env::temp_dir()) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
