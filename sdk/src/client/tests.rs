use std::sync::Arc;
use std::time::Duration;

use http::Method;
use protocol::map::MapError;
use protocol::{ContractorId, ErrorCode, Login, Password};
use tokio::sync::Semaphore;

use super::*;
use crate::store::MemoryStore;
use crate::testing::{DAY, FakeFleet, NOW, Reply, eventually, transfer_answer};

const SIGN_IN: &str = "POST /v1/sessions";
const RENEW: &str = "POST /v1/sessions/renew";
const ROUTES: &str = "GET /api/routes/today";
const COMPLETE: &str = "POST /api/jobs/j-1/complete";

fn ctr() -> ContractorId {
    ContractorId::new("c-40711").unwrap()
}

async fn sign_in(c: &Client) -> Result<SessionInfo, Error> {
    c.sign_in(
        &ctr(),
        &Login::new("ana").unwrap(),
        &Password::new("correct horse").unwrap(),
    )
    .await
}

#[tokio::test]
async fn first_sign_in_goes_to_the_maps_cell_and_is_stored() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, store) = f.client_mem(&f.map(1, &[]));
    assert_eq!(c.state_name(), "SignedOut");
    let info = sign_in(&c).await.unwrap();
    assert_eq!(info.cell_id, f.cells[0].id);
    assert_eq!(info.endpoint.as_str(), f.cells[0].endpoint);
    assert_eq!(c.state_name(), "Active");
    let hits = f.cells[0].hits(SIGN_IN);
    assert_eq!(hits.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&hits[0].body).unwrap();
    assert_eq!(body["client"], "field");
    assert_eq!(body["contractor_id"], "c-40711");
    assert_eq!(body["login"], "ana");
    assert_eq!(f.cells[1].all_hits(), 0);
    let blob = store
        .load(StoreSlot::Session)
        .unwrap()
        .expect("session stored");
    assert!(blob.contains("\"schema\":2"));
}

#[tokio::test]
async fn override_is_used_and_a_wrong_map_costs_one_hop() {
    let f = FakeFleet::start(3).await;
    // the map says cell-02; cell-02 says cell-03 owns it; cell-03 agrees
    f.cells[1].always(SIGN_IN, Reply::wrong_cell(&f.cells[2]));
    f.cells[2].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[("c-40711", 1)]));
    assert_eq!(c.cell_for(&ctr()).unwrap().id, f.cells[1].id);
    let info = sign_in(&c).await.unwrap();
    assert_eq!(info.cell_id, f.cells[2].id);
    assert_eq!(f.cells[0].all_hits(), 0, "the bucket cell is not asked");
    assert_eq!(f.cells[1].hits(SIGN_IN).len(), 1);
    assert_eq!(f.cells[2].hits(SIGN_IN).len(), 1);
}

#[tokio::test]
async fn cells_that_keep_disagreeing_fail_after_exactly_two_attempts() {
    let f = FakeFleet::start(3).await;
    f.cells[0].always(SIGN_IN, Reply::wrong_cell(&f.cells[1]));
    f.cells[1].always(SIGN_IN, Reply::wrong_cell(&f.cells[2]));
    f.cells[2].accept_sign_in(NOW + 30 * DAY);
    let (c, store) = f.client_mem(&f.map(1, &[]));
    let e = sign_in(&c).await.unwrap_err();
    match e {
        Error::CellsDisagree {
            first,
            second,
            named_owner,
        } => {
            assert_eq!(first, f.cells[0].id);
            assert_eq!(second, f.cells[1].id);
            assert_eq!(named_owner, Some(f.cells[2].id.clone()));
        }
        e => panic!("{e:?}"),
    }
    let attempts: usize = f.cells.iter().map(|c| c.hits(SIGN_IN).len()).sum();
    assert_eq!(attempts, 2);
    assert_eq!(f.cells[2].all_hits(), 0, "never a second redirect");
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    assert_eq!(c.state_name(), "SignedOut");
}

#[tokio::test]
async fn redirects_not_backed_by_the_signed_map_are_not_followed() {
    let f = FakeFleet::start(2).await;
    f.cells[1].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    // a cell the map does not list
    f.cells[0].push(
        SIGN_IN,
        Reply::wrong_cell_at("cell-09", "https://127.0.0.9:8443"),
    );
    assert!(matches!(
        sign_in(&c).await,
        Err(Error::UntrustedRedirect { owner_cell: Some(o), .. }) if o.as_str() == "cell-09"
    ));
    // a listed cell at another endpoint than the map's
    f.cells[0].push(
        SIGN_IN,
        Reply::wrong_cell_at(f.cells[1].id.as_str(), "https://127.0.0.66:8443"),
    );
    assert!(matches!(
        sign_in(&c).await,
        Err(Error::UntrustedRedirect { .. })
    ));
    assert_eq!(f.cells[1].all_hits(), 0);
}

