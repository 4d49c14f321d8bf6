//! Property tests of the protocol's parsers that face the network: the token verifier, the
//! signed placement map and the credential (bearer/cookie) extractor. Inputs mix mutations of
//! valid values (flipped bytes, truncations, swapped segments, re-signed edits: wrong
//! alg/typ/kid/aud, huge numbers, unicode, duplicate keys) with arbitrary bytes. Every result is
//! the expected success or one of the parser's typed errors, no case panics or hangs, and a
//! change to what a signature covers is always refused. `props_support` says how many cases run
//! and what is printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod props_support;

use cellbind_protocol as protocol;

use props_support::{ByteEdit, apply, byte_edit, hostile_json};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use protocol::http::{
    CSRF_COOKIE, CSRF_HEADER, CredentialError, CsrfError, Presented, SESSION_COOKIE, Source,
};
use protocol::ids::{MAX_TOKEN_COOKIE_BYTES, MAX_TOKEN_HEADER_BYTES};
use protocol::jwks::KeySet;
use protocol::map::{CellEntry, MAP_SCHEMA, MapError, PlacementMap, SignedMap, SpkiPin, TlsPins};
use protocol::token::{
    DEFAULT_SESSION_LIFETIME_S, Expectations, LEEWAY_S, SESSION_TYP, SessionClaims, SigningKey,
    TICKET_MAX_LIFETIME_S, TICKET_TYP, TicketClaims, TokenError, Verified,
};
use protocol::{CellId, ClientKind, ContractorId, Generation, Kid, SessionId};
use serde_json::{Value, json};

/// The verifier's "now" in every case.
const NOW: u64 = 1_790_000_000;
const ISSUER: &str = "https://127.0.0.3:8443";
const CELL: &str = "cell-03";
const OTHER_CELL: &str = "cell-04";

/// A typed-error check: a variant outside the enum's known ones fails the case (the enums are
/// `non_exhaustive`, so a new variant must be added here on purpose).
fn known_token_error(e: &TokenError) -> Result<(), TestCaseError> {
    match e {
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
        | TokenError::LifetimeTooLong => {
            // every refusal maps to a public code, never Internal
            prop_assert_ne!(e.code(), protocol::ErrorCode::Internal);
            Ok(())
        }
        other => Err(TestCaseError::fail(format!(
            "unexpected token error {other:?}"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// prop_token_verify

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Session,
    Ticket,
}

/// Who signs a re-signed token.
#[derive(Debug, Clone, Copy)]
enum Signer {
    /// The key the key set holds under `k1`.
    Right,
    /// Another key that claims to be `k1`.
    Imposter,
}

#[derive(Debug, Clone)]
enum HeaderEdit {
    None,
    Alg(String),
    Typ(String),
    Kid(String),
    Extra(String, Value),
    DuplicateKid,
    Reorder,
    NotObject(Value),
    /// The same members as a JSON array (`["EdDSA", typ, kid]`).
    AsArray,
}

#[derive(Debug, Clone)]
enum ClaimsEdit {
    None,
    Set(&'static str, Value),
    Remove(&'static str),
    Unknown(String),
    Duplicate(&'static str),
    NotObject(Value),
    /// The same claims as a JSON array, in field order.
    AsArray,
}

#[derive(Debug, Clone)]
enum TokenInput {
    Valid(Kind),
    Bytes(Kind, Vec<ByteEdit>),
    Segments(Kind, Vec<usize>),
    /// A segment taken from the other kind's token.
    Spliced(Kind, usize),
    Resigned(Kind, HeaderEdit, ClaimsEdit, Signer),
    Arbitrary(String),
}

const SESSION_FIELDS: [&str; 12] = [
    "iss",
    "aud",
    "sub",
    "ctr",
    "cell",
    "gen",
    "iat",
    "nbf",
    "exp",
    "auth_time",
    "jti",
    "cli",
];
const TICKET_FIELDS: [&str; 15] = [
    "iss",
    "aud",
    "src",
    "sub",
    "ctr",
    "gen",
    "new_gen",
    "sid",
    "sexp",
    "auth_time",
    "cli",
    "iat",
    "nbf",
    "exp",
    "jti",
];

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Session), Just(Kind::Ticket)]
}

fn header_edit() -> impl Strategy<Value = HeaderEdit> {
    let words = prop::sample::select(vec![
        "EdDSA",
        "eddsa",
        "EdDSA ",
        "none",
        "HS256",
        "RS256",
        "ES256",
        "Ed25519",
        SESSION_TYP,
        TICKET_TYP,
        "JWT",
        "k1",
        "k2",
        "k3",
        "../k1",
        "k1\u{0}",
        "",
    ]);
    prop_oneof![
        3 => Just(HeaderEdit::None),
        1 => words.clone().prop_map(|w| HeaderEdit::Alg(w.into())),
        1 => words.clone().prop_map(|w| HeaderEdit::Typ(w.into())),
        1 => prop_oneof![words.prop_map(String::from), ".{0,70}"].prop_map(HeaderEdit::Kid),
        1 => (prop::sample::select(vec!["crit", "cty", "jwk", "jku", "x5u", "x5c", "b64", "zip"]), hostile_json())
            .prop_map(|(k, v)| HeaderEdit::Extra(k.into(), v)),
        1 => Just(HeaderEdit::DuplicateKid),
        1 => Just(HeaderEdit::Reorder),
        1 => Just(HeaderEdit::AsArray),
        1 => hostile_json().prop_map(HeaderEdit::NotObject),
    ]
}

fn claims_edit() -> impl Strategy<Value = ClaimsEdit> {
    let field = prop::sample::select(TICKET_FIELDS.to_vec());
    prop_oneof![
        2 => Just(ClaimsEdit::None),
        2 => (field.clone(), prop_oneof![hostile_json(), claim_value()]).prop_map(|(f, v)| ClaimsEdit::Set(f, v)),
        1 => field.clone().prop_map(ClaimsEdit::Remove),
        1 => "[a-z_]{1,8}".prop_map(ClaimsEdit::Unknown),
        1 => field.prop_map(ClaimsEdit::Duplicate),
        1 => hostile_json().prop_map(ClaimsEdit::NotObject),
        1 => Just(ClaimsEdit::AsArray),
    ]
}

/// Plausible claim values, so that re-signed tokens reach the claim checks (times near now,
/// the other cell, other issuers).
fn claim_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0..=2 * DEFAULT_SESSION_LIFETIME_S)
            .prop_map(|d| json!(NOW - DEFAULT_SESSION_LIFETIME_S + d)),
        (0..=600u64).prop_map(|d| json!(NOW - 300 + d)),
        prop::sample::select(vec![
            json!(CELL),
            json!(OTHER_CELL),
            json!(ISSUER),
            json!("https://127.0.0.4:8443"),
            json!("field"),
            json!("desk"),
            json!("admin"),
            json!(1),
            json!(2),
        ]),
    ]
}

fn token_input() -> impl Strategy<Value = TokenInput> {
    prop_oneof![
        1 => kind().prop_map(TokenInput::Valid),
        6 => (kind(), prop::collection::vec(byte_edit(), 1..4)).prop_map(|(k, e)| TokenInput::Bytes(k, e)),
        1 => (kind(), prop::collection::vec(0..4usize, 0..5)).prop_map(|(k, s)| TokenInput::Segments(k, s)),
        1 => (kind(), 0..3usize).prop_map(|(k, i)| TokenInput::Spliced(k, i)),
        8 => (kind(), header_edit(), claims_edit(), prop_oneof![4 => Just(Signer::Right), 1 => Just(Signer::Imposter)])
            .prop_map(|(k, h, c, s)| TokenInput::Resigned(k, h, c, s)),
        2 => prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            "[A-Za-z0-9_.=+/-]{0,300}",
        ].prop_map(TokenInput::Arbitrary),
    ]
}

