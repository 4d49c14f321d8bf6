//! Faults through the fleet's actuators, with an undo log.
//!
//! A fault takes a [`Target`] down through the actuator the fleet declares for it (the
//! inventory's `[[gameday.actuators]]`, or `local` for every process of a dev fleet):
//!
//! - `local`: SIGKILL the process whose pid `fleet.json` names, after recording its command
//!   line, working directory and environment; up respawns that command line and writes the new
//!   pid into `fleet.json`.
//! - `systemd`: `systemctl stop UNIT…` (or `systemctl kill --signal=SIG UNIT…`); up is
//!   `systemctl start UNIT…`.
//! - `command`: the operator's `down` argv; up is their `up` argv (no shell unless they write
//!   `sh -c`), run in the fleet file's directory.
//!
//! Every fault is written to the undo log (`<state_dir>/undo.json`, 0600, atomically and
//! synced) BEFORE it is applied, so that a `cellctl` that crashes, is SIGKILLed or interrupted
//! leaves a record of what is in force: the next `cellctl gameday` command undoes it first
//! ([`Faults::finish_pending`]). A [`Faults`] holds the state directory's lock for its
//! lifetime: one game day per fleet at a time (another one's `finish_pending` would undo this
//! one's faults mid-scenario).

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleet_description::gameday::{Actuator, ActuatorKind, GamedaySection};
use fleet_description::inventory::is_inventory;
use fleet_description::{FLEET_FILE, FleetFile, FleetManagement, Inventory, load_gameday};
use protocol::CellId;
use runtime::IoContext as _;
use serde::{Deserialize, Serialize};

use crate::error::{CtlError, Result};

pub use fleet_description::gameday::Target;

/// Schema version of the undo log.
pub const UNDO_SCHEMA: u32 = 1;
/// File name of the undo log in the state directory.
pub const UNDO_FILE: &str = "undo.json";
/// File name of the state directory's lock (held by the one running `cellctl gameday`).
pub const LOCK_FILE: &str = "undo.lock";
/// How long a SIGKILLed process has to disappear, in milliseconds.
pub const KILL_DEADLINE_MS: u64 = 5_000;
/// How often a process's presence is checked while waiting, in milliseconds.
pub const PROCESS_POLL_MS: u64 = 50;
/// How long a respawned process must stay alive to count as started, in milliseconds.
pub const RESPAWN_SETTLE_MS: u64 = 300;
/// Bound of a `systemd` or `command` actuator's command, in seconds.
pub const COMMAND_TIMEOUT_S: u64 = 120;
/// Suffix of a respawned process's log file (`<component>.gameday.log`, beside `fleet.json`).
pub const RESPAWN_LOG_SUFFIX: &str = ".gameday.log";

/// The faults of one fleet and their undo log.
#[derive(Debug)]
pub struct Faults {
    /// The fleet file (inventory or `fleet.json`) the actuators were read from.
    fleet_path: PathBuf,
    /// Where `command` actuators run: the fleet file's directory.
    workdir: PathBuf,
    section: GamedaySection,
    /// Each cell and its number of auth-service replicas.
    cells: Vec<(CellId, usize)>,
    /// The dev fleet's `fleet.json` that `local` actuators act through (the fleet file itself,
    /// or one beside the inventory).
    fleet_json: Option<PathBuf>,
    log_path: PathBuf,
    /// The state directory's lock, held while this value lives.
    _lock: File,
    /// Serialises the read-modify-writes of the undo log and of `fleet.json`.
    files: Mutex<()>,
}

/// The undo log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UndoLog {
    schema: u32,
    entries: Vec<UndoEntry>,
}

/// One fault in force (or about to be).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UndoEntry {
    /// What it acts on: a single process for `local`, the actuator's own target otherwise.
    /// No two entries overlap.
    target: Target,
    /// What `down` was asked for (`target` is it or part of it).
    requested: Target,
    kind: ActuatorKind,
    recorded_unix_ms: u64,
    undo: Undo,
}

/// How to undo a fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
enum Undo {
    /// Respawn the killed process (`local`).
    Respawn {
        killed_pid: u32,
        argv: Vec<String>,
        cwd: PathBuf,
        env: Vec<(String, String)>,
        /// Set once the respawn has started (a crash after it must not respawn twice).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        respawned_pid: Option<u32>,
    },
    /// Run this command line (`systemd`, `command`).
    Run { argv: Vec<String> },
}

/// One thing `down` does for a target.
#[derive(Debug, Clone)]
struct Action {
    /// A single process for `local`; the actuator's own target otherwise.
    target: Target,
    actuator: Actuator,
}

/// A `local` action with its process.
#[derive(Debug)]
struct Planned {
    action: Action,
    /// The pid `fleet.json` names (`local` only).
    pid: Option<u32>,
}

/// What `/proc` tells of a process before it is killed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcRecord {
    argv: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The folder of a file (`.` for a bare file name).
fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn failed(s: impl Into<String>) -> CtlError {
    CtlError::Failed(s.into())
}

