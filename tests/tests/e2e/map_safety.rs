//! A cell refuses a tampered map and an older map, and keeps serving from the one it holds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use cellbind_tests::{TestFleet, route_load, session_for};
use devfleet::FleetCell;
use protocol::map::SignedMap;
use serde_json::json;

/// `PUT /admin/v1/placement-map` at a cell's auth-service, with that cell's admin token.
async fn push(t: &TestFleet, cell: &FleetCell, body: Vec<u8>) -> (u16, serde_json::Value) {
    let r = t
        .client
        .put(format!("{}/admin/v1/placement-map", cell.auth_service.url))
        .bearer_auth(&cell.admin_token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_and_older_maps_are_refused_and_the_cell_keeps_its_map() {
    let t = TestFleet::start().await;
    let cell = t.file().cells[1].clone();
    let v1 = t.map_at(&cell.endpoint).await;
    assert_eq!(v1.map.version, 1);

    // The control plane publishes version 2 when a placement changes.
    let mover = t
        .file()
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id != cell.id)
        .unwrap()
        .clone();
    let r = t
        .client
        .put(format!(
            "{}/admin/v1/placements/{}",
            t.file().control_plane.url,
            mover.contractor_id
        ))
        .bearer_auth(&t.file().admin_token) // the control plane's token
        .json(&json!({"cell": cell.id, "generation": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v2_bytes = t
        .client
        .get(format!("{}/v1/placement-map", t.file().control_plane.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let v2: SignedMap = serde_json::from_slice(&v2_bytes).unwrap();
    assert_eq!(v2.map.version, 2);
    assert_eq!(v2.map.overrides.get(&mover.contractor_id), Some(&cell.id));

    // The cell takes version 2 (pushed now; it would also poll it).
    let (s, v) = push(&t, &cell, v2_bytes.clone()).await;
    assert!(s == 200 || s == 400, "{s} {v}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.map_at(&cell.endpoint).await.map.version != 2 {
        assert!(Instant::now() < deadline, "the edge never served version 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // An older, validly signed map is refused.
    let (s, v) = push(&t, &cell, v1.to_json().unwrap()).await;
    assert_eq!(s, 400, "older map: {v}");
    assert_eq!(v["error"], "INVALID_REQUEST");

    // A tampered map (one content byte changed: version 2 → 3) is refused.
    let text = String::from_utf8(v2_bytes.clone()).unwrap();
    let tampered = text.replacen("\"version\":2", "\"version\":3", 1);
    assert_ne!(tampered, text);
    assert_eq!(tampered.len(), text.len());
    let (s, v) = push(&t, &cell, tampered.into_bytes()).await;
    assert_eq!(s, 400, "tampered map: {v}");

    // Another byte: an endpoint changed, version bumped to look newer.
    let other = text.replacen("\"version\":2", "\"version\":4", 1).replacen(
        &cell.endpoint,
        &cell.endpoint.replace("127.0.0.2", "127.0.0.9"),
        1,
    );
    let (s, _) = push(&t, &cell, other.into_bytes()).await;
    assert_eq!(s, 400);

    // The cell keeps the map it had, at the auth-service and at the edge, and keeps serving.
    for url in [
        &cell.auth_service.url,
        &cell.auth_public_url,
        &cell.endpoint,
    ] {
        let held = t.map_at(url).await;
        assert_eq!(held.map.version, 2, "{url}");
        assert_eq!(held, v2);
    }
    let user = t
        .file()
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id == cell.id)
        .unwrap()
        .clone();
    let s = session_for(&t, &user).await;
    assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 200);
    t.fleet.stop().await;
}
