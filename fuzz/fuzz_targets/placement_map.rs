//! The signed placement map (`protocol::map::SignedMap::verify_bytes`), as the SDK and the
//! edge read it.
//!
//! Input: first byte even → the rest is the signed-map document, checked against the pinned
//! key. Odd → the rest is a map (`PlacementMap` JSON) that the control plane's signing step
//! signs when it is valid, so that the fuzzer reaches the checks behind the signature: a map
//! signed here verifies, as the very map that was signed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::map::{MapError, PlacementMap, SignedMap};
use protocol::token::SigningKey;
use protocol::{ContractorId, Kid};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let key = SigningKey::from_seed(Kid::new("cp-1").unwrap(), &[9; 32]).unwrap();
    let (doc, signed_here) = if mode % 2 == 0 {
        (rest.to_vec(), None)
    } else {
        let Ok(map) = protocol::json::from_object_slice::<PlacementMap>(rest) else {
            return;
        };
        match map.clone().sign(&key) {
            Ok(s) => (s.to_json().unwrap(), Some(map)),
            // Refused by the consistency checks that verification runs too.
            Err(MapError::Invalid(_)) => return,
            Err(e) => panic!("signing refused a map with {e:?}"),
        }
    };
    match SignedMap::verify_bytes(&doc, &key.public_key()) {
        Ok(m) => {
            assert!(m.map.validate().is_ok());
            if let Some(expected) = &signed_here {
                assert_eq!(&m.map, expected);
            }
            for c in ["c-1", "c-40711"] {
                assert!(m.map.cell_for(&ContractorId::new(c).unwrap()).is_some());
            }
        }
        Err(
            MapError::TooLarge
            | MapError::Malformed(_)
            | MapError::BadSignature
            | MapError::Invalid(_)
            | MapError::NotNewer { .. },
        ) => assert!(signed_here.is_none(), "a valid map signed here was refused"),
        Err(e) => panic!("untyped map error {e:?}"),
    }
});
