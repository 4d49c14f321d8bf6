//! `cellctl migrate` killed after each step in turn (the hidden `--stop-after STEP` exits
//! abruptly right after the step's effects, before the journal records it): the contractor is
//! never owned by two cells, stays readable, and a rerun of the same command finishes the
//! migration with no write lost or duplicated. Then, with the control plane stopped
//! (SIGSTOP), a migration stops before release, the contractor stays read-only at the source
//! and is served for reads; once the control plane runs again a rerun finishes it. Last, the
//! SDK: a session follows a contractor moved once, and one moved twice asks for a new sign-in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::Instant;

use cellbind_tests::{Session, TestFleet, bin_dir, complete, route_load, session_for, signal};
use cellctl::migrate::STOP_AFTER_EXIT_CODE;
use devfleet::DemoUser;
use protocol::CellId;
use serde_json::Value;

const STEPS: [&str; 7] = [
    "copy",
    "handoff",
    "drain",
    "sync",
    "placement",
    "activate",
    "release",
];

fn cellctl(fleet: &Path, args: &[&str]) -> Output {
    std::process::Command::new(bin_dir().join("cellctl"))
        .arg("--fleet")
        .arg(fleet)
        .args(args)
        .output()
        .expect("cellctl runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A GET to one of `cell`'s internal listeners with `token` (its admin token at the
/// auth-service, its app's internal token at the app).
async fn internal_get(t: &TestFleet, token: &str, url: String) -> (u16, Value) {
    let r = t.client.get(url).bearer_auth(token).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn record(t: &TestFleet, cell: &CellId, c: &str) -> Value {
    let url = format!("{}/admin/v1/ownership/{c}", t.cell(cell).auth_service.url);
    internal_get(t, &t.cell(cell).admin_token, url).await.1
}

async fn completion_keys(t: &TestFleet, cell: &CellId, c: &str) -> Vec<String> {
    let url = format!(
        "{}/internal/v1/contractors/{c}/completions",
        t.cell(cell).app_internal_url
    );
    let (_, v) = internal_get(t, &t.cell(cell).app_internal_token, url).await;
    v["completions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c["idempotency_key"].as_str().map(str::to_owned))
        .collect()
}

fn target_of(u: &DemoUser) -> CellId {
    if u.cell_id.as_str() == "cell-01" {
        CellId::new("cell-02").unwrap()
    } else {
        CellId::new("cell-01").unwrap()
    }
}

/// Writes `n` completions with fresh keys at the session's cell; answers the accepted keys.
async fn write(t: &TestFleet, s: &Session, tag: &str, n: usize) -> Vec<String> {
    let mut ok = Vec::new();
    for i in 0..n {
        let key = format!("{tag}-{i}");
        let (st, _) = complete(
            &t.client,
            &s.endpoint,
            &s.token,
            &format!("j-{tag}-{i}"),
            &key,
        )
        .await;
        if st == 200 || st == 201 {
            ok.push(key);
        }
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_killed_after_any_step_finishes_on_rerun() {
    let t = TestFleet::start_exclusive().await;
    let fleet = t.fleet.fleet_file_path();
    let users: Vec<DemoUser> = t
        .file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.login == "tech-1")
        .take(STEPS.len() + 3)
        .cloned()
        .collect();

    for (step, u) in STEPS.iter().zip(&users) {
        let c = u.contractor_id.as_str();
        let to = target_of(u);
        let s = session_for(&t, u).await;
        let before = write(&t, &s, &format!("{step}-a"), 3).await;
        assert_eq!(before.len(), 3);

        let started = Instant::now();
        let o = cellctl(
            &fleet,
            &["migrate", c, "--to", to.as_str(), "--stop-after", step],
        );
        assert_eq!(o.status.code(), Some(STOP_AFTER_EXIT_CODE), "{}", text(&o));

        // Never split: before the release the source still holds it (active before the
        // handoff, read-only after it) and serves reads; writes are refused once the edge has
        // applied the handoff, which the drain waits for (DESIGN §5 step 2): right after the
        // handoff step a write may still be accepted, and is then carried over, never lost.
        let src = record(&t, &u.cell_id, c).await;
        let dst = record(&t, &to, c).await;
        let released = src["state"] == "released";
        let mut accepted = before.clone();
        assert_eq!(
            released,
            *step == "release",
            "{step}: source {src}, target {dst}"
        );
        if !released {
            assert_eq!(
                route_load(&t.client, &s.endpoint, &s.token).await,
                200,
                "{step}"
            );
            let key = format!("{step}-x");
            let (st, body) = complete(&t.client, &s.endpoint, &s.token, "j-x", &key).await;
            match (*step, st) {
                ("copy", 200) | ("handoff", 200) => accepted.push(key),
                ("copy", _) => panic!("{step}: {st} {body}"),
                (_, 409) => assert_eq!(body["error"], "HANDOFF_IN_PROGRESS", "{step}"),
                _ => panic!("{step}: {st} {body}"),
            }
        }

        let o = cellctl(&fleet, &["migrate", c, "--to", to.as_str()]);
        assert!(o.status.success(), "rerun after {step}: {}", text(&o));
        let out = text(&o);
        assert!(out.contains("resumed"), "{out}");
        println!(
            "killed after {step:<9} → rerun finished in {:>5} ms total; {} write(s) carried",
            started.elapsed().as_millis(),
            accepted.len()
        );
        let src = record(&t, &u.cell_id, c).await;
        assert_eq!(src["state"], "released", "{src}");
        assert_eq!(record(&t, &to, c).await["state"], "active");

        // No write lost or duplicated: every accepted key is at the new owner exactly once.
        let keys = completion_keys(&t, &to, c).await;
        let unique: BTreeSet<&String> = keys.iter().collect();
        assert_eq!(
            unique.len(),
            keys.len(),
            "{step}: duplicated writes {keys:?}"
        );
        for k in &accepted {
            assert!(unique.contains(k), "{step}: write {k} lost");
        }
        assert_eq!(keys.len(), accepted.len(), "{step}: {keys:?}");
        // The old session now follows the contractor: WRONG_CELL at the source.
        assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 409);
    }

    // Stalled publication: the control plane stopped.
    let u = &users[STEPS.len()];
    let c = u.contractor_id.as_str();
    let to = target_of(u);
    let s = session_for(&t, u).await;
    // Up to the drain with the control plane running (the start reads the placement), then
    // the control plane stops and the run resumes.
    let o = cellctl(
        &fleet,
        &["migrate", c, "--to", to.as_str(), "--stop-after", "drain"],
    );
    assert_eq!(o.status.code(), Some(STOP_AFTER_EXIT_CODE), "{}", text(&o));
    let cp = t.file().control_plane.pid;
    signal(cp, nix::sys::signal::Signal::SIGSTOP);
    let resumed_cp = scopeguard(cp);
    let o = cellctl(
        &fleet,
        &["migrate", c, "--to", to.as_str(), "--step-timeout-s", "3"],
    );
    let stalled = text(&o);
    assert!(!o.status.success(), "{stalled}");
    assert!(stalled.contains("placement"), "{stalled}");
    assert_eq!(record(&t, &u.cell_id, c).await["state"], "handoff");
    assert_ne!(record(&t, &to, c).await["state"], "active");
    assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 200);
    let (st, _) = complete(&t.client, &s.endpoint, &s.token, "j-y", "stalled-y").await;
    assert_eq!(st, 409);
    println!(
        "stalled publication: stopped before release ({})",
        stalled.lines().last().unwrap_or("")
    );
    drop(resumed_cp);
    let o = cellctl(&fleet, &["migrate", c, "--to", to.as_str()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(record(&t, &u.cell_id, c).await["state"], "released");
    assert_eq!(record(&t, &to, c).await["state"], "active");

    // The SDK: a session follows one move (transfer + rebind, no new sign-in); a contractor
    // moved twice while the client was away makes it sign in again (typed error).
    let once = sdk_client(&t, &users[STEPS.len() + 1]).await;
    let twice = sdk_client(&t, &users[STEPS.len() + 2]).await;
    for (client, u) in [
        (&once, &users[STEPS.len() + 1]),
        (&twice, &users[STEPS.len() + 2]),
    ] {
        let c = u.contractor_id.as_str();
        let o = cellctl(&fleet, &["migrate", c, "--to", target_of(u).as_str()]);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(client.session().unwrap().cell_id, u.cell_id);
    }
    let u = &users[STEPS.len() + 2];
    let third = CellId::new("cell-03").unwrap();
    assert_ne!(third, u.cell_id);
    let o = cellctl(
        &fleet,
        &["migrate", u.contractor_id.as_str(), "--to", third.as_str()],
    );
    assert!(o.status.success(), "{}", text(&o));

    let r = once
        .request(http::Method::GET, "/api/routes/today", None)
        .await
        .expect("the moved-once session follows its contractor");
    assert_eq!(r.status, 200);
    let moved = &users[STEPS.len() + 1];
    assert_eq!(once.session().unwrap().cell_id, target_of(moved));
    assert_eq!(once.session().unwrap().generation.get(), 2);

    match twice
        .request(http::Method::GET, "/api/routes/today", None)
        .await
    {
        Err(sdk::Error::SignInRequired) => {}
        other => panic!("moved twice: {other:?}"),
    }
    assert!(twice.session().is_none(), "the dead session is cleared");
}

async fn sdk_client(t: &TestFleet, u: &DemoUser) -> sdk::Client {
    let f = t.file();
    let map = t
        .client
        .get(format!("{}/v1/placement-map", f.control_plane.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let key = protocol::jwks::PublicKey::from_b64(&f.map_public_key).unwrap();
    let client = sdk::Client::builder(map.to_vec(), key)
        .extra_ca_pem(std::fs::read(&f.ca_cert).unwrap())
        .build()
        .unwrap();
    client
        .sign_in(
            &u.contractor_id,
            &protocol::Login::new(u.login.clone()).unwrap(),
            &protocol::Password::new(u.password.clone()).unwrap(),
        )
        .await
        .unwrap();
    client
}

/// Sends SIGCONT to `pid` when dropped (also when an assertion fails).
fn scopeguard(pid: u32) -> impl Drop {
    struct Cont(u32);
    impl Drop for Cont {
        fn drop(&mut self) {
            signal(self.0, nix::sys::signal::Signal::SIGCONT);
        }
    }
    Cont(pid)
}
