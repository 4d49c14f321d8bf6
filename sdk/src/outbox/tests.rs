use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use protocol::{ContractorId, ErrorCode, Login, Password};

use super::*;
use crate::testing::{DAY, FakeFleet, NOW, Reply, eventually, transfer_answer};
use crate::{Client, MemoryStore, Request, SessionStore, SignOut, StoreSlot};

const TRANSFER: &str = "POST /v1/sessions/transfer";
const REBIND: &str = "POST /v1/sessions/rebind";
const ROUTES: &str = "GET /api/routes/today";

fn job(i: usize) -> String {
    format!("/api/jobs/j-{i}/complete")
}

fn route(i: usize) -> String {
    format!("POST {}", job(i))
}

fn complete(i: usize) -> Request {
    Request::post(job(i)).json(format!("{{\"job\":{i}}}").into_bytes())
}

async fn signed_in(f: &FakeFleet) -> (Client, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let c = signed_in_with(f, f.builder(&f.map(1, &[])).store(store.clone())).await;
    (c, store)
}

/// Signs ana in with a client from `builder` (cell-01 accepts).
async fn signed_in_with(f: &FakeFleet, builder: crate::ClientBuilder) -> Client {
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let c = builder.build().unwrap();
    c.sign_in(
        &ContractorId::new("c-40711").unwrap(),
        &Login::new("ana").unwrap(),
        &Password::new("correct horse").unwrap(),
    )
    .await
    .unwrap();
    c
}

fn ok() -> Reply {
    Reply::json(200, serde_json::json!({"ok": true}))
}

fn keys(ws: &[QueuedWrite]) -> Vec<String> {
    ws.iter().map(|w| w.idempotency_key.clone()).collect()
}

fn outbox_blob(store: &MemoryStore) -> Option<String> {
    store.load(StoreSlot::Outbox).unwrap()
}

#[derive(Default)]
struct Seen {
    delivered: Mutex<Vec<(u64, u16)>>,
    rejected: Mutex<Vec<(u64, u16)>>,
    /// Ids of both, in the order told.
    order: Mutex<Vec<u64>>,
}

impl OutboxObserver for Seen {
    fn on_delivered(&self, d: &Delivered) {
        self.delivered
            .lock()
            .unwrap()
            .push((d.write.id, d.response.status));
        self.order.lock().unwrap().push(d.write.id);
    }
    fn on_rejected(&self, r: &WriteRejection) {
        self.rejected.lock().unwrap().push((r.write.id, r.status));
        self.order.lock().unwrap().push(r.write.id);
    }
}

#[tokio::test]
async fn a_queued_write_is_stored_before_enqueue_returns_and_nothing_is_sent() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    let hits = f.cells[0].all_hits();
    let w = c
        .enqueue(
            complete(1)
                .query("source", "driveway")
                .header("X-Request-Id", "r-1")
                .idempotency_key("mine-1"),
        )
        .unwrap();
    let w2 = c.enqueue(Request::delete("/api/notes/n-1")).unwrap();
    assert_eq!(f.cells[0].all_hits(), hits, "enqueue sends nothing");
    assert!(w2.id > w.id);
    assert_eq!(w.idempotency_key, "mine-1");
    // a generated key: 128 random bits, base64url
    assert_eq!(w2.idempotency_key.len(), 22);
    assert_eq!(w.enqueued_at, NOW);
    // the blob: its own slot, schema, owner, base64 body
    let blob: serde_json::Value = serde_json::from_str(&outbox_blob(&store).unwrap()).unwrap();
    assert_eq!(blob["schema"], OUTBOX_SCHEMA);
    assert_eq!(blob["owner"]["contractor"], "c-40711");
    assert_eq!(blob["owner"]["subject"], "c-40711.ana");
    assert_eq!(blob["entries"][0]["body"], "eyJqb2IiOjF9"); // {"job":1}
    assert_eq!(blob["entries"][0]["method"], "POST");
    // a new client (the app restarted) over the same store sees both, unchanged
    let c2 = f.client(&f.map(1, &[]), store.clone());
    assert_eq!(c2.outbox().unwrap(), vec![w.clone(), w2]);
    assert_eq!(w.request().path(), "/api/jobs/j-1/complete");
}