/// `argv` as an operator would type it.
fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@,+%".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Faults {
    /// Loads the actuators of the fleet at `fleet_path` (inventory or fleet.json) and opens the
    /// undo log in its state_dir (created 0700). Refuses when another `cellctl gameday` holds
    /// the state directory.
    pub fn open(fleet_path: &Path) -> Result<Faults> {
        let section = load_gameday(fleet_path)?;
        let dir = dir_of(fleet_path);
        let (mut cells, fleet_json): (Vec<(CellId, usize)>, Option<PathBuf>) =
            if is_inventory(fleet_path) {
                let inv = Inventory::read(fleet_path)?;
                let beside = dir.join(FLEET_FILE);
                let cells = inv
                    .cells
                    .iter()
                    .map(|c| (c.id.clone(), c.auth_service_urls.len()))
                    .collect();
                (cells, beside.is_file().then_some(beside))
            } else {
                let f = FleetFile::load(fleet_path)?;
                let cells = f
                    .cells
                    .iter()
                    .map(|c| (c.id.clone(), c.replicas().len()))
                    .collect();
                (cells, Some(fleet_path.to_path_buf()))
            };
        // An inventory may name one load balancer for several replicas: a replica an actuator
        // is declared for exists.
        for a in &section.actuators {
            if let Target::AuthReplica(c, r) = &a.target
                && let Some((_, n)) = cells.iter_mut().find(|(id, _)| id == c)
            {
                *n = (*n).max(r + 1);
            }
        }
        runtime::private_dir(&section.state_dir)
            .with_context(|| format!("creating {}", section.state_dir.display()))?;
        let lock = lock_state_dir(&section.state_dir)?;
        Ok(Faults {
            fleet_path: fleet_path.to_path_buf(),
            workdir: dir,
            log_path: section.state_dir.join(UNDO_FILE),
            section,
            cells,
            fleet_json,
            _lock: lock,
            files: Mutex::new(()),
        })
    }

    /// Undoes every fault a previous run left in the undo log (cellctl crashed, was
    /// SIGKILLed, Ctrl-C); returns one line per fault undone. Called first by every
    /// `cellctl gameday` command. Running it again does nothing.
    pub async fn finish_pending(&self) -> Result<Vec<String>> {
        self.undo_everything().await
    }

    /// Applies `target` down: records the undo entry (fsync'd) BEFORE acting, then acts.
    /// Returns a description (`cell-03/auth-service down (local: SIGKILL pid 4242)`).
    pub async fn down(&self, target: &Target) -> Result<String> {
        let planned = self.plan(target)?;
        // What to record: for a process, what /proc says of it, read before anything is done.
        let now = unix_ms();
        let mut entries = Vec::with_capacity(planned.len());
        for p in &planned {
            let undo = match (&p.action.actuator, p.pid) {
                (Actuator::Local, Some(pid)) => {
                    let rec = self.fleet_process(&p.action.target, pid)?;
                    Undo::Respawn {
                        killed_pid: pid,
                        argv: rec.argv,
                        cwd: rec.cwd,
                        env: rec.env,
                        respawned_pid: None,
                    }
                }
                (Actuator::Systemd { units, .. }, _) => Undo::Run {
                    argv: ["systemctl", "start"]
                        .into_iter()
                        .map(String::from)
                        .chain(units.iter().cloned())
                        .collect(),
                },
                (Actuator::Command { up, .. }, _) => Undo::Run { argv: up.clone() },
                (Actuator::Local, None) => {
                    return Err(CtlError::Internal(format!(
                        "{}: a local action without a pid",
                        p.action.target
                    )));
                }
            };
            entries.push(UndoEntry {
                target: p.action.target.clone(),
                requested: target.clone(),
                kind: p.action.actuator.kind(),
                recorded_unix_ms: now,
                undo,
            });
        }
        // Recorded (and synced) before anything is done.
        {
            let _files = self.files_lock();
            let mut log = self.read_log()?;
            for e in &entries {
                if let Some(o) = log.entries.iter().find(|o| o.target.overlaps(&e.target)) {
                    return Err(failed(format!(
                        "{target}: {} is already down (a fault recorded in {}; bring it up \
                         first, or `cellctl gameday undo`)",
                        o.target,
                        self.log_path.display()
                    )));
                }
            }
            log.entries.extend(entries.iter().cloned());
            self.write_log(&log)?;
        }
        for (i, p) in planned.iter().enumerate() {
            let acted = self.act_down(&p.action, p.pid).await;
            if let Err((e, applied)) = acted {
                // Entries of actions not taken are dropped; one that may have acted stays, so
                // that `up` or `cellctl gameday undo` undoes it.
                let first_unapplied = if applied { i + 1 } else { i };
                let unapplied: Vec<Target> = planned[first_unapplied..]
                    .iter()
                    .map(|p| p.action.target.clone())
                    .collect();
                if let Err(e2) = self.remove_entries(&unapplied) {
                    return Err(failed(format!("{e}; and then: {e2}")));
                }
                return Err(e);
            }
        }
        Ok(format!("{target} down ({})", describe_planned(&planned)))
    }

    /// Undoes `target`'s fault (up) and removes its entry from the undo log. A target with
    /// no fault in force is left alone.
    pub async fn up(&self, target: &Target) -> Result<String> {
        let entries = {
            let _files = self.files_lock();
            let log = self.read_log()?;
            if let Some(wider) = log
                .entries
                .iter()
                .find(|e| e.target != *target && e.target.contains(target))
            {
                return Err(failed(format!(
                    "{target} is down as part of {} (one actuator for all of it): bring {} up",
                    wider.target, wider.target
                )));
            }
            log.entries
                .into_iter()
                .filter(|e| target.contains(&e.target))
                .collect::<Vec<_>>()
        };
        if entries.is_empty() {
            return Ok(format!("{target} up (no fault in force)"));
        }
        let mut done = Vec::with_capacity(entries.len());
        for e in &entries {
            done.push(self.undo_entry(e).await?);
        }
        Ok(format!("{target} up ({})", done.join("; ")))
    }

    /// Down then up (a restart).
    pub async fn restart(&self, target: &Target) -> Result<String> {
        let down = self.down(target).await?;
        let up = self.up(target).await?;
        Ok(format!("{down}, then {up}"))
    }

    /// Undoes every fault in force (end of a scenario, abort, Ctrl-C).
    pub async fn undo_all(&self) -> Result<Vec<String>> {
        self.undo_everything().await
    }

    /// What `down(target)` would do, without doing it (for --dry-run plans).
    pub fn describe(&self, target: &Target) -> Result<String> {
        let planned = self.plan(target)?;
        Ok(format!("{target} down ({})", describe_planned(&planned)))
    }

    /// The undo log's path (tests).
    pub fn undo_log_path(&self) -> PathBuf {
        self.log_path.clone()
    }

    // ---- planning ----

    /// The actions of `down(target)`, with the pids of `local` ones.
    fn plan(&self, target: &Target) -> Result<Vec<Planned>> {
        let mut actions: Vec<Action> = Vec::new();
        for leaf in self.leaves(target)? {
            let Some(entry) = self.section.actuator_for(&leaf) else {
                return Err(CtlError::Config(format!(
                    "{}: no actuator for {leaf} (add a [[gameday.actuators]] entry for it or \
                     for a target containing it)",
                    self.fleet_path.display()
                )));
            };
            match &entry.actuator {
                Actuator::Local => actions.push(Action {
                    target: leaf,
                    actuator: Actuator::Local,
                }),
                other => {
                    if !target.contains(&entry.target) {
                        return Err(CtlError::Config(format!(
                            "{}: {target}'s actuator is {}'s ({}), which would act on all of \
                             {}; declare one for {target}",
                            self.fleet_path.display(),
                            entry.target,
                            other.kind(),
                            entry.target
                        )));
                    }
                    if !actions.iter().any(|a| a.target == entry.target) {
                        actions.push(Action {
                            target: entry.target.clone(),
                            actuator: other.clone(),
                        });
                    }
                }
            }
        }
        let locals = actions
            .iter()
            .any(|a| matches!(a.actuator, Actuator::Local));
        let fleet = if locals {
            Some(FleetFile::load(self.fleet_json_path(target)?)?)
        } else {
            None
        };
        actions
            .into_iter()
            .map(|action| {
                let pid = match (&action.actuator, &fleet) {
                    (Actuator::Local, Some(f)) => Some(pid_of(f, &action.target)?),
                    _ => None,
                };
                Ok(Planned { action, pid })
            })
            .collect()
    }

    /// The single components `target` covers (replicas, edge, app; the control plane).
    fn leaves(&self, target: &Target) -> Result<Vec<Target>> {
        let Some(cell) = target.cell() else {
            return Ok(vec![Target::ControlPlane]);
        };
        let Some((_, replicas)) = self.cells.iter().find(|(c, _)| c == cell) else {
            return Err(CtlError::Config(format!(
                "{cell} is not a cell of {}",
                self.fleet_path.display()
            )));
        };
        let all_replicas = || (0..*replicas).map(|r| Target::AuthReplica(cell.clone(), r));
        Ok(match target {
            Target::Cell(c) => all_replicas()
                .chain([Target::Edge(c.clone()), Target::App(c.clone())])
                .collect(),
            Target::AuthService(_) => all_replicas().collect(),
            Target::AuthReplica(c, r) if r >= replicas => {
                return Err(CtlError::Config(format!(
                    "{c} has {replicas} auth-service replica(s) in {}: there is no replica {r}",
                    self.fleet_path.display()
                )));
            }
            other => vec![other.clone()],
        })
    }

    fn fleet_json_path(&self, target: &Target) -> Result<&Path> {
        self.fleet_json.as_deref().ok_or_else(|| {
            CtlError::Config(format!(
                "{target}: a local actuator acts on a dev fleet's processes, and there is no \
                 {FLEET_FILE} beside {}",
                self.fleet_path.display()
            ))
        })
    }

    /// The process `pid` of `leaf`, recorded, after checking that it belongs to the fleet (a
    /// stale `fleet.json`'s pid may be anyone's process now).
    fn fleet_process(&self, leaf: &Target, pid: u32) -> Result<ProcRecord> {
        let fleet_json = self.fleet_json_path(leaf)?;
        if pid == 0 || !alive(pid) {
            return Err(failed(format!(
                "{leaf}: pid {pid} ({}) is not running",
                fleet_json.display()
            )));
        }
        let rec = record(pid).map_err(|e| failed(format!("{leaf}: {e}")))?;
        let dir = dir_of(fleet_json);
        let dir =
            std::fs::canonicalize(&dir).with_context(|| format!("resolving {}", dir.display()))?;
        let inside = |p: &Path| p.starts_with(&dir);
        let belongs = inside(&rec.cwd)
            || rec.argv.iter().skip(1).any(|a| {
                let p = Path::new(a);
                inside(&if p.is_relative() {
                    rec.cwd.join(p)
                } else {
                    p.to_path_buf()
                })
            });
        if !belongs {
            return Err(failed(format!(
                "{leaf}: pid {pid} (`{}`) does not look like a process of the fleet in {} \
                 (neither its working directory nor any argument is in it; is {} stale?); \
                 nothing was done",
                shown(&rec.argv),
                dir.display(),
                fleet_json.display()
            )));
        }
        Ok(rec)
    }

    // ---- acting ----

    /// Takes one action down. On failure: the error, and whether the action may have acted.
    async fn act_down(
        &self,
        action: &Action,
        pid: Option<u32>,
    ) -> std::result::Result<(), (CtlError, bool)> {
        match (&action.actuator, pid) {
            (Actuator::Local, Some(pid)) => kill_and_wait(&action.target, pid).await,
            (Actuator::Systemd { units, signal }, _) => {
                let mut argv: Vec<String> = match signal {
                    Some(s) => vec!["systemctl".into(), "kill".into(), format!("--signal={s}")],
                    None => vec!["systemctl".into(), "stop".into()],
                };
                argv.extend(units.iter().cloned());
                self.run(&argv).await.map_err(|e| (e, true))
            }
            (Actuator::Command { down, .. }, _) => self.run(down).await.map_err(|e| (e, true)),
            (Actuator::Local, None) => Err((
                CtlError::Internal(format!("{}: a local action without a pid", action.target)),
                false,
            )),
        }
    }

    /// Undoes one entry and removes it from the log; answers what was done.
    async fn undo_entry(&self, e: &UndoEntry) -> Result<String> {
        let what = match &e.undo {
            Undo::Run { argv } => {
                self.run(argv).await?;
                format!("{}: {}", e.kind, shown(argv))
            }
            Undo::Respawn {
                killed_pid,
                argv,
                cwd,
                env,
                respawned_pid,
            } => {
                if let Some(p) = respawned_pid
                    && running_as(*p, argv)
                {
                    // Respawned by a run that stopped before it could finish up.
                    self.set_fleet_pid(&e.target, *p)?;
                    format!("local: already running as pid {p}")
                } else if let Some(p) = self
                    .current_pid(&e.target)
                    .filter(|p| p != killed_pid && running_as(*p, argv))
                {
                    // Started again outside the game day (a new `cellctl dev`): a respawn
                    // would only collide with it.
                    format!(
                        "local: already running as pid {p} (started again outside the game day)"
                    )
                } else if running_as(*killed_pid, argv) {
                    format!("local: pid {killed_pid} still running (it was never killed)")
                } else {
                    let pid = self.respawn(e, argv, cwd, env)?;
                    self.set_fleet_pid(&e.target, pid)?;
                    wait_started(&e.target, pid, &self.respawn_log(&e.target)?).await?;
                    format!("local: respawned `{}` as pid {pid}", shown(argv))
                }
            }
        };
        self.remove_entries(std::slice::from_ref(&e.target))?;
        Ok(what)
    }

    /// Undoes every entry of the log; the ones that fail stay in it.
    async fn undo_everything(&self) -> Result<Vec<String>> {
        let entries = {
            let _files = self.files_lock();
            self.read_log()?.entries
        };
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for e in &entries {
            match self.undo_entry(e).await {
                Ok(what) => done.push(format!("{} up ({what})", e.target)),
                Err(err) => failures.push(format!("{}: {err}", e.target)),
            }
        }
        if failures.is_empty() {
            return Ok(done);
        }
        Err(failed(format!(
            "undoing faults failed: {}{}; {} keeps what is still in force (`cellctl gameday \
             undo` tries again)",
            failures.join("; "),
            if done.is_empty() {
                String::new()
            } else {
                format!(" (undone: {})", done.join("; "))
            },
            self.log_path.display()
        )))
    }

    /// Runs a `systemd` or `command` actuator's command line in the fleet file's directory.
    async fn run(&self, argv: &[String]) -> Result<()> {
        let Some((program, args)) = argv.split_first() else {
            return Err(CtlError::Internal("an empty command line".into()));
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(COMMAND_TIMEOUT_S), cmd.output())
            .await
            .map_err(|_| {
                failed(format!(
                    "`{}` did not finish in {COMMAND_TIMEOUT_S} s (killed)",
                    shown(argv)
                ))
            })?
            .map_err(|e| failed(format!("`{}` could not be started: {e}", shown(argv))))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("(nothing on stderr)");
        Err(failed(format!(
            "`{}` failed ({}): {last}",
            shown(argv),
            out.status
        )))
    }

    /// The log file of a respawned process: `<component>.gameday.log` beside `fleet.json`.
    fn respawn_log(&self, leaf: &Target) -> Result<PathBuf> {
        let fleet_json = self.fleet_json_path(leaf)?;
        let dir = dir_of(fleet_json);
        Ok(dir.join(format!("{}{RESPAWN_LOG_SUFFIX}", leaf.file_stem())))
    }

    /// Starts the recorded command line again; records its pid in the undo entry.
    fn respawn(
        &self,
        e: &UndoEntry,
        argv: &[String],
        cwd: &Path,
        env: &[(String, String)],
    ) -> Result<u32> {
        let Some((program, args)) = argv.split_first() else {
            return Err(failed(format!(
                "{}: the undo log {} records an empty command line",
                e.target,
                self.log_path.display()
            )));
        };
        // A relative program path with a `/` is relative to the process's own directory.
        let program = if program.contains('/') && Path::new(program).is_relative() {
            cwd.join(program)
        } else {
            PathBuf::from(program)
        };
        let log_path = self.respawn_log(&e.target)?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(runtime::PRIVATE_FILE_MODE)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let _ = writeln!(
            log,
            "--- cellctl gameday: respawning {} at {} ms (unix): {}",
            e.target,
            unix_ms(),
            shown(argv)
        );
        let log2 = log
            .try_clone()
            .with_context(|| format!("duplicating {}", log_path.display()))?;
        let mut cmd = std::process::Command::new(&program);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            // Its stdin is /dev/null: a dev fleet's child told to stop at the end of its stdin
            // (it was `cellctl dev`'s pipe) would stop at once.
            .envs(
                env.iter()
                    .filter(|(k, _)| k != runtime::EXIT_ON_STDIN_EOF_ENV)
                    .map(|(k, v)| (k, v)),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a Ctrl-C at cellctl's terminal does not reach it.
            .process_group(0);
        let child = cmd.spawn().map_err(|err| {
            failed(format!(
                "{}: respawning `{}` in {}: {err}",
                e.target,
                shown(argv),
                cwd.display()
            ))
        })?;
        let pid = child.id();
        // Detached on purpose: the process is a server meant to outlive cellctl (as it outlived
        // the process that started it the first time). Dropping a std `Child` neither kills nor
        // waits for it; should it exit while cellctl still runs, it stays a zombie until cellctl
        // exits, which `alive` counts as dead.
        drop(child);
        {
            let _files = self.files_lock();
            let mut log = self.read_log()?;
            if let Some(entry) = log.entries.iter_mut().find(|x| x.target == e.target)
                && let Undo::Respawn { respawned_pid, .. } = &mut entry.undo
            {
                *respawned_pid = Some(pid);
                self.write_log(&log)?;
            }
        }
        Ok(pid)
    }

    /// `leaf`'s pid in `fleet.json` now (`None`: unreadable).
    fn current_pid(&self, leaf: &Target) -> Option<u32> {
        let f = FleetFile::load(self.fleet_json.as_deref()?).ok()?;
        pid_of(&f, leaf).ok()
    }

    /// Writes `pid` as `leaf`'s in `fleet.json` (keeping its management section).
    fn set_fleet_pid(&self, leaf: &Target, pid: u32) -> Result<()> {
        let path = self.fleet_json_path(leaf)?;
        let _files = self.files_lock();
        let mut f = FleetFile::load(path)?;
        let management = FleetManagement::load(path)?;
        let slot = pid_slot(&mut f, leaf)
            .ok_or_else(|| CtlError::Config(format!("{leaf} is not in {}", path.display())))?;
        if *slot == pid {
            return Ok(());
        }
        *slot = pid;
        if let Target::AuthReplica(c, 0) = leaf
            && let Some(cell) = f.cells.iter_mut().find(|x| &x.id == c)
        {
            // `auth_service` is replica 0's copy.
            cell.auth_service.pid = pid;
        }
        f.save_with(path, &management)?;
        Ok(())
    }

    // ---- the undo log ----

    fn files_lock(&self) -> MutexGuard<'_, ()> {
        // The guarded data is `()`: a panic while holding it leaves nothing inconsistent.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The undo log (empty when there is none). A log that cannot be read is an error naming
    /// it, never discarded: it lists faults that may still be in force.
    fn read_log(&self) -> Result<UndoLog> {
        let p = &self.log_path;
        let bytes = match std::fs::read(p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(UndoLog {
                    schema: UNDO_SCHEMA,
                    entries: Vec::new(),
                });
            }
            Err(e) => {
                return Err(runtime::IoError::new(format!("reading {}", p.display()), e).into());
            }
        };
        let log: UndoLog = serde_json::from_slice(&bytes).map_err(|e| {
            CtlError::Config(format!(
                "{} is not a readable undo log ({e}); it may list faults still in force: \
                 undo them by hand, then remove the file",
                p.display()
            ))
        })?;
        if log.schema != UNDO_SCHEMA {
            return Err(CtlError::Config(format!(
                "{} has schema {}, this cellctl reads {UNDO_SCHEMA}; undo its faults with the \
                 cellctl that wrote it",
                p.display(),
                log.schema
            )));
        }
        Ok(log)
    }

    /// Replaces the undo log atomically (temporary file, fsync, rename, fsync of the folder).
    fn write_log(&self, log: &UndoLog) -> Result<()> {
        let bytes =
            serde_json::to_vec_pretty(log).map_err(|e| CtlError::Internal(e.to_string()))?;
        runtime::secret::write_private(&self.log_path, &bytes)
            .map_err(fleet_description::Error::from)?;
        if let Some(dir) = self.log_path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("syncing {}", dir.display()))?;
        }
        Ok(())
    }

    fn remove_entries(&self, targets: &[Target]) -> Result<()> {
        if targets.is_empty() {
            return Ok(());
        }
        let _files = self.files_lock();
        let mut log = self.read_log()?;
        log.entries.retain(|e| !targets.contains(&e.target));
        self.write_log(&log)
    }
}

