//! The migration drain as the auth-service sees it: edge instances report the feed sequence
//! they applied and the contractors in handoff with writes still in flight; the drain status
//! says "drained" only once every instance with a current lease applied the handoff and has
//! nothing in flight for the contractor. An instance whose lease lapsed does not count.

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

async fn report(f: &Fixture, instance: &str, since: u64, busy: &str) -> Resp {
    let auth = format!("Bearer {}", feed_for(instance));
    let busy = if busy.is_empty() {
        String::new()
    } else {
        format!("&busy={busy}")
    };
    f.call_internal(
        Method::GET,
        &format!("/internal/v1/feed?since={since}&instance={instance}{busy}"),
        &[("authorization", &auth)],
        Body::empty(),
    )
    .await
}

async fn drained(f: &Fixture, seq: u64) -> Value {
    let r = f
        .admin(
            Method::GET,
            &format!("/admin/v1/drain/c-1?seq={seq}"),
            Value::Null,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r.json
}

#[tokio::test]
async fn drained_only_when_every_live_instance_applied_and_finished_its_writes() {
    let f = Fixture::new().await;
    f.seed("c-1", "ana", "pw-pw-pw-pw", 1).await;
    // edge-c was seen once, long ago: its lease lapses.
    assert_eq!(report(&f, "edge-c", 0, "").await.status, StatusCode::OK);
    // Lease 30 s + the longest long-poll (25 s) + slack: then it must have stopped writing.
    f.clock.advance(60);
    let head = f
        .admin(Method::GET, "/admin/v1/status", Value::Null)
        .await
        .json["seq"]
        .as_u64()
        .unwrap();
    for i in ["edge-a", "edge-b"] {
        assert_eq!(report(&f, i, head, "").await.status, StatusCode::OK);
    }
    let r = f
        .admin(
            Method::PUT,
            "/admin/v1/ownership/c-1",
            json!({"state": "handoff", "gen": 1}),
        )
        .await;
    let seq = r.json["seq"].as_u64().unwrap();
    let d = drained(&f, seq).await;
    assert_eq!(d["drained"], false, "nobody applied the handoff yet: {d}");

    // Both applied it, but edge-a still has a write in flight for c-1.
    report(&f, "edge-a", seq, "c-1").await;
    report(&f, "edge-b", seq, "c-9").await;
    let d = drained(&f, seq).await;
    assert_eq!(d["drained"], false, "{d}");
    let a = d["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "edge-a")
        .unwrap()
        .clone();
    assert_eq!(a["busy"], true);
    assert_eq!(a["live"], true);

    // Its write finished: drained (edge-c's lapsed lease does not hold it up).
    report(&f, "edge-a", seq, "").await;
    let d = drained(&f, seq).await;
    assert_eq!(d["drained"], true, "{d}");
    let c = d["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "edge-c")
        .unwrap()
        .clone();
    assert_eq!(c["live"], false);

    // A malformed report is refused.
    assert_eq!(
        report(&f, "edge-a", seq, "C-BAD").await.status,
        StatusCode::BAD_REQUEST
    );
}
