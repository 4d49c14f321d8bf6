//! The fleet's child processes: spawned with a piped stdin and
//! `CELLBIND_EXIT_ON_STDIN_EOF=1` (so they never outlive the fleet), supervised (a death is
//! reported on stderr), probed until ready, and stopped in order.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runtime::IoContext as _;
use tokio::process::ChildStdin;
use tokio::task::JoinHandle;

use crate::error::{FleetError, Result};
use crate::layout::Layout;

/// Interval between two readiness probes, in milliseconds.
pub const PROBE_INTERVAL_MS: u64 = 50;
/// How long children get to exit after stdin EOF and SIGTERM before SIGKILL, in milliseconds.
pub const STOP_GRACE_MS: u64 = 5_000;
/// Environment variable that makes a child exit at the end of its stdin.
pub const EXIT_ON_STDIN_EOF_ENV: &str = runtime::EXIT_ON_STDIN_EOF_ENV;
/// Environment variable (no-color.org) that keeps colour escapes out of the children's logs.
pub const NO_COLOR_ENV: &str = "NO_COLOR";

/// What the supervisor knows about the children.
#[derive(Debug, Default)]
pub(crate) struct Supervision {
    pub(crate) stopping: AtomicBool,
    pub(crate) exits: Mutex<BTreeMap<String, Option<ExitStatus>>>,
}

impl Supervision {
    pub(crate) fn exit_of(&self, id: &str) -> Option<Option<ExitStatus>> {
        self.exits.lock().ok().and_then(|m| m.get(id).copied())
    }
}

/// One started child.
#[derive(Debug)]
pub(crate) struct ChildProc {
    pub(crate) id: String,
    pub(crate) pid: u32,
    stdin: Option<ChildStdin>,
    task: JoinHandle<()>,
    pub(crate) log: PathBuf,
}

/// Closes every child's stdin, sends SIGTERM, and SIGKILLs what is left after
/// [`STOP_GRACE_MS`]; returns once every child has been reaped.
pub(crate) async fn stop_children(sup: &Supervision, children: &mut Vec<ChildProc>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    sup.stopping.store(true, Ordering::SeqCst);
    for c in children.iter_mut() {
        c.stdin.take();
        if !c.task.is_finished()
            && let Ok(pid) = i32::try_from(c.pid)
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(STOP_GRACE_MS);
    for c in children.iter_mut() {
        if tokio::time::timeout_at(deadline, &mut c.task)
            .await
            .is_err()
        {
            // Not reaped yet, so the pid is still this child's.
            if let Ok(pid) = i32::try_from(c.pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = (&mut c.task).await;
        }
    }
    children.clear();
}

/// SIGKILLs one child (unless it has been reaped already: then its pid may be another
/// process's).
pub(crate) fn kill_child(c: &ChildProc) -> Result<()> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if c.task.is_finished() {
        return Ok(());
    }
    let pid = i32::try_from(c.pid)
        .map_err(|_| FleetError::Internal(format!("pid {} of {} is out of range", c.pid, c.id)))?;
    match kill(Pid::from_raw(pid), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(FleetError::Fleet(format!(
            "killing {} (pid {}): {e}",
            c.id, c.pid
        ))),
    }
}

/// Starts `bin --config DIR/config/<id>.toml`, its output to `DIR/<id>.log`.
pub(crate) fn spawn_child(
    bin: &Path,
    layout: &Layout,
    id: &str,
    sup: &Arc<Supervision>,
) -> Result<ChildProc> {
    let log_path = layout.log(id);
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let log2 = log.try_clone().context("duplicating a log handle")?;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("--config")
        .arg(layout.config(id))
        .stdin(Stdio::piped())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .env(EXIT_ON_STDIN_EOF_ENV, "1")
        // The logs are files read by people and tests: no colour escapes in them.
        .env(NO_COLOR_ENV, "1")
        .kill_on_drop(true)
        // Its own process group: a terminal's Ctrl-C reaches only cellctl, which stops the
        // children in order.
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child
        .id()
        .ok_or_else(|| FleetError::Fleet(format!("{id} exited at once")))?;
    let stdin = child.stdin.take();
    if let Ok(mut m) = sup.exits.lock() {
        m.remove(id);
    }
    let sup2 = sup.clone();
    let id2 = id.to_owned();
    let task = tokio::spawn(async move {
        let status = child.wait().await.ok();
        if !sup2.stopping.load(Ordering::SeqCst) {
            let what = status.map_or_else(|| "unknown status".to_string(), |s| s.to_string());
            eprintln!("cellctl dev: {id2} (pid {pid}) exited: {what}; the rest keep running");
        }
        if let Ok(mut m) = sup2.exits.lock() {
            m.insert(id2, status);
        }
    });
    Ok(ChildProc {
        id: id.to_owned(),
        pid,
        stdin,
        task,
        log: log_path,
    })
}

/// Polls `url` until it answers 200, the child exits, or the deadline passes.
pub(crate) async fn probe(
    client: &reqwest::Client,
    url: String,
    id: String,
    sup: &Supervision,
    layout: &Layout,
    deadline: Instant,
) -> Result<()> {
    loop {
        if let Some(status) = sup.exit_of(&id) {
            let log = layout.log(&id);
            if std::fs::read_to_string(&log)
                .is_ok_and(|l| l.contains("Address already in use") || l.contains("address in use"))
            {
                return Err(FleetError::ChildAddrInUse { id, log });
            }
            let what = status.map_or_else(|| "unknown status".to_string(), |s| s.to_string());
            return Err(FleetError::Fleet(format!(
                "{id} exited during start-up ({what}); see {}",
                layout.log(&id).display()
            )));
        }
        let last = match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(FleetError::Fleet(format!(
                "{id} was not ready in time ({url}: {last}); see {}",
                layout.log(&id).display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
}

/// Stops the fleet's servers that are not its children: ones a game day (`cellctl gameday`,
/// the `local` actuator) killed and started again, which `fleet.json` names. Only a live
/// process whose command line names the fleet's directory is signalled (a pid `fleet.json`
/// names may have been reused by another process since). SIGTERM, then SIGKILL after `grace`
/// (none: SIGKILL at once, from `Drop`).
pub(crate) fn stop_strays(dir: &Path, own: &[u32], grace: Option<Duration>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Ok(file) = fleet_description::FleetFile::load(&dir.join(fleet_description::FLEET_FILE))
    else {
        return;
    };
    let needle = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .to_string_lossy()
        .into_owned();
    let strays: Vec<Pid> = file
        .pids()
        .into_iter()
        .filter(|p| !own.contains(p))
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .filter_map(|p| i32::try_from(p).ok().map(Pid::from_raw))
        .collect();
    let first = if grace.is_some() {
        Signal::SIGTERM
    } else {
        Signal::SIGKILL
    };
    for p in &strays {
        let _ = kill(*p, first);
    }
    let Some(grace) = grace else { return };
    let deadline = std::time::Instant::now() + grace;
    // Not our children: nothing to reap, so poll for them to be gone.
    while strays.iter().any(|p| kill(*p, None).is_ok()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in &strays {
        let _ = kill(*p, Signal::SIGKILL);
    }
}