#[tokio::test]
async fn sign_in_errors_are_typed() {
    let f = FakeFleet::start(1).await;
    let (c, _) = f.client_mem(&f.map(1, &[]));
    for (code, check) in [
        (
            ErrorCode::InvalidCredentials,
            (|e: &Error| matches!(e, Error::InvalidCredentials)) as fn(&Error) -> bool,
        ),
        (ErrorCode::UnknownContractor, |e| {
            matches!(e, Error::UnknownContractor)
        }),
        (ErrorCode::InvalidRequest, |e| {
            matches!(
                e,
                Error::Rejected {
                    code: ErrorCode::InvalidRequest,
                    status: 400,
                    ..
                }
            )
        }),
    ] {
        f.cells[0].push(SIGN_IN, Reply::error(code));
        let e = sign_in(&c).await.unwrap_err();
        assert!(check(&e), "{code} gave {e:?}");
    }
}

#[tokio::test]
async fn requests_go_to_the_sessions_cell_only_with_the_bearer() {
    let f = FakeFleet::start(2).await;
    f.cells[1].accept_sign_in(NOW + 30 * DAY);
    f.cells[1].always(ROUTES, Reply::json(200, serde_json::json!({"jobs": []})));
    let (c, _) = f.client_mem(&f.map(1, &[("c-40711", 1)]));
    assert!(matches!(
        c.request(Method::GET, "/api/routes/today", None).await,
        Err(Error::NotSignedIn)
    ));
    sign_in(&c).await.unwrap();
    let r = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], br#"{"jobs":[]}"#);
    let hits = f.cells[1].hits(ROUTES);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].bearer().as_deref(), Some("tok.sign.in"));
    assert_eq!(hits[0].idempotency_key(), None, "reads carry no key");
    assert_eq!(f.cells[0].all_hits(), 0);
    for bad in [
        "api/x",
        "//evil.example/x",
        "https://evil.example/x",
        "/a b",
    ] {
        assert!(matches!(
            c.request(Method::GET, bad, None).await,
            Err(Error::InvalidInput(_))
        ));
    }
}

#[tokio::test]
async fn writes_keep_one_idempotency_key_across_503_retries() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    f.cells[0].push(COMPLETE, Reply::error(ErrorCode::CellStateStale));
    f.cells[0].push(COMPLETE, Reply::json(503, serde_json::json!({})));
    f.cells[0].always(COMPLETE, Reply::json(200, serde_json::json!({"ok": true})));
    let r = c
        .request(Method::POST, "/api/jobs/j-1/complete", Some(b"{}".to_vec()))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let hits = f.cells[0].hits(COMPLETE);
    assert_eq!(hits.len(), 3);
    let key = hits[0].idempotency_key().expect("a write carries a key");
    assert!(
        hits.iter()
            .all(|h| h.idempotency_key().as_deref() == Some(&key))
    );
    c.request(Method::POST, "/api/jobs/j-1/complete", Some(b"{}".to_vec()))
        .await
        .unwrap();
    let hits = f.cells[0].hits(COMPLETE);
    assert_ne!(
        hits[3].idempotency_key(),
        Some(key),
        "a new write gets a new key"
    );
}

#[tokio::test]
async fn retries_are_bounded() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::error(ErrorCode::CellStateStale));
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::CellStateStale), "{e:?}");
    assert_eq!(
        f.cells[0].hits(ROUTES).len(),
        3,
        "max_attempts of the policy"
    );
    // 502 is not retried
    f.cells[0].always(ROUTES, Reply::error(ErrorCode::UpstreamUnavailable));
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Upstream { status: 502, .. }), "{e:?}");
    assert_eq!(f.cells[0].hits(ROUTES).len(), 4);
}

#[tokio::test]
async fn connection_errors_surface_as_network_after_retries() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    f.cells[0].handle.shutdown();
    eventually("the cell to stop", Duration::from_secs(5), || {
        std::net::TcpStream::connect(f.cells[0].endpoint.trim_start_matches("https://")).is_err()
    })
    .await;
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Network {
                kind: crate::NetworkErrorKind::Connect,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(c.session().is_some(), "a network error keeps the session");
}

#[tokio::test]
async fn retry_after_is_honoured_for_handoff_and_rate_limits_within_a_bound() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    f.cells[0].push(
        COMPLETE,
        Reply::error(ErrorCode::HandoffInProgress).header("retry-after", "0"),
    );
    f.cells[0].push(
        COMPLETE,
        Reply::error(ErrorCode::RateLimited).header("retry-after", "0"),
    );
    f.cells[0].always(COMPLETE, Reply::json(200, serde_json::json!({})));
    let r = c
        .request(Method::POST, "/api/jobs/j-1/complete", Some(b"{}".to_vec()))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(f.cells[0].hits(COMPLETE).len(), 3);
    // longer than the bound: surfaced at once, with the wait
    f.cells[0].push(
        COMPLETE,
        Reply::error(ErrorCode::HandoffInProgress).header("retry-after", "120"),
    );
    let e = c
        .request(Method::POST, "/api/jobs/j-1/complete", Some(b"{}".to_vec()))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::HandoffInProgress { retry_after: Some(d) } if d == Duration::from_secs(120)),
        "{e:?}"
    );
    assert_eq!(f.cells[0].hits(COMPLETE).len(), 4);
}

