//! The harness of the browser tests (`desk_browser`, `gameday_report`): finding Chromium,
//! chromedriver and `certutil`, a chromedriver in its own process group with a throw-away
//! `HOME`, and a headless Chromium session through it (fantoccini).
//!
//! Needs Debian's `chromium` and `chromium-driver` (and `libnss3-tools` for `certutil`, when a
//! test makes the browser trust a CA). Without them a test fails and says what to install; set
//! `CELLBIND_SKIP_BROWSER_TESTS=1` to skip the browser tests on a machine that has no browser.
//! `CELLBIND_CHROMIUM` / `CELLBIND_CHROMEDRIVER` / `CELLBIND_CERTUTIL` override where the
//! binaries are looked up (default: `chromium`, `chromedriver` and `certutil` on `PATH`).
#![allow(clippy::expect_used, clippy::panic)] // test code

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// Set to `1` to skip the browser tests on a machine without Chromium.
pub const SKIP_ENV: &str = "CELLBIND_SKIP_BROWSER_TESTS";
pub const CHROMIUM_ENV: &str = "CELLBIND_CHROMIUM";
pub const CHROMEDRIVER_ENV: &str = "CELLBIND_CHROMEDRIVER";
pub const CERTUTIL_ENV: &str = "CELLBIND_CERTUTIL";
/// How long chromedriver may take to answer its status endpoint.
const DRIVER_START_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(100);

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The binary `name`: where `env` points, else on `PATH`; panics with what to install.
pub fn tool(env: &str, name: &str) -> PathBuf {
    std::env::var_os(env)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| on_path(name))
        .unwrap_or_else(|| {
            panic!(
                "`{name}` was not found: install the browser test tools \
                 (apt-get install -y chromium chromium-driver libnss3-tools), point {env} at it, \
                 or set {SKIP_ENV}=1 to skip the browser tests on this machine"
            )
        })
}

/// Whether the browser tests are skipped on this machine; says so, naming `what` did not run.
pub fn skipped(what: &str) -> bool {
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {SKIP_ENV}=1, the {what} did not run");
        return true;
    }
    false
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `HOME` whose NSS database trusts `ca` (or nothing, when `ca` is `None`).
pub fn browser_home(ca: Option<&Path>) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home dir");
    let db = home.path().join(".pki").join("nssdb");
    std::fs::create_dir_all(&db).expect("nssdb dir");
    let certutil = tool(CERTUTIL_ENV, "certutil");
    let db_arg = format!("sql:{}", db.display());
    run(Command::new(&certutil).args(["-d", &db_arg, "-N", "--empty-password"]));
    if let Some(ca) = ca {
        run(Command::new(&certutil)
            .args(["-d", &db_arg, "-A", "-t", "C,,", "-n", "cellbind-dev", "-i"])
            .arg(ca));
    }
    home
}

/// A chromedriver child process (its own process group), killed with the browser on drop.
pub struct Driver {
    child: Child,
    url: String,
    _home: tempfile::TempDir,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    /// Kills chromedriver's whole process group, so the browser it started goes too even when
    /// a failed step left its session open.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts chromedriver with `home` as its (and its browsers') `HOME`, kept until the driver is
/// dropped, and waits until it answers.
pub async fn start_driver(home: tempfile::TempDir) -> Driver {
    let chromedriver = tool(CHROMEDRIVER_ENV, "chromedriver");
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .process_group(0)
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _home: home,
        profile: tempfile::tempdir().expect("profile dir"),
    };
    // reqwest is built without a default crypto provider (the fleet helpers install one; a
    // test without a fleet has none yet).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let probe = reqwest::Client::new();
    let deadline = Instant::now() + DRIVER_START_TIMEOUT;
    loop {
        if let Ok(r) = probe.get(format!("{}/status", driver.url)).send().await
            && r.status().is_success()
        {
            return driver;
        }
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(POLL).await;
    }
}

/// A headless Chromium session through `driver`, its window `width`×`height`, with the test's
/// `extra_args` added to the common flags.
pub async fn browser(driver: &Driver, (width, height): (u32, u32), extra_args: &[&str]) -> Client {
    let chromium = tool(CHROMIUM_ENV, "chromium");
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    .iter()
    .chain(extra_args)
    .map(|a| (*a).to_owned())
    .collect();
    args.push(format!("--window-size={width},{height}"));
    args.push(format!(
        "--user-data-dir={}",
        driver.profile.path().display()
    ));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": chromium, "args": args }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}
