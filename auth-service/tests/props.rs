//! Property tests of the auth-service's parsers that face the network: the JSON request bodies
//! (sign-in, rebind, the admin and feed bodies) and the configuration loader.
//! `props_support` (shared with the other crates' `props` targets) says how many cases run and
//! what is printed.
//!
//! Request bodies: every case decodes its body with the deserialisation the routes' body
//! extractor uses (`serde_json` into the route's type). A body that does not decode goes
//! through the real router, which must answer a typed `400 INVALID_REQUEST`. A body that
//! decodes goes through the router too on the public routes (sign-in, rebind): the fixture
//! owns no contractor and has issued no ticket, so each is refused with a typed 4xx before any
//! password is hashed. A decoded admin body is not sent: it would hash a password (about 1 s
//! at the cell's argon2id parameters) or change the store; the example suites cover those.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "../../protocol/tests/props_support/mod.rs"]
mod props_support;

#[path = "it/common.rs"]
mod common;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use cellbind_auth_service::{Config, Error};
use http_body_util::BodyExt as _;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use protocol::admin::cell::{
    ContractorExport, ImportUsers, KeyRevokeRequest, NewUser, OwnershipBulk, RevokeRequest,
};
use protocol::api::{RebindRequest, SignInRequest};
use protocol::feed::Reapply;
use protocol::ownership::OwnershipRecord;
use protocol::{ErrorBody, ErrorCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use common::{ADMIN, Fixture, feed_for};
use props_support::{ByteEdit, apply, byte_edit, hostile_json, toml_input, toml_text};

// ---------------------------------------------------------------------------------------------
// prop_request_bodies

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Public,
    Internal,
}

/// One route that takes a JSON body.
struct Route {
    method: Method,
    path: &'static str,
    via: Via,
    /// `Authorization` value, when the route needs one.
    auth: Option<&'static str>,
    /// A body the route's type accepts.
    valid: Value,
    /// The same body's values as a JSON array in the type's field order: what serde alone
    /// reads as the same body, and the extractor must refuse.
    array_form: Value,
    /// The route's deserialisation.
    decodes: fn(&[u8]) -> bool,
    /// Whether a decoded body is sent too (see the module doc).
    send_decoded: bool,
}

/// The body extractor's deserialisation (`protocol::json::from_object_slice`).
fn decodes<T: serde::de::DeserializeOwned>(b: &[u8]) -> bool {
    protocol::json::from_object_slice::<T>(b).is_ok()
}