#[tokio::test]
async fn expired_revoked_and_invalid_sessions_clear_the_store() {
    for (code, check) in [
        (
            ErrorCode::SessionExpired,
            (|e: &Error| matches!(e, Error::SessionExpired)) as fn(&Error) -> bool,
        ),
        (ErrorCode::SessionRevoked, |e| {
            matches!(e, Error::SessionRevoked)
        }),
        (ErrorCode::SessionInvalid, |e| {
            matches!(e, Error::SessionInvalid)
        }),
    ] {
        let f = FakeFleet::start(1).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        f.cells[0].always(ROUTES, Reply::error(code));
        let (c, store) = f.client_mem(&f.map(1, &[]));
        sign_in(&c).await.unwrap();
        assert!(store.load(StoreSlot::Session).unwrap().is_some());
        let e = c
            .request(Method::GET, "/api/routes/today", None)
            .await
            .unwrap_err();
        assert!(check(&e), "{code}: {e:?}");
        assert_eq!(
            store.load(StoreSlot::Session).unwrap(),
            None,
            "{code} clears the store"
        );
        assert_eq!(c.session(), None);
        assert_eq!(f.cells[0].hits(ROUTES).len(), 1, "not retried");
        assert!(matches!(
            c.request(Method::GET, "/api/routes/today", None).await,
            Err(Error::NotSignedIn)
        ));
    }
}

const TRANSFER: &str = "POST /v1/sessions/transfer";
const REBIND: &str = "POST /v1/sessions/rebind";

#[tokio::test]
async fn wrong_cell_with_a_session_transfers_rebinds_and_retries_once() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::wrong_cell(&f.cells[1]));
    f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
    let mut moved = f.cells[1].session_answer(NOW + 29 * DAY, "tok.re.bound");
    moved["generation"] = 4.into();
    f.cells[1].always(REBIND, Reply::json(201, moved));
    f.cells[1].always(COMPLETE, Reply::json(200, serde_json::json!({"ok": true})));
    f.cells[0].always(COMPLETE, Reply::wrong_cell(&f.cells[1]));
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();

    let r = c
        .request(Method::POST, "/api/jobs/j-1/complete", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // The old cell was asked once for the write and once for a ticket; the ticket went to the
    // owner; the write was retried once there with the same idempotency key.
    let first = f.cells[0].hits(COMPLETE);
    let retried = f.cells[1].hits(COMPLETE);
    assert_eq!((first.len(), retried.len()), (1, 1));
    assert_eq!(first[0].idempotency_key(), retried[0].idempotency_key());
    assert_eq!(retried[0].bearer().as_deref(), Some("tok.re.bound"));
    let rebind = f.cells[1].hits(REBIND);
    assert_eq!(rebind.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&rebind[0].body).unwrap();
    assert_eq!(body["ticket"], "tic.ket.sig");
    assert_eq!(
        f.cells[0].hits(TRANSFER)[0].bearer().as_deref(),
        Some("tok.sign.in")
    );
    // The new session is the one in use and in the store.
    let now = c.session().unwrap();
    assert_eq!(now.cell_id, f.cells[1].id);
    assert_eq!(now.generation.get(), 4);
    let stored = store::decode(&store.load(StoreSlot::Session).unwrap().unwrap()).unwrap();
    assert_eq!(stored.info.cell_id, f.cells[1].id);
}

#[tokio::test]
async fn a_refused_transfer_or_rebind_asks_for_a_new_sign_in() {
    for refuse_at_source in [true, false] {
        let f = FakeFleet::start(2).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        f.cells[0].always(ROUTES, Reply::wrong_cell(&f.cells[1]));
        if refuse_at_source {
            f.cells[0].always(TRANSFER, Reply::error(ErrorCode::Forbidden));
        } else {
            f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
            f.cells[1].always(REBIND, Reply::error(ErrorCode::Forbidden));
        }
        let (c, store) = f.client_mem(&f.map(1, &[]));
        sign_in(&c).await.unwrap();
        let e = c
            .request(Method::GET, "/api/routes/today", None)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::SignInRequired), "{e:?}");
        assert!(e.ends_session());
        assert!(c.session().is_none());
        assert!(store.load(StoreSlot::Session).unwrap().is_none());
        assert_eq!(
            f.cells[1].hits(ROUTES).len(),
            0,
            "no request went elsewhere"
        );
    }
}

