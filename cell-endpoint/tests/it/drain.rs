//! The edge's part of the migration drain: a write in flight when the handoff arrives is
//! reported busy on the next feed request, a write after the handoff is refused, and once the
//! write finishes the report clears (and the sync loop is woken to send it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::any;
use cellbind_cell_endpoint::Edge;
use cellbind_cell_endpoint::testing::upstream::Upstreams;
use protocol::feed::{Change, FEED_SCHEMA, FeedBody, FeedEntry, FeedResponse};
use protocol::ownership::OwnershipRecord;
use protocol::{ContractorId, Generation};
use tokio::sync::{Semaphore, mpsc};

/// An auth-service that records each feed query and answers an empty delta.
fn recording_feed(head: u64) -> (Router, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let router = Router::new().fallback(any(move |req: Request<Body>| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push(req.uri().query().unwrap_or("").to_owned());
            axum::Json(FeedResponse {
                schema: FEED_SCHEMA,
                cell: cell(),
                head,
                issued_at: NOW,
                epoch: String::new(),
                body: FeedBody::Delta { entries: vec![] },
            })
        }
    }));
    (router, seen)
}

/// An app whose writes wait for a permit; each arrival is announced.
fn gated_app() -> (Router, Arc<Semaphore>, mpsc::UnboundedReceiver<()>) {
    let gate = Arc::new(Semaphore::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let g = gate.clone();
    let app = Router::new().fallback(any(move |req: Request<Body>| {
        let (g, tx) = (g.clone(), tx.clone());
        async move {
            if req.method() != "GET" {
                let _ = tx.send(());
                let _permit = g.acquire().await.unwrap();
            }
            (StatusCode::OK, axum::Json(serde_json::json!({"ok": true})))
        }
    }));
    (app, gate, rx)
}

#[tokio::test]
async fn a_write_in_flight_at_the_handoff_is_reported_until_it_ends() {
    let (feed, queries) = recording_feed(11);
    let (app, gate, mut arrived) = gated_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(settings(), shared, Upstreams::local(Some(feed), Some(app)));
    edge.install(state());
    edge.mark_synced();
    let ctr = ContractorId::new(CTR).unwrap();
    let token = session();

    // A write reaches the app and waits there.
    let e = edge.clone();
    let t = token.clone();
    let write =
        tokio::spawn(
            async move { send(&e, req("POST", "/api/jobs/j-1/complete", Some(&t))).await },
        );
    tokio::time::timeout(Duration::from_secs(5), arrived.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(edge.in_flight().count(&ctr), 1);

    // The handoff arrives.
    let handoff = FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head: 11,
        issued_at: NOW,
        epoch: String::new(),
        body: FeedBody::Delta {
            entries: vec![FeedEntry {
                seq: 11,
                change: Change::Ownership {
                    contractor: ctr.clone(),
                    record: OwnershipRecord::Handoff {
                        generation: Generation(1),
                    },
                },
            }],
        },
    };
    edge.apply_feed(10, handoff).unwrap();

    // The next feed request reports it busy; a new write is refused, reads are served.
    cellbind_cell_endpoint::testing::sync::fetch(&edge, 11, 0)
        .await
        .unwrap();
    let q = queries.lock().unwrap().last().cloned().unwrap();
    assert!(
        q.contains("since=11") && q.contains(&format!("busy={CTR}")),
        "{q}"
    );
    let (status, _, body) = send(&edge, req("POST", "/api/jobs/j-2/complete", Some(&token))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(code(&body), "HANDOFF_IN_PROGRESS");
    let (status, _, _) = send(&edge, get("/api/routes/today", Some(&token))).await;
    assert_eq!(status, StatusCode::OK);

    // The write ends: the sync loop is woken, and the report clears.
    gate.add_permits(1);
    let (status, _, _) = write.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    tokio::time::timeout(Duration::from_secs(5), edge.in_flight().drained())
        .await
        .expect("the drained contractor wakes the sync loop");
    cellbind_cell_endpoint::testing::sync::fetch(&edge, 11, 0)
        .await
        .unwrap();
    let q = queries.lock().unwrap().last().cloned().unwrap();
    assert!(!q.contains("busy="), "{q}");
    assert_eq!(edge.in_flight().count(&ctr), 0);
}