const ADMIN_AUTH: &str = "Bearer admin-token-for-tests-0123456789";
fn routes() -> Vec<Route> {
    assert_eq!(ADMIN_AUTH, format!("Bearer {ADMIN}"));
    // The handback is made with the feed credential of the instance the body names.
    let feed_auth: &'static str =
        Box::leak(format!("Bearer {}", feed_for("edge-a")).into_boxed_str());
    let user = json!({"contractor_id": "c-1", "login": "ana", "role": "technician", "password": "pw-123456"});
    let revocation = json!({"seq": 3, "kind": "subject", "sub": "c-1.ana", "before": 1_767_225_600u64, "at": 1_767_225_600u64, "by": "ops", "reason": "lost phone"});
    vec![
        Route {
            method: Method::POST,
            path: "/v1/sessions",
            via: Via::Public,
            auth: None,
            valid: json!({"contractor_id": "c-40711", "login": "ana", "password": "pw-123456", "client": "field"}),
            array_form: json!(["c-40711", "ana", "pw-123456", "field"]),
            decodes: decodes::<SignInRequest>,
            send_decoded: true,
        },
        Route {
            method: Method::POST,
            path: "/v1/sessions/rebind",
            via: Via::Public,
            auth: None,
            valid: json!({"ticket": "eyJhbGciOiJFZERTQSJ9.e30.c2ln"}),
            array_form: json!(["eyJhbGciOiJFZERTQSJ9.e30.c2ln"]),
            decodes: decodes::<RebindRequest>,
            send_decoded: true,
        },
        Route {
            method: Method::POST,
            path: protocol::admin::cell::USERS_PATH,
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: user.clone(),
            array_form: json!(["c-1", "ana", "technician", "pw-123456"]),
            decodes: decodes::<NewUser>,
            send_decoded: false,
        },
        Route {
            method: Method::POST,
            path: protocol::admin::cell::USERS_IMPORT_PATH,
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"users": [user]}),
            array_form: json!([[{"contractor_id": "c-1", "login": "ana", "role": "technician", "password": "pw-123456"}]]),
            decodes: decodes::<ImportUsers>,
            send_decoded: false,
        },
        Route {
            method: Method::PUT,
            path: "/admin/v1/ownership/c-1",
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"state": "released", "gen": 1, "successor": "cell-02", "successor_gen": 2}),
            array_form: json!(["released", 1, "cell-02", 2]),
            decodes: decodes::<OwnershipRecord>,
            send_decoded: false,
        },
        Route {
            method: Method::PUT,
            path: protocol::admin::cell::OWNERSHIP_PATH,
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"records": {"c-1": {"state": "active", "gen": 1}, "c-2": {"state": "handoff", "gen": 4}}}),
            array_form: json!([{"c-1": {"state": "active", "gen": 1}}]),
            decodes: decodes::<OwnershipBulk>,
            send_decoded: false,
        },
        Route {
            method: Method::POST,
            path: "/admin/v1/keys/k-1/revoke",
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"reason": "leaked", "by": "ops"}),
            array_form: json!(["leaked", "ops"]),
            decodes: decodes::<KeyRevokeRequest>,
            send_decoded: false,
        },
        Route {
            method: Method::POST,
            path: protocol::admin::cell::REVOCATIONS_PATH,
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"kind": "session", "jti": "AQEBAQEBAQEBAQEBAQEBAQ", "exp": 1_767_225_600u64, "reason": "lost phone", "by": "ops"}),
            array_form: json!([
                "session",
                "AQEBAQEBAQEBAQEBAQEBAQ",
                1_767_225_600u64,
                "lost phone",
                "ops"
            ]),
            decodes: decodes::<RevokeRequest>,
            send_decoded: false,
        },
        Route {
            method: Method::POST,
            path: "/admin/v1/contractors/c-1/import",
            via: Via::Internal,
            auth: Some(ADMIN_AUTH),
            valid: json!({"schema": 1, "contractor_id": "c-1", "users": [{"login": "ana", "role": "technician", "password_hash": "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "status": "active"}], "revocations": [revocation.clone()]}),
            array_form: json!([1, "c-1", [], []]),
            decodes: decodes::<ContractorExport>,
            send_decoded: false,
        },
        Route {
            method: Method::POST,
            path: protocol::feed::REAPPLY_PATH,
            via: Via::Internal,
            auth: Some(feed_auth),
            valid: json!({"from_epoch": "e-1", "instance": "edge-a", "revocations": [revocation]}),
            array_form: json!(["e-1", "edge-a", []]),
            decodes: decodes::<Reapply>,
            send_decoded: false,
        },
    ]
}

#[derive(Debug, Clone)]
enum BodyInput {
    Valid,
    /// A top-level member (by index) set to a hostile value.
    Member(usize, Value),
    Remove(usize),
    Unknown(String, Value),
    /// A top-level member written twice (as text).
    Duplicate(usize),
    Bytes(Vec<ByteEdit>),
    NotObject(Value),
    /// The route's body in its array form.
    AsArray,
    Arbitrary(Vec<u8>),
}

fn body_input() -> impl Strategy<Value = BodyInput> {
    prop_oneof![
        1 => Just(BodyInput::Valid),
        4 => (any::<usize>(), hostile_json()).prop_map(|(i, v)| BodyInput::Member(i, v)),
        1 => any::<usize>().prop_map(BodyInput::Remove),
        1 => ("[a-z_]{1,10}", hostile_json()).prop_map(|(k, v)| BodyInput::Unknown(k, v)),
        1 => any::<usize>().prop_map(BodyInput::Duplicate),
        4 => prop::collection::vec(byte_edit(), 1..4).prop_map(BodyInput::Bytes),
        1 => hostile_json().prop_map(BodyInput::NotObject),
        1 => Just(BodyInput::AsArray),
        2 => prop::collection::vec(any::<u8>(), 0..200).prop_map(BodyInput::Arbitrary),
    ]
}

fn body_bytes(route: &Route, input: &BodyInput) -> Vec<u8> {
    let valid = &route.valid;
    let members: Vec<(String, Value)> = valid
        .as_object()
        .map(|m| m.clone().into_iter().collect())
        .unwrap_or_default();
    let text = |members: &[(String, Value)]| {
        let inner: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
            .collect();
        format!("{{{}}}", inner.join(",")).into_bytes()
    };
    let n = members.len().max(1);
    match input {
        BodyInput::Valid => valid.to_string().into_bytes(),
        BodyInput::Member(i, v) => {
            let mut m = members;
            if let Some(slot) = m.get_mut(i % n) {
                slot.1 = v.clone();
            }
            text(&m)
        }
        BodyInput::Remove(i) => {
            let mut m = members;
            if !m.is_empty() {
                m.remove(i % n);
            }
            text(&m)
        }
        BodyInput::Unknown(k, v) => {
            let mut m = members;
            m.push((k.clone(), v.clone()));
            text(&m)
        }
        BodyInput::Duplicate(i) => {
            let mut m = members;
            if let Some(d) = m.get(i % n).cloned() {
                m.push(d);
            }
            text(&m)
        }
        BodyInput::Bytes(e) => apply(valid.to_string().as_bytes(), e),
        BodyInput::NotObject(v) => v.to_string().into_bytes(),
        BodyInput::AsArray => route.array_form.to_string().into_bytes(),
        BodyInput::Arbitrary(b) => b.clone(),
    }
}

/// Sends one request and reads the answer whole: status and the decoded error body, if any.
async fn send(
    router: &Router,
    route: &Route,
    body: Vec<u8>,
) -> Result<(StatusCode, Option<ErrorBody>), TestCaseError> {
    let mut req = Request::builder()
        .method(route.method.clone())
        .uri(route.path)
        .header("content-type", "application/json");
    if let Some(a) = route.auth {
        req = req.header("authorization", a);
    }
    let req = req
        .body(Body::from(body))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let resp = router
        .clone()
        .oneshot(req)
        .await
        .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .to_bytes();
    Ok((status, serde_json::from_slice::<ErrorBody>(&bytes).ok()))
}

#[test]
fn prop_request_bodies() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fixture = rt.block_on(Fixture::new());
    let public = cellbind_auth_service::public_router(fixture.state.clone());
    let internal = cellbind_auth_service::internal_router(fixture.state.clone());
    let routes = routes();
    for r in &routes {
        assert!((r.decodes)(r.valid.to_string().as_bytes()), "{}", r.path);
    }
    // serde alone reads the array forms (of the routes whose types are plain structs).
    assert!(serde_json::from_value::<SignInRequest>(routes[0].array_form.clone()).is_ok());
    assert!(serde_json::from_value::<RebindRequest>(routes[1].array_form.clone()).is_ok());
    assert!(serde_json::from_value::<KeyRevokeRequest>(routes[6].array_form.clone()).is_ok());
    let strategy = (0..routes.len(), body_input());
    props_support::run("request_bodies", strategy, |(i, input)| {
        let route = &routes[i];
        let body = body_bytes(route, &input);
        let decoded = (route.decodes)(&body);
        if matches!(input, BodyInput::Valid) {
            prop_assert!(decoded);
        }
        // Every body type refuses anything but an object, and repeated and unknown members,
        // except: sign-in's type takes unknown members, and the revocation's (a flattened
        // tagged kind) takes unknown and repeated ones.
        let refused = match input {
            BodyInput::NotObject(_) | BodyInput::AsArray => true,
            BodyInput::Duplicate(_) => route.path != protocol::admin::cell::REVOCATIONS_PATH,
            BodyInput::Unknown(..) => {
                route.path != protocol::admin::cell::REVOCATIONS_PATH
                    && route.path != "/v1/sessions"
            }
            _ => false,
        };
        if refused {
            prop_assert!(!decoded, "{} decoded {input:?}", route.path);
        }
        if decoded && !route.send_decoded {
            return Ok(());
        }
        let router = match route.via {
            Via::Public => &public,
            Via::Internal => &internal,
        };
        let (status, error) = rt.block_on(send(router, route, body))?;
        prop_assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR,
            "{} {input:?}: 500",
            route.path
        );
        let Some(error) = error else {
            return Err(TestCaseError::fail(format!(
                "{} {input:?}: {status} without a typed error body",
                route.path
            )));
        };
        if decoded {
            // Public routes: refused for what the body says, never served.
            prop_assert!(status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE);
            prop_assert_ne!(error.error, ErrorCode::Internal);
        } else {
            prop_assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{} {:?}",
                route.path,
                input
            );
            prop_assert_eq!(error.error, ErrorCode::InvalidRequest);
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// prop_config_loading

/// A complete, valid configuration (the deployment example's keys, on SQLite; the map key is
/// the public key of the seed `[3; 32]`, not a published example key, which is refused).
const VALID_CONFIG: &str = r#"cell_id = "cell-01"
issuer = "https://cell-01.example.com"
listen = "0.0.0.0:8445"
internal_listen = "0.0.0.0:8446"
management_listen = "127.0.0.1:9102"
tls_cert = "tls/auth-service.pem"
tls_key = "tls/auth-service.key"
ca_cert = "tls/ca.pem"
data_dir = "data"
kek_file = "secrets/kek"
admin_token_file = "secrets/admin.token"
feed_token_file = "secrets/feed.token"
edge_token_file = "secrets/edge.token"
control_plane_url = "https://control-plane.internal:8440"
map_public_key = "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E"
session_lifetime_s = 2592000
key_rotation_interval_s = 2592000
replica_id = "auth-a"
log_format = "json""#;

#[test]
fn prop_config_loading() {
    let dir = tempfile::tempdir_in(props_support::scratch_base()).unwrap();
    let path = dir.path().join("auth-service.toml");
    props_support::run("config_loading", toml_input(), |input| {
        let text = toml_text(VALID_CONFIG, &input);
        std::fs::write(&path, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded = Config::load(&path);
        // The embedding entry point reads the same text the same way.
        let embedded = std::str::from_utf8(&text).map(Config::from_toml);
        if let Ok(embedded) = &embedded {
            prop_assert_eq!(embedded.is_ok(), loaded.is_ok());
        }
        props_support::check_config_verdict(VALID_CONFIG, &input, &loaded, |e| {
            matches!(e, Error::Config(_))
        })?;
        Ok(())
    });
}
