//! The production rehearsal: the release tarball (`scripts/package`) unpacked, its binaries
//! started from its example configurations — not by `cellctl dev` — each server on its own
//! loopback address as if on its own host: a control plane and two cells, each with two
//! auth-service replicas on one PostgreSQL database, an edge and the app. Then, through
//! `cellctl --inventory` only: status, sign-in, route load, keys rotate, revoke, migrate.
//!
//! The examples are adapted the way an operator adapts them, by [`Adapt`]: host names become
//! this test's addresses, the install prefixes (`/etc/cellbind`, `/var/lib/cellbind`,
//! `/run/credentials`) become each host's directory, `cell-01` becomes `cell-02` for the
//! second cell, and the map key the control plane made replaces the placeholder. No key of any
//! file is added, removed or renamed, so a key the examples lose or misspell fails this test.
//! The secrets are made as the examples' comments say (random tokens, a 32-byte KEK, the TLS
//! keys) in each host's `etc/secrets/`, and handed to each server the way its systemd unit
//! does: every `LoadCredential=NAME:PATH` line of the tarball's unit copies PATH to
//! `run/credentials/<unit>/NAME`, which the configuration names, so a credential a
//! configuration names and its unit does not load fails this test. From the operator's
//! inventory on, the runbook's command blocks (docs/OPERATIONS.md, marked `rehearsal:`) are run
//! as written ([`Runbook`]): status, provisioning, the map export, a key rotation.
//!
//! The tarball holds the debug binaries (`--profile debug --no-build`), the ones the suite
//! built; the release build is the same script with the default profile.
//!
//! Then a game day (`cellctl gameday run`, docs/GAMEDAY.md) from the operator's inventory with
//! a `[gameday]` section, its faults through `command` actuators written as an operator of this
//! layout (no `cellctl dev`, no systemd) would write them: `down` SIGKILLs the servers named by
//! their pid files and waits for them to die, `up` starts each server again detached, exactly
//! as this test starts it except for stdin (`/dev/null`, so without the stop-at-end-of-stdin
//! switch) and writes its pid file. Every scenario it runs must pass; the servers the `up`
//! commands started are stopped with the rest at the end (they are not this test's children:
//! found by their command lines, which name this test's directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, bin_dir, fleet_slot, process_gone, signal};
use cellctl::gameday::model::Outcome;
use cellctl::gameday::{RunArgs, Scale};
use devfleet::{LocalCa, PgServer, client_trusting};
use protocol::admin::app::CONTRACTORS_PATH;
use protocol::admin::cell::PLACEMENT_MAP_PATH;
use protocol::admin::placement::{self, MapPublicKey};
use reqwest::Method;
use runtime::secret::{random_token, write_private};
use tokio::process::{Child, Command};

/// Longest wait for a server to be ready, for a revocation to reach the edge, for a command.
const DEADLINE: Duration = Duration::from_secs(60);
/// The example configurations' placeholder map key (refused until replaced).
const MAP_KEY_PLACEHOLDER: &str = "REPLACE-ME";
const CELLS: u8 = 2;
const CONTRACTOR: &str = "c-90001";
const LOGIN: &str = "tech-1";
const PASSWORD: &str = "rehearsal-password-1";

/// The servers of the examples: file name in `etc/`, binary, management port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    ControlPlane,
    AuthService,
    Edge,
    App,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::ControlPlane => "control-plane",
            Server::AuthService => "auth-service",
            Server::Edge => "cell-endpoint",
            Server::App => "demo-app",
        }
    }
    fn binary(self) -> String {
        format!("cellbind-{}", self.name())
    }
    /// Its systemd unit.
    fn unit(self) -> String {
        format!("cellbind-{}.service", self.name())
    }
    /// The example's `management_listen` port.
    fn management_port(self) -> u16 {
        match self {
            Server::Edge => 9101,
            Server::AuthService => 9102,
            Server::ControlPlane => 9103,
            Server::App => 9104,
        }
    }
}

/// This test's "hosts": the control plane on 127.20.0.1; cell n's edge, auth-service replicas
/// a and b, and app on 127.20.n.1 to .4.
fn ip(cell: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 20, cell, host))
}
const EDGE: u8 = 1;
const AUTH_A: u8 = 2;
const AUTH_B: u8 = 3;
const APP: u8 = 4;

fn cell_id(n: u8) -> String {
    format!("cell-{n:02}")
}

/// How the examples are adapted to this machine (see the module doc).
struct Adapt<'a> {
    /// The host's own address (listeners).
    ip: IpAddr,
    /// The host's directory (stands for `/`).
    root: &'a Path,
    /// The cell the file is for (`None`: the control plane and the inventory).
    cell: Option<u8>,
    map_key: &'a str,
}

impl Adapt<'_> {
    fn apply(&self, example: &str) -> String {
        let mut text = example.to_owned();
        if let Some(n) = self.cell {
            text = text.replace("cell-01", &cell_id(n));
        }
        for n in 1..=CELLS {
            let c = cell_id(n);
            text = text
                .replace(
                    &format!("https://{c}.example.com"),
                    &format!("https://{}:8443", ip(n, EDGE)),
                )
                .replace(&format!("auth-a.{c}.internal"), &ip(n, AUTH_A).to_string())
                .replace(&format!("auth-b.{c}.internal"), &ip(n, AUTH_B).to_string())
                .replace(&format!("app.{c}.internal"), &ip(n, APP).to_string());
        }
        let root = self.root.display().to_string();
        text.replace("control-plane.internal", &ip(0, 1).to_string())
            .replace("\"0.0.0.0:", &format!("\"{}:", self.ip))
            .replace("\"127.0.0.1:", &format!("\"{}:", self.ip))
            .replace("/etc/cellbind/", &format!("{root}/etc/"))
            .replace("/var/lib/cellbind/", &format!("{root}/var/"))
            .replace("/run/credentials/", &format!("{root}/run/credentials/"))
            .replace(MAP_KEY_PLACEHOLDER, self.map_key)
    }
}