struct TokenFixture {
    right: SigningKey,
    imposter: SigningKey,
    keys: KeySet,
    session: (SessionClaims, String),
    ticket: (TicketClaims, String),
    cell: CellId,
}

fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    match s.parse() {
        Ok(v) => v,
        Err(e) => panic!("fixture id {s}: {e:?}"),
    }
}

impl TokenFixture {
    fn new() -> Self {
        let key = |kid: &str, seed: u8| match SigningKey::from_seed(id(kid), &[seed; 32]) {
            Ok(k) => k,
            Err(e) => panic!("fixture key: {e}"),
        };
        let right = key("k1", 1);
        let imposter = key("k1", 2);
        let second = key("k2", 3);
        let keys = KeySet::new(
            [
                (right.kid().clone(), right.public_key()),
                (second.kid().clone(), second.public_key()),
            ]
            .into(),
        );
        let session = SessionClaims {
            iss: ISSUER.into(),
            aud: id(CELL),
            sub: id("t-40711-1"),
            ctr: id("c-40711"),
            cell: id(CELL),
            generation: Generation(3),
            iat: NOW - 100,
            nbf: NOW - 100,
            exp: NOW - 100 + DEFAULT_SESSION_LIFETIME_S,
            auth_time: NOW - 1000,
            jti: SessionId::from_random([1; 16]),
            cli: ClientKind::Field,
            cnf: None,
        };
        let ticket = TicketClaims {
            iss: "https://127.0.0.4:8443".into(),
            aud: id(CELL),
            src: id(OTHER_CELL),
            sub: id("t-40711-1"),
            ctr: id("c-40711"),
            generation: Generation(3),
            new_gen: Generation(4),
            sid: SessionId::from_random([2; 16]),
            sexp: NOW + 1000,
            auth_time: NOW - 1000,
            cli: ClientKind::Desk,
            iat: NOW - 10,
            nbf: NOW - 10,
            exp: NOW + 200,
            jti: SessionId::from_random([3; 16]),
            jkt: None,
        };
        let mint = |t: Result<protocol::SessionToken, TokenError>| match t {
            Ok(t) => t.expose().to_owned(),
            Err(e) => panic!("fixture mint: {e}"),
        };
        let session_token = mint(right.mint(&session));
        let ticket_token = mint(right.mint(&ticket));
        Self {
            right,
            imposter,
            keys,
            session: (session, session_token),
            ticket: (ticket, ticket_token),
            cell: id(CELL),
        }
    }

    fn token(&self, kind: Kind) -> &str {
        match kind {
            Kind::Session => &self.session.1,
            Kind::Ticket => &self.ticket.1,
        }
    }

    fn claims_json(&self, kind: Kind) -> Value {
        let v = match kind {
            Kind::Session => serde_json::to_value(&self.session.0),
            Kind::Ticket => serde_json::to_value(&self.ticket.0),
        };
        v.unwrap_or(Value::Null)
    }

    fn session_expect(&self) -> Expectations<'_> {
        Expectations {
            issuer: ISSUER,
            audience: &self.cell,
            max_lifetime_s: DEFAULT_SESSION_LIFETIME_S,
            leeway_s: LEEWAY_S,
        }
    }

    fn ticket_expect(&self) -> Expectations<'_> {
        Expectations {
            issuer: "https://127.0.0.4:8443",
            audience: &self.cell,
            max_lifetime_s: TICKET_MAX_LIFETIME_S,
            leeway_s: LEEWAY_S,
        }
    }
}

