//! The placement map: bucket hashing, validation, signing, verification and rollback.

use super::*;
use crate::ids::Kid;

fn c(s: &str) -> ContractorId {
    ContractorId::new(s).unwrap()
}

#[test]
fn bucket_hash_known_answers() {
    // Pinned: changing the hash would silently move every contractor.
    let got: Vec<usize> = ["c-40711", "c-10001", "c-1"]
        .iter()
        .map(|s| bucket_of(&c(s), 1024))
        .collect();
    assert_eq!(got, KNOWN_BUCKETS);
    assert_eq!(bucket_of(&c("c-40711"), 1), 0);
}

// Computed independently: python3 hashlib.sha256(b"cellbind-bucket-v1:" + id).digest()[:8], big-endian, % 1024.
const KNOWN_BUCKETS: [usize; 3] = [497, 848, 110];

fn sample(version: u64) -> PlacementMap {
    PlacementMap {
        schema: MAP_SCHEMA,
        version,
        issued_at: 1_790_000_000,
        cells: (1..=3)
            .map(|n| CellEntry {
                id: CellId::new(format!("cell-0{n}")).unwrap(),
                endpoint: format!("https://127.0.0.{n}:8443"),
                tls_pins: Some(TlsPins {
                    current: SpkiPin::from_sha256([n; 32]),
                    next: (n == 2).then(|| SpkiPin::from_sha256([0x20 + n; 32])),
                }),
            })
            .collect(),
        buckets: vec![0, 1, 2, 0, 1, 2, 0, 1],
        overrides: [(c("c-40711"), CellId::new("cell-03").unwrap())].into(),
    }
}

fn key() -> SigningKey {
    SigningKey::from_seed(Kid::new("cp-1").unwrap(), &[9; 32]).unwrap()
}

#[test]
fn sign_verify_tamper_rollback() {
    let k = key();
    let signed = sample(2).sign(&k).unwrap();
    let bytes = signed.to_json().unwrap();
    let back = SignedMap::verify_bytes(&bytes, &k.public_key()).unwrap();
    assert_eq!(back, signed);
    assert_eq!(
        back.map.cell_for(&c("c-40711")).unwrap().id.as_str(),
        "cell-03"
    );
    // one byte of content changed
    let s = String::from_utf8(bytes.clone()).unwrap();
    let tampered = s.replacen("127.0.0.2", "127.0.0.9", 1);
    assert_eq!(
        SignedMap::verify_bytes(tampered.as_bytes(), &k.public_key()),
        Err(MapError::BadSignature)
    );
    // another key
    let other = SigningKey::from_seed(Kid::new("x").unwrap(), &[8; 32]).unwrap();
    assert_eq!(
        SignedMap::verify_bytes(&bytes, &other.public_key()),
        Err(MapError::BadSignature)
    );
    // rollback
    let older = sample(1).sign(&k).unwrap();
    assert!(older.newer_than(Some(&signed)).is_err());
    assert!(signed.newer_than(Some(&older)).is_ok());
    assert!(signed.newer_than(Some(&signed)).is_err());
}