/// One cell's secrets, made as the examples' comments say.
struct CellSecrets {
    admin: String,
    app_internal: String,
    feed: String,
    edge: String,
    app: String,
    kek: [u8; 32],
    database_url: String,
}

/// A server this test started.
struct Started {
    host: String,
    server: Server,
    ip: IpAddr,
    child: Child,
}

/// The rehearsal's running world.
struct World {
    dir: PathBuf,
    /// The unpacked tarball.
    dist: PathBuf,
    ca: LocalCa,
    children: Vec<Started>,
}

impl World {
    fn host_root(&self, host: &str) -> PathBuf {
        self.dir.join("hosts").join(host)
    }

    /// `host`'s `etc/<server>.toml`.
    fn config_path(&self, host: &str, server: Server) -> PathBuf {
        self.host_root(host)
            .join("etc")
            .join(format!("{}.toml", server.name()))
    }

    /// Where `host`'s server's pid is written (as a unit's `PIDFile=`): `run/<binary>.pid`.
    fn pid_file(&self, host: &str, server: Server) -> PathBuf {
        self.host_root(host)
            .join("run")
            .join(format!("{}.pid", server.binary()))
    }

    fn log_path(&self, host: &str) -> PathBuf {
        self.dir.join(format!("{host}.log"))
    }

