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
        r#gen: Generation(1),
        iat: NOW,
        nbf: NOW,
        exp: NOW + DEFAULT_SESSION_LIFETIME_S,
        auth_time: NOW,
        jti: SessionId::from_random([1; 16]),
        cli: ClientKind::Field,
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