/// A JSON object's text with `extra` members written first (so duplicates stay in the text).
fn object_text(members: &[(String, Value)]) -> String {
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The claims' values in the order of the struct's fields (how serde reads a sequence).
fn claims_in_field_order(kind: Kind, claims: Vec<(String, Value)>) -> Vec<Value> {
    let fields: &[&str] = match kind {
        Kind::Session => &SESSION_FIELDS,
        Kind::Ticket => &TICKET_FIELDS,
    };
    fields
        .iter()
        .filter_map(|f| claims.iter().find(|(n, _)| n == f).map(|(_, v)| v.clone()))
        .collect()
}

fn resign(f: &TokenFixture, kind: Kind, h: &HeaderEdit, c: &ClaimsEdit, signer: Signer) -> String {
    let typ = match kind {
        Kind::Session => SESSION_TYP,
        Kind::Ticket => TICKET_TYP,
    };
    let mut header: Vec<(String, Value)> = vec![
        ("alg".into(), json!("EdDSA")),
        ("typ".into(), json!(typ)),
        ("kid".into(), json!("k1")),
    ];
    let header_text = match h {
        HeaderEdit::None => object_text(&header),
        HeaderEdit::Alg(a) => {
            header[0].1 = json!(a);
            object_text(&header)
        }
        HeaderEdit::Typ(t) => {
            header[1].1 = json!(t);
            object_text(&header)
        }
        HeaderEdit::Kid(k) => {
            header[2].1 = json!(k);
            object_text(&header)
        }
        HeaderEdit::Extra(k, v) => {
            header.push((k.clone(), v.clone()));
            object_text(&header)
        }
        HeaderEdit::DuplicateKid => {
            header.push(("kid".into(), json!("k2")));
            object_text(&header)
        }
        HeaderEdit::Reorder => {
            header.reverse();
            object_text(&header)
        }
        HeaderEdit::NotObject(v) => v.to_string(),
        HeaderEdit::AsArray => {
            Value::Array(header.into_iter().map(|(_, v)| v).collect()).to_string()
        }
    };
    let mut claims: Vec<(String, Value)> = match f.claims_json(kind) {
        Value::Object(m) => m.into_iter().collect(),
        _ => Vec::new(),
    };
    let claims_text = match c {
        ClaimsEdit::None => object_text(&claims),
        ClaimsEdit::Set(k, v) => {
            match claims.iter_mut().find(|(n, _)| n == k) {
                Some(slot) => slot.1 = v.clone(),
                None => claims.push(((*k).into(), v.clone())),
            }
            object_text(&claims)
        }
        ClaimsEdit::Remove(k) => {
            claims.retain(|(n, _)| n != k);
            object_text(&claims)
        }
        ClaimsEdit::Unknown(k) => {
            claims.push((k.clone(), json!(1)));
            object_text(&claims)
        }
        ClaimsEdit::Duplicate(k) => {
            let dup = claims.iter().find(|(n, _)| n == k).cloned();
            claims.extend(dup);
            object_text(&claims)
        }
        ClaimsEdit::NotObject(v) => v.to_string(),
        ClaimsEdit::AsArray => Value::Array(claims_in_field_order(kind, claims)).to_string(),
    };
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header_text),
        URL_SAFE_NO_PAD.encode(claims_text)
    );
    let key = match signer {
        Signer::Right => &f.right,
        Signer::Imposter => &f.imposter,
    };
    let sig = key.sign_raw(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// Verifies `token` as both kinds from both sources and checks that every outcome is typed and
/// that an accepted token is exactly the minted one (the only ones this fixture signs validly
/// as-is) or a re-signed one whose claims pass the checks.
struct Outcome {
    session: Result<Verified<SessionClaims>, TokenError>,
    ticket: Result<Verified<TicketClaims>, TokenError>,
}

fn verify_all(f: &TokenFixture, token: &str, cap: usize) -> Result<Outcome, TestCaseError> {
    let session =
        protocol::token::verify::<SessionClaims>(token, &f.keys, &f.session_expect(), NOW, cap);
    let ticket =
        protocol::token::verify::<TicketClaims>(token, &f.keys, &f.ticket_expect(), NOW, cap);
    for e in [session.as_ref().err(), ticket.as_ref().err()]
        .into_iter()
        .flatten()
    {
        known_token_error(e)?;
    }
    // A token over the cap is refused before anything else.
    if token.len() > cap.min(MAX_TOKEN_HEADER_BYTES) {
        prop_assert!(
            matches!(session, Err(TokenError::TooLarge { .. })),
            "session: not TooLarge"
        );
        prop_assert!(
            matches!(ticket, Err(TokenError::TooLarge { .. })),
            "ticket: not TooLarge"
        );
    }
    // No token is both kinds.
    prop_assert!(session.is_err() || ticket.is_err());
    // Whatever was accepted satisfies the claim rules, checked here independently.
    if let Ok(v) = &session {
        let c = &v.claims;
        prop_assert_eq!(c.iss.as_str(), ISSUER);
        prop_assert_eq!(c.aud.as_str(), CELL);
        prop_assert_eq!(&c.cell, &c.aud);
        prop_assert!(c.exp >= c.iat && c.exp - c.iat <= DEFAULT_SESSION_LIFETIME_S);
        prop_assert!(c.iat <= NOW + LEEWAY_S && c.nbf <= NOW + LEEWAY_S);
        prop_assert!(NOW < c.exp + LEEWAY_S);
        prop_assert!(c.auth_time <= c.iat);
    }
    if let Ok(v) = &ticket {
        let c = &v.claims;
        prop_assert_eq!(c.aud.as_str(), CELL);
        prop_assert_ne!(&c.src, &c.aud);
        prop_assert!(c.new_gen > c.generation);
        prop_assert!(c.exp >= c.iat && c.exp - c.iat <= TICKET_MAX_LIFETIME_S);
        prop_assert!(NOW < c.exp + LEEWAY_S);
    }
    Ok(Outcome { session, ticket })
}

fn token_case(f: &TokenFixture, input: TokenInput, cookie: bool) -> Result<(), TestCaseError> {
    let cap = if cookie {
        Source::Cookie.cap()
    } else {
        Source::Bearer.cap()
    };
    match input {
        TokenInput::Valid(kind) => {
            let out = verify_all(f, f.token(kind), cap)?;
            match kind {
                Kind::Session => {
                    let v = out
                        .session
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(&v.claims, &f.session.0);
                    prop_assert_eq!(v.kid.as_str(), "k1");
                    prop_assert!(
                        matches!(out.ticket, Err(TokenError::BadType { .. })),
                        "not BadType"
                    );
                }
                Kind::Ticket => {
                    let v = out.ticket.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(&v.claims, &f.ticket.0);
                    prop_assert!(
                        matches!(out.session, Err(TokenError::BadType { .. })),
                        "not BadType"
                    );
                }
            }
        }
        TokenInput::Bytes(kind, edits) => {
            let original = f.token(kind);
            let bytes = apply(original.as_bytes(), &edits);
            let token = String::from_utf8_lossy(&bytes);
            let out = verify_all(f, &token, cap)?;
            if token != original {
                // any change to a signed token is refused
                prop_assert!(out.session.is_err() && out.ticket.is_err(), "{token}");
            }
        }
        TokenInput::Segments(kind, order) => {
            let original = f.token(kind);
            let parts: Vec<&str> = original.split('.').collect();
            let token = order
                .iter()
                .map(|&i| parts.get(i).copied().unwrap_or(""))
                .collect::<Vec<_>>()
                .join(".");
            let out = verify_all(f, &token, cap)?;
            if token != original {
                prop_assert!(out.session.is_err() && out.ticket.is_err(), "{token}");
            }
        }
        TokenInput::Spliced(kind, i) => {
            let other = match kind {
                Kind::Session => Kind::Ticket,
                Kind::Ticket => Kind::Session,
            };
            let mut parts: Vec<&str> = f.token(kind).split('.').collect();
            let donor: Vec<&str> = f.token(other).split('.').collect();
            if let (Some(slot), Some(d)) = (parts.get_mut(i), donor.get(i)) {
                *slot = d;
            }
            let token = parts.join(".");
            let out = verify_all(f, &token, cap)?;
            prop_assert!(out.session.is_err() && out.ticket.is_err(), "{token}");
        }
        TokenInput::Resigned(kind, h, c, signer) => {
            let token = resign(f, kind, &h, &c, signer);
            let out = verify_all(f, &token, cap)?;
            let (own, other) = match kind {
                Kind::Session => (out.session.map(|_| ()), out.ticket.map(|_| ())),
                Kind::Ticket => (out.ticket.map(|_| ()), out.session.map(|_| ())),
            };
            let header_changed = !matches!(h, HeaderEdit::None | HeaderEdit::Reorder);
            if !header_changed {
                prop_assert!(other.is_err());
            }
            let expected: Option<fn(&TokenError) -> bool> = match (&h, &c, signer) {
                _ if token.len() > cap => None,
                (HeaderEdit::Alg(a), ..) if a != "EdDSA" => {
                    Some(|e| matches!(e, TokenError::BadAlgorithm))
                }
                (
                    HeaderEdit::Extra(..)
                    | HeaderEdit::DuplicateKid
                    | HeaderEdit::NotObject(_)
                    | HeaderEdit::AsArray,
                    ..,
                ) => Some(|e| matches!(e, TokenError::BadHeader)),
                (HeaderEdit::Typ(t), ..) if t != SESSION_TYP && t != TICKET_TYP => {
                    Some(|e| matches!(e, TokenError::BadType { .. }))
                }
                (HeaderEdit::Kid(k), ..) if Kid::new(k.as_str()).is_err() => {
                    Some(|e| matches!(e, TokenError::BadKid))
                }
                (HeaderEdit::Kid(k), ..) if k != "k1" && k != "k2" => {
                    Some(|e| matches!(e, TokenError::UnknownKid(_)))
                }
                (HeaderEdit::Kid(k), ..) if k == "k2" => {
                    Some(|e| matches!(e, TokenError::BadSignature))
                }
                (HeaderEdit::Typ(_), ..) => None,
                (_, _, Signer::Imposter) => Some(|e| matches!(e, TokenError::BadSignature)),
                (
                    _,
                    ClaimsEdit::Remove(_)
                    | ClaimsEdit::Unknown(_)
                    | ClaimsEdit::Duplicate(_)
                    | ClaimsEdit::NotObject(_)
                    | ClaimsEdit::AsArray,
                    _,
                ) => Some(|e| matches!(e, TokenError::BadClaims(_))),
                (_, ClaimsEdit::None, _) => Some(|_| false),
                _ => None,
            };
            if let Some(ok_error) = expected {
                match (&own, &c) {
                    // A removed or unknown member that the other kind's struct does not have
                    // is still refused; one it would have is refused all the same, because
                    // `typ` fixes the struct.
                    (Err(e), _) => prop_assert!(ok_error(e), "{h:?} {c:?}: {e:?}"),
                    (Ok(()), ClaimsEdit::None) => {}
                    (Ok(()), _) => {
                        // A member the other kind has, removed or marked unknown, may be one
                        // this kind never had.
                        let fields: &[&str] = match kind {
                            Kind::Session => &SESSION_FIELDS,
                            Kind::Ticket => &TICKET_FIELDS,
                        };
                        let named = match &c {
                            ClaimsEdit::Remove(n) | ClaimsEdit::Duplicate(n) => Some(*n),
                            _ => None,
                        };
                        prop_assert!(
                            named.is_some_and(|n| !fields.contains(&n)),
                            "{h:?} {c:?} accepted"
                        );
                    }
                }
            }
        }
        TokenInput::Arbitrary(s) => {
            let out = verify_all(f, &s, cap)?;
            prop_assert!(out.session.is_err() && out.ticket.is_err(), "{s}");
        }
    }
    Ok(())
}

#[test]
fn prop_token_verify() {
    let f = TokenFixture::new();
    props_support::run(
        "token_verify",
        (token_input(), any::<bool>()),
        |(input, cookie)| token_case(&f, input, cookie),
    );
}

// ---------------------------------------------------------------------------------------------
// prop_placement_map

#[derive(Debug, Clone)]
enum MapEdit {
    Version(u64),
    IssuedAt(u64),
    Schema(u32),
    Endpoint(usize, String),
    DropPins(usize),
    DuplicateCell(usize),
    CellId(usize, String),
    Bucket(usize, u16),
    Buckets(usize),
    NoCells,
    NoBuckets,
    Override(String, String),
}

#[derive(Debug, Clone)]
enum MapInput {
    Valid,
    Bytes(Vec<ByteEdit>),
    /// A member of the signed document replaced (not re-signed).
    Member(Vec<String>, Value),
    /// A member added (unknown or duplicate), as text.
    Added(usize, String, Value),
    Resigned(Vec<MapEdit>),
    Arbitrary(Vec<u8>),
}

fn map_edit() -> impl Strategy<Value = MapEdit> {
    prop_oneof![
        any::<u64>().prop_map(MapEdit::Version),
        any::<u64>().prop_map(MapEdit::IssuedAt),
        prop_oneof![Just(MAP_SCHEMA), any::<u32>()].prop_map(MapEdit::Schema),
        (
            0..4usize,
            prop_oneof![
                Just("https://127.0.0.9:8443".to_owned()),
                Just("http://127.0.0.9:8443".to_owned()),
                Just(format!("https://{}", "a".repeat(260))),
                ".{0,30}"
            ]
        )
            .prop_map(|(i, e)| MapEdit::Endpoint(i, e)),
        (0..4usize).prop_map(MapEdit::DropPins),
        (0..4usize).prop_map(MapEdit::DuplicateCell),
        (0..4usize, "[a-z0-9-]{1,12}").prop_map(|(i, s)| MapEdit::CellId(i, s)),
        (any::<usize>(), 0..6u16).prop_map(|(i, b)| MapEdit::Bucket(i, b)),
        prop_oneof![40 => 1..200usize, 1 => Just(65_536usize), 1 => Just(65_537usize)]
            .prop_map(MapEdit::Buckets),
        Just(MapEdit::NoCells),
        Just(MapEdit::NoBuckets),
        (
            "c-[0-9]{1,6}",
            prop_oneof![Just("cell-01".to_owned()), Just("cell-09".to_owned())]
        )
            .prop_map(|(c, t)| MapEdit::Override(c, t)),
    ]
}

fn map_input() -> impl Strategy<Value = MapInput> {
    let path = prop::sample::select(vec![
        vec!["signature"],
        vec!["map", "schema"],
        vec!["map", "version"],
        vec!["map", "issued_at"],
        vec!["map", "cells"],
        vec!["map", "buckets"],
        vec!["map", "overrides"],
        vec!["map", "cells", "0", "id"],
        vec!["map", "cells", "1", "endpoint"],
        vec!["map", "cells", "1", "tls_pins"],
        vec!["map", "cells", "2", "tls_pins", "current"],
        vec!["map", "cells", "1", "tls_pins", "next"],
        vec!["map", "buckets", "3"],
        vec!["map", "overrides", "c-40711"],
    ])
    .prop_map(|p| p.into_iter().map(String::from).collect::<Vec<_>>());
    prop_oneof![
        1 => Just(MapInput::Valid),
        6 => prop::collection::vec(byte_edit(), 1..4).prop_map(MapInput::Bytes),
        3 => (path, hostile_json()).prop_map(|(p, v)| MapInput::Member(p, v)),
        2 => (0..6usize, prop_oneof![
                prop::sample::select(vec!["version", "map", "signature", "schema", "cells", "id", "tls_pins", "next", "extra"]).prop_map(String::from),
                "[a-z_]{1,8}",
            ], hostile_json()).prop_map(|(at, k, v)| MapInput::Added(at, k, v)),
        4 => prop::collection::vec(map_edit(), 1..4).prop_map(MapInput::Resigned),
        2 => prop::collection::vec(any::<u8>(), 0..400).prop_map(MapInput::Arbitrary),
    ]
}

struct MapFixture {
    key: SigningKey,
    other: SigningKey,
    signed: SignedMap,
    bytes: Vec<u8>,
}

fn sample_map() -> PlacementMap {
    PlacementMap {
        schema: MAP_SCHEMA,
        version: 7,
        issued_at: NOW,
        cells: (1..=3u8)
            .map(|n| CellEntry {
                id: id(&format!("cell-0{n}")),
                endpoint: format!("https://127.0.0.{n}:8443"),
                tls_pins: Some(TlsPins {
                    current: SpkiPin::from_sha256([n; 32]),
                    next: (n == 2).then(|| SpkiPin::from_sha256([0x20 + n; 32])),
                }),
            })
            .collect(),
        buckets: vec![0, 1, 2, 0, 1, 2, 0, 1],
        overrides: [(id::<ContractorId>("c-40711"), id::<CellId>("cell-03"))].into(),
    }
}

impl MapFixture {
    fn new() -> Self {
        let key = |kid: &str, seed: u8| match SigningKey::from_seed(id(kid), &[seed; 32]) {
            Ok(k) => k,
            Err(e) => panic!("fixture key: {e}"),
        };
        let key_1 = key("cp-1", 9);
        let signed = match sample_map().sign(&key_1) {
            Ok(s) => s,
            Err(e) => panic!("fixture map: {e}"),
        };
        let bytes = signed.to_json().unwrap_or_default();
        Self {
            key: key_1,
            other: key("cp-2", 8),
            signed,
            bytes,
        }
    }
}

fn known_map_error(e: &MapError) -> Result<(), TestCaseError> {
    match e {
        MapError::TooLarge
        | MapError::Malformed(_)
        | MapError::BadSignature
        | MapError::Invalid(_)
        | MapError::NotNewer { .. } => Ok(()),
        other => Err(TestCaseError::fail(format!(
            "unexpected map error {other:?}"
        ))),
    }
}

fn edit_map(mut m: PlacementMap, edits: &[MapEdit]) -> PlacementMap {
    for e in edits {
        let n = m.cells.len();
        match e {
            MapEdit::Version(v) => m.version = *v,
            MapEdit::IssuedAt(t) => m.issued_at = *t,
            MapEdit::Schema(s) => m.schema = *s,
            MapEdit::Endpoint(i, s) if *i < n => m.cells[*i].endpoint = s.clone(),
            MapEdit::DropPins(i) if *i < n => m.cells[*i].tls_pins = None,
            MapEdit::DuplicateCell(i) if *i < n => {
                let c = m.cells[*i].clone();
                m.cells.push(c);
            }
            MapEdit::CellId(i, s) if *i < n => {
                if let Ok(c) = CellId::new(s.as_str()) {
                    m.cells[*i].id = c;
                }
            }
            MapEdit::Bucket(i, b) if !m.buckets.is_empty() => {
                let len = m.buckets.len();
                m.buckets[i % len] = *b;
            }
            MapEdit::Buckets(len) => m.buckets = (0..*len).map(|i| (i % 3) as u16).collect(),
            MapEdit::NoCells => m.cells.clear(),
            MapEdit::NoBuckets => m.buckets.clear(),
            MapEdit::Override(c, t) => {
                if let (Ok(c), Ok(t)) = (ContractorId::new(c.as_str()), CellId::new(t.as_str())) {
                    m.overrides.insert(c, t);
                }
            }
            _ => {}
        }
    }
    m
}

/// The signed-map document with a raw signature over whatever map it holds (validated or not).
fn sign_raw(map: &PlacementMap, key: &SigningKey) -> Vec<u8> {
    let mut msg = protocol::map::MAP_SIGNING_CONTEXT.to_vec();
    msg.extend(map.canonical_bytes().unwrap_or_default());
    let doc = SignedMap {
        map: map.clone(),
        signature: URL_SAFE_NO_PAD.encode(key.sign_raw(&msg)),
    };
    doc.to_json().unwrap_or_default()
}

fn set_path(v: &mut Value, path: &[String], new: Value) {
    let mut at = v;
    for p in path {
        at = match at {
            Value::Object(m) => m.entry(p.clone()).or_insert(Value::Null),
            Value::Array(a) => match p.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(x) => x,
                None => return,
            },
            _ => return,
        };
    }
    *at = new;
}