#[tokio::test]
async fn reads_bad_requests_and_a_missing_session_are_refused_and_queue_nothing() {
    let f = FakeFleet::start(1).await;
    let (c, _) = f.client_mem(&f.map(1, &[]));
    assert!(matches!(c.enqueue(complete(1)), Err(Error::NotSignedIn)));
    let (c, store2) = signed_in(&f).await;
    for r in [
        Request::get("/api/routes/today"),
        Request::new(Method::HEAD, "/api/x"),
        Request::post("/api/../v1/sessions"),
        Request::post("/api/x").header("Authorization", "Bearer x"),
        Request::post("/api/x").idempotency_key("no spaces"),
    ] {
        assert!(matches!(c.enqueue(r), Err(Error::InvalidInput(_))));
    }
    assert_eq!(outbox_blob(&store2), None);
    assert_eq!(c.outbox().unwrap(), vec![]);
}

#[tokio::test]
async fn flush_delivers_in_order_with_the_same_key_on_every_attempt_across_restarts() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    let queued: Vec<QueuedWrite> = (1..=3).map(|i| c.enqueue(complete(i)).unwrap()).collect();
    // the cell is down for the first write: every attempt answers 503
    f.cells[0].always(&route(1), Reply::json(503, serde_json::json!({})));
    let report = c.flush().await.unwrap();
    assert!(report.delivered.is_empty() && report.rejected.is_empty());
    assert!(matches!(
        report.stopped,
        Some(Error::Upstream { status: 503, .. })
    ));
    assert!(!report.session_ended);
    assert_eq!(report.remaining, 3);
    assert_eq!(f.cells[0].hits(&route(2)).len(), 0, "order is kept");
    assert_eq!(c.outbox().unwrap(), queued);

    // the app restarts; the cell is back
    drop(c);
    f.cells[0].always(&route(1), ok());
    for i in 2..=3 {
        f.cells[0].always(&route(i), ok());
    }
    let c2 = f.client(&f.map(1, &[]), store.clone());
    c2.restore().unwrap();
    let report = c2.flush().await.unwrap();
    let delivered: Vec<u64> = report.delivered.iter().map(|d| d.write.id).collect();
    // the background flush started by restore() may have delivered some first: together, all
    assert!(
        report.stopped.is_none() && report.remaining == 0,
        "{report:?}"
    );
    assert!(delivered.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(c2.outbox().unwrap(), vec![]);
    let first = f.cells[0].hits(&route(1));
    assert!(first.len() >= 4, "3 attempts, then 1 after the restart");
    for (i, w) in queued.iter().enumerate() {
        let hits = f.cells[0].hits(&route(i + 1));
        assert!(
            hits.iter()
                .all(|h| h.idempotency_key().as_deref() == Some(w.idempotency_key.as_str())),
            "write {} kept its key",
            w.id
        );
        assert_eq!(
            hits.iter()
                .filter(|h| h.body == format!("{{\"job\":{}}}", i + 1).into_bytes())
                .count(),
            hits.len()
        );
    }
    // delivered once each after the outage (order across writes: the cell saw 1, 2, 3)
    let order: Vec<String> = f.cells[0]
        .script
        .lock()
        .unwrap()
        .hits
        .iter()
        .filter(|h| h.path.starts_with("/api/jobs/"))
        .map(|h| h.path.clone())
        .collect();
    let mut last = order.clone();
    last.dedup();
    assert_eq!(last, vec![job(1), job(2), job(3)]);
    // the emptied outbox stays a readable blob, ids keep increasing
    assert!(outbox_blob(&store).unwrap().contains("\"entries\":[]"));
    assert!(c2.enqueue(complete(4)).unwrap().id > queued[2].id);
}