/// ATTACKS A38: the owner refuses a rebind because the ticket's source says the session was
/// revoked there (the user signed out): the session ends, nothing is retried elsewhere.
#[tokio::test]
async fn a_rebind_refused_because_the_session_ended_at_its_source_ends_the_session() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::wrong_cell(&f.cells[1]));
    f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
    f.cells[1].always(REBIND, Reply::error(ErrorCode::SessionRevoked));
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::SessionRevoked), "{e:?}");
    assert!(e.ends_session(), "the app is told to sign in again");
    assert!(c.session().is_none());
    assert!(store.load(StoreSlot::Session).unwrap().is_none());
    assert_eq!(f.cells[1].hits(REBIND).len(), 1, "not retried");
    assert_eq!(
        f.cells[1].hits(ROUTES).len(),
        0,
        "no request went elsewhere"
    );
}

/// ATTACKS A38: the owner cannot reach the ticket's source to confirm it (`503 NOT_READY`,
/// nothing burned): the session is kept and the error is a retryable one; the next request
/// transfers again and is served at the owner.
#[tokio::test]
async fn a_rebind_its_source_could_not_confirm_keeps_the_session_for_a_retry() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::wrong_cell(&f.cells[1]));
    f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
    f.cells[1].push(
        REBIND,
        Reply::error(ErrorCode::NotReady).header("retry-after", "1"),
    );
    let mut moved = f.cells[1].session_answer(NOW + 29 * DAY, "tok.re.bound");
    moved["generation"] = 4.into();
    f.cells[1].always(REBIND, Reply::json(201, moved));
    f.cells[1].always(ROUTES, Reply::json(200, serde_json::json!({"jobs": []})));
    let (c, store) = f.client_mem(&f.map(1, &[]));
    let signed_in = sign_in(&c).await.unwrap();

    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Rejected {
                code: ErrorCode::NotReady,
                status: 503,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.ends_session());
    assert_eq!(
        c.session().unwrap().session_id,
        signed_in.session_id,
        "kept"
    );
    assert!(store.load(StoreSlot::Session).unwrap().is_some());
    assert_eq!(
        f.cells[1].hits(REBIND).len(),
        1,
        "a rebind is never resent by itself"
    );

    let r = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(c.session().unwrap().cell_id, f.cells[1].id);
    let tickets: Vec<serde_json::Value> = f.cells[1]
        .hits(REBIND)
        .iter()
        .map(|h| serde_json::from_slice(&h.body).unwrap())
        .collect();
    assert_eq!(tickets.len(), 2);
    assert_eq!(tickets[0], tickets[1], "the same ticket, asked for again");
}

#[tokio::test]
async fn wrong_cell_naming_an_owner_outside_the_signed_map_goes_nowhere() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(
        ROUTES,
        Reply::wrong_cell_at("cell-09", "https://127.0.0.9:8443"),
    );
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    let e = c
        .request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::UntrustedRedirect { .. }), "{e:?}");
    assert_eq!(f.cells[0].hits(TRANSFER).len(), 0, "no ticket asked for");
    assert_eq!(f.cells[1].all_hits(), 0);
    assert!(c.session().is_some());
    assert!(store.load(StoreSlot::Session).unwrap().is_some());
}

#[tokio::test]
async fn restore_reads_the_store_only() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let map = f.map(1, &[]);
    let (c1, store) = f.client_mem(&map);
    let info = sign_in(&c1).await.unwrap();
    f.cells[0].handle.shutdown();
    let before = f.cells[0].all_hits();
    let c2 = f.client(&map, store.clone());
    assert_eq!(c2.session(), None);
    assert_eq!(c2.restore().unwrap(), Some(info.clone()));
    assert_eq!(c2.session(), Some(info));
    assert_eq!(c2.state_name(), "Active");
    assert_eq!(f.cells[0].all_hits(), before);
    // an empty store restores nothing; a corrupt one is a store error
    let empty = f.client(&map, Arc::new(MemoryStore::new()));
    assert_eq!(empty.restore().unwrap(), None);
    let bad = Arc::new(MemoryStore::new());
    bad.save(StoreSlot::Session, "{\"schema\":2}").unwrap();
    assert!(matches!(
        f.client(&map, bad).restore(),
        Err(Error::Store(_))
    ));
}