fn map_case(f: &MapFixture, input: MapInput, wrong_key: bool) -> Result<(), TestCaseError> {
    let key = if wrong_key {
        f.other.public_key()
    } else {
        f.key.public_key()
    };
    // What the document says, and the only map it may verify as (None: any valid one).
    let (bytes, signed_as): (Vec<u8>, Option<PlacementMap>) = match &input {
        MapInput::Valid => (f.bytes.clone(), Some(f.signed.map.clone())),
        MapInput::Bytes(edits) => (apply(&f.bytes, edits), Some(f.signed.map.clone())),
        MapInput::Member(path, v) => {
            let mut doc = serde_json::to_value(&f.signed).unwrap_or(Value::Null);
            set_path(&mut doc, path, v.clone());
            (doc.to_string().into_bytes(), Some(f.signed.map.clone()))
        }
        MapInput::Added(at, k, v) => {
            // After the n-th `{` of the document.
            let text = String::from_utf8_lossy(&f.bytes).into_owned();
            let pos = text
                .match_indices('{')
                .map(|(i, _)| i)
                .nth(*at)
                .unwrap_or(0);
            let member = format!("{}:{v},", Value::String(k.clone()));
            let mut out = text.clone();
            out.insert_str(pos + 1, &member);
            (out.into_bytes(), Some(f.signed.map.clone()))
        }
        MapInput::Resigned(edits) => {
            let m = edit_map(f.signed.map.clone(), edits);
            (sign_raw(&m, &f.key), Some(m))
        }
        MapInput::Arbitrary(b) => (b.clone(), None),
    };
    let result = SignedMap::verify_bytes(&bytes, &key);
    match &result {
        Err(e) => known_map_error(e)?,
        Ok(m) => {
            // Only the held key's signature over exactly this content is accepted.
            prop_assert!(!wrong_key, "accepted with another key");
            prop_assert!(m.map.validate().is_ok());
            match &signed_as {
                Some(expected) => prop_assert_eq!(&m.map, expected),
                None => prop_assert!(false, "arbitrary bytes verified"),
            }
            // What the SDK and the edge do with an accepted map never panics.
            for c in ["c-40711", "c-1", "c-999999"] {
                let c = id::<ContractorId>(c);
                prop_assert!(m.map.cell_for(&c).is_some());
            }
            prop_assert!(m.newer_than(Some(&f.signed)).is_ok() == (m.map.version > 7));
        }
    }
    // A re-signed map verifies exactly when it is valid, and is refused for its first fault.
    if let (MapInput::Resigned(_), Some(m), false) = (&input, &signed_as, wrong_key) {
        match (m.validate(), &result) {
            (Ok(()), Ok(_)) => {}
            (Err(want), Err(got)) => prop_assert_eq!(&want, got),
            (want, got) => prop_assert!(false, "validate {want:?} but verify {got:?}"),
        }
    }
    Ok(())
}

