//! Game day (Exercise 1, shortened): the control plane dies, then a cell's auth-service dies;
//! serving with existing sessions must not notice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use cellbind_tests::{
    TestFleet, complete, eventually, process_gone, route_load, session_for, sign_in, signal,
};
use futures::StreamExt as _;
use nix::sys::signal::Signal;

/// Route loads with the control plane down.
const ROUTE_LOADS: usize = 1_000;
/// Job completions with the control plane down.
const COMPLETIONS: usize = 200;
/// Route loads in the cell whose auth-service is down too.
const ROUTE_LOADS_CELL_DOWN: usize = 200;
/// Requests in flight at once.
const CONCURRENCY: usize = 16;
/// Technicians signed in per cell.
const SESSIONS_PER_CELL: usize = 4;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_survives_the_control_plane_and_an_auth_service_dying() {
    let t = TestFleet::start_exclusive().await;
    let sample = t.sample_per_cell(SESSIONS_PER_CELL, &[]);
    let mut sessions = Vec::new();
    for u in &sample {
        sessions.push(session_for(&t, u).await);
    }
    assert_eq!(sessions.len(), 5 * SESSIONS_PER_CELL);

    // 1. SIGKILL the control plane.
    let cp = t.file().control_plane.pid;
    signal(cp, Signal::SIGKILL);
    assert!(eventually(Duration::from_secs(5), || process_gone(cp)).await);
    assert!(
        eventually(Duration::from_secs(5), || t
            .fleet
            .exited()
            .iter()
            .any(|(id, _)| id == "control-plane"))
        .await,
        "the supervisor saw the control plane die"
    );

    // 1000 route loads spread over every cell.
    let started = Instant::now();
    let results: Vec<(u16, Duration)> = futures::stream::iter(0..ROUTE_LOADS)
        .map(|i| {
            let s = &sessions[i % sessions.len()];
            let client = &t.client;
            async move {
                let t0 = Instant::now();
                (
                    route_load(client, &s.endpoint, &s.token).await,
                    t0.elapsed(),
                )
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let wall = started.elapsed();
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    let mut lat: Vec<Duration> = results.iter().map(|(_, d)| *d).collect();
    lat.sort();
    println!(
        "game day, control plane down: route loads {ok}/{ROUTE_LOADS} ok ({:.1}%), p50 {:.1} ms, p99 {:.1} ms, {:.0} req/s",
        100.0 * ok as f64 / ROUTE_LOADS as f64,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        ROUTE_LOADS as f64 / wall.as_secs_f64()
    );
    let failed: Vec<u16> = results
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| *s != 200)
        .collect();
    assert!(failed.is_empty(), "failed route loads: {failed:?}");

    // 200 completions, each with its own idempotency key.
    let results: Vec<(u16, serde_json::Value)> = futures::stream::iter(0..COMPLETIONS)
        .map(|i| {
            let s = &sessions[i % sessions.len()];
            let client = &t.client;
            async move {
                complete(
                    client,
                    &s.endpoint,
                    &s.token,
                    &format!("gd-job-{i}"),
                    &format!("gd-key-{i}"),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let ok = results
        .iter()
        .filter(|(s, v)| *s == 200 && v["replayed"] == false)
        .count();
    println!(
        "game day, control plane down: completions {ok}/{COMPLETIONS} ok ({:.1}%)",
        100.0 * ok as f64 / COMPLETIONS as f64
    );
    let failed: Vec<_> = results.iter().filter(|(s, _)| *s != 200).collect();
    assert!(failed.is_empty(), "failed completions: {failed:?}");

    // The writes reached each cell's app exactly once.
    let first = &sessions[0];
    let cell = t.cell(&first.user.cell_id);
    let listed: serde_json::Value = t
        .client
        .get(format!(
            "{}/internal/v1/contractors/{}/completions",
            cell.app_internal_url, first.user.contractor_id
        ))
        .bearer_auth(&cell.app_internal_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let expected = (0..COMPLETIONS).filter(|i| i % sessions.len() == 0).count();
    assert_eq!(
        listed["completions"].as_array().unwrap().len(),
        expected,
        "{listed}"
    );

    // Sign-ins still work with the control plane down.
    let fresh: Vec<_> = t
        .file()
        .cells
        .iter()
        .map(|c| {
            t.file()
                .demo
                .technicians
                .iter()
                .find(|u| u.cell_id == c.id && u.login == "tech-2")
                .unwrap()
                .clone()
        })
        .collect();
    let mut signed_in = 0;
    for u in &fresh {
        let (s, v) = sign_in(&t.client, &t.cell(&u.cell_id).endpoint, u).await;
        assert_eq!(s, 201, "sign-in with the control plane down: {v}");
        signed_in += 1;
    }
    println!(
        "game day, control plane down: sign-ins {signed_in}/{} ok",
        fresh.len()
    );

    // 2. SIGKILL one cell's auth-service too: route loads in that cell still all succeed.
    let victim = &t.file().cells[2];
    let auth = victim.auth_service.pid;
    signal(auth, Signal::SIGKILL);
    assert!(eventually(Duration::from_secs(5), || process_gone(auth)).await);
    let in_cell: Vec<_> = sessions
        .iter()
        .filter(|s| s.user.cell_id == victim.id)
        .collect();
    assert!(!in_cell.is_empty());
    let results: Vec<u16> = futures::stream::iter(0..ROUTE_LOADS_CELL_DOWN)
        .map(|i| {
            let s = in_cell[i % in_cell.len()];
            let client = &t.client;
            async move { route_load(client, &s.endpoint, &s.token).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let ok = results.iter().filter(|s| **s == 200).count();
    println!(
        "game day, control plane and {}'s auth-service down: route loads in {} {ok}/{ROUTE_LOADS_CELL_DOWN} ok ({:.1}%)",
        victim.id,
        victim.id,
        100.0 * ok as f64 / ROUTE_LOADS_CELL_DOWN as f64
    );
    let failed: Vec<_> = results.iter().filter(|s| **s != 200).collect();
    assert!(failed.is_empty(), "failed route loads: {failed:?}");

    // The other children are untouched.
    assert!(
        eventually(Duration::from_secs(5), || t.fleet.exited().len() == 2).await,
        "{:?}",
        t.fleet.exited()
    );
    let dead: Vec<String> = t.fleet.exited().into_iter().map(|(id, _)| id).collect();
    assert_eq!(dead.len(), 2, "{dead:?}");
    let alive: Vec<u32> = t
        .file()
        .pids()
        .into_iter()
        .filter(|p| *p != cp && *p != auth)
        .collect();
    assert!(
        alive.iter().all(|p| !process_gone(*p)),
        "only the two victims died"
    );
    t.fleet.stop().await;
}
