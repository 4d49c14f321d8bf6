//! The README's walkthrough and `cellctl dev`'s "Try it" hints, run as a reader would: the real
//! `cellctl dev` binary starts a fleet; the hints it printed are pasted into a fresh shell at the
//! repository's root; then `scripts/walkthrough` (the README's block, checked against it by the
//! docs test) runs twice in a row against the same fleet, and both runs must pass: every status
//! code as announced, every cellctl command successful (the second run finds the contractor
//! where the first moved it, and moves it on).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, bin_dir, fleet_slot, free_port_base};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// One walkthrough run: a migration and a fleet-wide revocation with `--wait-edges` included.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

/// Starts `cellctl dev` and returns it with the lines it printed up to "Press Ctrl-C".
async fn start_dev(dir: &Path, stderr_file: &Path) -> (Child, Vec<String>) {
    let base = free_port_base();
    let mut child = Command::new(bin_dir().join("cellctl"))
        .args(["dev", "--dir"])
        .arg(dir)
        .args(["--port-base", &base.to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr_file).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains("Press Ctrl-C");
            printed.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        let stderr = std::fs::read_to_string(stderr_file).unwrap_or_default();
        panic!("cellctl dev did not come up (port base {base}); its stderr:\n{stderr}");
    }
    // Keep draining stdout so the fleet never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, printed)
}

/// The commands under "Try it", as a reader would paste them (the two-space indent removed).
fn try_it(printed: &[String]) -> Vec<String> {
    printed
        .iter()
        .skip_while(|l| !l.starts_with("Try it"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.strip_prefix("  ").unwrap_or(l).to_owned())
        .collect()
}

/// Runs `script` in a new bash at the repository's root (`CELLCTL` names this build's cellctl).
async fn bash_at_root(script: &str) -> (bool, String, String) {
    let out = tokio::time::timeout(
        RUN_TIMEOUT,
        Command::new("bash")
            .args(["-c", script])
            .current_dir(repo_root())
            .env("CELLCTL", bin_dir().join("cellctl"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the commands ended in time")
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The status codes a walkthrough run printed (its `→ NNN` lines), and the cell it migrated to.
fn statuses_and_target(stdout: &str) -> (Vec<String>, Option<String>) {
    let statuses = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("→ "))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
        .collect();
    let target = stdout
        .lines()
        .find(|l| l.starts_with("migrated "))
        .and_then(|l| l.split(" to ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned);
    (statuses, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_try_it_hints_work_and_the_readme_walkthrough_runs_twice() {
    let _slot = fleet_slot(Slot::Shared).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let (mut dev, printed) = start_dev(&dir, &tmp.path().join("cellctl.stderr")).await;

    // The hints, pasted: the session is captured before it is used, the route loads, cellctl
    // is found at the path printed, and the last hint is the walkthrough.
    let hints = try_it(&printed);
    println!("Try it:\n  {}", hints.join("\n  "));
    let walkthrough = hints
        .iter()
        .find(|l| l.starts_with("scripts/walkthrough "))
        .expect("a hint runs scripts/walkthrough")
        .split(" #")
        .next()
        .unwrap()
        .trim()
        .to_owned();
    let others: Vec<&str> = hints
        .iter()
        .filter(|l| !l.starts_with("scripts/walkthrough "))
        .map(String::as_str)
        .collect();
    let (ok, out, err) = bash_at_root(&others.join("\n")).await;
    assert!(ok, "the Try it hints failed:\n{out}\n{err}");
    assert!(
        out.contains("\"jobs\":["),
        "the pasted route hint loaded no route:\n{out}\n{err}"
    );
    assert!(
        out.contains("control plane") && out.contains("cell-05"),
        "the pasted status hint printed no fleet status:\n{out}"
    );

    // The README's walkthrough, twice in a row against the same fleet.
    let mut targets = Vec::new();
    for run in 1..=2 {
        let started = Instant::now();
        let (ok, out, err) = bash_at_root(&walkthrough).await;
        let (statuses, target) = statuses_and_target(&out);
        println!(
            "walkthrough run {run}: exit {}, {:.1} s, {} statuses: {}; migrated to {}",
            if ok { "0" } else { "non-zero" },
            started.elapsed().as_secs_f64(),
            statuses.len(),
            statuses.join(" "),
            target.as_deref().unwrap_or("-")
        );
        assert!(ok, "walkthrough run {run} failed:\n{out}\n{err}");
        assert!(
            out.contains("walkthrough: every step answered as expected"),
            "{out}"
        );
        assert_eq!(
            statuses,
            [
                "200", "201", "200", "200", "200", "401", "409", "200", "400", "409"
            ],
            "run {run}:\n{out}"
        );
        targets.push(target.expect("the walkthrough migrated the contractor"));
    }
    // The second run moved the contractor on from where the first one left it.
    assert_ne!(targets[0], targets[1], "{targets:?}");

    cellbind_tests::signal(dev.id().unwrap(), Signal::SIGINT);
    let exited = tokio::time::timeout(EXIT_TIMEOUT, dev.wait()).await;
    assert!(
        matches!(exited, Ok(Ok(s)) if s.success()),
        "cellctl dev did not stop cleanly on SIGINT: {exited:?}"
    );
}
