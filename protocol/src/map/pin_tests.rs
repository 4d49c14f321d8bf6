//! The TLS pins of a placement map's cells.

use super::*;
use crate::ids::Kid;

fn key() -> SigningKey {
    SigningKey::from_seed(Kid::new("cp-1").unwrap(), &[9; 32]).unwrap()
}

fn map(pins: Option<TlsPins>) -> PlacementMap {
    PlacementMap {
        schema: MAP_SCHEMA,
        version: 3,
        issued_at: 1_790_000_000,
        cells: vec![CellEntry {
            id: CellId::new("cell-01").unwrap(),
            endpoint: "https://127.0.0.1:8443".into(),
            tls_pins: pins,
        }],
        buckets: vec![0, 0],
        overrides: BTreeMap::new(),
    }
}

fn pins() -> TlsPins {
    TlsPins {
        current: SpkiPin::from_sha256([1; 32]),
        next: Some(SpkiPin::from_sha256([2; 32])),
    }
}

/// Signs whatever it is given, as a control plane without `validate` would.
fn sign_unchecked(map: &PlacementMap, key: &SigningKey) -> Vec<u8> {
    let mut msg = MAP_SIGNING_CONTEXT.to_vec();
    msg.extend(map.canonical_bytes().unwrap());
    let signed = SignedMap {
        map: map.clone(),
        signature: URL_SAFE_NO_PAD.encode(key.sign_raw(&msg)),
    };
    signed.to_json().unwrap()
}

#[test]
fn a_pin_round_trips_as_43_base64url_characters_and_nothing_else_parses() {
    let pin = SpkiPin::from_sha256([0xfb; 32]);
    let wire = pin.to_string();
    assert_eq!(wire.len(), 43);
    assert!(!wire.contains(['+', '/', '=']));
    assert_eq!(SpkiPin::parse(&wire), Ok(pin));
    let json = serde_json::to_string(&pin).unwrap();
    assert_eq!(serde_json::from_str::<SpkiPin>(&json).unwrap(), pin);
    for bad in [
        "",
        &wire[..42],
        &format!("{wire}A"),
        &format!("{wire}="),
        &URL_SAFE_NO_PAD.encode([0xfb; 31]),
        &base64::engine::general_purpose::STANDARD.encode([0xfb; 32]),
    ] {
        assert_eq!(SpkiPin::parse(bad), Err(PinError::Encoding), "{bad:?}");
    }
}

#[test]
fn pins_match_the_current_or_the_next_certificate_only() {
    let p = pins();
    assert!(p.matches(&SpkiPin::from_sha256([1; 32])));
    assert!(p.matches(&SpkiPin::from_sha256([2; 32])));
    assert!(!p.matches(&SpkiPin::from_sha256([3; 32])));
    let only_current = TlsPins { next: None, ..p };
    assert!(!only_current.matches(&SpkiPin::from_sha256([2; 32])));
    // `next` is left out of the wire form when there is none; unknown members are refused
    let json = serde_json::to_string(&only_current).unwrap();
    assert!(!json.contains("next"), "{json}");
    let extra = json.replace('}', r#","previous":"x"}"#);
    assert!(serde_json::from_str::<TlsPins>(&extra).is_err());
}

#[test]
fn the_pin_of_a_certificate_is_the_digest_of_its_subject_public_key_info() {
    let cert = rcgen::generate_simple_self_signed(vec!["cell.example".into()]).unwrap();
    use rcgen::PublicKeyData as _;
    let expected = SpkiPin::of_spki_der(&cert.signing_key.subject_public_key_info());
    assert_eq!(
        SpkiPin::of_certificate_der(cert.cert.der()).unwrap(),
        expected
    );
    // Another key, another pin.
    let other = rcgen::generate_simple_self_signed(vec!["cell.example".into()]).unwrap();
    assert_ne!(
        SpkiPin::of_certificate_der(other.cert.der()).unwrap(),
        expected
    );
    // Not a certificate: an error, never a panic or a pin of something else.
    let der = cert.cert.der().to_vec();
    for bad in [&[][..], &der[..der.len() - 1], &der[4..], b"-----BEGIN"] {
        assert!(matches!(
            SpkiPin::of_certificate_der(bad),
            Err(PinError::Certificate(_))
        ));
    }
    let mut trailing = der.clone();
    trailing.push(0);
    assert!(SpkiPin::of_certificate_der(&trailing).is_err());
}

#[test]
fn a_pinned_map_signs_and_verifies_with_its_pins() {
    let k = key();
    let bytes = map(Some(pins())).sign(&k).unwrap().to_json().unwrap();
    let back = SignedMap::verify_bytes(&bytes, &k.public_key()).unwrap();
    assert_eq!(back.map.cells[0].tls_pins, Some(pins()));
    assert_eq!(back.map.schema, 2);
}

#[test]
fn an_entry_whose_pins_were_stripped_is_refused_by_the_signature() {
    let k = key();
    let bytes = map(Some(pins())).sign(&k).unwrap().to_json().unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let entry = doc["map"]["cells"][0].as_object_mut().unwrap();
    assert!(entry.remove("tls_pins").is_some());
    let stripped = serde_json::to_vec(&doc).unwrap();
    assert_eq!(
        SignedMap::verify_bytes(&stripped, &k.public_key()),
        Err(MapError::BadSignature)
    );
    // only the next pin stripped: refused as well
    let mut doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    doc["map"]["cells"][0]["tls_pins"]
        .as_object_mut()
        .unwrap()
        .remove("next");
    assert_eq!(
        SignedMap::verify_bytes(&serde_json::to_vec(&doc).unwrap(), &k.public_key()),
        Err(MapError::BadSignature)
    );
}

#[test]
fn an_unpinned_map_is_never_signed_nor_accepted_even_when_signed() {
    let k = key();
    assert_eq!(
        map(None).sign(&k),
        Err(MapError::Invalid("a cell has no TLS pin"))
    );
    let bytes = sign_unchecked(&map(None), &k);
    assert_eq!(
        SignedMap::verify_bytes(&bytes, &k.public_key()),
        Err(MapError::Invalid("a cell has no TLS pin"))
    );
}

#[test]
fn a_schema_1_map_is_refused_even_when_signed() {
    let k = key();
    let old = PlacementMap {
        schema: 1,
        ..map(Some(pins()))
    };
    let bytes = sign_unchecked(&old, &k);
    assert_eq!(
        SignedMap::verify_bytes(&bytes, &k.public_key()),
        Err(MapError::Invalid("unknown schema"))
    );
}
