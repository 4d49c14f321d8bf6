//! A refused sign-in never logs its login in any process of a real fleet:
//! a password typed into the login box, sent through the edge as a field client's JSON
//! sign-in and as the desk's sign-in form, appears in no log file (the auth-services', the
//! edges' with the access lines, the apps', the control plane's), while the refusals
//! themselves are logged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::Duration;

use cellbind_tests::{TestFleet, eventually, sign_in_as};

/// A password typed into the login box: what must never reach a log.
const TYPED_PASSWORD: &str = "C0rrect-Horse_Battery.Staple-4ever";

fn fleet_logs(dir: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_sign_in_never_logs_its_login_in_any_process() {
    let t = TestFleet::start().await;
    let f = t.file().clone();
    let tech = f.demo.technicians[0].clone();
    let endpoint = t.cell(&tech.cell_id).endpoint.clone();

    // A field client's JSON sign-in: an unknown login, then a real login with the typed
    // password as its password (a wrong one), for contrast.
    let (st, v) = sign_in_as(
        &t.client,
        &endpoint,
        tech.contractor_id.as_str(),
        TYPED_PASSWORD,
        TYPED_PASSWORD,
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("INVALID_CREDENTIALS"))
    );
    // The desk's sign-in form, from the cell's own origin.
    // (Every character of these values is safe in a form body as it is.)
    let form = format!(
        "contractor_id={}&login={TYPED_PASSWORD}&password={TYPED_PASSWORD}",
        tech.contractor_id
    );
    let r = t
        .client
        .post(format!("{endpoint}/desk/sign-in"))
        .header("origin", endpoint.as_str())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    // The 303 to the desk page, followed: the page names the refusal.
    let landed = r.url().to_string();
    assert!(landed.contains("error=INVALID_CREDENTIALS"), "{landed}");

    // Both refusals are in the auth-service's log (written asynchronously: wait for them).
    let dir = t.fleet.dir().to_owned();
    let refused = || {
        fleet_logs(&dir)
            .iter()
            .map(|(_, text)| text.matches("sign-in refused").count())
            .sum::<usize>()
    };
    assert!(
        eventually(Duration::from_secs(10), || refused() >= 2).await,
        "the refusals are logged"
    );
    let logs = fleet_logs(&dir);
    let mut lines = 0;
    for (name, text) in &logs {
        lines += text.lines().count();
        assert!(
            !text.contains(TYPED_PASSWORD),
            "{name} holds the login typed as a password"
        );
    }
    let example = logs
        .iter()
        .flat_map(|(_, text)| text.lines())
        .find(|l| l.contains("sign-in refused"))
        .unwrap_or("");
    println!(
        "point 9: {} log files, {lines} lines, {} refused sign-ins logged, the login in none; e.g.\n{example}",
        logs.len(),
        refused()
    );
}
