//! Strict reading of the JSON documents that arrive from the network.
//!
//! serde's derived structs read a JSON array of their fields (in declaration order) as well as
//! an object: `["EdDSA","cellbind-session+jwt","k1"]` reads as the JOSE header
//! `{"alg":"EdDSA","typ":"cellbind-session+jwt","kid":"k1"}`. A JOSE header and a JWT claims
//! set are JSON objects (RFC 7515 §4, RFC 7519 §4), and so is every Cellbind body (DESIGN §4):
//! [`from_object_slice`] refuses any other document before serde reads it, so that no reader
//! of ours accepts what every other JSON reader of the same contract refuses.

use serde::de::DeserializeOwned;

/// The document must be a JSON object (after optional JSON whitespace); then `serde_json`
/// reads it into `T`. A document that is not an object is a data error (`Category::Data`).
pub fn from_object_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(<serde_json::Error as serde::de::Error>::custom(
            "expected a JSON object",
        ));
    }
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Two {
        a: String,
        b: u64,
    }

    #[test]
    fn objects_only() {
        let two = Two {
            a: "x".into(),
            b: 1,
        };
        assert_eq!(
            from_object_slice::<Two>(br#"{"a":"x","b":1}"#).unwrap(),
            two
        );
        assert_eq!(
            from_object_slice::<Two>(b" \n\t{\"a\":\"x\",\"b\":1}").unwrap(),
            two
        );
        // serde_json alone reads the array form; the strict reader does not.
        assert_eq!(serde_json::from_slice::<Two>(br#"["x",1]"#).unwrap(), two);
        for not_object in [&br#"["x",1]"#[..], b"", b"   ", b"null", b"\"x\"", b"1"] {
            let e = from_object_slice::<Two>(not_object).unwrap_err();
            assert_eq!(e.classify(), serde_json::error::Category::Data, "{e}");
        }
    }
}
