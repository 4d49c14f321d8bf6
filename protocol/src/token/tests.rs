use super::*;
use crate::time::UnixSeconds;

const NOW: UnixSeconds = 1_790_000_000;

fn key(kid: &str, seed: u8) -> SigningKey {
    SigningKey::from_seed(Kid::new(kid).unwrap(), &[seed; 32]).unwrap()
}

fn cell() -> CellId {
    CellId::new("cell-03").unwrap()
}

fn claims() -> SessionClaims {
    SessionClaims {
        iss: "https://127.0.0.3:8443".into(),
        aud: cell(),
        sub: SubjectId::new("t-40711-1").unwrap(),
        ctr: ContractorId::new("c-40711").unwrap(),
        cell: cell(),
        generation: Generation(1),
        iat: NOW,
        nbf: NOW,
        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
        auth_time: NOW,
        jti: SessionId::from_random([1; 16]),
        cli: ClientKind::Field,
        cnf: None,
    }
}

fn expect(c: &CellId) -> Expectations<'_> {
    Expectations {
        issuer: "https://127.0.0.3:8443",
        audience: c,
        max_lifetime_s: DEFAULT_SESSION_LIFETIME_S,
        leeway_s: LEEWAY_S,
    }
}

fn keyset(k: &SigningKey) -> KeySet {
    KeySet::new([(k.kid().clone(), k.public_key())].into())
}

#[test]
fn mint_then_verify_round_trip() {
    let k = key("k1", 1);
    let t = k.mint(&claims()).unwrap();
    let c = cell();
    let v: Verified<SessionClaims> = verify(
        t.expose(),
        &keyset(&k),
        &expect(&c),
        NOW,
        MAX_TOKEN_HEADER_BYTES,
    )
    .unwrap();
    assert_eq!(v.claims, claims());
    assert_eq!(v.kid.as_str(), "k1");
    // header is exactly alg, typ, kid
    let h = t.expose().split('.').next().unwrap();
    let hv: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).unwrap()).unwrap();
    assert_eq!(
        hv,
        serde_json::json!({"alg":"EdDSA","typ":"cellbind-session+jwt","kid":"k1"})
    );
}

#[test]
fn expiry_boundaries_use_sixty_second_leeway() {
    let k = key("k1", 1);
    let c = cell();
    let mut cl = claims();
    cl.iat = NOW - DEFAULT_SESSION_LIFETIME_S;
    cl.nbf = cl.iat;
    cl.auth_time = cl.iat;
    cl.exp = NOW;
    let t = k.mint(&cl).unwrap();
    let ks = keyset(&k);
    let run =
        |now| verify::<SessionClaims>(t.expose(), &ks, &expect(&c), now, MAX_TOKEN_HEADER_BYTES);
    assert!(run(NOW + 59).is_ok());
    assert_eq!(run(NOW + 61).unwrap_err(), TokenError::Expired);
}

#[test]
fn a_ticket_is_never_a_session() {
    let k = key("k1", 1);
    let t = k.mint(&claims()).unwrap();
    assert!(matches!(
        parse(t.expose(), TICKET_TYP, MAX_TOKEN_HEADER_BYTES),
        Err(TokenError::BadType { .. })
    ));
}

/// Found by the property test `prop_token_verify` (protocol/tests/props.rs): serde reads a
/// struct from a JSON array of its fields, so a token whose header was
/// `["EdDSA","cellbind-session+jwt","k1"]`, or whose claims were an array of the claim values
/// in field order, verified. Both must be objects (RFC 7515 §4, RFC 7519 §4; step 3 and 8).
#[test]
fn array_header_or_claims_are_refused() {
    let k = key("k1", 1);
    let c = cell();
    let craft = |header: &str, payload: &str| {
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(payload)
        );
        let sig = k.sign_raw(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    };
    let run = |t: &str| {
        verify::<SessionClaims>(t, &keyset(&k), &expect(&c), NOW, MAX_TOKEN_HEADER_BYTES)
            .map(|v| v.claims)
    };
    let object_header = r#"{"alg":"EdDSA","typ":"cellbind-session+jwt","kid":"k1"}"#;
    let array_header = r#"["EdDSA","cellbind-session+jwt","k1"]"#;
    let object_claims = serde_json::to_string(&claims()).unwrap();
    let c0 = claims();
    let array_claims = serde_json::json!([
        c0.iss,
        c0.aud,
        c0.sub,
        c0.ctr,
        c0.cell,
        c0.generation,
        c0.iat,
        c0.nbf,
        c0.exp,
        c0.auth_time,
        c0.jti,
        c0.cli
    ])
    .to_string();
    // What serde alone makes of them: the very header and claims.
    assert!(serde_json::from_str::<StrictHeader>(array_header).is_ok());
    assert_eq!(
        serde_json::from_str::<SessionClaims>(&array_claims).unwrap(),
        claims()
    );

    assert_eq!(run(&craft(object_header, &object_claims)), Ok(claims()));
    assert_eq!(
        run(&craft(array_header, &object_claims)),
        Err(TokenError::BadHeader)
    );
    assert!(
        matches!(
            run(&craft(object_header, &array_claims)),
            Err(TokenError::BadClaims(_))
        ),
        "array claims"
    );
}