#[tokio::test]
async fn a_permanent_refusal_is_removed_and_reported_and_a_503_stops_the_flush() {
    let f = FakeFleet::start(1).await;
    let seen = Arc::new(Seen::default());
    let c = signed_in_with(&f, f.builder(&f.map(1, &[])).outbox_observer(seen.clone())).await;
    f.cells[0].always(&route(1), Reply::error(ErrorCode::InvalidRequest));
    f.cells[0].always(
        &route(2),
        Reply {
            status: 404,
            headers: vec![],
            body: b"no such job".to_vec(),
            gate: None,
            bind: false,
        },
    );
    f.cells[0].always(&route(3), ok());
    f.cells[0].always(&route(4), Reply::json(503, serde_json::json!({})));
    f.cells[0].always(&route(5), ok());
    let ws: Vec<QueuedWrite> = (1..=5).map(|i| c.enqueue(complete(i)).unwrap()).collect();
    let report = c.flush().await.unwrap();
    let rejected: Vec<(u64, u16, Option<&str>)> = report
        .rejected
        .iter()
        .map(|r| (r.write.id, r.status, r.code.as_deref()))
        .collect();
    assert_eq!(
        rejected,
        vec![
            (ws[0].id, 400, Some("INVALID_REQUEST")),
            (ws[1].id, 404, None)
        ]
    );
    assert!(matches!(
        &report.rejected[0].refusal,
        Refusal::Error(Error::Rejected {
            code: ErrorCode::InvalidRequest,
            ..
        })
    ));
    assert_eq!(report.rejected[1].refusal.detail(), "no such job");
    assert_eq!(report.delivered.len(), 1);
    assert_eq!(report.delivered[0].write, ws[2]);
    assert_eq!(&report.delivered[0].response.body[..], b"{\"ok\":true}");
    assert!(matches!(report.stopped, Some(Error::Upstream { .. })));
    assert_eq!(report.remaining, 2);
    assert_eq!(c.outbox().unwrap(), ws[3..].to_vec());
    assert_eq!(f.cells[0].hits(&route(5)).len(), 0);
    assert_eq!(*seen.delivered.lock().unwrap(), vec![(ws[2].id, 200)]);
    assert_eq!(
        *seen.rejected.lock().unwrap(),
        vec![(ws[0].id, 400), (ws[1].id, 404)]
    );
    assert_eq!(
        *seen.order.lock().unwrap(),
        vec![ws[0].id, ws[1].id, ws[2].id],
        "told in the order it happened"
    );
    // rate limits and handoffs keep the write too
    for reply in [
        Reply::error(ErrorCode::RateLimited).header("retry-after", "600"),
        Reply::error(ErrorCode::HandoffInProgress).header("retry-after", "600"),
        Reply::error(ErrorCode::CellStateStale),
    ] {
        f.cells[0].always(&route(4), reply);
        let r = c.flush().await.unwrap();
        assert!(r.stopped.is_some() && r.rejected.is_empty() && r.remaining == 2);
    }
}

#[tokio::test]
async fn a_full_outbox_refuses_and_changes_nothing() {
    let f = FakeFleet::start(1).await;
    let store = Arc::new(MemoryStore::new());
    let builder = f.builder(&f.map(1, &[])).store(store.clone());
    let c = signed_in_with(&f, builder.outbox_limits(2, 16)).await;
    // one body over the byte bound
    let big = Request::post("/api/x").json(vec![b'x'; 17]);
    assert!(matches!(
        c.enqueue(big),
        Err(Error::OutboxFull {
            capacity: 2,
            capacity_bytes: 16
        })
    ));
    assert_eq!(outbox_blob(&store), None);
    c.enqueue(Request::post("/api/x").json(vec![b'x'; 10]))
        .unwrap();
    let before = outbox_blob(&store).unwrap();
    // the bytes together over the bound
    assert!(matches!(
        c.enqueue(Request::post("/api/x").json(vec![b'x'; 7])),
        Err(Error::OutboxFull { .. })
    ));
    c.enqueue(Request::delete("/api/y")).unwrap();
    let two = outbox_blob(&store).unwrap();
    assert_ne!(two, before);
    // the count
    assert!(matches!(
        c.enqueue(Request::delete("/api/z")),
        Err(Error::OutboxFull { capacity: 2, .. })
    ));
    assert_eq!(outbox_blob(&store).unwrap(), two);
    assert_eq!(c.outbox().unwrap().len(), 2);
    // the default bound
    assert_eq!(DEFAULT_OUTBOX_MAX_WRITES, 100);
    assert_eq!(DEFAULT_OUTBOX_MAX_BYTES, 1 << 20);
}

#[tokio::test]
async fn sign_out_hands_back_the_writes_and_clears_the_outbox() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    f.cells[0].push(
        "DELETE /v1/sessions/current",
        Reply::json(204, serde_json::json!(null)),
    );
    let ws: Vec<QueuedWrite> = (1..=2).map(|i| c.enqueue(complete(i)).unwrap()).collect();
    let out = c.sign_out().await.unwrap();
    assert_eq!(out.outcome, SignOut::Revoked);
    assert_eq!(out.undelivered, ws);
    assert_eq!(outbox_blob(&store), None);
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    assert_eq!(f.cells[0].hits(&route(1)).len(), 0, "nothing was sent");
    assert!(matches!(c.enqueue(complete(3)), Err(Error::NotSignedIn)));
    let again = c.sign_out().await.unwrap();
    assert_eq!(again.outcome, SignOut::NotSignedIn);
    assert!(again.undelivered.is_empty());
}

