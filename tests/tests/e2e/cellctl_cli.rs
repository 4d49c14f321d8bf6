//! The real `cellctl` binary: `dev` refuses a second run in the same directory and a taken
//! port; `status`, `keys rotate` and `client` work against it; neither SIGINT nor SIGKILL
//! leaves a process behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cellbind_tests::{Slot, bin_dir, eventually, fleet_slot, free_port_base, process_gone, signal};
use devfleet::{FleetFile, Ports};
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

fn cellctl() -> Command {
    let mut c = Command::new(bin_dir().join("cellctl"));
    c.kill_on_drop(true);
    c
}

/// Starts `cellctl dev` (its stderr into `stderr_file`) and returns once it printed that the
/// fleet is up.
async fn start_dev(dir: &Path, base: u16, stderr_file: &Path) -> Child {
    let mut child = cellctl()
        .args(["dev", "--dir"])
        .arg(dir)
        .args(["--port-base", &base.to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr_file).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("cellctl dev: {line}");
            if line.contains("Press Ctrl-C") {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        let status = child.try_wait().ok().flatten();
        let stderr = std::fs::read_to_string(stderr_file).unwrap_or_default();
        panic!(
            "cellctl dev did not come up (ready: {ready:?}, exit: {status:?}, port base {base}); \
             its stderr:\n{stderr}"
        );
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

async fn run_to_end(cmd: &mut Command) -> (bool, String, String) {
    let out = tokio::time::timeout(EXIT_TIMEOUT, cmd.output())
        .await
        .expect("the command ended in time")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn all_gone(pids: &[u32]) -> bool {
    eventually(EXIT_TIMEOUT, || pids.iter().all(|p| process_gone(*p))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_refuses_twice_and_a_taken_port_then_sigint_stops_everything() {
    let _slot = fleet_slot(Slot::Shared).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let base = free_port_base();
    let stderr_file = tmp.path().join("cellctl.stderr");
    let mut first = start_dev(&dir, base, &stderr_file).await;
    let fleet = FleetFile::load(&dir.join("fleet.json")).unwrap();
    let pids = fleet.pids();
    assert_eq!(pids.len(), 16);
    assert!(pids.iter().all(|p| !process_gone(*p)));

    // Twice in the same directory: refused, one clear line.
    let (ok, _, err) = run_to_end(
        cellctl()
            .args(["dev", "--dir"])
            .arg(&dir)
            .args(["--port-base", &free_port_base().to_string()]),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!(
            "cellctl: another `cellctl dev` is already running in {}",
            std::fs::canonicalize(&dir).unwrap().display()
        )
    );
    assert_eq!(err.trim().lines().count(), 1);

    // A port in use (here: cell 3's edge port) is named.
    let base2 = free_port_base();
    let taken = Ports { base: base2 }.edge(3).unwrap();
    let _holder = std::net::TcpListener::bind(taken).unwrap();
    let (ok, _, err) = run_to_end(
        cellctl()
            .args(["dev", "--dir"])
            .arg(tmp.path().join("other"))
            .args(["--port-base", &base2.to_string()]),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!("cellctl: address {taken} is already in use")
    );

    // status and keys rotate against the running fleet.
    let fleet_path = dir.join("fleet.json");
    let (ok, out, err) = run_to_end(
        cellctl()
            .arg("status")
            .arg("--fleet")
            .arg(&fleet_path)
            .arg("--json"),
    )
    .await;
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["control_plane"]["reachable"], true);
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 5);
    for c in cells {
        assert_eq!(c["reachable"], true, "{c}");
        assert_eq!(c["endpoint_ready"], true, "{c}");
        assert_eq!(c["map_version"], 1, "{c}");
        assert!(!c["kids"].as_array().unwrap().is_empty(), "{c}");
    }
    let (ok, out, err) = run_to_end(
        cellctl()
            .args(["keys", "rotate", "--cell", "cell-02", "--json", "--fleet"])
            .arg(&fleet_path),
    )
    .await;
    assert!(ok, "{err}");
    let rotated: serde_json::Value = serde_json::from_str(&out).unwrap();
    let before: Vec<String> = cells[1]["kids"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["status"] == "current")
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        rotated["retired"].as_array().unwrap()[0],
        before[0].as_str()
    );
    assert_ne!(rotated["current"], before[0].as_str());
    let (ok, _, err) = run_to_end(
        cellctl()
            .args(["keys", "rotate", "--cell", "cell-09", "--fleet"])
            .arg(&fleet_path),
    )
    .await;
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // The client SDK from the command line: sign in (password on stdin), read, write.
    let user = &fleet.demo.technicians[0];
    let session_file = tmp.path().join("session.json");
    let mut signin = cellctl()
        .args([
            "client",
            "sign-in",
            user.contractor_id.as_str(),
            &user.login,
            "--json",
        ])
        .arg("--fleet")
        .arg(&fleet_path)
        .arg("--session-file")
        .arg(&session_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = signin.stdin.take().unwrap();
        stdin
            .write_all(format!("{}\n", user.password).as_bytes())
            .await
            .unwrap();
    }
    let out = tokio::time::timeout(EXIT_TIMEOUT, signin.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cell_id"], user.cell_id.as_str());
    let (ok, out, err) = run_to_end(
        cellctl()
            .args(["client", "get", "/api/routes/today", "--json", "--fleet"])
            .arg(&fleet_path)
            .arg("--session-file")
            .arg(&session_file),
    )
    .await;
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], 200);
    assert_eq!(v["body"]["contractor_id"], user.contractor_id.as_str());
    let (ok, out, err) = run_to_end(
        cellctl()
            .args([
                "client",
                "post",
                "/api/jobs/cli-1/complete",
                "--body",
                "{}",
                "--json",
            ])
            .arg("--fleet")
            .arg(&fleet_path)
            .arg("--session-file")
            .arg(&session_file),
    )
    .await;
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["body"]["status"], "completed");

    // A child that dies is reported on stderr and left dead; the rest keep running.
    let app = fleet.cells[4].app_pid;
    signal(app, Signal::SIGKILL);
    let expected = format!("cell-05-app (pid {app}) exited: signal: 9 (SIGKILL)");
    assert!(
        eventually(EXIT_TIMEOUT, || std::fs::read_to_string(&stderr_file)
            .unwrap_or_default()
            .contains(&expected))
        .await,
        "no report of the dead child on stderr"
    );
    assert!(
        first.try_wait().unwrap().is_none(),
        "cellctl dev keeps running"
    );
    let others: Vec<u32> = pids.iter().copied().filter(|p| *p != app).collect();
    assert!(others.iter().all(|p| !process_gone(*p)));
    assert!(
        process_gone(app),
        "a dead child is not restarted behind our back"
    );

    // SIGINT: cellctl stops every process it started and exits 0.
    signal(first.id().unwrap(), Signal::SIGINT);
    let status = tokio::time::timeout(EXIT_TIMEOUT, first.wait())
        .await
        .expect("cellctl exited in time")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(all_gone(&pids).await, "a process outlived cellctl dev");
    // A stopped fleet leaves the directory free for the next run.
    assert!(devfleet::lock_dir(&dir).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_never_outlive_a_sigkilled_cellctl() {
    let _slot = fleet_slot(Slot::Shared).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut cellctl = start_dev(&dir, free_port_base(), &tmp.path().join("stderr")).await;
    let pids = FleetFile::load(&dir.join("fleet.json")).unwrap().pids();
    signal(cellctl.id().unwrap(), Signal::SIGKILL);
    let _ = cellctl.wait().await;
    assert!(
        all_gone(&pids).await,
        "a child outlived a SIGKILLed cellctl dev"
    );
}

/// `cellctl --inventory`: the inventory `cellctl dev` writes beside `fleet.json` drives every
/// command (status, keys rotate, revoke, migrate, client) with each cell's own token; an
/// inventory that gives a cell another cell's token is refused by that cell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_from_an_inventory_and_a_cell_refuses_another_cells_token() {
    let _slot = fleet_slot(Slot::Shared).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut dev = start_dev(&dir, free_port_base(), &tmp.path().join("cellctl.stderr")).await;
    let fleet = FleetFile::load(&dir.join("fleet.json")).unwrap();
    let inventory = dir.join("inventory.toml");
    let text = std::fs::read_to_string(&inventory).expect("cellctl dev wrote inventory.toml");
    assert!(
        !text.contains(&fleet.cells[0].admin_token),
        "it names token files only"
    );
    let with_inventory = |args: &[&str]| {
        let mut c = cellctl();
        c.args(args).arg("--inventory").arg(&inventory);
        c
    };

    let (ok, out, err) = run_to_end(&mut with_inventory(&["status", "--json"])).await;
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["control_plane"]["reachable"], true);
    for c in v["cells"].as_array().unwrap() {
        assert_eq!(c["reachable"], true, "{c}");
    }
    let (ok, out, err) = run_to_end(&mut with_inventory(&[
        "keys", "rotate", "--cell", "cell-02", "--json",
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["current"].is_string());

    let user = fleet.demo.technicians[0].clone();
    let sub = format!("{}.{}", user.contractor_id, user.login);
    let (ok, out, err) = run_to_end(&mut with_inventory(&[
        "revoke",
        "subject",
        &sub,
        "--reason",
        "inventory test",
        "--json",
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(out.contains(user.cell_id.as_str()), "{out}");

    // A migration through the inventory (to the next cell).
    let n: u8 = user.cell_id.as_str()[5..].parse().unwrap();
    let target = format!("cell-{:02}", n % 5 + 1);
    let (ok, out, err) = run_to_end(&mut with_inventory(&[
        "migrate",
        user.contractor_id.as_str(),
        "--to",
        &target,
    ]))
    .await;
    assert!(ok, "{out}\n{err}");

    // The client, from the inventory (map verified with its key; session beside it).
    let other = fleet
        .demo
        .technicians
        .iter()
        .find(|u| u.contractor_id != user.contractor_id)
        .unwrap()
        .clone();
    let mut signin = with_inventory(&[
        "client",
        "sign-in",
        other.contractor_id.as_str(),
        &other.login,
        "--json",
    ]);
    signin
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = signin.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(format!("{}\n", other.password).as_bytes())
            .await
            .unwrap();
    }
    let out = tokio::time::timeout(EXIT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, out, err) = run_to_end(&mut with_inventory(&[
        "client",
        "get",
        "/api/routes/today",
        "--json",
    ]))
    .await;
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["status"],
        200
    );

    // Cell-02 given cell-01's token: refused by cell-02 (403), nothing rotated there.
    let bad = tmp.path().join("cross-cell.toml");
    let cell01_token = fleet.cells[0].admin_token_file.display().to_string();
    let cell02_token = fleet.cells[1].admin_token_file.display().to_string();
    std::fs::write(&bad, text.replace(&cell02_token, &cell01_token)).unwrap();
    let (ok, _, err) = run_to_end(
        cellctl()
            .args(["keys", "rotate", "--cell", "cell-02", "--inventory"])
            .arg(&bad),
    )
    .await;
    assert!(!ok, "a cell accepted another cell's token");
    assert!(err.contains("403"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    signal(dev.id().unwrap(), Signal::SIGINT);
    let status = tokio::time::timeout(EXIT_TIMEOUT, dev.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}
