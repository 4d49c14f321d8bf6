//! `cellctl gameday` against a real dev fleet (SQLite, and PostgreSQL with 2 auth-service
//! replicas per cell when the suite runs on it): every scenario passes its bounds; a scenario
//! whose fault hurts real traffic stops itself; a `cellctl` killed mid-scenario leaves its
//! fault in the undo log and the next `cellctl gameday` undoes it first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, TestFleet, bin_dir, eventually, sign_in};
use cellctl::gameday::fault::Faults;
use cellctl::gameday::model::Outcome;
use cellctl::gameday::{RunArgs, Scale};
use nix::sys::signal::Signal;

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The pids an undo log records as killed (its `local` entries).
fn killed_pids(log: &str) -> Vec<u32> {
    fn walk(v: &serde_json::Value, out: &mut Vec<u32>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v.as_u64()) {
                        ("killed_pid", Some(p)) => out.extend(u32::try_from(p).ok()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(log) {
        walk(&v, &mut out);
    }
    out
}

/// `true` while `pid` runs (a zombie, killed but not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        !matches!(state, None | Some('Z' | 'X' | 'x'))
    })
}

/// Waits until a sign-in of `u` at `endpoint` answers `want` (panics after `limit`).
async fn sign_in_answers(
    t: &TestFleet,
    endpoint: &str,
    u: &devfleet::DemoUser,
    want: u16,
    limit: Duration,
    what: &str,
) {
    let deadline = Instant::now() + limit;
    loop {
        let (s, _) = sign_in(&t.client, endpoint, u).await;
        if s == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what} (sign-in answered {s})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn args(scenarios: &[&str], all: bool, duration_s: u64, out: &std::path::Path) -> RunArgs {
    RunArgs {
        scenarios: scenarios.iter().map(|s| (*s).to_owned()).collect(),
        all,
        cells: Vec::new(),
        duration: Duration::from_secs(duration_s),
        scale: Scale::Small,
        dry_run: false,
        contractors: Vec::new(),
        wave: None,
        out: Some(out.to_path_buf()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_meets_its_bounds_on_a_dev_fleet() {
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let out = tempfile::tempdir().unwrap();
    let path = t.fleet.fleet_file_path();
    let started = Instant::now();
    let report = cellctl::gameday::run(&path, &args(&[], true, 4, out.path()), false)
        .await
        .unwrap()
        .expect("a report");
    println!(
        "gameday --all ({} store): {} scenarios in {:.1} s",
        t.file().store,
        report.scenarios.len(),
        started.elapsed().as_secs_f64()
    );
    // (`gameday::run` printed its summary: faults, figures, every bound ✔/✘.)
    assert_eq!(
        report.scenarios.len(),
        cellctl::gameday::scenarios::ALL.len()
    );
    assert!(report.passed(), "every scenario passes");
    // The report is on disk, both forms.
    let files: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(files.iter().any(|f| f.ends_with(".json")), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with(".html")), "{files:?}");
    // The page, as an SRE opens it.
    let html = files.iter().find(|f| f.ends_with(".html")).unwrap();
    crate::gameday_report::look_at_report(&out.path().join(html), &report).await;
    // The synthetic users are retired: a sign-in of each is refused now (at its owner, which a
    // migration may have changed).
    let fleet = t.file();
    for cell in &fleet.cells {
        let contractor = format!("{}{}-0001", protocol::SYNTHETIC_CONTRACTOR_PREFIX, cell.id);
        let sign_in_at = |endpoint: String| {
            let (client, contractor) = (t.client.clone(), contractor.clone());
            async move {
                cellbind_tests::sign_in_as(&client, &endpoint, &contractor, "tech-1", "no-longer")
                    .await
            }
        };
        let (mut s, mut v) = sign_in_at(cell.endpoint.clone()).await;
        for _ in 0..3 {
            if s != 409 {
                break;
            }
            (s, v) = sign_in_at(v["owner_endpoint"].as_str().unwrap().to_owned()).await;
        }
        assert_eq!(s, 401, "{contractor}: {v}");
    }
    t.fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_hurting_real_traffic_stops_itself_and_undoes_its_fault() {
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let out = tempfile::tempdir().unwrap();
    let path = t.fleet.fleet_file_path();
    let fleet = t.file().clone();
    // `auth-service-down` acts on the last cell; real technicians of that cell keep signing in.
    let victim = fleet.cells.last().unwrap().clone();
    let real: Vec<_> = fleet
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == victim.id)
        .take(4)
        .cloned()
        .collect();
    // When real traffic first failed, in Unix milliseconds.
    let first_failure: Arc<Mutex<Option<u64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (client, first_failure, stop) = (t.client.clone(), first_failure.clone(), stop.clone());
        let endpoint = victim.endpoint.clone();
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (s, _) = sign_in(&client, &endpoint, &real[i % real.len()]).await;
                i += 1;
                if s != 201 {
                    first_failure.lock().unwrap().get_or_insert_with(unix_ms);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let report = cellctl::gameday::run(
        &path,
        &args(&["auth-service-down"], false, 120, out.path()),
        false,
    )
    .await
    .unwrap()
    .expect("a report");
    let s = &report.scenarios[0];
    let first = first_failure.lock().unwrap().expect("real traffic failed");
    let stopped = s.stopped_ms.expect("stopped by a stop condition");
    let detected_ms = (s.started_unix_ms + stopped).saturating_sub(first);
    let undone_ms = s.faults[0].end_ms.unwrap() - stopped;
    println!(
        "gameday abort: {:?}, stopped {detected_ms} ms after real traffic first failed, its fault undone {undone_ms} ms later (the scenario's window was 120 s): {}",
        s.outcome, s.reason
    );
    assert_eq!(s.outcome, Outcome::Aborted, "{}", s.reason);
    assert!(s.reason.contains("stop condition"), "{}", s.reason);
    assert!(
        detected_ms <= 5_000,
        "stopped within 5 s of the first real failure"
    );
    // The fault is undone: the undo log is empty and real sign-ins work again.
    let faults = Faults::open(&path).unwrap();
    assert!(faults.finish_pending().await.unwrap().is_empty());
    let u = fleet
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id == victim.id)
        .unwrap();
    let limit = Duration::from_secs(30);
    sign_in_answers(
        &t,
        &victim.endpoint,
        u,
        201,
        limit,
        "real sign-ins work again",
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.await.unwrap();
    t.fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cellctl_leaves_its_fault_to_the_next_run_and_a_signalled_one_undoes_it() {
    let t = TestFleet::start_in(Slot::Exclusive, |o| o).await;
    let path = t.fleet.fleet_file_path();
    let fleet = t.file().clone();
    let victim = fleet.cells.last().unwrap().clone();
    let undo_log = Faults::open(&path).unwrap().undo_log_path();
    let mut child = tokio::process::Command::new(bin_dir().join("cellctl"))
        .arg("--fleet")
        .arg(&path)
        .args(["gameday", "run", "auth-service-down", "--duration", "300s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // In force: recorded in the undo log (which cellctl writes BEFORE it acts) and every
    // process it names killed. Waiting on the log alone let the test SIGKILL cellctl between
    // its two replicas' kills, leaving one replica serving.
    let in_force = || {
        std::fs::read_to_string(&undo_log)
            .map(|s| s.contains("auth-service") && killed_pids(&s).iter().all(|p| !alive(*p)))
            .unwrap_or(false)
    };
    assert!(
        eventually(Duration::from_secs(60), in_force).await,
        "the fault is recorded in the undo log"
    );
    let pid = child.id().unwrap();
    cellbind_tests::signal(pid, Signal::SIGKILL);
    child.wait().await.unwrap();
    // The victim's auth-service is still down: a real sign-in is refused with 503.
    let u = fleet
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id == victim.id)
        .unwrap();
    let limit = Duration::from_secs(20);
    sign_in_answers(
        &t,
        &victim.endpoint,
        u,
        503,
        limit,
        "the fault outlived cellctl",
    )
    .await;
    // The next run undoes it first.
    let undone = tokio::process::Command::new(bin_dir().join("cellctl"))
        .arg("--fleet")
        .arg(&path)
        .args(["gameday", "undo"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&undone.stdout);
    println!("gameday after SIGKILL: {}", text.trim());
    assert!(
        undone.status.success(),
        "{}",
        String::from_utf8_lossy(&undone.stderr)
    );
    assert!(
        text.contains("undone:") && text.contains("auth-service"),
        "{text}"
    );
    let limit = Duration::from_secs(30);
    sign_in_answers(&t, &victim.endpoint, u, 201, limit, "sign-ins work again").await;

    // SIGINT (Ctrl-C) or SIGTERM (systemd, Kubernetes) instead: cellctl undoes the fault
    // itself, writes its report and exits non-zero.
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        let mut child = tokio::process::Command::new(bin_dir().join("cellctl"))
            .arg("--fleet")
            .arg(&path)
            .args(["gameday", "run", "auth-service-down", "--duration", "300s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(60), in_force).await,
            "the fault is recorded in the undo log"
        );
        sign_in_answers(&t, &victim.endpoint, u, 503, limit, "the fault is in force").await;
        let interrupted = Instant::now();
        cellbind_tests::signal(child.id().unwrap(), sig);
        let out = tokio::time::timeout(Duration::from_secs(60), async {
            let mut text = String::new();
            use tokio::io::AsyncReadExt as _;
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut text)
                .await
                .unwrap();
            (child.wait().await.unwrap(), text)
        })
        .await
        .expect("cellctl exits after the signal");
        println!(
            "gameday after {sig}: exit {:?} after {} ms, undo log {}",
            out.0.code(),
            interrupted.elapsed().as_millis(),
            if in_force() {
                "still holds the fault"
            } else {
                "empty"
            }
        );
        assert_eq!(out.0.code(), Some(1), "{}", out.1);
        assert!(out.1.contains("interrupted"), "{}", out.1);
        assert!(!in_force(), "the fault was undone by cellctl itself");
        sign_in_answers(&t, &victim.endpoint, u, 201, limit, "sign-ins work again").await;
    }
    t.fleet.stop().await;
}

#[tokio::test]
async fn a_game_day_refuses_a_real_contractor() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(&["migration-under-load"], false, 1, out.path());
    a.contractors = vec![protocol::ContractorId::new("c-40711").unwrap()];
    let e = cellctl::gameday::run(std::path::Path::new("no-such-fleet.json"), &a, false)
        .await
        .unwrap_err();
    println!("gameday with a real contractor: {e}");
    assert!(e.to_string().contains("real contractor"), "{e}");
}