#[tokio::test]
async fn map_refresh_accepts_only_newer_signed_maps() {
    let f = FakeFleet::start(2).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(5, &[]));
    assert!(matches!(c.refresh_map().await, Err(Error::NotSignedIn)));
    sign_in(&c).await.unwrap();
    const MAP: &str = "GET /v1/placement-map";
    let reply = |m: &SignedMap| Reply::json(200, serde_json::to_value(m).unwrap());
    // older
    f.cells[0].push(MAP, reply(&f.map(4, &[("c-40711", 1)])));
    assert!(matches!(
        c.refresh_map().await,
        Err(Error::MapRefused(MapError::NotNewer {
            held: 5,
            offered: 4
        }))
    ));
    // tampered: a newer version with the signature of another map
    let mut tampered = f.map(6, &[]);
    tampered.map.overrides.insert(ctr(), f.cells[1].id.clone());
    f.cells[0].push(MAP, reply(&tampered));
    assert!(matches!(
        c.refresh_map().await,
        Err(Error::MapRefused(MapError::BadSignature))
    ));
    // signed by another key
    let other =
        protocol::token::SigningKey::from_seed(protocol::Kid::new("x").unwrap(), &[1; 32]).unwrap();
    let forged = f.map(7, &[]).map.sign(&other).unwrap();
    f.cells[0].push(MAP, reply(&forged));
    assert!(matches!(
        c.refresh_map().await,
        Err(Error::MapRefused(MapError::BadSignature))
    ));
    assert_eq!(c.map().map.version, 5, "old map kept");
    assert_eq!(c.cell_for(&ctr()).unwrap().id, f.cells[0].id);
    // newer and valid
    f.cells[0].push(MAP, reply(&f.map(8, &[("c-40711", 1)])));
    assert_eq!(
        c.refresh_map().await.unwrap(),
        MapUpdate {
            previous_version: 5,
            version: 8
        }
    );
    assert_eq!(c.cell_for(&ctr()).unwrap().id, f.cells[1].id);
    assert_eq!(
        f.cells[0].hits(MAP).len(),
        4,
        "maps come from the session's cell"
    );
    assert_eq!(f.cells[1].all_hits(), 0);
}

#[tokio::test]
async fn renewal_happens_in_the_window_once_for_concurrent_requests() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    cell.accept_sign_in(NOW + 30 * DAY);
    cell.always(ROUTES, Reply::json(200, serde_json::json!({})));
    let gate = Arc::new(Semaphore::new(0));
    cell.always(
        RENEW,
        Reply::json(201, cell.session_answer(NOW + 53 * DAY, "tok.re.newed")).gated(gate.clone()),
    );
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    // outside the window: no renewal
    f.clock.advance(22 * DAY);
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(cell.hits(RENEW).len(), 0);
    // inside: two concurrent requests, one renewal
    f.clock.advance(2 * DAY);
    let (a, b) = (c.clone(), c.clone());
    let t1 = tokio::spawn(async move { a.request(Method::GET, "/api/routes/today", None).await });
    let t2 = tokio::spawn(async move { b.request(Method::GET, "/api/routes/today", None).await });
    eventually(
        "both requests to want a renewal",
        Duration::from_secs(10),
        || c.renewals_wanted() == 2 && cell.hits(RENEW).len() == 1,
    )
    .await;
    assert_eq!(c.state_name(), "Renewing");
    gate.add_permits(10);
    t1.await.unwrap().unwrap();
    t2.await.unwrap().unwrap();
    assert_eq!(cell.hits(RENEW).len(), 1, "single flight");
    assert_eq!(cell.hits(RENEW)[0].bearer().as_deref(), Some("tok.sign.in"));
    let routes = cell.hits(ROUTES);
    assert_eq!(routes.len(), 3);
    assert!(
        routes[1..]
            .iter()
            .all(|h| h.bearer().as_deref() == Some("tok.re.newed"))
    );
    assert_eq!(c.session().unwrap().expires_at, NOW + 53 * DAY);
    assert!(
        store
            .load(StoreSlot::Session)
            .unwrap()
            .unwrap()
            .contains("tok.re.newed")
    );
}

#[tokio::test]
async fn a_failed_renewal_keeps_the_session_and_a_revoked_one_ends_it() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    cell.accept_sign_in(NOW + 30 * DAY);
    cell.always(ROUTES, Reply::json(200, serde_json::json!({})));
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    f.clock.advance(25 * DAY);
    cell.push(RENEW, Reply::error(ErrorCode::UpstreamUnavailable));
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    assert_eq!(c.state_name(), "Active");
    cell.push(RENEW, Reply::error(ErrorCode::SessionRevoked));
    assert!(matches!(
        c.request(Method::GET, "/api/routes/today", None).await,
        Err(Error::SessionRevoked)
    ));
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    assert_eq!(c.state_name(), "SignedOut");
    assert_eq!(
        cell.hits(ROUTES).len(),
        1,
        "no request with a revoked session"
    );
}

#[tokio::test]
async fn sign_out_revokes_and_forgets() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].push(
        "DELETE /v1/sessions/current",
        Reply::json(204, serde_json::json!(null)),
    );
    let (c, store) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    assert_eq!(c.sign_out().await.unwrap().outcome, SignOut::Revoked);
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
    assert_eq!(c.session(), None);
    assert_eq!(c.sign_out().await.unwrap().outcome, SignOut::NotSignedIn);
    // the cell unreachable: forgotten locally all the same
    sign_in(&c).await.unwrap();
    f.cells[0].handle.shutdown();
    eventually("the cell to stop", Duration::from_secs(5), || {
        std::net::TcpStream::connect(f.cells[0].endpoint.trim_start_matches("https://")).is_err()
    })
    .await;
    assert!(matches!(
        c.sign_out().await.unwrap().outcome,
        SignOut::LocalOnly { .. }
    ));
    assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
}

