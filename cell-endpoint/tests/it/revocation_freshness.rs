//! Revocation at the edge, in-process: a revoked key's sessions answer `SESSION_REVOKED` (not
//! "unknown key"), also for a token already in the verified cache; and the fail-closed option
//! (`revocation_max_age_ms`, `revocation_fail_closed`) refuses writes or everything with
//! `503 CELL_STATE_STALE` once the revocation view is older than the bound.

use std::time::{Duration, Instant};

use crate::common::*;
use axum::http::StatusCode;
use cellbind_cell_endpoint::Edge;
use cellbind_cell_endpoint::config::FailClosed;
use cellbind_cell_endpoint::testing::CellState;
use cellbind_cell_endpoint::testing::Outcome;
use cellbind_cell_endpoint::testing::upstream::Upstreams;
use protocol::feed::{Change, FEED_SCHEMA, FeedBody, FeedEntry, FeedResponse, KeyStatus};
use protocol::revocation::{Revocation, RevocationKind};
use protocol::{CellId, ErrorCode, Kid};

fn delta(since: u64, changes: Vec<Change>) -> FeedResponse {
    let entries: Vec<FeedEntry> = changes
        .into_iter()
        .enumerate()
        .map(|(i, change)| FeedEntry {
            seq: since + 1 + i as u64,
            change,
        })
        .collect();
    FeedResponse {
        schema: FEED_SCHEMA,
        cell: CellId::new(CELL).unwrap(),
        head: since + entries.len() as u64,
        issued_at: NOW,
        epoch: String::new(),
        body: FeedBody::Delta { entries },
    }
}

#[tokio::test]
async fn a_revoked_keys_sessions_are_revoked_cached_or_not() {
    let (edge, _seen, _c) = edge();
    let cached = session();
    let fresh = mint(&claims(CTR, 1));
    assert_eq!(
        send(&edge, get("/api/x", Some(&cached))).await.0,
        StatusCode::OK
    );
    let kid: Kid = cell_key().kid().clone();
    let held = edge.current().unwrap();
    let next = edge
        .apply_feed(
            held.seq,
            delta(
                held.seq,
                vec![
                    // The successor key stays (an edge with no key at all is not ready).
                    Change::Key(feed_key(&key("k-next", 9), KeyStatus::Current)),
                    Change::KeyRemoved { kid: kid.clone() },
                    Change::Revocation(Revocation {
                        seq: held.seq + 3,
                        kind: RevocationKind::Key { kid },
                        at: NOW,
                        by: "security".into(),
                        reason: "leaked".into(),
                        seal: None,
                        handed_back: None,
                        withdrawn: None,
                    }),
                ],
            ),
        )
        .unwrap();
    assert!(next.changed.is_some());
    for token in [&cached, &fresh] {
        let (status, _, body) = send(&edge, get("/api/x", Some(token))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(code(&body), "SESSION_REVOKED");
    }
    assert_eq!(
        edge.metrics()
            .requests(Outcome::Refused(ErrorCode::SessionRevoked)),
        2,
        "no key refetch: the kid is known to be revoked"
    );
}

fn stale_edge(max_age_ms: u64, mode: FailClosed) -> Edge {
    let mut s = settings();
    s.serving.write_lease_ms = 0;
    s.serving.revocation_max_age_ms = max_age_ms;
    s.serving.revocation_fail_closed = mode;
    s.serving.rate_per_subject_per_s = 1_000_000;
    s.serving.burst_per_subject = 1_000_000;
    let (app, _seen) = recording_app();
    let (shared, _fake) = clock();
    let edge = Edge::new(s, shared, Upstreams::local(None, Some(app)));
    edge.install(CellState::from_snapshot(cell(), 10, 10, NOW, snapshot()).unwrap());
    edge
}

#[tokio::test]
async fn a_stale_revocation_view_refuses_writes_or_everything() {
    let token = session();
    // Served from disk, never synced: older than any bound.
    let writes = stale_edge(200, FailClosed::Writes);
    assert_eq!(
        send(&writes, get("/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    let (status, headers, body) = send(&writes, req("POST", "/api/x", Some(&token))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&body), "CELL_STATE_STALE");
    assert!(headers.get("retry-after").is_some());

    let all = stale_edge(200, FailClosed::All);
    for method in ["GET", "POST"] {
        let (status, _, body) = send(&all, req(method, "/api/x", Some(&token))).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{method}");
        assert_eq!(code(&body), "CELL_STATE_STALE");
    }
    // A sync makes it fresh; the bound passing without one makes it stale again.
    all.mark_synced();
    assert_eq!(
        send(&all, req("POST", "/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = send(&all, get("/api/x", Some(&token))).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(code(&body), "CELL_STATE_STALE");
            break;
        }
        assert_eq!(status, StatusCode::OK);
        assert!(Instant::now() < deadline, "the view never went stale");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        all.metrics()
            .requests(Outcome::Refused(ErrorCode::CellStateStale))
            >= 3
    );
}

#[tokio::test]
async fn off_by_default() {
    let s = settings();
    assert_eq!(s.serving.revocation_max_age(), None);
    assert_eq!(s.serving.revocation_fail_closed, FailClosed::Writes);
    let (app, _seen) = recording_app();
    let (shared, _fake) = clock();
    let mut s = settings();
    s.serving.write_lease_ms = 0;
    let edge = Edge::new(s, shared, Upstreams::local(None, Some(app)));
    edge.install(state());
    let token = session();
    assert_eq!(
        send(&edge, req("POST", "/api/x", Some(&token))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn revocations_that_match_nothing_are_dropped_on_apply() {
    let (edge, _seen, clock) = edge();
    let c = claims(CTR, 1);
    let token = mint(&c);
    let jti = c.jti;
    let held = edge.current().unwrap();
    let old = protocol::SessionId::from_random([3; 16]);
    let change = |seq: u64, jti: protocol::SessionId, exp: u64| {
        Change::Revocation(Revocation {
            seq,
            kind: RevocationKind::Session { jti, exp },
            at: NOW,
            by: "self".into(),
            reason: "sign-out".into(),
            seal: None,
            handed_back: None,
            withdrawn: None,
        })
    };
    edge.apply_feed(
        held.seq,
        delta(
            held.seq,
            vec![
                // A sign-out of a session that has long expired: nothing to keep.
                change(held.seq + 1, old, NOW - 3_600),
                change(held.seq + 2, jti.clone(), NOW + 3_600),
            ],
        ),
    )
    .unwrap();
    let now_held = edge.current().unwrap();
    assert_eq!(now_held.snapshot.revocations.len(), 1);
    assert_eq!(now_held.snapshot.revocations[0].seq, held.seq + 2);
    let (status, _, body) = send(&edge, get("/api/x", Some(&token))).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "SESSION_REVOKED")
    );
    // Past its expiry (and the leeway) the next applied change drops it too.
    clock.set(NOW + 3_600 + protocol::token::LEEWAY_S);
    let seq = now_held.seq;
    edge.apply_feed(
        seq,
        delta(
            seq,
            vec![change(
                seq + 1,
                protocol::SessionId::from_random([4; 16]),
                NOW + 7_200,
            )],
        ),
    )
    .unwrap();
    let after = edge.current().unwrap();
    assert_eq!(after.snapshot.revocations.len(), 1);
    assert_eq!(after.snapshot.revocations[0].seq, seq + 1);
}
