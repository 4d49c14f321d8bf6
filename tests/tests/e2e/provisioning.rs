//! Provisioning with the real `cellctl` binary against a dev fleet, as an operator does it
//! (docs/OPERATIONS.md): a contractor and two technicians from a CSV, placed at a cell, signed
//! in through that cell's edge; the same import again changes nothing; a disabled technician
//! can neither sign in nor use the session it had; a reset password signs in; a disabled
//! contractor's people can do neither; the map export an app ships verifies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use cellbind_tests::{Slot, TestFleet, bin_dir, route_load, sign_in_as};
use serde_json::Value;

/// Runs `cellctl --fleet FLEET ARGS…` with `stdin`; answers (exit code, stdout, stderr).
async fn cellctl(fleet: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(bin_dir().join("cellctl"))
        .arg("--fleet")
        .arg(fleet)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).await.unwrap();
    }
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contractor_and_its_technicians_from_a_csv_sign_in_and_a_rerun_changes_nothing() {
    let t = TestFleet::start_in(Slot::Shared, |o| o).await;
    let fleet = t.fleet.fleet_file_path();
    let file = t.file().clone();
    let cell = file.cells[1].clone();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("people.csv");
    std::fs::write(
        &csv,
        format!(
            "contractor_id,login,role,password,cell\n\
             c-77001,tech-1,technician,first pass phrase,{cell}\n\
             c-77001,tech-2,technician,\"second, pass phrase\",{cell}\n",
            cell = cell.id
        ),
    )
    .unwrap();
    // A sign-in of one of c-77001's people through its cell's edge.
    let sign_in = |login: &'static str, password: &'static str| {
        sign_in_as(&t.client, &cell.endpoint, "c-77001", login, password)
    };
    // A CSV holding passwords that others may read is refused, and nothing is written.
    std::fs::set_permissions(&csv, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = cellctl(&fleet, &["users", "import", csv.to_str().unwrap()], None).await;
    println!("import of a 0644 CSV: exit {code}: {}", err.trim());
    assert_eq!(code, 1);
    assert!(err.contains("people.csv"), "{err}");
    let (code, out, _) = cellctl(&fleet, &["users", "list", "c-77001"], None).await;
    assert_ne!(code, 0, "nothing was placed: {out}");

    std::fs::set_permissions(&csv, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, out, err) = cellctl(
        &fleet,
        &["--json", "users", "import", csv.to_str().unwrap()],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(&out).unwrap();
    let outcomes = |v: &Value, what: &str| -> Vec<String> {
        v[what]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["outcome"].as_str().unwrap().to_owned())
            .collect()
    };
    println!(
        "first import: contractors {:?}, users {:?}",
        outcomes(&first, "contractors"),
        outcomes(&first, "users")
    );
    assert_eq!(outcomes(&first, "contractors"), ["created"]);
    assert_eq!(outcomes(&first, "users"), ["created", "created"]);
    assert_eq!(first["contractors"][0]["cell"], cell.id.as_str());

    // Signed in through the owning cell's edge: 201, then today's route 200.
    let (status, body) = sign_in("tech-2", "second, pass phrase").await;
    println!("tech-2 sign-in at {}: {status}", cell.id);
    assert_eq!(status, 201, "{body}");
    let token = body["session"].as_str().unwrap().to_owned();
    let route = route_load(&t.client, &cell.endpoint, &token).await;
    println!("tech-2 route: {route}");
    assert_eq!(route, 200);
    // tech-1's session, for the contractor-wide disable at the end.
    let (status, body) = sign_in("tech-1", "first pass phrase").await;
    assert_eq!(status, 201, "{body}");
    let tech1_token = body["session"].as_str().unwrap().to_owned();

    // The same import again: everything unchanged (the text output says so, too).
    let (code, out, err) = cellctl(&fleet, &["users", "import", csv.to_str().unwrap()], None).await;
    assert_eq!(code, 0, "{err}");
    let summary = out.lines().last().unwrap_or_default();
    println!("second import: {summary}");
    assert!(
        summary.contains("contractors 0 created, 0 completed, 1 unchanged")
            && summary.contains("users 0 created, 0 changed, 2 unchanged"),
        "{out}"
    );
    // ... and the session it did not touch still works.
    assert_eq!(route_load(&t.client, &cell.endpoint, &token).await, 200);

    let (code, out, _) = cellctl(&fleet, &["users", "list", "c-77001"], None).await;
    assert_eq!(code, 0);
    println!("users list:\n{}", out.trim());
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, out, _) = cellctl(
        &fleet,
        &["contractors", "list", "--cell", cell.id.as_str()],
        None,
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.contains("c-77001") && l.contains("active") && l.contains("users 2")),
        "{out}"
    );

    // Disabled: sign-in refused and the session it holds revoked at every edge.
    let (code, out, err) = cellctl(
        &fleet,
        &[
            "users",
            "disable",
            "c-77001",
            "tech-2",
            "--reason",
            "left the company",
            "--wait-edges",
        ],
        None,
    )
    .await;
    println!("users disable: exit {code}\n{}", out.trim());
    assert_eq!(code, 0, "{err}");
    let (status, _) = sign_in("tech-2", "second, pass phrase").await;
    assert_eq!(status, 401);
    assert_eq!(route_load(&t.client, &cell.endpoint, &token).await, 401);

    // Enabled again with a new password, read from a 0600 file (never an argument).
    let (code, _, err) = cellctl(&fleet, &["users", "enable", "c-77001", "tech-2"], None).await;
    assert_eq!(code, 0, "{err}");
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "a third pass phrase\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, _, err) = cellctl(
        &fleet,
        &[
            "users",
            "reset-password",
            "c-77001",
            "tech-2",
            "--password-file",
            pw.to_str().unwrap(),
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (status, _) = sign_in("tech-2", "a third pass phrase").await;
    assert_eq!(status, 201);
    // A new user from stdin; a game day's reserved range is refused.
    let (code, out, err) = cellctl(
        &fleet,
        &["users", "add", "c-77001", "disp-1", "--role", "dispatcher"],
        Some("dispatcher pass phrase\n"),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("c-77001.disp-1 created"), "{out}");
    let (code, _, err) = cellctl(
        &fleet,
        &[
            "contractors",
            "add",
            "c-synthetic-cell-01-0001",
            "--cell",
            "cell-01",
        ],
        None,
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("reserved for game days"), "{err}");

    // The whole contractor disabled: every user, and every session (tech-1's, minted at the
    // start). (A session minted within a second after an earlier "before" revocation of its
    // subject carries that revocation's `before` as its `iat`, so a second revocation in the
    // same second misses it: docs/DECISIONS.md, "Noticed and left for later".)
    let token = tech1_token;
    let (code, out, err) = cellctl(
        &fleet,
        &[
            "--json",
            "contractors",
            "disable",
            "c-77001",
            "--reason",
            "contract ended",
            "--wait-edges",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    println!(
        "contractors disable: {} users {:?}",
        report["users"].as_array().unwrap().len(),
        outcomes(&report, "users")
    );
    assert_eq!(report["users"].as_array().unwrap().len(), 3);
    assert_eq!(route_load(&t.client, &cell.endpoint, &token).await, 401);
    for (login, password) in [
        ("tech-1", "first pass phrase"),
        ("disp-1", "dispatcher pass phrase"),
    ] {
        let (status, _) = sign_in(login, password).await;
        assert_eq!(status, 401, "{login}");
    }

    // What an app ships: the signed map and its key, which verify together (the cells hold
    // the map naming c-77001 once they polled the control plane's new publication).
    let out_dir = dir.path().join("app-resources");
    let ctr = protocol::ContractorId::new("c-77001").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, out, err) = cellctl(
            &fleet,
            &["map", "export", "--out", out_dir.to_str().unwrap()],
            None,
        )
        .await;
        assert_eq!(code, 0, "{err}");
        let map = std::fs::read(out_dir.join("placement-map.json")).unwrap();
        let key = std::fs::read_to_string(out_dir.join("map-public-key.txt")).unwrap();
        let key = protocol::map_key::parse(key.trim()).unwrap();
        let signed = protocol::map::SignedMap::verify_bytes(&map, &key).unwrap();
        if signed.map.cell_for(&ctr).map(|c| &c.id) == Some(&cell.id) {
            println!("map export:\n{}", out.trim());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the exported map never placed {ctr} at {}",
            cell.id
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    t.fleet.stop().await;
}