#[tokio::test]
async fn builder_refuses_bad_configuration() {
    let f = FakeFleet::start(1).await;
    let map = f.map(1, &[]);
    assert!(matches!(
        f.builder(&map).extra_ca_pem("").build(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        f.builder(&map).extra_ca_pem("not a pem").build(),
        Err(Error::Config(_))
    ));
    let other =
        protocol::token::SigningKey::from_seed(protocol::Kid::new("x").unwrap(), &[1; 32]).unwrap();
    assert!(matches!(
        Client::builder(map.to_json().unwrap(), other.public_key()).build(),
        Err(Error::MapRefused(MapError::BadSignature))
    ));
}

#[tokio::test]
async fn a_client_without_the_dev_ca_does_not_trust_the_cells() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let map = f.map(1, &[]);
    let (events, observer) = recorder();
    let c = Client::builder(map.to_json().unwrap(), f.map_key.public_key())
        .retry_policy(crate::testing::fast_retries())
        .observer(observer)
        .build()
        .unwrap();
    let e = sign_in(&c).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Network {
                kind: crate::NetworkErrorKind::Tls,
                reached_cell: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(f.cells[0].hits(SIGN_IN).len(), 0);
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].attempts, 1, "a TLS failure is not retried");
    assert_eq!(events[0].status, None);
}

/// An observer that records every event.
fn recorder() -> (
    Arc<std::sync::Mutex<Vec<crate::RequestEvent>>>,
    Arc<dyn crate::RequestObserver>,
) {
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    let observer = move |e: &crate::RequestEvent| sink.lock().unwrap().push(e.clone());
    (events, Arc::new(observer))
}

#[tokio::test]
async fn send_carries_query_headers_body_and_the_callers_key_on_every_retry() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    let (c, _) = f.client_mem(&f.map(1, &[]));
    sign_in(&c).await.unwrap();
    f.cells[0].push(COMPLETE, Reply::error(ErrorCode::CellStateStale));
    f.cells[0].always(COMPLETE, Reply::json(200, serde_json::json!({"ok": true})));
    let r = c
        .send(
            crate::Request::post("/api/jobs/j-1/complete")
                .query("note", "left at the gate & signed")
                .query("v", "2")
                .header("X-Request-Id", "r-17")
                .body(b"done=1".to_vec(), "application/x-www-form-urlencoded")
                .idempotency_key("job-j-1:complete"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let hits = f.cells[0].hits(COMPLETE);
    assert_eq!(hits.len(), 2, "the 503 was retried");
    for h in &hits {
        assert_eq!(
            h.query.as_deref(),
            Some("note=left%20at%20the%20gate%20%26%20signed&v=2")
        );
        assert_eq!(h.headers["x-request-id"], "r-17");
        assert_eq!(
            h.headers["content-type"],
            "application/x-www-form-urlencoded"
        );
        assert_eq!(h.body, b"done=1");
        assert_eq!(h.bearer().as_deref(), Some("tok.sign.in"));
        assert_eq!(
            h.idempotency_key().as_deref(),
            Some("job-j-1:complete"),
            "the caller's key, as it is, on every attempt"
        );
    }
    // the thin form still sends JSON with a key of the SDK's own
    c.request(Method::POST, "/api/jobs/j-1/complete", Some(b"{}".to_vec()))
        .await
        .unwrap();
    let last = f.cells[0].hits(COMPLETE).pop().unwrap();
    assert_eq!(last.headers["content-type"], "application/json");
    let key = last.idempotency_key().unwrap();
    assert_ne!(key, "job-j-1:complete");
    assert_eq!(key.len(), 22, "128 random bits, base64url");
}

#[tokio::test]
async fn a_refused_header_path_or_key_sends_nothing() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::json(200, serde_json::json!({})));
    let (events, observer) = recorder();
    let c = f
        .builder(&f.map(1, &[]))
        .observer(observer)
        .build()
        .unwrap();
    sign_in(&c).await.unwrap();
    let before = f.cells[0].all_hits();
    for r in [
        crate::Request::get(ROUTES_PATH).header("Authorization", "Bearer someone-else"),
        crate::Request::get(ROUTES_PATH).header("X-Cellbind-Subject", "c-1.admin"),
        crate::Request::get(ROUTES_PATH).header("Connection", "close"),
        crate::Request::get("/api/routes/today?date=2026-01-01"),
        crate::Request::get("/api/../v1/sessions/current"),
        crate::Request::post("/api/jobs/j-1/complete").idempotency_key("not a key"),
    ] {
        let shown = format!("{r:?}");
        assert!(
            matches!(c.send(r).await, Err(Error::InvalidInput(_))),
            "{shown}"
        );
    }
    assert_eq!(f.cells[0].all_hits(), before, "nothing was sent");
    assert_eq!(
        events.lock().unwrap().len(),
        1,
        "only the sign-in was a call"
    );
}

