//! Known-answer tests for the Ed25519 verification every component relies on
//! (`cellbind_protocol::jwks::PublicKey::verify`, ed25519-dalek through jsonwebtoken's `rust_crypto`
//! backend): RFC 8037 A.4, all Wycheproof Ed25519 vectors, and the ed25519-speccheck row.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use cellbind_protocol::jwks::PublicKey;
use serde_json::Value;

fn load(rel: &str) -> Value {
    let path = format!("{}/../vectors/{rel}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn rfc8037_a4_ed25519_example_verifies() {
    let v = load("jose-cookbook/curve25519_jws.json");
    let key = PublicKey::from_b64(v["input"]["key"]["x"].as_str().unwrap()).unwrap();
    let input = v["signing"]["sig-input"].as_str().unwrap();
    let sig = URL_SAFE_NO_PAD
        .decode(v["signing"]["sig"].as_str().unwrap())
        .unwrap();
    assert!(key.verify(input.as_bytes(), &sig));
    // The compact form is the same signing input and signature.
    let compact = v["output"]["compact"].as_str().unwrap();
    assert_eq!(
        compact,
        format!("{input}.{}", v["signing"]["sig"].as_str().unwrap())
    );
    // One flipped bit in the message or the signature fails.
    let mut bad = input.as_bytes().to_vec();
    bad[0] ^= 1;
    assert!(!key.verify(&bad, &sig));
    let mut bad_sig = sig.clone();
    bad_sig[63] ^= 0x40;
    assert!(!key.verify(input.as_bytes(), &bad_sig));
    // The JWK's private d derives the same public key (RFC 8037 A.1/A.2).
    let d: [u8; 32] = URL_SAFE_NO_PAD
        .decode(v["input"]["key"]["d"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let signer = cellbind_protocol::token::SigningKey::from_seed(
        cellbind_protocol::Kid::new("rfc8037").unwrap(),
        &d,
    )
    .unwrap();
    assert_eq!(&signer.public_bytes(), key.as_bytes());
    assert_eq!(
        signer.sign_raw(input.as_bytes()).to_vec(),
        sig,
        "Ed25519 is deterministic"
    );
}

/// Wycheproof "invalid" vectors that `PublicKey::verify` accepts. Pinned: a change of backend
/// or of its strictness must show up here.
const WYCHEPROOF_INVALID_ACCEPTED: &[u64] = &[];

#[test]
fn wycheproof_ed25519_all_vectors_give_the_labelled_verdict() {
    let v = load("wycheproof/ed25519_test.json");
    let mut total = 0;
    let mut valid_ok = 0;
    let mut invalid_rejected = 0;
    let mut invalid_accepted = Vec::new();
    let mut valid_rejected = Vec::new();
    for group in v["testGroups"].as_array().unwrap() {
        let pk = hex(group["publicKey"]["pk"].as_str().unwrap());
        let key = PublicKey::from_bytes(&pk);
        for t in group["tests"].as_array().unwrap() {
            total += 1;
            let id = t["tcId"].as_u64().unwrap();
            let msg = hex(t["msg"].as_str().unwrap());
            let sig = hex(t["sig"].as_str().unwrap());
            let accepted = key.as_ref().is_ok_and(|k| k.verify(&msg, &sig));
            let flags: Vec<String> = t["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_owned())
                .collect();
            match (t["result"].as_str().unwrap(), accepted) {
                ("valid", true) => valid_ok += 1,
                ("valid", false) => valid_rejected.push((id, flags)),
                ("invalid", false) => invalid_rejected += 1,
                ("invalid", true) => invalid_accepted.push((id, flags)),
                (other, _) => panic!("tcId {id}: unexpected result label {other}"),
            }
        }
    }
    eprintln!(
        "wycheproof ed25519: {total} vectors, {valid_ok} valid accepted, {invalid_rejected} invalid rejected, \
         invalid accepted {invalid_accepted:?}, valid rejected {valid_rejected:?}"
    );
    assert_eq!(total, 151);
    assert_eq!(v["numberOfTests"], 151);
    assert!(valid_rejected.is_empty(), "{valid_rejected:?}");
    let accepted: BTreeSet<u64> = invalid_accepted.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        accepted,
        WYCHEPROOF_INVALID_ACCEPTED.iter().copied().collect(),
        "{invalid_accepted:?}"
    );
    assert_eq!(valid_ok, 88);
    assert_eq!(invalid_rejected, 63 - WYCHEPROOF_INVALID_ACCEPTED.len());
}

/// ed25519-speccheck verdicts, cases 0–11 (true = accepted), of ed25519-dalek's `verify`,
/// the primitive behind `PublicKey::verify` and jsonwebtoken's `rust_crypto` backend.
/// Upstream's row for this backend: V V V V X X X X X X X V.
const SPECCHECK_DALEK_ROW: [bool; 12] = [
    true, true, true, true, false, false, false, false, false, false, false, true,
];

#[test]
fn ed25519_speccheck_row_is_pinned() {
    let v = load("ed25519-speccheck/cases.json");
    let cases = v.as_array().unwrap();
    assert_eq!(cases.len(), 12);
    let mut dalek_row = [false; 12];
    let mut public_key_row = [false; 12];
    for (i, c) in cases.iter().enumerate() {
        let msg = hex(c["message"].as_str().unwrap());
        let pk = hex(c["pub_key"].as_str().unwrap());
        let sig = hex(c["signature"].as_str().unwrap());
        let pk32: [u8; 32] = pk.as_slice().try_into().unwrap();
        let sig64: [u8; 64] = sig.as_slice().try_into().unwrap();
        dalek_row[i] = ed25519_dalek::VerifyingKey::from_bytes(&pk32).is_ok_and(|k| {
            use ed25519_dalek::Verifier as _;
            k.verify(&msg, &ed25519_dalek::Signature::from_bytes(&sig64))
                .is_ok()
        });
        public_key_row[i] = PublicKey::from_bytes(&pk).is_ok_and(|k| k.verify(&msg, &sig));
    }
    let show = |row: &[bool; 12]| {
        row.iter()
            .map(|&b| if b { "V" } else { "X" })
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!("speccheck dalek verify:     {}", show(&dalek_row));
    eprintln!("speccheck PublicKey::verify: {}", show(&public_key_row));
    assert_eq!(dalek_row, SPECCHECK_DALEK_ROW, "{}", show(&dalek_row));
    assert_eq!(public_key_row, PUBLIC_KEY_ROW, "{}", show(&public_key_row));
    let refused: Vec<usize> = cases
        .iter()
        .enumerate()
        .filter(|(_, c)| PublicKey::from_bytes(&hex(c["pub_key"].as_str().unwrap())).is_err())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(refused, SPECCHECK_REFUSED_KEYS);
}

/// The same cases through `PublicKey`, which refuses small-order public keys when a key is
/// loaded (ATTACKS A9). Cases 0, 1, 10 and 11 use a small-order `A`, so the key never loads and
/// those signatures are rejected: X X V V X X X X X X X X.
const PUBLIC_KEY_ROW: [bool; 12] = [
    false, false, true, true, false, false, false, false, false, false, false, false,
];

/// The cases whose public key `PublicKey::from_bytes` refuses (small order).
const SPECCHECK_REFUSED_KEYS: [usize; 4] = [0, 1, 10, 11];
