//! Feed epochs: a snapshot of a new epoch (the auth-service restored from a backup) is taken
//! whatever its head, the held revocations it lacks keep being enforced and are handed back
//! to the auth-service; an older head within one epoch stays a refused rollback; the disk copy
//! keeps its epoch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use crate::support::wait_for;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get as get_route, post};
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::state;
use cellbind_cell_endpoint::testing::sync;
use protocol::feed::{
    Change, FEED_PATH, FEED_SCHEMA, FeedBody, FeedEntry, FeedResponse, REAPPLY_PATH, Reapplied,
    Reapply, Snapshot,
};
use protocol::revocation::{Revocation, RevocationKind};
use protocol::token::{DEFAULT_SESSION_LIFETIME_S, SessionClaims};

/// The reason of a revocation the fake auth-service answers as withdrawn when handed back.
const WITHDRAWN_REASON: &str = "planted, withdrawn";

/// What the fake auth-service serves and what it was handed back.
#[derive(Clone)]
struct Auth {
    feed: Arc<Mutex<FeedResponse>>,
    /// The query of each feed request.
    queries: Arc<Mutex<Vec<String>>>,
    handed_back: Arc<Mutex<Vec<(HeaderMap, Reapply)>>>,
}

impl Auth {
    fn new(first: FeedResponse) -> Self {
        Self {
            feed: Arc::new(Mutex::new(first)),
            queries: Arc::default(),
            handed_back: Arc::default(),
        }
    }

    fn serve(&self, next: FeedResponse) {
        *self.feed.lock().unwrap() = next;
    }

    fn router(&self) -> Router {
        let feed = self.feed.clone();
        let queries = self.queries.clone();
        let back = self.handed_back.clone();
        Router::new()
            .route(
                FEED_PATH,
                get_route(move |uri: axum::http::Uri| {
                    queries
                        .lock()
                        .unwrap()
                        .push(uri.query().unwrap_or("").to_owned());
                    let f = feed.lock().unwrap().clone();
                    async move { axum::Json(f) }
                }),
            )
            .route(
                REAPPLY_PATH,
                post(
                    move |h: HeaderMap, axum::Json(body): axum::Json<Reapply>| async move {
                        // Like the auth-service, it names the ones an operator withdrew
                        // (here: the ones whose reason says so).
                        let withdrawn: Vec<u64> = body
                            .revocations
                            .iter()
                            .filter(|r| r.reason == WITHDRAWN_REASON)
                            .map(|r| r.seq)
                            .collect();
                        let n = body.revocations.len() as u64 - withdrawn.len() as u64;
                        back.lock().unwrap().push((h, body));
                        axum::Json(Reapplied {
                            recorded: n,
                            skipped: 0,
                            refused: withdrawn.len() as u64,
                            withdrawn,
                        })
                    },
                ),
            )
    }
}

fn snapshot_answer(epoch: &str, head: u64, revocations: Vec<Revocation>) -> FeedResponse {
    FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head,
        issued_at: NOW,
        epoch: epoch.into(),
        body: FeedBody::Snapshot {
            snapshot: Box::new(Snapshot {
                revocations,
                ..snapshot()
            }),
        },
    }
}

fn signed_out(seq: u64, c: &SessionClaims) -> Revocation {
    Revocation {
        seq,
        kind: RevocationKind::Session {
            jti: c.jti.clone(),
            exp: c.exp,
        },
        at: NOW - 10,
        by: "self".into(),
        reason: "sign-out".into(),
        seal: None,
        handed_back: None,
        withdrawn: None,
    }
}

async fn status_and_code(edge: &cellbind_cell_endpoint::Edge, token: &str) -> (StatusCode, String) {
    let (status, _, body) = send(edge, get("/api/x", Some(token))).await;
    (status, code(&body).to_owned())
}