#[tokio::test]
async fn a_revoked_session_keeps_the_outbox_for_take_undelivered() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    f.cells[0].always(&route(1), Reply::error(ErrorCode::SessionRevoked));
    let ws: Vec<QueuedWrite> = (1..=2).map(|i| c.enqueue(complete(i)).unwrap()).collect();
    let report = c.flush().await.unwrap();
    assert!(matches!(report.stopped, Some(Error::SessionRevoked)));
    assert!(report.session_ended);
    assert_eq!(report.remaining, 2);
    // the session is gone, the writes are not
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    assert_eq!(c.outbox().unwrap(), ws);
    let report = c.flush().await.unwrap();
    assert!(matches!(report.stopped, Some(Error::NotSignedIn)) && report.session_ended);
    assert_eq!(
        f.cells[0].hits(&route(1)).len(),
        1,
        "not sent without a session"
    );
    // a new client over the same store finds them too
    let c2 = f.client(&f.map(1, &[]), store.clone());
    assert_eq!(keys(&c2.take_undelivered().unwrap()), keys(&ws));
    assert_eq!(outbox_blob(&store), None);
    assert_eq!(c.take_undelivered().unwrap(), vec![]);
}

#[tokio::test]
async fn writes_of_another_user_are_never_sent_under_this_session() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    f.cells[0].always(&route(1), ok());
    let w = c.enqueue(complete(1)).unwrap();
    // the outbox was queued by bob (same contractor), ana is signed in
    let blob = outbox_blob(&store)
        .unwrap()
        .replace("c-40711.ana", "c-40711.bob");
    store.save(StoreSlot::Outbox, &blob).unwrap();
    let report = c.flush().await.unwrap();
    assert!(report.session_ended && report.remaining == 1, "{report:?}");
    assert_eq!(f.cells[0].hits(&route(1)).len(), 0);
    assert!(
        matches!(c.enqueue(complete(2)), Err(Error::InvalidInput(m)) if m.contains("another user"))
    );
    assert_eq!(c.take_undelivered().unwrap(), vec![w]);
    // emptied: ana's own writes are welcome again
    c.enqueue(complete(2)).unwrap();
}

#[tokio::test]
async fn an_outbox_of_an_unknown_schema_is_a_store_error_and_is_kept() {
    let f = FakeFleet::start(1).await;
    let (c, store) = signed_in(&f).await;
    let future = "{\"schema\":2,\"entries\":[],\"shape\":\"new\"}";
    store.save(StoreSlot::Outbox, future).unwrap();
    assert!(matches!(c.outbox(), Err(Error::Store(m)) if m.contains("schema 2")));
    assert!(matches!(c.enqueue(complete(1)), Err(Error::Store(_))));
    assert!(matches!(c.flush().await, Err(Error::Store(_))));
    assert!(matches!(c.take_undelivered(), Err(Error::Store(_))));
    assert!(matches!(c.sign_out().await, Err(Error::Store(_))));
    assert_eq!(
        outbox_blob(&store).as_deref(),
        Some(future),
        "never dropped"
    );
    assert!(c.session().is_some(), "a failed sign-out changed nothing");
    store.save(StoreSlot::Outbox, "not json").unwrap();
    assert!(matches!(c.outbox(), Err(Error::Store(_))));
}