const ROUTES_PATH: &str = "/api/routes/today";

#[tokio::test]
async fn a_refused_connection_is_connect_and_never_reached_the_cell() {
    let f = FakeFleet::start(1).await;
    f.cells[0].handle.shutdown();
    eventually("the cell to stop", Duration::from_secs(5), || {
        std::net::TcpStream::connect(f.cells[0].endpoint.trim_start_matches("https://")).is_err()
    })
    .await;
    let (events, observer) = recorder();
    let c = f
        .builder(&f.map(1, &[]))
        .observer(observer)
        .build()
        .unwrap();
    let e = sign_in(&c).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Network {
                kind: crate::NetworkErrorKind::Connect,
                reached_cell: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("never reached the cell"), "{e}");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    let ev = &events[0];
    assert_eq!(
        ev.outcome,
        crate::RequestOutcome::Network {
            kind: crate::NetworkErrorKind::Connect
        }
    );
    assert!(!ev.reached_cell);
    assert_eq!(ev.status, None);
    assert_eq!(ev.attempts, 3, "nothing was sent, so it was retried");
    assert_eq!(ev.cell_id, f.cells[0].id);
}

#[tokio::test]
async fn a_cell_that_takes_the_request_and_never_answers_may_have_applied_it() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    // never answered: the gate gets no permit
    f.cells[0].always(
        COMPLETE,
        Reply::json(200, serde_json::json!({})).gated(Arc::new(Semaphore::new(0))),
    );
    let c = f
        .builder(&f.map(1, &[]))
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    sign_in(&c).await.unwrap();
    let e = c
        .send(crate::Request::post("/api/jobs/j-1/complete").idempotency_key("k-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Network {
                kind: crate::NetworkErrorKind::TimeoutAfterSend,
                reached_cell: true,
                ..
            }
        ),
        "{e:?}"
    );
    let hits = f.cells[0].hits(COMPLETE);
    assert_eq!(hits.len(), 3, "a keyed write is retried");
    assert!(
        hits.iter()
            .all(|h| h.idempotency_key().as_deref() == Some("k-1"))
    );
    assert!(c.session().is_some());
}

#[tokio::test]
async fn an_unknown_error_code_from_a_newer_server_is_the_one_fallback() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].push(
        ROUTES,
        Reply::json(
            422,
            serde_json::json!({"error": "ROUTE_FROZEN_BY_DISPATCH", "message": "ask dispatch",
                "frozen_until": 1_800_000_600u64}),
        ),
    );
    let (events, observer) = recorder();
    let (c, store) = {
        let store = Arc::new(MemoryStore::new());
        let c = f
            .builder(&f.map(1, &[]))
            .store(store.clone())
            .observer(observer)
            .build()
            .unwrap();
        (c, store)
    };
    sign_in(&c).await.unwrap();
    let e = c.request(Method::GET, ROUTES_PATH, None).await.unwrap_err();
    match &e {
        Error::UnknownErrorCode {
            code,
            status,
            message,
        } => {
            assert_eq!(code, "ROUTE_FROZEN_BY_DISPATCH");
            assert_eq!(*status, 422);
            assert_eq!(message, "ask dispatch");
        }
        e => panic!("{e:?}"),
    }
    assert!(!e.ends_session());
    assert!(
        store.load(StoreSlot::Session).unwrap().is_some(),
        "the session is kept"
    );
    let last = events.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last.outcome,
        crate::RequestOutcome::Refused {
            code: Some("ROUTE_FROZEN_BY_DISPATCH".into())
        }
    );
    assert_eq!(last.status, Some(422));
}

#[tokio::test]
async fn the_observer_sees_each_call_once_with_its_final_outcome() {
    let f = FakeFleet::start(1).await;
    let cell = &f.cells[0];
    cell.accept_sign_in(NOW + 30 * DAY);
    cell.push(ROUTES, Reply::error(ErrorCode::CellStateStale));
    cell.always(ROUTES, Reply::json(200, serde_json::json!({})));
    cell.always(COMPLETE, Reply::error(ErrorCode::Forbidden));
    let (events, observer) = recorder();
    let c = f
        .builder(&f.map(1, &[]))
        .observer(observer)
        .build()
        .unwrap();
    sign_in(&c).await.unwrap();
    c.send(crate::Request::get(ROUTES_PATH).query("date", "2026-11-30"))
        .await
        .unwrap();
    let e = c
        .request(Method::POST, "/api/jobs/j-1/complete", None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Rejected { .. }), "{e:?}");
    let events = events.lock().unwrap().clone();
    let summary: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.method.as_str().to_owned(),
                e.path.clone(),
                e.outcome.clone(),
                e.status,
                e.reached_cell,
                e.attempts,
            )
        })
        .collect();
    type Row = (
        String,
        String,
        crate::RequestOutcome,
        Option<u16>,
        bool,
        u32,
    );
    let want: Vec<Row> = vec![
        (
            "POST".into(),
            "/v1/sessions".into(),
            crate::RequestOutcome::Answered,
            Some(201),
            true,
            1,
        ),
        (
            "GET".into(),
            ROUTES_PATH.into(),
            crate::RequestOutcome::Answered,
            Some(200),
            true,
            2,
        ),
        (
            "POST".into(),
            "/api/jobs/j-1/complete".into(),
            crate::RequestOutcome::Refused {
                code: Some("FORBIDDEN".into()),
            },
            Some(403),
            true,
            1,
        ),
    ];
    assert_eq!(summary, want);
    assert!(events.iter().all(|e| e.cell_id == cell.id));
    let shown = format!("{events:?}");
    assert!(
        !shown.contains("tok.sign.in") && !shown.contains("2026-11-30"),
        "no token, no query: {shown}"
    );
}

