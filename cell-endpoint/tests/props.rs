//! Property tests of the edge's parsers that face the network: the credential a request
//! presents (bearer header, session and CSRF cookies, origin) through the edge's own
//! validation and browser rules, and the configuration loader. `props_support` (shared with
//! the other crates' `props` targets) says how many cases run and what is printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "../../protocol/tests/props_support/mod.rs"]
mod props_support;

#[path = "it/common/mod.rs"]
mod common;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use cellbind_cell_endpoint::testing::Validation;
use cellbind_cell_endpoint::testing::{Refusal, rescue};
use cellbind_cell_endpoint::testing::{Verdict, decide, uses_session_cookie};
use cellbind_cell_endpoint::{Config, EdgeError};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use protocol::http::{CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE};
use protocol::ownership::Access;
use protocol::token::{SessionClaims, TokenError};

use common::*;
use props_support::{ByteEdit, TomlInput, apply, byte_edit, toml_input, toml_text};

// ---------------------------------------------------------------------------------------------
// prop_edge_credentials

/// The sessions the fixture mints, one per ownership situation of `common::state`.
struct Sessions {
    claims: Vec<SessionClaims>,
    tokens: Vec<String>,
    /// Signed with a key the cell does not hold.
    foreign: String,
}

fn sessions() -> Sessions {
    let claims = vec![
        claims(CTR, 1),
        claims(CTR, 2),
        claims(CTR_HANDOFF, 1),
        claims(CTR_RELEASED, 1),
        claims(CTR_ELSEWHERE, 1),
        claims(CTR_NOWHERE, 1),
    ];
    let tokens = claims.iter().map(mint).collect();
    let foreign = key("k-unknown", 42)
        .mint(&claims[0])
        .unwrap()
        .expose()
        .to_owned();
    Sessions {
        claims,
        tokens,
        foreign,
    }
}

#[derive(Debug, Clone)]
enum TokenPick {
    Minted(usize),
    Edited(usize, Vec<ByteEdit>),
    Foreign,
    Text(String),
}

fn token_pick() -> impl Strategy<Value = TokenPick> {
    prop_oneof![
        4 => (0..6usize).prop_map(TokenPick::Minted),
        4 => (0..6usize, prop::collection::vec(byte_edit(), 1..3)).prop_map(|(i, e)| TokenPick::Edited(i, e)),
        1 => Just(TokenPick::Foreign),
        1 => "[A-Za-z0-9._ =;-]{0,60}".prop_map(TokenPick::Text),
    ]
}