    /// The pid `host`'s pid file names, when that process runs and is `host`'s server (its
    /// command line names the host's configuration).
    fn serving_pid(&self, host: &str, server: Server) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.pid_file(host, server))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let config = self.config_path(host, server).display().to_string();
        let names_config = String::from_utf8_lossy(&cmdline)
            .split('\0')
            .any(|a| a == config);
        (names_config && !process_gone(pid)).then_some(pid)
    }

    /// The servers started again by someone else (a game day's `up` command) after this
    /// test's child exited: (host, server, ip, pid).
    fn restarted(&mut self) -> Vec<(String, Server, IpAddr, u32)> {
        let mut exited = Vec::new();
        for s in &mut self.children {
            if let Ok(Some(_)) = s.child.try_wait() {
                exited.push((s.host.clone(), s.server, s.ip));
            }
        }
        exited
            .into_iter()
            .filter_map(|(host, server, ip)| {
                let pid = self.serving_pid(&host, server)?;
                Some((host, server, ip, pid))
            })
            .collect()
    }

    /// Makes `host`'s directories, its certificate for `ip` (`etc/tls/`) and key
    /// (`etc/secrets/`), writes `secrets` (name, bytes) into its `etc/secrets/` (0600), and
    /// hands `server` its credentials as its systemd unit does.
    fn prepare_host(&self, host: &str, server: Server, ip: IpAddr, secrets: &[(&str, &[u8])]) {
        let root = self.host_root(host);
        for d in ["etc/tls", "etc/secrets"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        runtime::files::private_dir(&root.join("etc/secrets")).unwrap();
        let var = root.join("var").join(server.name());
        std::fs::create_dir_all(&var).unwrap();
        runtime::files::private_dir(&var).unwrap();
        std::fs::write(root.join("etc/tls/ca.pem"), self.ca.pem()).unwrap();
        let cert = root.join(format!("etc/tls/{}.pem", server.name()));
        // (An edge's certificate was issued before the control plane started.)
        if !cert.exists() {
            self.ca
                .issue_to(
                    host,
                    &[ip],
                    &cert,
                    &root.join(format!("etc/secrets/{}.key", server.name())),
                )
                .unwrap();
        }
        for (name, bytes) in secrets {
            write_private(&root.join("etc/secrets").join(name), bytes).unwrap();
        }
        self.load_credentials(&root, server);
    }

    /// What systemd does for `server`'s unit from the tarball: each `LoadCredential=NAME:PATH`
    /// copies PATH (below the host's root) to `run/credentials/<unit>/NAME`, 0400 in a 0700
    /// folder. Returns the names loaded.
    fn load_credentials(&self, root: &Path, server: Server) -> Vec<String> {
        let unit = std::fs::read_to_string(self.dist.join("systemd").join(server.unit())).unwrap();
        let dir = root.join("run/credentials").join(server.unit());
        std::fs::create_dir_all(&dir).unwrap();
        runtime::files::private_dir(&dir).unwrap();
        let mut names = Vec::new();
        for line in unit.lines() {
            let Some(spec) = line.strip_prefix("LoadCredential=") else {
                continue;
            };
            let (name, source) = spec.split_once(':').unwrap();
            let source = source
                .strip_prefix("/etc/cellbind/")
                .unwrap_or_else(|| panic!("{}: {source} is outside /etc/cellbind", server.unit()));
            let from = root.join("etc").join(source);
            let to = dir.join(name);
            std::fs::copy(&from, &to).unwrap_or_else(|e| {
                panic!(
                    "{}: LoadCredential={spec}: {}: {e}",
                    server.unit(),
                    from.display()
                )
            });
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o400)).unwrap();
            names.push(name.to_owned());
        }
        assert!(!names.is_empty(), "{} loads no credential", server.unit());
        names
    }

    /// Issues each cell's edge certificate and installs a copy beside the control plane (its
    /// `tls_cert_file`, which the map pins), as an operator does before the first start.
    fn issue_edge_certificates(&self) {
        let copies = self.host_root("control-plane").join("etc/cells");
        std::fs::create_dir_all(&copies).unwrap();
        for n in 1..=CELLS {
            let c = cell_id(n);
            let host = format!("{c}-edge");
            let root = self.host_root(&host);
            for d in ["etc/tls", "etc/secrets"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            let cert = root.join(format!("etc/tls/{}.pem", Server::Edge.name()));
            let key = root.join(format!("etc/secrets/{}.key", Server::Edge.name()));
            self.ca
                .issue_to(&host, &[ip(n, EDGE)], &cert, &key)
                .unwrap();
            std::fs::copy(&cert, copies.join(format!("{c}.pem"))).unwrap();
        }
    }

    /// Writes the adapted example of `server` as `host`'s `etc/<server>.toml`; returns its path.
    fn write_config(
        &self,
        host: &str,
        server: Server,
        ip: IpAddr,
        cell: Option<u8>,
        map_key: &str,
    ) -> PathBuf {
        let root = self.host_root(host);
        let example = std::fs::read_to_string(
            self.dist
                .join("etc")
                .join(format!("{}.toml", server.name())),
        )
        .unwrap();
        let config = root.join("etc").join(format!("{}.toml", server.name()));
        let adapt = Adapt {
            ip,
            root: &root,
            cell,
            map_key,
        };
        std::fs::write(&config, adapt.apply(&example)).unwrap();
        config
    }

    /// `--check-config` of the adapted example with `map_key`: (exit success, stderr).
    fn check_config(
        &self,
        host: &str,
        server: Server,
        ip: IpAddr,
        cell: Option<u8>,
        map_key: &str,
    ) -> (bool, String) {
        let config = self.write_config(host, server, ip, cell, map_key);
        let out = std::process::Command::new(self.dist.join("bin").join(server.binary()))
            .arg("--config")
            .arg(&config)
            .arg("--check-config")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Writes the adapted example of `server` as `host`'s `etc/<server>.toml` and starts the
    /// tarball's binary with it; its stderr goes to `host.log`, its pid to its pid file.
    fn start(&mut self, host: &str, server: Server, ip: IpAddr, cell: Option<u8>, map_key: &str) {
        let config = self.write_config(host, server, ip, cell, map_key);
        let log = std::fs::File::create(self.log_path(host)).unwrap();
        let child = Command::new(self.dist.join("bin").join(server.binary()))
            .arg("--config")
            .arg(&config)
            // Never outlive the test: the servers stop when their stdin closes.
            .env(runtime::EXIT_ON_STDIN_EOF_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid_file = self.pid_file(host, server);
        std::fs::create_dir_all(pid_file.parent().unwrap()).unwrap();
        std::fs::write(&pid_file, format!("{}\n", child.id().unwrap())).unwrap();
        self.children.push(Started {
            host: host.to_owned(),
            server,
            ip,
            child,
        });
    }

    fn log_of(&self, host: &str) -> String {
        std::fs::read_to_string(self.log_path(host)).unwrap_or_default()
    }

    /// Fails with the host's log when one of the servers has exited (and was not started
    /// again: a game day's `up` command writes the new pid to the pid file).
    fn check_alive(&mut self) {
        let mut dead = Vec::new();
        for s in &mut self.children {
            if let Ok(Some(status)) = s.child.try_wait() {
                dead.push((s.host.clone(), s.server, status));
            }
        }
        dead.retain(|(host, server, _)| self.serving_pid(host, *server).is_none());
        if let Some((host, _, status)) = dead.first() {
            panic!("{host} exited ({status}):\n{}", self.log_of(host));
        }
    }

    /// Waits until `host`'s management listener answers `/readyz` with 200.
    async fn wait_ready(&mut self, client: &reqwest::Client, host: &str, ip: IpAddr, s: Server) {
        let url = format!("https://{ip}:{}/readyz", s.management_port());
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            self.check_alive();
            if let Ok(r) = client.get(&url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{host} was not ready at {url}:\n{}",
                self.log_of(host)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The scenarios of the game day, in this order: `shift-start-storm` and `auth-service-down`
/// fault through the `command` actuators of [`World::gameday_section`] (the control plane, the
/// last cell's auth-services); the others fault nothing (a key rotation, revocations, a
/// migration).
///
/// Between two scenarios the game day waits for each cell's edge (`/readyz`) and auth-service
/// (its admin status): an `up` command (like `systemctl start` of a `Type=exec` unit) returns
/// before the server listens (~0.7 s here for an auth-service). `cell-lost` would need an
/// actuator for the whole cell and is left to `e2e::gameday`.
const GAMEDAY_SCENARIOS: &[&str] = &[
    "shift-start-storm",
    "revocation-propagation",
    "key-rotation",
    "stale-map-sign-in",
    "auth-service-down",
];
/// How long each scenario holds its fault under load.
const GAMEDAY_DURATION: Duration = Duration::from_secs(3);

/// Shell function of the actuators' scripts: whether pid `$1` runs (a process nobody reaped
/// yet does not).
const RUNNING_FN: &str = "running() { [ -d \"/proc/$1\" ] && ! grep -q '^State:[[:space:]]*Z' \"/proc/$1/status\" 2>/dev/null; }";

/// The `down` command's script (`sh -c SCRIPT sh PIDFILE…`): SIGKILL each server its pid file
/// names and wait until it is gone, as `systemctl stop` returns once the unit stopped; one
/// already stopped is left as it is (a cell's fault runs both the cell's entry and its
/// auth-services' entry when there is one, and both would name them).
fn down_script() -> String {
    format!(
        "{RUNNING_FN}; \
         for f; do \
         p=$(cat \"$f\") || exit; \
         running \"$p\" || continue; \
         kill -KILL \"$p\" || exit; \
         while running \"$p\"; do sleep 0.05; done; \
         done"
    )
}

/// The `up` command's script (`sh -c SCRIPT sh BIN CONFIG LOG PIDFILE…`): start each server
/// as [`World::start`] does, detached: stdin `/dev/null` (so without the stop-at-end-of-stdin
/// switch), stdout discarded, stderr appended to its log; its pid into its pid file. One that
/// runs already is left as it is (`systemctl start` of a running unit does nothing).
fn up_script() -> String {
    format!(
        "{RUNNING_FN}; \
         while [ \"$#\" -ge 4 ]; do \
         if ! {{ p=$(cat \"$4\" 2>/dev/null) && running \"$p\"; }}; then \
         env -u {} \"$1\" --config \"$2\" </dev/null >/dev/null 2>>\"$3\" & \
         echo \"$!\" >\"$4\" || exit; \
         fi; \
         shift 4; \
         done",
        runtime::EXIT_ON_STDIN_EOF_ENV
    )
}

impl World {
    /// `sh -c` [`down_script`] for `hosts`' servers, in this order.
    fn down_argv(&self, hosts: &[(String, Server)]) -> Vec<String> {
        let mut argv: Vec<String> = vec!["sh".into(), "-c".into(), down_script(), "sh".into()];
        for (host, server) in hosts {
            argv.push(self.pid_file(host, *server).display().to_string());
        }
        argv
    }

    /// `sh -c` [`up_script`] for `hosts`' servers, in this order.
    fn up_argv(&self, hosts: &[(String, Server)]) -> Vec<String> {
        let mut argv: Vec<String> = vec!["sh".into(), "-c".into(), up_script(), "sh".into()];
        for (host, server) in hosts {
            for p in [
                self.dist.join("bin").join(server.binary()),
                self.config_path(host, *server),
                self.log_path(host),
                self.pid_file(host, *server),
            ] {
                argv.push(p.display().to_string());
            }
        }
        argv
    }

    /// The inventory's `[gameday]` section for this layout: the edges' management `/metrics`,
    /// and `command` actuators for the control plane and the last cell's auth-services.
    fn gameday_section(&self) -> String {
        let toml_array = |v: Vec<String>| serde_json::to_string(&v).unwrap();
        let mut s = String::from(
            "\n# The rehearsal's game day: this layout's own commands (no systemd here).\n\
             [gameday]\nstate_dir = \"gameday\"\n",
        );
        for n in 1..=CELLS {
            s.push_str(&format!(
                "\n[[gameday.edges]]\ncell = \"{}\"\nmetrics_urls = [\"https://{}:{}/metrics\"]\n",
                cell_id(n),
                ip(n, EDGE),
                Server::Edge.management_port()
            ));
        }
        let c = cell_id(CELLS);
        let auth = vec![
            (format!("{c}-auth-a"), Server::AuthService),
            (format!("{c}-auth-b"), Server::AuthService),
        ];
        let cp = vec![("control-plane".to_owned(), Server::ControlPlane)];
        for (target, down, up) in [
            ("control-plane".to_owned(), &cp, &cp),
            (format!("{c}/auth-service"), &auth, &auth),
        ] {
            s.push_str(&format!(
                "\n[[gameday.actuators]]\ntarget = \"{target}\"\nkind = \"command\"\ndown = {}\nup = {}\n",
                toml_array(self.down_argv(down)),
                toml_array(self.up_argv(up))
            ));
        }
        s
    }
}

/// The running processes (not zombies) of the tarball unpacked in `dir`: the servers whose
/// program is its `bin/` and whose configuration is a host's below `dir` — this test's
/// children, and the ones a game day's `up` command started (whoever's pid file names them).
fn servers_of(dir: &Path, dist: &Path) -> Vec<u32> {
    let bin = dist.join("bin").display().to_string();
    let hosts = dir.join("hosts").display().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let cmdline = String::from_utf8_lossy(&cmdline);
            let args: Vec<&str> = cmdline.split('\0').collect();
            args.first().is_some_and(|a| a.starts_with(&bin))
                && args
                    .windows(2)
                    .any(|w| w[0] == "--config" && w[1].starts_with(&hosts))
                && !process_gone(*pid)
        })
        .collect()
}

impl Drop for World {
    /// Stops every server of the rehearsal, the ones a game day's `up` command started too
    /// (they are not this test's children; its children are also killed on drop), and waits
    /// until they are gone.
    fn drop(&mut self) {
        let servers = servers_of(&self.dir, &self.dist);
        for pid in &servers {
            signal(*pid, nix::sys::signal::Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !servers.iter().all(|p| process_gone(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One admin call as an operator's tooling makes it; any answer but 2xx fails the test.
async fn admin_call<T: serde::Serialize>(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    token: &str,
    body: &T,
) -> serde_json::Value {
    let r = client
        .request(method.clone(), url)
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{method} {url}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

/// Runs `cellctl --inventory INVENTORY ARGS…` (with `stdin` as its input) to its end.
async fn cellctl(inventory: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(bin_dir().join("cellctl"));
    cmd.args(args)
        .arg("--inventory")
        .arg(inventory)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        use tokio::io::AsyncWriteExt as _;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
    }
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("cellctl ended in time")
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    println!(
        "cellctl {} -> {}: {}",
        args.join(" "),
        out.status,
        stdout.trim()
    );
    (out.status.success(), stdout, stderr)
}

/// The runbook's command blocks (docs/OPERATIONS.md): a fenced `sh` block right after a
/// `<!-- rehearsal: NAME -->` line is run by [`Runbook::run`] as written, by bash with
/// `-euo pipefail`, with the runbook's §0 variables set for this rehearsal and the tarball's
/// `bin/` first on PATH. [`Runbook::all_ran`] fails the test when a marked block was not run.
struct Runbook {
    text: String,
    env: Vec<(String, String)>,
    ran: Vec<String>,
}

impl Runbook {
    fn new(dist: &Path, inventory: &Path, operator: &Path) -> Runbook {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/OPERATIONS.md");
        let text = std::fs::read_to_string(&doc).unwrap();
        let password_file = operator.join("tech-1.pw");
        write_private(&password_file, format!("{PASSWORD}\n").as_bytes()).unwrap();
        let path = format!(
            "{}:{}",
            dist.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let env = [
            ("INVENTORY", inventory.display().to_string()),
            ("CTR", CONTRACTOR.to_owned()),
            ("CELL", cell_id(1)),
            ("PASSWORD_FILE", password_file.display().to_string()),
            (
                "APP_RESOURCES",
                operator.join("app-resources").display().to_string(),
            ),
            ("PATH", path),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Runbook {
            text,
            env,
            ran: Vec::new(),
        }
    }

    /// The names of the marked blocks, in the runbook's order.
    fn names(&self) -> Vec<String> {
        self.text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("<!-- rehearsal: "))
            .filter_map(|l| l.strip_suffix(" -->"))
            .map(str::to_owned)
            .collect()
    }

    /// The block marked `name`: the lines of the fenced block that follows the marker.
    fn block(&self, name: &str) -> String {
        let marker = format!("<!-- rehearsal: {name} -->");
        let mut lines = self.text.lines().skip_while(|l| l.trim() != marker).skip(1);
        assert_eq!(
            lines.next().map(str::trim),
            Some("```sh"),
            "docs/OPERATIONS.md: `{marker}` is not followed by a ```sh block"
        );
        lines
            .take_while(|l| l.trim() != "```")
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn run(&mut self, name: &str) {
        let block = self.block(name);
        let section = self
            .text
            .lines()
            .take_while(|l| !l.contains(&format!("<!-- rehearsal: {name} -->")))
            .filter(|l| l.starts_with("## "))
            .last()
            .unwrap_or_default()
            .trim_start_matches("## ")
            .to_owned();
        let out = tokio::time::timeout(
            DEADLINE,
            Command::new("bash")
                .args(["-euo", "pipefail", "-c", &block])
                .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the runbook block ended in time")
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "runbook §{section} `{name}`:\n{block}\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "rehearsal: runbook §{section}, block `{name}` ({} commands): ok\n{}",
            block.lines().filter(|l| !l.trim().is_empty()).count(),
            stdout.trim()
        );
        self.ran.push(name.to_owned());
    }

    fn all_ran(&self) {
        let names = self.names();
        println!(
            "rehearsal: ran the runbook's blocks {:?} of {:?}",
            self.ran, names
        );
        for n in &names {
            assert!(
                self.ran.contains(n),
                "the runbook's block `{n}` was not run"
            );
        }
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The game day: appends [`World::gameday_section`] to the operator's inventory and runs
/// [`GAMEDAY_SCENARIOS`] from it, in-process (`cellctl gameday run`); every scenario must pass.
/// Then every server a `down` command stopped runs again (started by an `up` command: pid
/// file, `/readyz`) and the undo log is empty.
async fn game_day(world: &mut World, client: &reqwest::Client, inventory: &Path) {
    let section = world.gameday_section();
    let mut text = std::fs::read_to_string(inventory).unwrap();
    text.push_str(&section);
    std::fs::write(inventory, text).unwrap();
    println!(
        "rehearsal gameday: appended to {}:{section}",
        inventory.display()
    );
    let args = |dry_run| RunArgs {
        scenarios: GAMEDAY_SCENARIOS.iter().map(|s| (*s).to_owned()).collect(),
        all: false,
        cells: Vec::new(),
        duration: GAMEDAY_DURATION,
        scale: Scale::Small,
        dry_run,
        contractors: Vec::new(),
        wave: None,
        out: None,
    };
    // The plan first, as an operator checks it: each fault names its command.
    let plan = cellctl::gameday::run(inventory, &args(true), false)
        .await
        .unwrap();
    assert!(plan.is_none(), "a dry run writes no report");
    let started = Instant::now();
    let report = cellctl::gameday::run(inventory, &args(false), false)
        .await
        .unwrap()
        .expect("a report");
    println!(
        "rehearsal gameday (command actuator): {} scenarios in {:.1} s",
        report.scenarios.len(),
        started.elapsed().as_secs_f64()
    );
    if !report.passed() {
        // What the servers of the faulted cell said (the last lines of each log).
        let c = cell_id(CELLS);
        for host in [
            format!("{c}-edge"),
            format!("{c}-auth-a"),
            format!("{c}-auth-b"),
            format!("{c}-app"),
            "control-plane".to_owned(),
        ] {
            let log = world.log_of(&host);
            let lines: Vec<&str> = log.lines().collect();
            println!(
                "--- {host}.log (last 40 lines) ---\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
    assert_eq!(
        report
            .scenarios
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        GAMEDAY_SCENARIOS
    );
    for s in &report.scenarios {
        assert_eq!(s.outcome, Outcome::Passed, "{}: {}", s.name, s.reason);
        assert!(
            s.faults.iter().all(|f| f.end_ms.is_some()),
            "{}: every fault undone within the scenario",
            s.name
        );
    }
    // The faulting scenarios went through the command actuators.
    for name in ["shift-start-storm", "auth-service-down"] {
        let s = report.scenarios.iter().find(|s| s.name == name).unwrap();
        assert!(
            !s.faults.is_empty() && s.faults.iter().all(|f| f.what.contains("(command: sh -c")),
            "{name}: {:?}",
            s.faults.iter().map(|f| &f.what).collect::<Vec<_>>()
        );
    }
    println!(
        "rehearsal gameday (command actuator): {} scenarios passed: {}",
        report.scenarios.len(),
        GAMEDAY_SCENARIOS.join(", ")
    );

    // Every server stopped by a `down` command runs again, started by an `up` command.
    let restarted = world.restarted();
    let c = cell_id(CELLS);
    let mut hosts: Vec<&str> = restarted.iter().map(|(h, ..)| h.as_str()).collect();
    hosts.sort_unstable();
    let mut want = vec![
        "control-plane".to_owned(),
        format!("{c}-auth-a"),
        format!("{c}-auth-b"),
    ];
    want.sort_unstable();
    assert_eq!(hosts, want, "the servers the game day stopped and started");
    for (host, server, host_ip, pid) in &restarted {
        println!("rehearsal gameday: {host} runs again as pid {pid} (started by an `up` command)");
        world.wait_ready(client, host, *host_ip, *server).await;
    }
    // One server per host: no `up` command started a second one.
    let running = servers_of(&world.dir, &world.dist);
    assert_eq!(
        running.len(),
        world.children.len(),
        "servers running: {running:?}"
    );
    // Nothing left in force: the undo log is empty (and the lock free).
    let faults = cellctl::gameday::fault::Faults::open(inventory).unwrap();
    let undone = faults.finish_pending().await.unwrap();
    assert!(undone.is_empty(), "left in force: {undone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tarball_runs_a_two_cell_fleet_from_its_example_configs() {
    let slot = fleet_slot(Slot::Shared).await;
    let test_started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();

    // The tarball, as an operator receives it.
    let dist = cellbind_tests::package_and_unpack(&dir);
    for b in [
        "cellbind-auth-service",
        "cellbind-cell-endpoint",
        "cellbind-control-plane",
        "cellbind-demo-app",
        "cellctl",
    ] {
        assert!(dist.join("bin").join(b).is_file(), "the tarball has no {b}");
    }

    let ca = LocalCa::generate("Cellbind rehearsal CA").unwrap();
    let client = client_trusting(ca.pem().as_bytes()).unwrap();
    let mut world = World {
        dir: dir.clone(),
        dist,
        ca,
        children: Vec::new(),
    };

    // The cells' database server (one database per cell).
    let pg = PgServer::start(&dir.join("postgres")).unwrap();

    // The control plane first: it makes the map signing key the auth-services verify with,
    // and pins the edges' certificates (issued first).
    world.issue_edge_certificates();
    let cp_token = random_token().to_string();
    world.prepare_host(
        "control-plane",
        Server::ControlPlane,
        ip(0, 1),
        &[("control-plane.token", cp_token.as_bytes())],
    );
    world.start(
        "control-plane",
        Server::ControlPlane,
        ip(0, 1),
        None,
        MAP_KEY_PLACEHOLDER,
    );
    world
        .wait_ready(&client, "control-plane", ip(0, 1), Server::ControlPlane)
        .await;
    let cp_url = format!("https://{}:8440", ip(0, 1));
    let map_key = client
        .get(format!("{cp_url}{}", placement::MAP_PUBLIC_KEY_PATH))
        .send()
        .await
        .unwrap()
        .json::<MapPublicKey>()
        .await
        .unwrap()
        .public_key;

    // Each cell: its secrets, its database, then the app, two auth-service replicas, the edge.
    let mut secrets = Vec::new();
    for n in 1..=CELLS {
        let db = format!("cellbind_cell_{n:02}");
        pg.create_database(&db).unwrap();
        let mut kek = [0u8; 32];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut kek);
        let s = CellSecrets {
            admin: random_token().to_string(),
            app_internal: random_token().to_string(),
            feed: random_token().to_string(),
            edge: random_token().to_string(),
            app: random_token().to_string(),
            kek,
            database_url: pg.url(&db),
        };
        let c = cell_id(n);
        world.prepare_host(
            &format!("{c}-app"),
            Server::App,
            ip(n, APP),
            &[
                ("app.token", s.app.as_bytes()),
                ("app-internal.token", s.app_internal.as_bytes()),
            ],
        );
        world.start(
            &format!("{c}-app"),
            Server::App,
            ip(n, APP),
            Some(n),
            &map_key,
        );
        for (replica, host_ip) in [("a", ip(n, AUTH_A)), ("b", ip(n, AUTH_B))] {
            let host = format!("{c}-auth-{replica}");
            world.prepare_host(
                &host,
                Server::AuthService,
                host_ip,
                &[
                    ("kek", &s.kek[..]),
                    ("admin.token", s.admin.as_bytes()),
                    ("feed.token", s.feed.as_bytes()),
                    ("edge.token", s.edge.as_bytes()),
                    ("database-url", s.database_url.as_bytes()),
                ],
            );
            if n == 1 && replica == "a" {
                // The example as shipped (its placeholder), or with a published example key,
                // does not start.
                for (key, says) in [
                    (MAP_KEY_PLACEHOLDER, "not a base64url Ed25519 public key"),
                    (
                        protocol::map_key::RFC8037_EXAMPLE_KEY,
                        "RFC 8037's example key",
                    ),
                ] {
                    let (ok, stderr) =
                        world.check_config(&host, Server::AuthService, host_ip, Some(n), key);
                    assert!(
                        !ok && stderr.contains("map_public_key") && stderr.contains(says),
                        "map_public_key = {key:?}: {stderr}"
                    );
                    println!(
                        "rehearsal: map_public_key = {key:?} refused: {}",
                        stderr.trim()
                    );
                }
            }
            world.start(&host, Server::AuthService, host_ip, Some(n), &map_key);
        }
        // The edge holds its own feed credential (its instance `edge-a`, as the example
        // configuration names it), minted offline from the cell's feed secret.
        let feed_secret = dir.join(format!("{c}-feed-secret"));
        let credential = dir.join(format!("{c}-edge-a.feed"));
        write_private(&feed_secret, s.feed.as_bytes()).unwrap();
        let minted = std::process::Command::new(bin_dir().join("cellctl"))
            .args(["edge-credential", "--cell", &c, "--instance", "edge-a"])
            .arg("--feed-secret-file")
            .arg(&feed_secret)
            .arg("--out")
            .arg(&credential)
            .output()
            .unwrap();
        assert!(
            minted.status.success(),
            "cellctl edge-credential: {}",
            String::from_utf8_lossy(&minted.stderr)
        );
        let credential = std::fs::read(&credential).unwrap();
        world.prepare_host(
            &format!("{c}-edge"),
            Server::Edge,
            ip(n, EDGE),
            &[
                ("cell-endpoint.feed", &credential[..]),
                ("edge.token", s.edge.as_bytes()),
                ("app.token", s.app.as_bytes()),
            ],
        );
        world.start(
            &format!("{c}-edge"),
            Server::Edge,
            ip(n, EDGE),
            Some(n),
            &map_key,
        );
        secrets.push(s);
    }
    for n in 1..=CELLS {
        let c = cell_id(n);
        for (host, host_ip, server) in [
            (format!("{c}-app"), ip(n, APP), Server::App),
            (format!("{c}-auth-a"), ip(n, AUTH_A), Server::AuthService),
            (format!("{c}-auth-b"), ip(n, AUTH_B), Server::AuthService),
            (format!("{c}-edge"), ip(n, EDGE), Server::Edge),
        ] {
            world.wait_ready(&client, &host, host_ip, server).await;
        }
    }
    // Metrics on every management listener, labelled with the cell; on no other listener.
    for (host_ip, server) in [
        (ip(0, 1), Server::ControlPlane),
        (ip(1, EDGE), Server::Edge),
        (ip(1, AUTH_A), Server::AuthService),
        (ip(1, APP), Server::App),
    ] {
        let url = format!("https://{host_ip}:{}/metrics", server.management_port());
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK, "{url}");
        let text = r.text().await.unwrap();
        assert!(text.contains("cellbind_"), "{url}: {text}");
        if server != Server::ControlPlane {
            assert!(text.contains("cell=\"cell-01\""), "{url}: {text}");
        }
    }
    for url in [
        format!("{cp_url}/metrics"),
        format!("https://{}:8443/metrics", ip(1, EDGE)),
        format!("https://{}:8445/metrics", ip(1, AUTH_A)),
        format!("https://{}:8446/metrics", ip(1, AUTH_A)),
        format!("https://{}:8447/metrics", ip(1, APP)),
        format!("https://{}:8448/metrics", ip(1, APP)),
    ] {
        let status = client.get(&url).send().await.unwrap().status();
        assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{url}");
    }

    // The operator's inventory: the example, adapted; the files it names beside it.
    let operator = dir.join("operator");
    std::fs::create_dir_all(operator.join("tls")).unwrap();
    for n in 1..=CELLS {
        std::fs::create_dir_all(operator.join("secrets").join(cell_id(n))).unwrap();
    }
    std::fs::write(operator.join("tls/ca.pem"), world.ca.pem()).unwrap();
    write_private(
        &operator.join("secrets/control-plane.token"),
        cp_token.as_bytes(),
    )
    .unwrap();
    for n in 1..=CELLS {
        let s = &secrets[usize::from(n - 1)];
        for (name, token) in [
            ("admin.token", &s.admin),
            ("app-internal.token", &s.app_internal),
        ] {
            write_private(
                &operator.join("secrets").join(cell_id(n)).join(name),
                token.as_bytes(),
            )
            .unwrap();
        }
    }
    let inventory = operator.join("inventory.toml");
    let example = std::fs::read_to_string(world.dist.join("etc/inventory.toml")).unwrap();
    let adapt = Adapt {
        ip: ip(0, 1),
        root: &operator,
        cell: None,
        map_key: &map_key,
    };
    std::fs::write(&inventory, adapt.apply(&example)).unwrap();

    // The runbook (docs/OPERATIONS.md) from here: its `rehearsal:` blocks, run as written with
    // its §0 variables and the tarball's `cellctl` first on PATH.
    let mut runbook = Runbook::new(&world.dist, &inventory, &operator);
    runbook.run("status").await;
    // Provisioning a contractor on cell-01 (§8): `cellctl contractors add`, `users add`.
    runbook.run("provision").await;
    // The auth-services learn the map at their next poll; handing it to them now keeps the
    // test short (its WRONG_CELL hints name the owner at once).
    let map: serde_json::Value = client
        .get(format!("{cp_url}{}", placement::PLACEMENT_MAP_PATH))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for n in 1..=CELLS {
        admin_call(
            &client,
            Method::PUT,
            &format!("https://{}:8446{PLACEMENT_MAP_PATH}", ip(n, AUTH_A)),
            &secrets[usize::from(n - 1)].admin,
            &map,
        )
        .await;
    }
    // What an app ships (§9): the signed map and its key, which verify together.
    runbook.run("map-export").await;
    let exported = std::fs::read(operator.join("app-resources/placement-map.json")).unwrap();
    let key = std::fs::read_to_string(operator.join("app-resources/map-public-key.txt")).unwrap();
    assert_eq!(key.trim(), map_key);
    protocol::map::SignedMap::verify_bytes(
        &exported,
        &protocol::map_key::parse(key.trim()).unwrap(),
    )
    .unwrap();
    let cell1_admin = format!("https://{}:8446", ip(1, AUTH_A));

    // The app holds no admin token (ATTACKS A35): its own token at the auth-service's admin
    // API, and the cell's admin token at the app's migration interface, are both refused.
    for (url, token, what) in [
        (
            format!("{cell1_admin}/admin/v1/status"),
            &secrets[0].app_internal,
            "the app's internal token at the auth-service's admin API",
        ),
        (
            format!(
                "https://{}:8448{CONTRACTORS_PATH}/{CONTRACTOR}/completions",
                ip(1, APP)
            ),
            &secrets[0].admin,
            "the cell's admin token at the app's internal API",
        ),
    ] {
        let status = client
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{what}");
        println!("rehearsal: {what}: {status}");
    }

    // status: every service reachable.
    let (ok, out, err) = cellctl(&inventory, &["status", "--json"], None).await;
    assert!(ok, "{err}");
    let status = json(&out);
    assert_eq!(status["control_plane"]["reachable"], true, "{status}");
    for c in status["cells"].as_array().unwrap() {
        assert_eq!(c["reachable"], true, "{c}");
    }

    // Sign-in (the contractor's cell from the signed map) and today's route.
    let password_line = format!("{PASSWORD}\n");
    let sign_in = || {
        cellctl(
            &inventory,
            &["client", "sign-in", CONTRACTOR, LOGIN, "--json"],
            Some(&password_line),
        )
    };
    let (ok, out, err) = sign_in().await;
    assert!(ok, "{err}");
    assert_eq!(json(&out)["cell_id"], "cell-01", "{out}");
    let route_load = || {
        cellctl(
            &inventory,
            &["client", "get", "/api/routes/today", "--json"],
            None,
        )
    };
    let (ok, out, err) = route_load().await;
    assert!(ok, "{out}{err}");
    assert_eq!(json(&out)["status"], 200);

    // Keys rotate (§12, as written), then once more for its JSON: a new current key; the
    // session signed by the old one still opens the route.
    runbook.run("key-rotation").await;
    let (ok, out, err) = route_load().await;
    assert!(ok, "after the runbook's rotation: {out}{err}");
    let (ok, out, err) = cellctl(
        &inventory,
        &["keys", "rotate", "--cell", "cell-01", "--json"],
        None,
    )
    .await;
    assert!(ok, "{err}");
    let rotated = json(&out);
    assert!(rotated["current"].is_string(), "{rotated}");
    let (ok, out, err) = route_load().await;
    assert!(ok, "after the rotation: {out}{err}");

    // Revoke the subject: the edge refuses the session once the revocation reached it.
    let subject = format!("{CONTRACTOR}.{LOGIN}");
    let (ok, out, err) = cellctl(
        &inventory,
        &[
            "revoke",
            "subject",
            &subject,
            "--reason",
            "production rehearsal",
            "--json",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("cell-01"), "{out}");
    // It revokes every session issued before `before` (the second after the command ran).
    let before = json(&out)["report"]["revocation"]["before"]
        .as_u64()
        .expect("the revocation's `before`");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (ok, out, err) = route_load().await;
        if !ok {
            assert!(err.contains("revoked"), "after the revocation: {out}{err}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the revoked session still opens the route"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Signed in again once the clock is past `before` (a session issued in the revocation's own
    // second is revoked too), its route opens; then the contractor is moved to cell-02.
    use protocol::time::Clock as _;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while protocol::time::SystemClock.now() < before {
        assert!(tokio::time::Instant::now() < deadline, "the clock is stuck");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (ok, _, err) = sign_in().await;
    assert!(ok, "{err}");
    let (ok, out, err) = route_load().await;
    assert!(ok, "a session issued after the revocation: {out}{err}");
    let (ok, out, err) = cellctl(
        &inventory,
        &["migrate", CONTRACTOR, "--to", "cell-02"],
        None,
    )
    .await;
    assert!(ok, "{out}{err}");
    // The session from before the move follows WRONG_CELL to cell-02 (transfer + rebind)...
    let (ok, out, err) = route_load().await;
    assert!(ok, "the old session after the move: {out}{err}");
    assert_eq!(json(&out)["body"]["generation"], 2, "{out}");
    // ...and the next sign-in lands on cell-02 (the map says so), and its route opens there.
    let (ok, out, err) = sign_in().await;
    assert!(ok, "{err}");
    assert_eq!(json(&out)["cell_id"], "cell-02", "{out}");
    let (ok, out, err) = route_load().await;
    assert!(ok, "at cell-02: {out}{err}");
    assert_eq!(json(&out)["status"], 200);

    // The game day measures latencies: it runs with no other fleet test beside it.
    drop(slot);
    let _slot = fleet_slot(Slot::Exclusive).await;
    game_day(&mut world, &client, &inventory).await;
    // The fleet serves as before: the contractor (at cell-02, whose auth-services the game day
    // restarted) signs in and loads its route.
    let (ok, out, err) = sign_in().await;
    assert!(ok, "after the game day: {err}");
    assert_eq!(json(&out)["cell_id"], "cell-02", "{out}");
    let (ok, out, err) = route_load().await;
    assert!(ok, "after the game day: {out}{err}");

    world.check_alive();
    let (world_dir, world_dist) = (world.dir.clone(), world.dist.clone());
    drop(world);
    runbook.all_ran();
    // No server outlives the test, not even the ones started by the `up` commands.
    let left = servers_of(&world_dir, &world_dist);
    assert!(left.is_empty(), "servers still running: {left:?}");
    pg.stop().unwrap();
    println!(
        "rehearsal: {:.1} s in all",
        test_started.elapsed().as_secs_f64()
    );
}