#[tokio::test]
async fn writes_queued_before_a_move_are_delivered_at_the_new_owner_after_rebind() {
    let f = FakeFleet::start(2).await;
    let (c, _) = signed_in(&f).await;
    let ws: Vec<QueuedWrite> = (1..=3).map(|i| c.enqueue(complete(i)).unwrap()).collect();
    // meanwhile the contractor moved to cell-02
    for i in 1..=3 {
        f.cells[0].always(&route(i), Reply::wrong_cell(&f.cells[1]));
        f.cells[1].always(&route(i), ok());
    }
    f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
    let mut moved = f.cells[1].session_answer(NOW + 29 * DAY, "tok.re.bound");
    moved["generation"] = 4.into();
    f.cells[1].always(REBIND, Reply::json(201, moved));
    let report = c.flush().await.unwrap();
    assert_eq!(
        report
            .delivered
            .iter()
            .map(|d| d.write.id)
            .collect::<Vec<_>>(),
        ws.iter().map(|w| w.id).collect::<Vec<_>>()
    );
    assert!(report.stopped.is_none() && report.remaining == 0);
    assert_eq!(c.session().unwrap().cell_id, f.cells[1].id);
    // the old cell refused the first write once (and applied none); the owner got each once,
    // with its key
    assert_eq!(f.cells[0].hits(&route(1)).len(), 1);
    assert_eq!(f.cells[0].hits(&route(2)).len(), 0);
    assert_eq!(f.cells[1].hits(REBIND).len(), 1);
    for (i, w) in ws.iter().enumerate() {
        let hits = f.cells[1].hits(&route(i + 1));
        assert_eq!(hits.len(), 1);
        assert_eq!(
            hits[0].idempotency_key().as_deref(),
            Some(w.idempotency_key.as_str())
        );
        assert_eq!(hits[0].bearer().as_deref(), Some("tok.re.bound"));
    }
}

#[tokio::test]
async fn a_successful_request_and_restore_start_a_background_flush() {
    let f = FakeFleet::start(1).await;
    let seen = Arc::new(Seen::default());
    let store = Arc::new(MemoryStore::new());
    let c = signed_in_with(
        &f,
        f.builder(&f.map(1, &[]))
            .store(store.clone())
            .outbox_observer(seen.clone()),
    )
    .await;
    f.cells[0].always(ROUTES, ok());
    f.cells[0].always(&route(1), ok());
    f.cells[0].always(&route(2), ok());
    let w1 = c.enqueue(complete(1)).unwrap();
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    eventually("the background flush", Duration::from_secs(10), || {
        seen.delivered.lock().unwrap().contains(&(w1.id, 200))
    })
    .await;
    eventually("the outbox to empty", Duration::from_secs(10), || {
        c.outbox().unwrap().is_empty()
    })
    .await;

    // restore() of a new client over the same store
    let w2 = c.enqueue(complete(2)).unwrap();
    let c2 = f
        .builder(&f.map(1, &[]))
        .store(store.clone())
        .outbox_observer(seen.clone())
        .build()
        .unwrap();
    assert!(c2.restore().unwrap().is_some());
    eventually("the restore flush", Duration::from_secs(10), || {
        seen.delivered.lock().unwrap().contains(&(w2.id, 200))
    })
    .await;
    assert_eq!(f.cells[0].hits(&route(1)).len(), 1);
    // (the first client's flush may still have been looking when w2 was queued: any second
    // delivery carries the same key)
    let w2_hits = f.cells[0].hits(&route(2));
    assert!(!w2_hits.is_empty());
    assert!(
        w2_hits
            .iter()
            .all(|h| h.idempotency_key().as_deref() == Some(w2.idempotency_key.as_str()))
    );
}

#[test]
fn restore_outside_a_runtime_starts_nothing_and_does_not_panic() {
    let store = Arc::new(MemoryStore::new());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (f, session_blob) = rt.block_on(async {
        let f = FakeFleet::start(1).await;
        let (c, s) = signed_in(&f).await;
        c.enqueue(complete(1)).unwrap();
        store
            .save(
                StoreSlot::Outbox,
                &s.load(StoreSlot::Outbox).unwrap().unwrap(),
            )
            .unwrap();
        (f, s.load(StoreSlot::Session).unwrap().unwrap())
    });
    store.save(StoreSlot::Session, &session_blob).unwrap();
    let c = f.client(&f.map(1, &[]), store.clone());
    assert!(c.restore().unwrap().is_some());
    assert_eq!(c.outbox().unwrap().len(), 1);
    assert_eq!(f.cells[0].hits(&route(1)).len(), 0);
    drop(rt);
}