#[test]
fn prop_placement_map() {
    let f = MapFixture::new();
    props_support::run(
        "placement_map",
        (map_input(), prop::bool::weighted(0.1)),
        |(input, wrong_key)| map_case(&f, input, wrong_key),
    );
}

// ---------------------------------------------------------------------------------------------
// prop_cookie_credentials

/// The token the credential property's verifier accepts; everything else is "invalid".
const GOOD: &str = "good.token.value";

#[derive(Debug, Clone)]
enum Piece {
    Session(String),
    Csrf(String),
    Other(String, String),
    Raw(String),
}

fn cookie_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just(GOOD.to_owned()),
        2 => "[A-Za-z0-9._-]{0,40}",
        1 => Just(String::new()),
        1 => Just("x".repeat(MAX_TOKEN_COOKIE_BYTES + 1)),
        1 => Just("x".repeat(MAX_TOKEN_COOKIE_BYTES)),
        1 => ".{0,20}",
        1 => Just("a=b".to_owned()),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        3 => cookie_value().prop_map(Piece::Session),
        2 => cookie_value().prop_map(Piece::Csrf),
        2 => ("[a-zA-Z_-]{1,12}", "[a-z0-9]{0,8}").prop_map(|(n, v)| Piece::Other(n, v)),
        1 => prop::sample::select(vec![
            "__Host-cellbind_session",
            "__Host-cellbind_session ",
            " __Host-cellbind_session=x",
            "__host-cellbind_session=x",
            "__Host-cellbind_session==x",
            "__Host-cellbind_sessionx=y",
            "=",
            ";",
            "",
        ]).prop_map(|s| Piece::Raw(s.to_owned())),
    ]
}

