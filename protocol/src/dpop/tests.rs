#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

const NOW: UnixSeconds = 1_800_000_000;
const BASE: &str = "https://127.0.0.4:8443";

fn claims(nonce: Option<String>, token: Option<&str>) -> ProofClaims {
    ProofClaims {
        jti: "j-1".into(),
        htm: "GET".into(),
        htu: format!("{BASE}/api/routes/today"),
        iat: NOW,
        ath: token.map(token_hash),
        nonce,
    }
}

fn p256_proof(key: &SoftwareP256Key, c: &ProofClaims) -> String {
    let b = ProofBuilder::new(key.public());
    let input = b.signing_input(c).unwrap();
    let sig = key.sign(input.as_bytes()).unwrap();
    ProofBuilder::finish(input, &sig).unwrap()
}

fn ed_proof(key: &ed25519_dalek::SigningKey, c: &ProofClaims) -> String {
    use ed25519_dalek::Signer as _;
    let public = ProofKey::Ed25519(key.verifying_key().to_bytes());
    let b = ProofBuilder::new(&public);
    let input = b.signing_input(c).unwrap();
    let sig = key.sign(input.as_bytes()).to_bytes();
    ProofBuilder::finish(input, &sig).unwrap()
}

fn req<'a>(token: Option<&'a str>, htu: &'a str) -> ProofRequest<'a> {
    ProofRequest {
        method: "GET",
        htu,
        access_token: token,
    }
}

#[test]
fn an_es256_proof_round_trips_and_binds_to_its_thumbprint() {
    let key = SoftwareP256Key::generate().unwrap();
    let raw = p256_proof(&key, &claims(Some("n".into()), Some("tok")));
    let proof = parse(&raw).unwrap();
    proof.verify_signature().unwrap();
    assert_eq!(proof.jkt(), &key.public().thumbprint());
    let htu = format!("{BASE}/api/routes/today");
    proof.check_request(&req(Some("tok"), &htu), NOW).unwrap();
    assert_eq!(
        proof.check_request(&req(Some("other"), &htu), NOW),
        Err(ProofError::WrongToken)
    );
    assert_eq!(
        proof.check_request(&req(Some("tok"), &format!("{BASE}/api/x")), NOW),
        Err(ProofError::WrongUrl)
    );
    let post = ProofRequest {
        method: "POST",
        ..req(Some("tok"), &htu)
    };
    assert_eq!(
        proof.check_request(&post, NOW),
        Err(ProofError::WrongMethod)
    );
    assert_eq!(
        proof.check_request(&req(Some("tok"), &htu), NOW + IAT_WINDOW_S + 1),
        Err(ProofError::IatOutOfWindow)
    );
    // The stored key signs the same way after a restart.
    let again = SoftwareP256Key::from_pkcs8(key.pkcs8()).unwrap();
    assert_eq!(again.public(), key.public());
}

#[test]
fn an_eddsa_proof_verifies_and_a_flipped_bit_does_not() {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let raw = ed_proof(&key, &claims(None, None));
    let proof = parse(&raw).unwrap();
    proof.verify_signature().unwrap();
    assert_eq!(proof.key().alg(), "EdDSA");
    let mut bad = raw.clone().into_bytes();
    let i = bad.len() - 5;
    bad[i] = if bad[i] == b'A' { b'B' } else { b'A' };
    let bad = String::from_utf8(bad).unwrap();
    assert_eq!(
        parse(&bad).and_then(|p| p.verify_signature()),
        Err(ProofError::BadSignature)
    );
}

/// RFC 7638 §3.1's example (an RSA key) is not ours; RFC 8037 Appendix A.3 gives the Ed25519
/// thumbprint of its example key.
#[test]
fn the_thumbprint_is_rfc_8037s() {
    let x = URL_SAFE_NO_PAD
        .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
        .unwrap();
    let key = ProofKey::Ed25519(x.try_into().unwrap());
    assert_eq!(
        key.thumbprint().as_str(),
        "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
    );
}

fn forge(header: &str, payload: &str) -> String {
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode([0u8; 64])
    )
}