/// Takes the state directory's lock, or refuses (another game day runs on this fleet).
#[allow(clippy::incompatible_msrv)] // File::try_lock is stable since Rust 1.89
fn lock_state_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(runtime::PRIVATE_FILE_MODE)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(failed(format!(
            "another `cellctl gameday` is running on this fleet (it holds {})",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(runtime::IoError::new(format!("locking {}", path.display()), e).into())
        }
    }
}

/// `leaf`'s pid in `fleet.json`.
fn pid_of(f: &FleetFile, leaf: &Target) -> Result<u32> {
    let pid = match leaf {
        Target::ControlPlane => Some(f.control_plane.pid),
        Target::AuthReplica(c, r) => f.cell(c).and_then(|x| x.replicas().get(*r)).map(|s| s.pid),
        Target::Edge(c) => f.cell(c).map(|x| x.endpoint_pid),
        Target::App(c) => f.cell(c).map(|x| x.app_pid),
        Target::Cell(_) | Target::AuthService(_) => None,
    };
    pid.ok_or_else(|| CtlError::Config(format!("{leaf} is not in the dev fleet's {FLEET_FILE}")))
}

/// Where `fleet.json` keeps `leaf`'s pid.
fn pid_slot<'a>(f: &'a mut FleetFile, leaf: &Target) -> Option<&'a mut u32> {
    if let Target::ControlPlane = leaf {
        return Some(&mut f.control_plane.pid);
    }
    let cell = f.cells.iter_mut().find(|c| Some(&c.id) == leaf.cell())?;
    match leaf {
        Target::AuthReplica(_, r) => {
            if cell.auth_services.is_empty() && *r == 0 {
                Some(&mut cell.auth_service.pid)
            } else {
                cell.auth_services.get_mut(*r).map(|s| &mut s.pid)
            }
        }
        Target::Edge(_) => Some(&mut cell.endpoint_pid),
        Target::App(_) => Some(&mut cell.app_pid),
        Target::ControlPlane | Target::Cell(_) | Target::AuthService(_) => None,
    }
}