#[derive(Debug, Clone)]
struct CredentialInput {
    method: Method,
    authorization: Vec<Vec<u8>>,
    cookies: Vec<(Vec<Piece>, String)>,
    raw_cookie: Option<Vec<u8>>,
    origin: Option<Vec<u8>>,
    sec_fetch_site: Option<&'static str>,
    csrf_header: Option<String>,
    set_cookies: Vec<Vec<u8>>,
}

fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            format!("Bearer {GOOD}"),
            "Bearer bad.token.value".to_owned(),
            "Bearer ".to_owned(),
            "Bearer  good.token.value".to_owned(),
            "bearer good.token.value".to_owned(),
            "Basic dXNlcjpwdw==".to_owned(),
            format!("Bearer {}", "x".repeat(MAX_TOKEN_HEADER_BYTES)),
            format!("Bearer {}", "x".repeat(MAX_TOKEN_HEADER_BYTES + 1)),
            "Bearer tok\u{e9}n".to_owned(),
        ]).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..60),
    ]
}

fn credential_input() -> impl Strategy<Value = CredentialInput> {
    (
        prop::sample::select(vec![
            Method::GET,
            Method::POST,
            Method::DELETE,
            Method::OPTIONS,
            Method::PUT,
            Method::HEAD,
        ]),
        prop::collection::vec(header_bytes(), 0..3),
        prop::collection::vec(
            (
                prop::collection::vec(piece(), 0..4),
                prop::sample::select(vec![";", "; ", " ;", ";;"]).prop_map(String::from),
            ),
            0..3,
        ),
        prop::option::weighted(0.1, prop::collection::vec(any::<u8>(), 0..80)),
        prop::option::of(prop_oneof![
            Just(b"https://127.0.0.3:8443".to_vec()),
            Just(b"https://evil.example".to_vec()),
            Just(b"null".to_vec()),
            prop::collection::vec(any::<u8>(), 0..30),
        ]),
        prop::option::of(prop::sample::select(vec![
            "same-origin",
            "cross-site",
            "same-site",
            "none",
        ])),
        prop::option::of(cookie_value()),
        prop::collection::vec(
            prop_oneof![
                cookie_value()
                    .prop_map(|v| format!("{SESSION_COOKIE}={v}; Secure; Max-Age=60").into_bytes()),
                any::<u64>().prop_map(|n| format!("{SESSION_COOKIE}=x; Max-Age={n}").into_bytes()),
                Just(format!("{SESSION_COOKIE}=; Max-Age=0").into_bytes()),
                Just(format!("{SESSION_COOKIE}=x; Max-Age=-1; Max-Age=5").into_bytes()),
                prop::collection::vec(any::<u8>(), 0..40),
            ],
            0..3,
        ),
    )
        .prop_map(
            |(
                method,
                authorization,
                cookies,
                raw_cookie,
                origin,
                sec_fetch_site,
                csrf_header,
                set_cookies,
            )| {
                CredentialInput {
                    method,
                    authorization,
                    cookies,
                    raw_cookie,
                    origin,
                    sec_fetch_site,
                    csrf_header,
                    set_cookies,
                }
            },
        )
}

