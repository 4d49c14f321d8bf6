//! Helpers of the revocation tests: extra edge instances for a cell (same configuration as the
//! fleet's own edge, their own port, instance id and state directory), a cell's auth-service
//! run by the test itself (so it can be killed and restarted), and small HTTP helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest an extra process may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A child process the test started; killed when dropped.
#[derive(Debug)]
pub struct Proc {
    pub child: tokio::process::Child,
    pub url: String,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Rewrites `key = ...` lines of a flat TOML file.
pub fn rewrite_toml(text: &str, set: &[(&str, String)]) -> String {
    text.lines()
        .map(|line| {
            for (k, v) in set {
                if line.split('=').next().map(str::trim) == Some(*k) {
                    return format!("{k} = {v}");
                }
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A free TCP port on `ip` (bound and released; the caller binds it next).
pub fn free_port(ip: &str) -> u16 {
    let l = std::net::TcpListener::bind((ip, 0)).expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

fn spawn(bin: &Path, config: &Path, log: &Path, url: String) -> Proc {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log handle");
    let child = tokio::process::Command::new(bin)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .env("CELLBIND_EXIT_ON_STDIN_EOF", "1")
        .kill_on_drop(true)
        .spawn()
        .expect("start a child");
    Proc {
        child,
        url,
        log: log.to_owned(),
    }
}

/// Starts `extra` more edge instances of the cell whose fleet edge config is
/// `DIR/config/{cell}-endpoint.toml`, each on a free port of the cell's address.
pub fn start_extra_edges(fleet_dir: &Path, cell: &str, ip: &str, extra: usize) -> Vec<Proc> {
    let base = std::fs::read_to_string(fleet_dir.join(format!("config/{cell}-endpoint.toml")))
        .expect("edge config");
    let bin = cellbind_tests::bin_dir().join("cellbind-cell-endpoint");
    (0..extra)
        .map(|i| {
            let port = free_port(ip);
            let id = format!("{cell}-edge-x{}", i + 2);
            let state = fleet_dir.join(format!("data/{id}"));
            {
                use std::os::unix::fs::DirBuilderExt as _;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&state)
                    .expect("state dir");
            }
            // Its own feed credential: the fleet edge's names the fleet edge.
            let credential = devfleet::write_edge_feed_credential(
                fleet_dir,
                &protocol::CellId::new(cell).expect("cell id"),
                &protocol::InstanceId::new(id.as_str()).expect("instance id"),
            )
            .expect("feed credential");
            let text = rewrite_toml(
                &base,
                &[
                    ("instance_id", format!("\"{id}\"")),
                    (
                        "feed_token_file",
                        format!("{:?}", credential.display().to_string()),
                    ),
                    ("listen", format!("\"{ip}:{port}\"")),
                    // Its own management listener (the copied one is the fleet edge's).
                    ("management_listen", format!("\"{ip}:{}\"", free_port(ip))),
                    ("state_dir", format!("{:?}", state.display().to_string())),
                ],
            );
            let cfg = fleet_dir.join(format!("config/{id}.toml"));
            std::fs::write(&cfg, text).expect("write config");
            spawn(
                &bin,
                &cfg,
                &fleet_dir.join(format!("{id}.log")),
                format!("https://{ip}:{port}"),
            )
        })
        .collect()
}

/// Starts a cell's auth-service from the fleet's own configuration file (same port, same data).
pub fn start_auth_service(fleet_dir: &Path, cell: &str, url: &str, log_name: &str) -> Proc {
    let bin = cellbind_tests::bin_dir().join("cellbind-auth-service");
    spawn(
        &bin,
        &fleet_dir.join(format!("config/{cell}-auth-service.toml")),
        &fleet_dir.join(log_name),
        url.to_owned(),
    )
}

/// Polls `GET {url}{path}` until it answers 200 or the deadline passes.
pub async fn wait_ready(client: &reqwest::Client, url: &str, path: &str) -> bool {
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{url}{path}")).send().await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// `GET {endpoint}/api/routes/today`: (status, error code).
pub async fn route(client: &reqwest::Client, endpoint: &str, token: &str) -> (u16, String) {
    match client
        .get(format!("{endpoint}/api/routes/today"))
        .bearer_auth(token)
        .send()
        .await
    {
        Ok(r) => {
            let s = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            (s, v["error"].as_str().unwrap_or_default().to_owned())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// Polls every edge with `token` until each answers `401 SESSION_REVOKED`; answers, per edge,
/// the time from `t0` to its first such answer (`None` when the deadline passed first or the
/// edge answered anything but 200 or 401 SESSION_REVOKED).
pub async fn time_to_revoked(
    client: &reqwest::Client,
    edges: &[String],
    token: &str,
    t0: Instant,
    deadline: Duration,
    poll: Duration,
) -> Vec<Result<Duration, String>> {
    let polls = edges.iter().map(|e| async move {
        loop {
            let (s, code) = route(client, e, token).await;
            match (s, code.as_str()) {
                (401, "SESSION_REVOKED") => return Ok(t0.elapsed()),
                (200, _) => {}
                (s, c) => return Err(format!("{e} answered {s} {c}")),
            }
            if t0.elapsed() > deadline {
                return Err(format!("{e} still served the session after {deadline:?}"));
            }
            tokio::time::sleep(poll).await;
        }
    });
    futures::future::join_all(polls).await
}

/// The p-th percentile (nearest rank) of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// The kid in a session token's header.
pub fn kid_of(token: &str) -> String {
    protocol::token::parse(
        token,
        protocol::token::SESSION_TYP,
        protocol::ids::MAX_TOKEN_HEADER_BYTES,
    )
    .expect("a session token")
    .kid
    .to_string()
}

/// An admin call: (status, JSON answer).
pub async fn admin(
    client: &reqwest::Client,
    token: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(r) => {
            let s = r.status().as_u16();
            (s, r.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}