#[derive(Debug, Clone)]
struct EdgeInput {
    method: Method,
    path: &'static str,
    bearer: Vec<(bool, TokenPick)>,
    cookie: Option<(TokenPick, Option<String>, &'static str)>,
    second_cookie: Option<TokenPick>,
    origin: Option<Vec<u8>>,
    sec_fetch_site: Option<&'static str>,
    csrf_header: Option<String>,
    preflight: bool,
    raw: Vec<(&'static str, Vec<u8>)>,
}

fn edge_input() -> impl Strategy<Value = EdgeInput> {
    let csrf = prop_oneof![Just("csrf-1".to_owned()), "[a-z0-9-]{0,8}"];
    (
        prop::sample::select(vec![
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
            Method::HEAD,
            Method::PATCH,
        ]),
        prop::sample::select(vec![
            "/api/jobs",
            "/v1/sessions",
            "/v1/sessions/renew",
            "/v1/sessionsX",
            "/desk/",
            "/",
            "//v1/sessions",
        ]),
        prop::collection::vec((any::<bool>(), token_pick()), 0..3),
        prop::option::of((
            token_pick(),
            prop::option::of(csrf.clone()),
            prop::sample::select(vec!["; ", ";", " ; "]),
        )),
        prop::option::weighted(0.1, token_pick()),
        prop::option::of(prop_oneof![
            Just(ISSUER.as_bytes().to_vec()),
            Just(OTHER_ENDPOINT.as_bytes().to_vec()),
            Just(b"https://evil.example".to_vec()),
            Just(b"https://127.0.0.3:8443/".to_vec()),
            Just(b"HTTPS://127.0.0.3:8443".to_vec()),
            Just(b"null".to_vec()),
            prop::collection::vec(any::<u8>(), 0..30),
        ]),
        prop::option::of(prop::sample::select(vec![
            "same-origin",
            "cross-site",
            "none",
        ])),
        prop::option::of(csrf),
        any::<bool>(),
        prop::collection::vec(
            (
                prop::sample::select(vec!["authorization", "cookie", "origin", CSRF_HEADER]),
                prop::collection::vec(any::<u8>(), 0..40),
            ),
            0..2,
        ),
    )
        .prop_map(
            |(
                method,
                path,
                bearer,
                cookie,
                second_cookie,
                origin,
                sec_fetch_site,
                csrf_header,
                preflight,
                raw,
            )| {
                EdgeInput {
                    method,
                    path,
                    bearer,
                    cookie,
                    second_cookie,
                    origin,
                    sec_fetch_site,
                    csrf_header,
                    preflight,
                    raw,
                }
            },
        )
}

fn token_text(s: &Sessions, pick: &TokenPick) -> String {
    match pick {
        TokenPick::Minted(i) => s.tokens[*i].clone(),
        TokenPick::Edited(i, e) => {
            String::from_utf8_lossy(&apply(s.tokens[*i].as_bytes(), e)).into_owned()
        }
        TokenPick::Foreign => s.foreign.clone(),
        TokenPick::Text(t) => t.clone(),
    }
}

fn edge_headers(s: &Sessions, input: &EdgeInput) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut add = |name: &str, bytes: &[u8]| {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(bytes),
        ) {
            h.append(n, v);
        }
    };
    for (scheme, pick) in &input.bearer {
        let prefix = if *scheme { "Bearer " } else { "bearer " };
        add(
            "authorization",
            format!("{prefix}{}", token_text(s, pick)).as_bytes(),
        );
    }
    if let Some((pick, csrf, sep)) = &input.cookie {
        let mut text = format!("{SESSION_COOKIE}={}", token_text(s, pick));
        if let Some(c) = csrf {
            text = format!("theme=dark{sep}{CSRF_COOKIE}={c}{sep}{text}");
        }
        add("cookie", text.as_bytes());
    }
    if let Some(pick) = &input.second_cookie {
        add(
            "cookie",
            format!("{SESSION_COOKIE}={}", token_text(s, pick)).as_bytes(),
        );
    }
    if let Some(o) = &input.origin {
        add("origin", o);
    }
    if let Some(f) = input.sec_fetch_site {
        add("sec-fetch-site", f.as_bytes());
    }
    if let Some(c) = &input.csrf_header {
        add(CSRF_HEADER, c.as_bytes());
    }
    if input.preflight {
        add("access-control-request-method", b"POST");
    }
    for (name, bytes) in &input.raw {
        add(name, bytes);
    }
    h
}

fn known_refusal(e: &Refusal) -> Result<(), TestCaseError> {
    match e {
        Refusal::SessionMissing
        | Refusal::Revoked
        | Refusal::Handoff
        | Refusal::WrongCell { .. }
        | Refusal::UnknownContractor
        | Refusal::ViewBehind
        | Refusal::LeaseLapsed
        | Refusal::RevocationsStale
        | Refusal::RateLimited { .. }
        | Refusal::CsrfProof(_) => {}
        Refusal::Token(t) => match t {
            TokenError::TooLarge { .. }
            | TokenError::Malformed
            | TokenError::BadHeader
            | TokenError::BadAlgorithm
            | TokenError::BadType { .. }
            | TokenError::BadKid
            | TokenError::UnknownKid(_)
            | TokenError::BadSignature
            | TokenError::BadClaims(_)
            | TokenError::WrongIssuer
            | TokenError::WrongAudience
            | TokenError::Expired
            | TokenError::NotYetValid
            | TokenError::LifetimeTooLong => {}
            other => return Err(TestCaseError::fail(format!("token error {other:?}"))),
        },
        other => return Err(TestCaseError::fail(format!("refusal {other:?}"))),
    }
    // Every refusal is a typed 4xx or a 503, never a 500.
    let status = rescue(e).status().as_u16();
    prop_assert!(
        (400..500).contains(&status) || status == 503,
        "{e:?} → {status}"
    );
    Ok(())
}