#[test]
fn the_verdict_table() {
    let resp = |status| {
        Ok(Response {
            status,
            body: Bytes::new(),
        })
    };
    let rejected = |code: ErrorCode| {
        Err(Error::Rejected {
            code,
            status: code.status().as_u16(),
            message: "m".into(),
        })
    };
    let net = |kind| {
        Err(Error::Network {
            kind,
            reached_cell: true,
            detail: "x".into(),
        })
    };
    let delivered = |v: &Verdict| matches!(v, Verdict::Delivered(_));
    let gone = |v: &Verdict| matches!(v, Verdict::Rejected { .. });
    let kept = |v: &Verdict| {
        matches!(
            v,
            Verdict::Kept {
                session_ended: false,
                ..
            }
        )
    };
    let ended = |v: &Verdict| {
        matches!(
            v,
            Verdict::Kept {
                session_ended: true,
                ..
            }
        )
    };
    type Case = (Result<Response, Error>, fn(&Verdict) -> bool);
    let cases: Vec<Case> = vec![
        (resp(200), delivered),
        (resp(201), delivered),
        (resp(204), delivered),
        (resp(303), delivered),
        (resp(404), gone),
        (resp(409), gone),
        (resp(429), kept),
        (rejected(ErrorCode::InvalidRequest), gone),
        (rejected(ErrorCode::Forbidden), gone),
        (rejected(ErrorCode::NotFound), gone),
        (rejected(ErrorCode::PayloadTooLarge), gone),
        (rejected(ErrorCode::NotReady), kept),
        (rejected(ErrorCode::Internal), kept),
        (Err(Error::UnknownContractor), gone),
        (Err(Error::InvalidInput("x".into())), gone),
        (
            Err(Error::UnknownErrorCode {
                code: "NEWER".into(),
                status: 422,
                message: "m".into(),
            }),
            gone,
        ),
        (
            Err(Error::UnknownErrorCode {
                code: "NEWER".into(),
                status: 503,
                message: "m".into(),
            }),
            kept,
        ),
        (
            Err(Error::UnknownErrorCode {
                code: "SLOW_DOWN".into(),
                status: 429,
                message: "m".into(),
            }),
            kept,
        ),
        (net(crate::NetworkErrorKind::Connect), kept),
        (net(crate::NetworkErrorKind::TimeoutAfterSend), kept),
        (
            Err(Error::Upstream {
                status: 502,
                code: None,
            }),
            kept,
        ),
        (Err(Error::RateLimited { retry_after: None }), kept),
        (Err(Error::HandoffInProgress { retry_after: None }), kept),
        (Err(Error::CellStateStale), kept),
        (
            Err(Error::PinMismatch {
                cell: protocol::CellId::new("cell-02").unwrap(),
            }),
            kept,
        ),
        (
            Err(Error::WrongCell {
                owner_cell: None,
                owner_endpoint: None,
            }),
            kept,
        ),
        (
            Err(Error::UntrustedRedirect {
                owner_cell: None,
                owner_endpoint: None,
            }),
            kept,
        ),
        (Err(Error::Store("x".into())), kept),
        (Err(Error::SessionExpired), ended),
        (Err(Error::SessionRevoked), ended),
        (Err(Error::SessionInvalid), ended),
        (Err(Error::SignInRequired), ended),
        (Err(Error::NotSignedIn), ended),
        // a refused proof is not a refused write
        (rejected(ErrorCode::DpopNonceStale), kept),
        (rejected(ErrorCode::DpopNonceRequired), kept),
        (rejected(ErrorCode::DpopProofInvalid), kept),
        (rejected(ErrorCode::DpopProofReplayed), kept),
        (rejected(ErrorCode::DpopProofMissing), ended),
        (rejected(ErrorCode::DpopKeyMismatch), ended),
        (Err(Error::DeviceKey("keystore locked".into())), kept),
    ];
    for (result, want) in cases {
        let shown = format!("{result:?}");
        let v = verdict(result);
        assert!(want(&v), "{shown} -> {v:?}");
    }
    match verdict(rejected(ErrorCode::Forbidden)) {
        Verdict::Rejected { status, code, .. } => {
            assert_eq!((status, code.as_deref()), (403, Some("FORBIDDEN")))
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn debug_shows_no_values() {
    let w = QueuedWrite {
        id: 1,
        method: Method::POST,
        path: "/api/x".into(),
        query: vec![("token".into(), "q-secret".into())],
        headers: vec![("X-Api-Key".into(), "h-secret".into())],
        body: Some(b"b-secret".to_vec()),
        content_type: Some("text/plain".into()),
        idempotency_key: "k-secret".into(),
        enqueued_at: NOW,
    };
    let shown = format!("{w:?}");
    for s in ["q-secret", "h-secret", "b-secret", "k-secret"] {
        assert!(!shown.contains(s), "{shown}");
    }
}