#[tokio::test]
async fn a_restore_is_taken_whatever_its_head_and_the_revocations_it_lacks_are_kept_and_handed_back()
 {
    let (c1, c2) = (claims(CTR, 1), claims(CTR, 1));
    let (r1, r2) = (signed_out(7, &c1), signed_out(8, &c2));
    // A revocation that can match nothing any more is not carried.
    let mut old = claims(CTR, 1);
    old.exp = NOW - DEFAULT_SESSION_LIFETIME_S;
    let dead = signed_out(6, &old);

    let auth = Auth::new(snapshot_answer("e1", 5, vec![r1.clone()]));
    let (edge, _seen, _c) = edge_with(settings(), Some(auth.router()));
    let held = CellState::from_snapshot(
        cell(),
        9,
        9,
        NOW,
        Snapshot {
            revocations: vec![dead, r1.clone(), r2.clone()],
            ..snapshot()
        },
    )
    .unwrap()
    .with_epoch("e1");
    edge.install(held);
    let before = edge.current().unwrap();

    // Same epoch, older head: an accidental rollback, refused; nothing changes.
    assert!(sync::fetch_once(&edge).await.is_err());
    assert!(Arc::ptr_eq(&before, &edge.current().unwrap()));
    assert_eq!(edge.metrics().feed_rejected_count(), 1);
    // Every feed request names the epoch held.
    let q = auth.queries.lock().unwrap().last().cloned().unwrap();
    assert!(q.starts_with("since=9&") && q.contains("&epoch=e1"), "{q}");

    // A delta of another epoch cannot continue the held state.
    let delta = FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head: 10,
        issued_at: NOW,
        epoch: "e2".into(),
        body: FeedBody::Delta {
            entries: vec![FeedEntry {
                seq: 10,
                change: Change::Revocation(signed_out(10, &claims(CTR, 1))),
            }],
        },
    };
    let e = edge.apply_feed(9, delta).unwrap_err().to_string();
    assert!(e.contains("epoch"), "{e}");
    assert!(Arc::ptr_eq(&before, &edge.current().unwrap()));

    // The auth-service was restored: epoch e2 at head 5, holding R1 only (its own seq).
    let mut r1_again = r1.clone();
    r1_again.seq = 3;
    auth.serve(snapshot_answer("e2", 5, vec![r1_again]));
    sync::fetch_once(&edge).await.unwrap();
    let now = edge.current().unwrap();
    assert_eq!((now.seq, now.head, now.epoch.as_str()), (5, 5, "e2"));
    assert_eq!(edge.metrics().feed_epoch_change_count(), 1);
    assert!(
        edge.metrics()
            .encode()
            .contains(r#"cellbind_edge_feed_epoch_changes_total{cell="cell-03"} 1"#)
    );
    // R2 is still enforced, and so is R1; an unrevoked session is served.
    for c in [&c1, &c2] {
        assert_eq!(
            status_and_code(&edge, &mint(c)).await,
            (StatusCode::UNAUTHORIZED, "SESSION_REVOKED".to_owned())
        );
    }
    assert_eq!(status_and_code(&edge, &session()).await.0, StatusCode::OK);

    // R2, exactly, was handed back, from epoch e1, with the feed token.
    let (headers, handed) = wait_for("the revocation handback", Duration::from_secs(5), || {
        let got = auth.handed_back.lock().unwrap().first().cloned();
        async move { got }
    })
    .await;
    assert_eq!(handed.from_epoch, "e1");
    assert_eq!(handed.instance, settings().instance_id);
    assert_eq!(handed.revocations, vec![r2.clone()]);
    assert_eq!(headers["authorization"], "Bearer feed-token-for-tests");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(auth.handed_back.lock().unwrap().len(), 1);

    // The same epoch again: nothing more is carried or handed back.
    let mut r1_again = r1;
    r1_again.seq = 3;
    auth.serve(snapshot_answer("e2", 6, vec![r1_again]));
    sync::fetch_once(&edge).await.unwrap();
    assert_eq!(edge.current().unwrap().head, 6);
    assert_eq!(edge.metrics().feed_epoch_change_count(), 1);
    let q = auth.queries.lock().unwrap().last().cloned().unwrap();
    assert!(q.contains("&epoch=e2"), "{q}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(auth.handed_back.lock().unwrap().len(), 1);
}

/// ATTACKS A32: a revocation an operator withdrew is not kept alive by an edge. One this
/// instance carried over a restore stops being enforced when the auth-service answers the
/// handback with "withdrawn"; a withdrawal in the feed removes every held copy of its kind.
#[tokio::test]
async fn withdrawn_revocations_stop_being_enforced_also_copies_carried_over_a_restore() {
    let (c_planted, c_kept) = (claims(CTR, 1), claims(CTR, 1));
    let planted = Revocation {
        reason: WITHDRAWN_REASON.into(),
        ..signed_out(7, &c_planted)
    };
    let kept = signed_out(8, &c_kept);
    let auth = Auth::new(snapshot_answer("e2", 3, vec![]));
    let (edge, _seen, _c) = edge_with(settings(), Some(auth.router()));
    let held = CellState::from_snapshot(
        cell(),
        9,
        9,
        NOW,
        Snapshot {
            revocations: vec![planted.clone(), kept.clone()],
            ..snapshot()
        },
    )
    .unwrap()
    .with_epoch("e1");
    edge.install(held);
    sync::fetch_once(&edge).await.unwrap();
    // Handed back; the auth-service says the planted one was withdrawn: no longer enforced.
    wait_for(
        "the planted revocation dropped",
        Duration::from_secs(5),
        || {
            let e = edge.clone();
            let t = mint(&c_planted);
            async move { (status_and_code(&e, &t).await.0 == StatusCode::OK).then_some(()) }
        },
    )
    .await;
    assert_eq!(
        status_and_code(&edge, &mint(&c_kept)).await,
        (StatusCode::UNAUTHORIZED, "SESSION_REVOKED".to_owned()),
        "the others stay enforced"
    );

    // A withdrawal in the feed removes the held revocation of its kind, whatever its seq (the
    // carried copy has the old epoch's).
    let withdrawn = Revocation {
        seq: 4,
        withdrawn: Some(protocol::revocation::Withdrawn {
            seq: 4,
            at: NOW,
            by: "ops".into(),
            reason: "mistake".into(),
        }),
        ..kept.clone()
    };
    let delta = FeedResponse {
        schema: FEED_SCHEMA,
        cell: cell(),
        head: 4,
        issued_at: NOW,
        epoch: "e2".into(),
        body: FeedBody::Delta {
            entries: vec![FeedEntry {
                seq: 4,
                change: Change::RevocationWithdrawn(withdrawn),
            }],
        },
    };
    edge.apply_feed(3, delta).unwrap();
    assert_eq!(
        status_and_code(&edge, &mint(&c_kept)).await.0,
        StatusCode::OK
    );
    assert!(edge.current().unwrap().snapshot.revocations.is_empty());
}

#[test]
fn the_disk_copy_keeps_its_epoch_and_a_copy_from_before_epochs_loads() {
    let dir = tempfile::tempdir().unwrap();
    let s = CellState::from_snapshot(cell(), 9, 9, NOW, snapshot())
        .unwrap()
        .with_epoch("e7");
    state::persist(dir.path(), &s).unwrap();
    let path = state::state_path(dir.path());
    let mut raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(raw["epoch"], "e7");
    let loaded = state::load(dir.path(), &cell()).unwrap().unwrap();
    assert_eq!((loaded.seq, loaded.epoch.as_str()), (9, "e7"));

    raw.as_object_mut().unwrap().remove("epoch");
    std::fs::write(&path, raw.to_string()).unwrap();
    let loaded = state::load(dir.path(), &cell()).unwrap().unwrap();
    assert_eq!((loaded.seq, loaded.epoch.as_str()), (9, ""));
    assert_eq!(raw["schema"], state::STATE_SCHEMA);
}