#[test]
fn prop_edge_credentials() {
    let mut settings = settings();
    // Every case reuses the same subjects: the per-subject limit and the write lease (real
    // time) are not what this property is about.
    settings.serving.rate_per_subject_per_s = 1_000_000;
    settings.serving.burst_per_subject = 1_000_000;
    settings.serving.write_lease_ms = 0;
    let (edge, _seen, _clock) = edge_with(settings, None);
    let held = edge.current().expect("the fixture edge holds a state");
    let s = sessions();
    props_support::run("edge_credentials", edge_input(), |input| {
        let headers = edge_headers(&s, &input);
        let access = Access::of_method(input.method.as_str());
        let ctx = cellbind_cell_endpoint::ProofContext {
            method: input.method.as_str(),
            path: "/api/routes/today",
            connection: None,
        };
        match edge.validate(&headers, access, &ctx) {
            Validation::Decided(Ok(v)) => {
                // Only a session minted with the cell's key, unchanged, is accepted.
                prop_assert!(s.claims.contains(&v.claims), "accepted {:?}", v.claims);
            }
            Validation::Decided(Err(e)) => known_refusal(&e.refusal)?,
            // A key this cell does not hold: refused with it unless a refetch brings it.
            Validation::AfterRefetch(wait) => {
                known_refusal(&Refusal::Token(TokenError::UnknownKid(wait.kid().clone())))?
            }
        }
        let verdict = decide(
            &input.method,
            input.path,
            &headers,
            ISSUER,
            Some(held.as_ref()),
        );
        let origin = headers.get("origin");
        match verdict {
            Verdict::Preflight(allowed) => {
                prop_assert_eq!(&input.method, &Method::OPTIONS);
                prop_assert_eq!(Some(&allowed), origin);
            }
            Verdict::Refuse(_) => prop_assert!(origin.is_some(), "refused without an Origin"),
            Verdict::Pass {
                cors: Some(allowed),
            } => prop_assert_eq!(Some(&allowed), origin),
            Verdict::Pass { cors: None } => {}
        }
        let _ = uses_session_cookie(&headers);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// prop_config_loading

/// A complete, valid configuration (the deployment example's keys, every optional one
/// included that takes a plain value).
const VALID_CONFIG: &str = r#"cell_id = "cell-01"
instance_id = "edge-a"
public_url = "https://cell-01.example.com"
listen = "0.0.0.0:8443"
management_listen = "127.0.0.1:9101"
tls_cert = "tls/cell-endpoint.pem"
tls_key = "tls/cell-endpoint.key"
ca_cert = "tls/ca.pem"
auth_service_url = ["https://auth-a.cell-01.internal:8445", "https://auth-b.cell-01.internal:8445"]
feed_url = "https://auth-a.cell-01.internal:8446"
app_url = "https://app.cell-01.internal:8447"
feed_token_file = "secrets/feed.token"
edge_token_file = "secrets/edge.token"
app_token_file = "secrets/app.token"
state_dir = "state"
write_lease_ms = 30000
session_lifetime_s = 2592000
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]
log_format = "json""#;

#[test]
fn prop_config_loading() {
    let dir = tempfile::tempdir_in(props_support::scratch_base()).unwrap();
    let path = dir.path().join("cell-endpoint.toml");
    props_support::run("config_loading", toml_input(), |input| {
        let text = toml_text(VALID_CONFIG, &input);
        std::fs::write(&path, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded = Config::load(&path);
        props_support::check_config_verdict(VALID_CONFIG, &input, &loaded, |e| {
            matches!(e, EdgeError::Config(_))
        })?;
        if let (TomlInput::Valid, Ok(c)) = (&input, &loaded) {
            // What the server derives from it next must hold too.
            prop_assert!(c.settings().is_ok());
        }
        if let Ok(c) = &loaded {
            // The settings step refuses a bad proxy entry with a typed error.
            match c.settings() {
                Ok(_) | Err(EdgeError::Config(_)) => {}
                Err(e) => prop_assert!(false, "settings: {e:?}"),
            }
        }
        Ok(())
    });
}
