//! ATTACKS A38 on a real fleet: a transfer ticket taken before the user's own sign-out at the
//! source cell is refused at the target (a sign-out is recorded at the source only; the target
//! asks the source about every ticket through the source's public endpoint before it rebinds),
//! while a ticket of a session that is still signed in rebinds and is served, and an SDK client
//! signed in before the move follows the contractor without signing in again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use cellbind_tests::{TestFleet, post_json, route_load, session_for};
use cellctl::migrate::{MigrateOptions, migrate};
use protocol::{CellId, Login, Password};
use serde_json::json;

/// Bound of each migration step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_taken_before_the_users_sign_out_at_the_source_is_refused_at_the_target() {
    let t = TestFleet::start().await;
    let fleet_path = t.fleet.fleet_file_path();
    let f = t.file().clone();
    let tech = f.demo.technicians[0].clone();
    let ctr = tech.contractor_id.clone();
    let source = tech.cell_id.clone();
    let target: CellId = f
        .cells
        .iter()
        .map(|c| c.id.clone())
        .find(|c| *c != source)
        .unwrap();
    let source_ep = t.cell(&source).endpoint.clone();
    let target_ep = t.cell(&target).endpoint.clone();

    // Two sessions of one technician (one to sign out, one kept), and an SDK client.
    let signed_out = session_for(&t, &tech).await;
    let kept = session_for(&t, &tech).await;
    let map_bytes = t
        .client
        .get(format!("{source_ep}/v1/placement-map"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let map_key = protocol::jwks::PublicKey::from_b64(&f.map_public_key).unwrap();
    let sdk_client = sdk::Client::builder(map_bytes, map_key)
        .extra_ca_pem(std::fs::read(&f.ca_cert).unwrap())
        .build()
        .unwrap();
    sdk_client
        .sign_in(
            &ctr,
            &Login::new(tech.login.clone()).unwrap(),
            &Password::new(tech.password.clone()).unwrap(),
        )
        .await
        .unwrap();

    let mut opts = MigrateOptions::new(ctr.clone(), target.clone());
    opts.step_timeout = STEP_TIMEOUT;
    migrate(&fleet_path, &opts, |_| {})
        .await
        .expect("the migration completes");
    for s in [&signed_out, &kept] {
        assert_eq!(route_load(&t.client, &source_ep, &s.token).await, 409);
    }

    // Tickets for both sessions, then the user signs one of them out at the source.
    let transfer_url = format!("{source_ep}/v1/sessions/transfer");
    let mut tickets = Vec::new();
    for s in [&signed_out, &kept] {
        let (st, v) = post_json(&t.client, &transfer_url, Some(&s.token), json!({})).await;
        assert_eq!(st, 200, "{v}");
        tickets.push(v["ticket"].as_str().unwrap().to_owned());
    }
    let r = t
        .client
        .delete(format!("{source_ep}/v1/sessions/current"))
        .bearer_auth(&signed_out.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204, "sign-out at the source");

    // The signed-out session's ticket is refused at the target, and stays refused.
    let rebind_url = format!("{target_ep}/v1/sessions/rebind");
    let started = Instant::now();
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[0] }),
    )
    .await;
    let took = started.elapsed();
    println!(
        "A38: rebind at {target} of a ticket taken before the sign-out at {source}: {st} {} ({took:?})",
        v["error"]
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("SESSION_REVOKED")),
        "{v}"
    );
    assert!(v["session"].is_null(), "nothing minted");
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[0] }),
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (401, Some("SESSION_REVOKED")));

    // The normal path: the session still signed in rebinds once and is served at the target.
    let started = Instant::now();
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[1] }),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(st, 201, "{v}");
    println!("A38: rebind of the signed-in session's ticket: {st} ({took:?})");
    let moved = v["session"].as_str().unwrap().to_owned();
    assert_eq!(route_load(&t.client, &target_ep, &moved).await, 200);
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[1] }),
    )
    .await;
    assert_eq!(st, 403, "single use: {v}");

    // And the SDK follows the contractor by itself (WRONG_CELL → transfer → rebind, which
    // the target confirms with the source), without a new sign-in.
    let r = sdk_client
        .request(http::Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(sdk_client.session().unwrap().cell_id, target);
    println!("A38: an SDK client signed in before the move is served at {target} after a transfer");
}
