//! What the shipped `cellctl` links: its normal dependencies (those of the binary the release
//! package and the image carry) include no server and not the dev-fleet harness. `cellctl dev`
//! runs the dev fleet's own binary instead (`src/dev.rs`).

use std::io::ErrorKind;
use std::process::Command;
use std::time::{Duration, Instant};

/// Workspace crates the shipped `cellctl` must not link.
const NOT_SHIPPED: [&str; 5] = [
    "cellbind-devfleet",
    "cellbind-control-plane",
    "cellbind-auth-service",
    "cellbind-cell-endpoint",
    "cellbind-demo-app",
];

#[test]
fn the_shipped_cellctl_links_no_server_and_not_the_dev_fleet() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "--manifest-path",
            manifest,
            "-p",
            "cellbind-cellctl",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ours: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with("cellbind-"))
        .collect();
    ours.sort_unstable();
    ours.dedup();
    println!("the shipped cellctl links: {}", ours.join(", "));
    assert!(ours.contains(&"cellbind-cellctl"), "{tree}");
    let linked: Vec<&&str> = NOT_SHIPPED.iter().filter(|c| ours.contains(c)).collect();
    assert!(
        linked.is_empty(),
        "the shipped cellctl links {linked:?} (cargo tree -p cellbind-cellctl -e normal)"
    );
}

/// An installed `cellctl` (here: a copy alone in a folder, as in the release package) has no
/// dev fleet beside it: `cellctl dev` says so in one line and fails; nothing is started.
#[test]
fn an_installed_cellctl_without_the_dev_fleet_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cellctl = dir.path().join("cellctl");
    std::fs::copy(env!("CARGO_BIN_EXE_cellctl"), &cellctl).unwrap();
    let fleet_dir = dir.path().join("fleet");
    // Another test of this binary may fork while the copy's write handle is still open, and
    // its child holds that handle until it execs: exec then fails with "text file busy"
    // (ETXTBSY) for that moment. Try again until it runs, within a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        match Command::new(&cellctl)
            .arg("dev")
            .arg("--dir")
            .arg(&fleet_dir)
            .output()
        {
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.unwrap(),
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "`cellctl dev` runs {}, which is not there",
            dir.path().join("cellctl-dev").display()
        )),
        "{err}"
    );
    assert!(!fleet_dir.exists(), "nothing was started");
}