#[tokio::test]
async fn a_panicking_observer_does_not_break_requests() {
    let f = FakeFleet::start(1).await;
    f.cells[0].accept_sign_in(NOW + 30 * DAY);
    f.cells[0].always(ROUTES, Reply::json(200, serde_json::json!({})));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let observer = move |_: &crate::RequestEvent| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        panic!("observer bug");
    };
    let c = f
        .builder(&f.map(1, &[]))
        .observer(Arc::new(observer))
        .build()
        .unwrap();
    sign_in(&c).await.unwrap();
    let r = c.request(Method::GET, ROUTES_PATH, None).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// The device token a sign-in sent, if any.
fn sent_device_token(hit: &crate::testing::Hit) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(&hit.body).unwrap();
    body["device_token"].as_str().map(str::to_owned)
}

/// ATTACKS A36: the device token a cell gives at sign-in is kept in its own slot beyond the
/// session (sign-out included) and sent with the next sign-in of that account at that cell,
/// also by a new client over the same store; a rebind's token is kept for the new cell.
#[tokio::test]
async fn the_device_token_outlives_the_session_and_goes_with_the_next_sign_in() {
    let f = FakeFleet::start(2).await;
    let mut answer = f.cells[0].session_answer(NOW + 30 * DAY, "tok.sign.in");
    answer["device_token"] = "d1.first-cell".into();
    f.cells[0].always(SIGN_IN, Reply::json(201, answer));
    f.cells[0].always(
        "DELETE /v1/sessions/current",
        Reply::json(204, serde_json::json!({})),
    );
    let store = Arc::new(MemoryStore::new());
    let c = f.client(&f.map(1, &[]), store.clone());
    sign_in(&c).await.unwrap();
    assert_eq!(
        sent_device_token(&f.cells[0].hits(SIGN_IN)[0]),
        None,
        "none yet"
    );
    assert!(store.load(StoreSlot::Device).unwrap().is_some());
    c.sign_out().await.unwrap();
    assert!(store.load(StoreSlot::Session).unwrap().is_none());
    assert!(store.load(StoreSlot::Device).unwrap().is_some(), "kept");

    // A new client over the same store (the app restarted) signs in: the token goes along.
    let c = f.client(&f.map(1, &[]), store.clone());
    sign_in(&c).await.unwrap();
    let hits = f.cells[0].hits(SIGN_IN);
    assert_eq!(
        sent_device_token(&hits[1]).as_deref(),
        Some("d1.first-cell")
    );
    // Another account on the same device does not send it.
    c.sign_in(
        &ctr(),
        &Login::new("bo").unwrap(),
        &Password::new("pw").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(sent_device_token(&f.cells[0].hits(SIGN_IN)[2]), None);

    // The contractor moves: the rebind's token is kept for the new cell.
    sign_in(&c).await.unwrap();
    f.cells[0].always(ROUTES, Reply::wrong_cell(&f.cells[1]));
    f.cells[0].always(TRANSFER, transfer_answer(&f.cells[1]));
    let mut moved = f.cells[1].session_answer(NOW + 29 * DAY, "tok.re.bound");
    moved["generation"] = 4.into();
    moved["device_token"] = "d1.second-cell".into();
    f.cells[1].always(REBIND, Reply::json(201, moved));
    f.cells[1].always(ROUTES, Reply::json(200, serde_json::json!({})));
    c.request(Method::GET, "/api/routes/today", None)
        .await
        .unwrap();
    let book: serde_json::Value =
        serde_json::from_str(&store.load(StoreSlot::Device).unwrap().unwrap()).unwrap();
    let cells: Vec<(&str, &str)> = book["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cell_id"].as_str().unwrap(), r["token"].as_str().unwrap()))
        .collect();
    assert!(cells.contains(&("cell-02", "d1.second-cell")), "{cells:?}");
    assert!(cells.contains(&("cell-01", "d1.first-cell")), "{cells:?}");
}