fn piece_text(p: &Piece) -> String {
    match p {
        Piece::Session(v) => format!("{SESSION_COOKIE}={v}"),
        Piece::Csrf(v) => format!("{CSRF_COOKIE}={v}"),
        Piece::Other(n, v) => format!("{n}={v}"),
        Piece::Raw(s) => s.clone(),
    }
}

/// The headers of the case; a value `HeaderValue` refuses (control bytes) is left out, as the
/// HTTP layer would never hand it over.
fn build_headers(input: &CredentialInput) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut add = |name: &str, bytes: &[u8]| {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(bytes),
        ) {
            h.append(n, v);
        }
    };
    for a in &input.authorization {
        add("authorization", a);
    }
    for (pieces, sep) in &input.cookies {
        let text: Vec<String> = pieces.iter().map(piece_text).collect();
        add("cookie", text.join(sep).as_bytes());
    }
    if let Some(raw) = &input.raw_cookie {
        add("cookie", raw);
    }
    if let Some(o) = &input.origin {
        add("origin", o);
    }
    if let Some(s) = input.sec_fetch_site {
        add("sec-fetch-site", s.as_bytes());
    }
    if let Some(c) = &input.csrf_header {
        add(CSRF_HEADER, c.as_bytes());
    }
    for s in &input.set_cookies {
        add("set-cookie", s);
    }
    h
}

fn credential_case(input: CredentialInput) -> Result<(), TestCaseError> {
    let headers = build_headers(&input);
    let presented = Presented::from_headers(&headers);
    // The Authorization header: exactly one, `Bearer <visible ASCII>`, capped.
    let auths: Vec<&HeaderValue> = headers.get_all("authorization").iter().collect();
    match (auths.as_slice(), presented.authorization) {
        ([], None) => {}
        ([_, _, ..], Some(Err(CredentialError::TwoAuthorizationHeaders))) => {}
        ([v], Some(Ok(t))) => {
            let expected = format!("Bearer {t}");
            prop_assert_eq!(v.as_bytes(), expected.as_bytes());
            prop_assert!(!t.is_empty() && t.len() <= MAX_TOKEN_HEADER_BYTES);
        }
        (
            [v],
            Some(Err(
                CredentialError::NotBearer
                | CredentialError::Empty
                | CredentialError::NotText
                | CredentialError::TooLarge { .. },
            )),
        ) => {
            let ok = v
                .to_str()
                .ok()
                .and_then(|s| s.strip_prefix("Bearer "))
                .is_some_and(|t| !t.is_empty() && t.len() <= MAX_TOKEN_HEADER_BYTES);
            prop_assert!(!ok, "a well-formed bearer header was refused");
        }
        (a, got) => prop_assert!(false, "{} headers gave {got:?}", a.len()),
    }
    // The session cookie, against a plain reading of the Cookie headers.
    let cookie_headers: Vec<&HeaderValue> = headers.get_all("cookie").iter().collect();
    let unreadable = cookie_headers.iter().any(|v| v.to_str().is_err());
    let oversized = cookie_headers
        .iter()
        .any(|v| v.len() > MAX_TOKEN_HEADER_BYTES);
    let pairs: Vec<&str> = cookie_headers
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|t| t.split(';'))
        .filter_map(|p| {
            p.trim_start_matches(' ')
                .strip_prefix(SESSION_COOKIE)
                .and_then(|r| r.strip_prefix('='))
        })
        .collect();
    match presented.cookie {
        None => prop_assert!(pairs.is_empty()),
        Some(Ok(v)) => {
            prop_assert_eq!(pairs.as_slice(), &[v]);
            prop_assert!(!v.is_empty() && v.len() <= MAX_TOKEN_COOKIE_BYTES);
        }
        Some(Err(
            CredentialError::TwoSessionCookies
            | CredentialError::Empty
            | CredentialError::NotText
            | CredentialError::TooLarge { .. },
        )) => {}
        Some(Err(e)) => prop_assert!(false, "cookie error {e:?}"),
    }
    if pairs.len() >= 2 {
        prop_assert!(presented.cookie.is_some_and(|c| c.is_err()));
    }
    if let [v] = pairs.as_slice()
        && !v.is_empty()
        && v.len() <= MAX_TOKEN_COOKIE_BYTES
        && !unreadable
        && !oversized
    {
        prop_assert_eq!(presented.cookie, Some(Ok(*v)));
    }
    // The credential rule: a valid bearer wins, else the cookie, else the typed refusal.
    let resolved = presented.resolve(TokenError::BadClaims("missing".into()), |t, _| {
        if t == GOOD {
            Ok(())
        } else {
            Err(TokenError::BadSignature)
        }
    });
    let bearer_good = presented.authorization == Some(Ok(GOOD));
    let cookie_good = presented.cookie == Some(Ok(GOOD));
    match resolved {
        Ok(((), Source::Bearer)) => prop_assert!(bearer_good),
        Ok(((), Source::Cookie)) => prop_assert!(!bearer_good && cookie_good),
        Err(TokenError::BadClaims(m)) => {
            prop_assert_eq!(m.as_str(), "missing");
            prop_assert!(presented.authorization.is_none() && presented.cookie.is_none());
        }
        Err(e) => {
            known_token_error(&e)?;
            prop_assert!(!bearer_good && !cookie_good);
        }
    }
    // The CSRF proof: accepted only with an allowed origin (or same-origin fetch metadata) and
    // a header equal to the CSRF cookie.
    let allowed = |o: &str| o == "https://127.0.0.3:8443";
    match protocol::http::check_csrf_proof(&headers, allowed) {
        Ok(()) => {
            let origin = headers.get("origin").and_then(|v| v.to_str().ok());
            prop_assert!(
                origin.is_some_and(allowed)
                    || (origin.is_none()
                        && headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
                            == Some("same-origin"))
            );
            let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            let held = protocol::http::cookie(&headers, CSRF_COOKIE);
            prop_assert!(sent.is_some_and(|s| !s.is_empty()));
            prop_assert_eq!(held, Ok(sent));
        }
        Err(
            CsrfError::ForeignOrigin
            | CsrfError::NoOrigin
            | CsrfError::Missing
            | CsrfError::Mismatch,
        ) => {}
        Err(e) => prop_assert!(false, "csrf error {e:?}"),
    }
    // What else reads the same headers never panics, and agrees with the extractor.
    let _ = protocol::http::session_cookie_change(&headers);
    let _ = protocol::http::cookies_without_session(&headers);
    prop_assert_eq!(
        protocol::http::has_session_cookie(&headers),
        presented.cookie.is_some()
    );
    let _ = protocol::http::is_unsafe(&input.method);
    // A session cookie we would set reads back as the same token.
    if let Some(Ok(v)) = presented.cookie
        && let Some(req) = protocol::http::session_cookie_request(v)
    {
        let mut one = HeaderMap::new();
        one.append("cookie", req);
        prop_assert_eq!(protocol::http::cookie(&one, SESSION_COOKIE), Ok(Some(v)));
    }
    Ok(())
}