/// `local: SIGKILL pid 4242` / `systemd: systemctl stop u` / `command: kubectl …`, per action.
fn describe_planned(planned: &[Planned]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let locals: Vec<&Planned> = planned
        .iter()
        .filter(|p| matches!(p.action.actuator, Actuator::Local))
        .collect();
    match locals.as_slice() {
        [] => {}
        [one] => parts.push(format!("local: SIGKILL pid {}", one.pid.unwrap_or(0))),
        many => parts.push(format!(
            "local: SIGKILL {}",
            many.iter()
                .map(|p| format!("{} pid {}", p.action.target, p.pid.unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    for p in planned {
        match &p.action.actuator {
            Actuator::Local => {}
            Actuator::Systemd { units, signal } => parts.push(format!(
                "systemd: systemctl {} {}",
                signal
                    .as_ref()
                    .map_or_else(|| "stop".to_owned(), |s| format!("kill --signal={s}")),
                units.join(" ")
            )),
            Actuator::Command { down, .. } => parts.push(format!("command: {}", shown(down))),
        }
    }
    parts.join("; ")
}

// ---- processes ----

/// `true` when `pid` is a live process (a zombie, killed but not yet reaped, is not).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S …`: the state follows the last `)` (comm may hold anything).
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X' | 'x'))
}

/// The command line of a live `pid` (`None`: not running, or unreadable).
fn cmdline(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv = nul_separated(&bytes)
        .map(|a| String::from_utf8(a.to_vec()).ok())
        .collect::<Option<Vec<String>>>()?;
    (!argv.is_empty()).then_some(argv)
}

/// `true` when `pid` is alive and runs `argv` (not another process that got the pid since).
fn running_as(pid: u32, argv: &[String]) -> bool {
    pid != 0 && alive(pid) && cmdline(pid).is_some_and(|a| a == argv)
}

fn nul_separated(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .strip_suffix(b"\0")
        .unwrap_or(bytes)
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
}

/// What `/proc` says of `pid`: its command line, working directory and environment.
fn record(pid: u32) -> std::result::Result<ProcRecord, String> {
    let argv = cmdline(pid)
        .ok_or_else(|| format!("cannot read the command line of pid {pid} (gone, or not UTF-8)"))?;
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
        .map_err(|e| format!("cannot read the working directory of pid {pid}: {e}"))?;
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .map_err(|e| format!("cannot read the environment of pid {pid}: {e}"))?;
    let mut env = Vec::new();
    for var in nul_separated(&environ) {
        let Ok(var) = std::str::from_utf8(var) else {
            tracing::warn!(pid, "an environment variable that is not UTF-8 is not kept");
            continue;
        };
        if let Some((k, v)) = var.split_once('=') {
            env.push((k.to_owned(), v.to_owned()));
        }
    }
    Ok(ProcRecord { argv, cwd, env })
}

/// SIGKILLs `pid` and waits until it is gone. On failure: the error, and whether the signal
/// may have been delivered.
async fn kill_and_wait(leaf: &Target, pid: u32) -> std::result::Result<(), (CtlError, bool)> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let raw = i32::try_from(pid)
        .map_err(|_| (failed(format!("{leaf}: pid {pid} is out of range")), false))?;
    match kill(Pid::from_raw(raw), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => {
            return Err((
                failed(format!("{leaf}: SIGKILL pid {pid}: {e}; nothing was done")),
                false,
            ));
        }
    }
    let deadline = Instant::now() + Duration::from_millis(KILL_DEADLINE_MS);
    while alive(pid) {
        if Instant::now() > deadline {
            return Err((
                failed(format!(
                    "{leaf}: pid {pid} still alive {KILL_DEADLINE_MS} ms after SIGKILL"
                )),
                true,
            ));
        }
        tokio::time::sleep(Duration::from_millis(PROCESS_POLL_MS)).await;
    }
    Ok(())
}

/// Waits [`RESPAWN_SETTLE_MS`] and checks that the respawned `pid` still runs.
async fn wait_started(leaf: &Target, pid: u32, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(RESPAWN_SETTLE_MS);
    loop {
        if !alive(pid) {
            return Err(failed(format!(
                "{leaf}: the respawned process (pid {pid}) exited at once; see {}",
                log.display()
            )));
        }
        if Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(PROCESS_POLL_MS)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use fleet_description::fleet_file::{CellManagement, Demo, FLEET_SCHEMA, FleetCell, Service};

    const MAP_KEY: &str = "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E";

    fn cell() -> CellId {
        CellId::new("cell-01").unwrap()
    }

    /// An inventory of one cell whose edge has a `command` actuator appending to `out`.
    fn inventory_with_command(dir: &Path, out: &Path) -> PathBuf {
        let undo = dir.join("gameday").join(UNDO_FILE);
        let text = format!(
            r#"
schema = 1
ca_cert = "ca.pem"
[control_plane]
url = "https://cp.internal:8440"
token_file = "secrets/control-plane.token"
map_public_key = "{MAP_KEY}"
[[cells]]
id = "cell-01"
endpoint = "https://cell-01.example.com"
auth_service_urls = ["https://auth.internal:8446"]
app_internal_url = "https://app.internal:8448"
admin_token_file = "secrets/cell-01/admin.token"
app_internal_token_file = "secrets/cell-01/app-internal.token"
[gameday]
[[gameday.actuators]]
target = "cell-01/edge"
kind = "command"
# Refuses to act unless the undo log already records the fault.
down = ["sh", "-c", "grep -q cell-01/edge '{undo}' && echo down >> '{out}'"]
up = ["sh", "-c", "echo up >> '{out}'"]
"#,
            undo = undo.display(),
            out = out.display()
        );
        let path = dir.join("cells.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn lines(p: &Path) -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn log_entries(f: &Faults) -> Vec<UndoEntry> {
        f.read_log().unwrap().entries
    }

    #[tokio::test]
    async fn a_command_fault_is_recorded_before_it_runs_and_undone_by_up() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let path = inventory_with_command(dir.path(), &out);
        let f = Faults::open(&path).unwrap();
        let edge = Target::Edge(cell());
        assert!(
            f.describe(&edge)
                .unwrap()
                .starts_with("cell-01/edge down (command: sh -c"),
            "{}",
            f.describe(&edge).unwrap()
        );
        assert!(lines(&out).is_empty(), "describe does nothing");
        let d = f.down(&edge).await.unwrap();
        assert!(d.starts_with("cell-01/edge down (command: "), "{d}");
        // The down command only writes when the entry was in the log when it ran.
        assert_eq!(lines(&out), ["down"]);
        let entries = log_entries(&f);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].kind, ActuatorKind::Command);
        // A second fault on it is refused while it is in force.
        let e = f.down(&edge).await.unwrap_err().to_string();
        assert!(e.contains("already down"), "{e}");
        // The log is private.
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(f.undo_log_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let state = std::fs::metadata(f.undo_log_path().parent().unwrap()).unwrap();
        assert_eq!(state.permissions().mode() & 0o777, 0o700);
        let u = f.up(&edge).await.unwrap();
        assert!(u.starts_with("cell-01/edge up (command: sh -c"), "{u}");
        assert_eq!(lines(&out), ["down", "up"]);
        assert!(log_entries(&f).is_empty());
        // Nothing in force: up does nothing.
        assert!(f.up(&edge).await.unwrap().contains("no fault in force"));
        assert_eq!(lines(&out), ["down", "up"]);
        // No actuator for the app: refused, naming the file.
        let e = f.down(&Target::App(cell())).await.unwrap_err().to_string();
        assert!(
            e.contains("no actuator for cell-01/app") && e.contains("cells.toml"),
            "{e}"
        );
        // One game day per fleet at a time.
        let e = Faults::open(&path).unwrap_err().to_string();
        assert!(e.contains("another `cellctl gameday`"), "{e}");
    }

    #[tokio::test]
    async fn finish_pending_undoes_what_a_crashed_run_left_once() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let path = inventory_with_command(dir.path(), &out);
        {
            let crashed = Faults::open(&path).unwrap();
            crashed.down(&Target::Edge(cell())).await.unwrap();
            // Gone without undoing anything (its lock goes with it).
        }
        let f = Faults::open(&path).unwrap();
        let undone = f.finish_pending().await.unwrap();
        assert_eq!(undone.len(), 1, "{undone:?}");
        assert!(
            undone[0].starts_with("cell-01/edge up (command: "),
            "{undone:?}"
        );
        assert_eq!(lines(&out), ["down", "up"]);
        assert!(f.finish_pending().await.unwrap().is_empty());
        assert_eq!(lines(&out), ["down", "up"]);
    }

    #[tokio::test]
    async fn a_failing_command_names_itself_and_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let path = inventory_with_command(dir.path(), &out);
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "echo up >>",
            "echo 'no such deployment' >&2; exit 3; echo >>",
        );
        std::fs::write(&path, text).unwrap();
        let f = Faults::open(&path).unwrap();
        let edge = Target::Edge(cell());
        f.down(&edge).await.unwrap();
        let e = f.up(&edge).await.unwrap_err().to_string();
        assert!(
            e.contains("`sh -c") && e.contains("no such deployment"),
            "{e}"
        );
        assert!(e.contains("exit status: 3"), "{e}");
        // Still recorded: undo_all tries again and says what is left.
        assert_eq!(log_entries(&f).len(), 1);
        let e = f.undo_all().await.unwrap_err().to_string();
        assert!(e.contains(&f.undo_log_path().display().to_string()), "{e}");
    }

    #[tokio::test]
    async fn a_corrupt_undo_log_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = inventory_with_command(dir.path(), &dir.path().join("out"));
        let f = Faults::open(&path).unwrap();
        std::fs::write(f.undo_log_path(), b"{ not json").unwrap();
        let e = f.finish_pending().await.unwrap_err().to_string();
        assert!(e.contains(&f.undo_log_path().display().to_string()), "{e}");
        assert!(e.contains("not a readable undo log"), "{e}");
        // Kept as it was.
        assert_eq!(std::fs::read(f.undo_log_path()).unwrap(), b"{ not json");
    }

    // ---- local ----

    /// A dev fleet's `fleet.json` in `dir` whose edge is `edge_pid` (the other pids: 0).
    fn write_fleet(dir: &Path, edge_pid: u32) -> PathBuf {
        let service = |url: &str| Service {
            url: url.into(),
            pid: 0,
        };
        let f = FleetFile {
            schema: FLEET_SCHEMA,
            ca_cert: dir.join("ca.pem"),
            control_plane: service("https://127.0.0.1:8440"),
            admin_token: "cp".into(),
            admin_token_file: dir.join("secrets/control-plane.token"),
            map_public_key: MAP_KEY.into(),
            store: Default::default(),
            postgres: None,
            cells: vec![FleetCell {
                id: cell(),
                endpoint: "https://127.0.0.1:8443".into(),
                endpoint_pid: edge_pid,
                auth_service: service("https://127.0.0.1:8446"),
                auth_public_url: "https://127.0.0.1:8445".into(),
                auth_services: vec![service("https://127.0.0.1:8446")],
                auth_public_urls: Vec::new(),
                app_url: "https://127.0.0.1:8447".into(),
                app_internal_url: "https://127.0.0.1:8448".into(),
                app_pid: 0,
                admin_token: "a".into(),
                admin_token_file: dir.join("secrets/cell-01/admin.token"),
                app_internal_token: String::new(),
                app_internal_token_file: PathBuf::new(),
            }],
            demo: Demo {
                technicians: Vec::new(),
                dispatchers: Vec::new(),
            },
        };
        let m = FleetManagement {
            control_plane: "https://127.0.0.1:9440".into(),
            cells: vec![CellManagement {
                id: cell(),
                edges: vec!["https://127.0.0.1:9443".into()],
                auth_services: Vec::new(),
                app: String::new(),
            }],
        };
        let path = dir.join(FLEET_FILE);
        f.save_with(&path, &m).unwrap();
        path
    }

    /// `sleep 600` with `cwd` as its working directory, once its command line is readable.
    fn sleeper(cwd: &Path) -> std::process::Child {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .current_dir(cwd)
            .env("GAMEDAY_TEST_MARK", "kept")
            .env(runtime::EXIT_ON_STDIN_EOF_ENV, "1")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running_as(child.id(), &["sleep".into(), "600".into()]) {
            assert!(Instant::now() < deadline, "sleep 600 did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    fn sigkill(pid: u32) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    fn environ(pid: u32) -> String {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
            .replace('\0', "\n")
    }

    #[tokio::test]
    async fn a_local_fault_kills_the_process_and_up_respawns_its_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = sleeper(dir.path());
        let old = child.id();
        let path = write_fleet(dir.path(), old);
        let f = Faults::open(&path).unwrap();
        assert_eq!(
            f.undo_log_path(),
            dir.path().join("gameday").join(UNDO_FILE)
        );
        let edge = Target::Edge(cell());
        assert_eq!(
            f.describe(&edge).unwrap(),
            format!("cell-01/edge down (local: SIGKILL pid {old})")
        );
        let d = f.down(&edge).await.unwrap();
        assert_eq!(d, format!("cell-01/edge down (local: SIGKILL pid {old})"));
        assert!(!alive(old));
        child.wait().unwrap();
        let entries = log_entries(&f);
        assert_eq!(entries.len(), 1);
        match &entries[0].undo {
            Undo::Respawn {
                killed_pid,
                argv,
                cwd,
                ..
            } => {
                assert_eq!(*killed_pid, old);
                assert_eq!(argv, &["sleep", "600"]);
                assert_eq!(cwd, &std::fs::canonicalize(dir.path()).unwrap());
            }
            other => panic!("{other:?}"),
        }
        let u = f.up(&edge).await.unwrap();
        let new = FleetFile::load(&path).unwrap().cells[0].endpoint_pid;
        assert_ne!(new, old);
        assert!(u.contains(&format!("as pid {new}")), "{u}");
        assert!(running_as(new, &["sleep".into(), "600".into()]));
        // Its environment, without the stop-at-end-of-stdin switch; its output in its log.
        let env = environ(new);
        assert!(env.contains("GAMEDAY_TEST_MARK=kept"), "{env}");
        assert!(!env.contains(runtime::EXIT_ON_STDIN_EOF_ENV), "{env}");
        assert!(dir.path().join("cell-01-edge.gameday.log").is_file());
        // The management section survived the rewrite.
        let m = FleetManagement::load(&path).unwrap();
        assert_eq!(m.cells[0].edges, ["https://127.0.0.1:9443"]);
        assert!(log_entries(&f).is_empty());
        // A restart: another pid.
        let r = f.restart(&edge).await.unwrap();
        let newer = FleetFile::load(&path).unwrap().cells[0].endpoint_pid;
        assert!(r.contains(&format!("SIGKILL pid {new}")), "{r}");
        assert_ne!(newer, new);
        assert!(running_as(newer, &["sleep".into(), "600".into()]));
        assert!(!alive(new));
        sigkill(newer);
    }

    #[tokio::test]
    async fn finish_pending_leaves_a_process_that_was_never_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = sleeper(dir.path());
        let pid = child.id();
        let path = write_fleet(dir.path(), pid);
        let f = Faults::open(&path).unwrap();
        // A run that recorded the fault and died before the kill.
        let rec = record(pid).unwrap();
        f.write_log(&UndoLog {
            schema: UNDO_SCHEMA,
            entries: vec![UndoEntry {
                target: Target::Edge(cell()),
                requested: Target::Edge(cell()),
                kind: ActuatorKind::Local,
                recorded_unix_ms: unix_ms(),
                undo: Undo::Respawn {
                    killed_pid: pid,
                    argv: rec.argv,
                    cwd: rec.cwd,
                    env: rec.env,
                    respawned_pid: None,
                },
            }],
        })
        .unwrap();
        let undone = f.finish_pending().await.unwrap();
        assert_eq!(undone.len(), 1);
        assert!(undone[0].contains("never killed"), "{undone:?}");
        assert!(alive(pid));
        assert_eq!(FleetFile::load(&path).unwrap().cells[0].endpoint_pid, pid);
        assert!(f.finish_pending().await.unwrap().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[tokio::test]
    async fn finish_pending_leaves_a_component_started_again_outside_the_game_day() {
        let dir = tempfile::tempdir().unwrap();
        let mut killed = sleeper(dir.path());
        let rec = record(killed.id()).unwrap();
        killed.kill().unwrap();
        killed.wait().unwrap();
        // A new `cellctl dev` started the same command line again.
        let mut again = sleeper(dir.path());
        let path = write_fleet(dir.path(), again.id());
        let f = Faults::open(&path).unwrap();
        f.write_log(&UndoLog {
            schema: UNDO_SCHEMA,
            entries: vec![UndoEntry {
                target: Target::Edge(cell()),
                requested: Target::Cell(cell()),
                kind: ActuatorKind::Local,
                recorded_unix_ms: unix_ms(),
                undo: Undo::Respawn {
                    killed_pid: killed.id(),
                    argv: rec.argv,
                    cwd: rec.cwd,
                    env: rec.env,
                    respawned_pid: None,
                },
            }],
        })
        .unwrap();
        let undone = f.finish_pending().await.unwrap();
        assert!(
            undone[0].contains(&format!("already running as pid {}", again.id())),
            "{undone:?}"
        );
        assert_eq!(
            FleetFile::load(&path).unwrap().cells[0].endpoint_pid,
            again.id()
        );
        assert!(
            !dir.path().join("cell-01-edge.gameday.log").exists(),
            "nothing respawned"
        );
        again.kill().unwrap();
        again.wait().unwrap();
    }

    #[test]
    fn the_futures_can_be_spawned() {
        fn send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let path = inventory_with_command(dir.path(), &dir.path().join("out"));
        let f = Faults::open(&path).unwrap();
        let t = Target::Edge(cell());
        send(&f.down(&t));
        send(&f.up(&t));
        send(&f.restart(&t));
        send(&f.undo_all());
        send(&f.finish_pending());
    }

    #[tokio::test]
    async fn a_pid_that_is_not_the_fleets_is_not_killed() {
        let dir = tempfile::tempdir().unwrap();
        // Not started in the fleet's directory, no argument in it: a stale pid's new owner.
        let mut child = sleeper(Path::new("/"));
        let path = write_fleet(dir.path(), child.id());
        let f = Faults::open(&path).unwrap();
        let e = f.down(&Target::Edge(cell())).await.unwrap_err().to_string();
        assert!(
            e.contains("does not look like a process of the fleet"),
            "{e}"
        );
        assert!(alive(child.id()));
        assert!(log_entries(&f).is_empty());
        // A dead pid is refused too.
        let e = f
            .down(&Target::AuthReplica(cell(), 0))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("pid 0") && e.contains("not running"), "{e}");
        let e = f
            .describe(&Target::AuthReplica(cell(), 3))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no replica 3"), "{e}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