#[test]
fn hostile_headers_are_refused_with_their_reason() {
    let key = SoftwareP256Key::generate().unwrap();
    let jwk = key.public().canonical_jwk();
    let payload = r#"{"jti":"a","htm":"GET","htu":"https://x/","iat":1}"#;
    let cases = [
        (
            r#"{"typ":"dpop+jwt","alg":"none","jwk":JWK}"#,
            ProofError::BadAlgorithm,
        ),
        (
            r#"{"typ":"dpop+jwt","alg":"HS256","jwk":JWK}"#,
            ProofError::BadAlgorithm,
        ),
        (
            r#"{"typ":"dpop+jwt","alg":"EdDSA","jwk":JWK}"#,
            ProofError::BadAlgorithm,
        ),
        (
            r#"{"typ":"JWT","alg":"ES256","jwk":JWK}"#,
            ProofError::BadType,
        ),
        (r#"{"typ":"dpop+jwt","alg":"ES256"}"#, ProofError::BadHeader),
        (
            r#"{"typ":"dpop+jwt","alg":"ES256","jwk":JWK,"kid":"k"}"#,
            ProofError::BadHeader,
        ),
        (
            r#"{"typ":"dpop+jwt","typ":"dpop+jwt","alg":"ES256","jwk":JWK}"#,
            ProofError::BadHeader,
        ),
        (r#"["dpop+jwt","ES256",JWK]"#, ProofError::BadHeader),
    ];
    for (h, want) in cases {
        let h = h.replace("JWK", &jwk);
        assert_eq!(parse(&forge(&h, payload)).err(), Some(want), "{h}");
    }
    let private = jwk.replace(r#""kty""#, r#""d":"AAAA","kty""#);
    let h = format!(r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{private}}}"#);
    assert_eq!(
        parse(&forge(&h, payload)).err(),
        Some(ProofError::PrivateKey)
    );
    let sym = r#"{"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"oct","k":"AAAA"}}"#;
    assert!(matches!(
        parse(&forge(sym, payload)),
        Err(ProofError::BadKey(_))
    ));
    // A small-order Ed25519 key (the identity point).
    let mut id = [0u8; 32];
    id[0] = 1;
    let h = format!(
        r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{{"kty":"OKP","crv":"Ed25519","x":"{}"}}}}"#,
        URL_SAFE_NO_PAD.encode(id)
    );
    assert!(matches!(
        parse(&forge(&h, payload)),
        Err(ProofError::BadKey(_))
    ));
}

#[test]
fn malformed_proofs_are_refused_before_anything_is_decoded() {
    assert_eq!(parse("").err(), Some(ProofError::Malformed));
    assert_eq!(parse("a.b").err(), Some(ProofError::Malformed));
    assert_eq!(parse("a.b.c.d").err(), Some(ProofError::Malformed));
    assert_eq!(parse("a+.b.c").err(), Some(ProofError::Malformed));
    assert_eq!(
        parse(&"a".repeat(MAX_PROOF_BYTES + 1)).err(),
        Some(ProofError::TooLarge)
    );
    // Non-canonical base64url (trailing bits set).
    assert_eq!(parse("eyJ9.eyJ9.AB").err(), Some(ProofError::Malformed));
}

#[test]
fn nonces_are_per_instance_and_expire_after_the_next_step() {
    let a = Noncer::new(&[1; 32], "edge-a", NONCE_STEP_S);
    let b = Noncer::new(&[1; 32], "edge-b", NONCE_STEP_S);
    let n = a.issue(NOW);
    assert_eq!(a.check(Some(&n), NOW), Ok(a.step(NOW)));
    assert_eq!(a.check(Some(&n), NOW + NONCE_STEP_S), Ok(a.step(NOW)));
    assert_eq!(
        a.check(Some(&n), NOW + 2 * NONCE_STEP_S + 1),
        Err(ProofError::NonceStale)
    );
    assert_eq!(b.check(Some(&n), NOW), Err(ProofError::NonceUnknown));
    let other_key = Noncer::new(&[2; 32], "edge-a", NONCE_STEP_S);
    assert_eq!(
        other_key.check(Some(&n), NOW),
        Err(ProofError::NonceUnknown)
    );
    assert_eq!(a.check(None, NOW), Err(ProofError::NonceMissing));
    assert_eq!(a.check(Some("x"), NOW), Err(ProofError::NonceUnknown));
    // A future step (forged or a clock that went back) is not accepted.
    let future = a.nonce_of(a.step(NOW) + 5);
    assert_eq!(a.check(Some(&future), NOW), Err(ProofError::NonceStale));
}

#[test]
fn der_signatures_are_converted_to_the_jws_form() {
    // r = 1, s = 0x80 00..00 (needs a leading zero in DER).
    let mut der = vec![0x30, 0x00, 0x02, 0x01, 0x01, 0x02, 0x21, 0x00, 0x80];
    der.extend_from_slice(&[0u8; 31]);
    der[1] = (der.len() - 2) as u8;
    let fixed = es256_der_to_fixed(&der).unwrap();
    assert_eq!(fixed[31], 1);
    assert_eq!(fixed[32], 0x80);
    assert!(es256_der_to_fixed(&[0x30, 0x01, 0x02]).is_err());
    assert!(es256_der_to_fixed(&[]).is_err());
}

#[test]
fn htu_ignores_query_and_host_case_but_not_path_case() {
    assert!(same_htu(
        "HTTPS://Cell.example/api/x?q=1",
        "https://cell.example/api/x"
    ));
    assert!(!same_htu(
        "https://cell.example/API/x",
        "https://cell.example/api/x"
    ));
    assert!(!same_htu(
        "https://other.example/api/x",
        "https://cell.example/api/x"
    ));
    assert_eq!(
        htu("https://c:8443/", "/v1/sessions?x=1"),
        "https://c:8443/v1/sessions"
    );
}

#[test]
fn every_refusal_has_a_dpop_code() {
    for e in [
        ProofError::Missing,
        ProofError::Replayed,
        ProofError::KeyMismatch,
        ProofError::NonceStale,
        ProofError::NonceUnknown,
        ProofError::BadSignature,
    ] {
        assert!(e.code().as_str().starts_with("DPOP_"), "{e:?}");
        assert_eq!(e.code().status(), 401);
    }
    assert!(ProofError::NonceStale.wants_nonce());
    assert!(!ProofError::Replayed.wants_nonce());
}