#[test]
fn prop_cookie_credentials() {
    props_support::run("cookie_credentials", credential_input(), credential_case);
}

// ---------------------------------------------------------------------------------------------
// prop_dpop_proof

/// A valid proof, then edited: its bytes, or its header/claims re-signed by the same key.
#[derive(Debug, Clone)]
enum ProofInput {
    Bytes(Vec<ByteEdit>),
    /// A member of the header (`jwk` members included, as `jwk.x`) or of the claims replaced,
    /// then signed by the proof's key.
    Resigned {
        header: bool,
        member: String,
        value: Value,
    },
    Arbitrary(String),
}

fn proof_input() -> impl Strategy<Value = ProofInput> {
    let member = prop::sample::select(vec![
        "typ", "alg", "jwk", "jwk.kty", "jwk.crv", "jwk.x", "jwk.y", "jwk.d", "kid", "jti", "htm",
        "htu", "iat", "ath", "nonce", "extra",
    ])
    .prop_map(String::from);
    prop_oneof![
        4 => prop::collection::vec(byte_edit(), 1..4).prop_map(ProofInput::Bytes),
        4 => (any::<bool>(), member, hostile_json())
            .prop_map(|(header, member, value)| ProofInput::Resigned { header, member, value }),
        1 => ".{0,600}".prop_map(ProofInput::Arbitrary),
    ]
}

/// Sets `path` (`a` or `a.b`) of `doc` to `value`.
fn set_member(doc: &mut Value, path: &str, value: Value) {
    let mut parts = path.splitn(2, '.');
    let first = parts.next().unwrap_or_default();
    match (parts.next(), doc.as_object_mut()) {
        (None, Some(o)) => {
            o.insert(first.to_owned(), value);
        }
        (Some(rest), Some(o)) => {
            if let Some(inner) = o.get_mut(first) {
                set_member(inner, rest, value);
            }
        }
        _ => {}
    }
}

#[test]
fn prop_dpop_proof() {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use protocol::dpop::{ProofBuilder, ProofClaims, ProofError, ProofRequest, SoftwareP256Key};
    const NOW: u64 = 1_800_000_000;
    const HTU: &str = "https://127.0.0.3:8443/api/routes/today";
    let key = SoftwareP256Key::generate().expect("a P-256 key");
    let claims = ProofClaims {
        jti: "j-1".into(),
        htm: "GET".into(),
        htu: HTU.into(),
        iat: NOW,
        ath: Some(protocol::dpop::token_hash("tok")),
        nonce: Some("n".into()),
    };
    let builder = ProofBuilder::new(key.public());
    let input = builder.signing_input(&claims).expect("claims serialise");
    let valid = ProofBuilder::finish(input.clone(), &key.sign(input.as_bytes()).expect("signs"))
        .expect("a proof");
    let (h, p) = input.split_once('.').expect("two segments");
    let decode = |s: &str| -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(s).expect("base64url")).expect("JSON")
    };
    let (header, payload) = (decode(h), decode(p));
    let request = ProofRequest {
        method: "GET",
        htu: HTU,
        access_token: Some("tok"),
    };
    props_support::run("dpop_proof", proof_input(), |input| {
        let raw = match &input {
            ProofInput::Bytes(edits) => {
                String::from_utf8_lossy(&apply(valid.as_bytes(), edits)).into_owned()
            }
            ProofInput::Resigned {
                header: in_header,
                member,
                value,
            } => {
                let (mut hd, mut pl) = (header.clone(), payload.clone());
                set_member(
                    if *in_header { &mut hd } else { &mut pl },
                    member,
                    value.clone(),
                );
                let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("JSON"));
                let input = format!("{}.{}", enc(&hd), enc(&pl));
                let sig = key.sign(input.as_bytes()).expect("signs");
                format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
            }
            ProofInput::Arbitrary(s) => s.clone(),
        };
        // Never a panic; every refusal has a DPoP code (or the replay-set's 429).
        let verdict = protocol::dpop::parse(&raw).and_then(|proof| {
            proof.verify_signature()?;
            proof.check_request(&request, NOW)?;
            Ok(proof)
        });
        match verdict {
            Ok(proof) => {
                // Accepted: by the one key, for this request, with every required claim.
                prop_assert_eq!(proof.jkt(), &key.public().thumbprint());
                prop_assert_eq!(proof.claims().htm.as_str(), "GET");
                if let ProofInput::Arbitrary(_) = input {
                    prop_assert!(false, "an arbitrary string verified: {raw}");
                }
            }
            Err(e) => {
                prop_assert!(
                    e.code().as_str().starts_with("DPOP_") && !matches!(e, ProofError::Signing(_)),
                    "{e:?}"
                );
            }
        }
        Ok(())
    });
}
