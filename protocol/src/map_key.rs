//! The placement map's public key as a configuration names it (`map_public_key`): the one
//! check every configuration that takes one uses (the auth-service, `cellctl`'s inventory and
//! fleet file).
//!
//! A map key is a base64url Ed25519 public key ([`PublicKey::from_b64`]: canonical encoding,
//! 32 bytes, a curve point not of small order) and never a key whose private half is
//! published: RFC 8037 Appendix A's example key (the one example configurations tend to carry,
//! so that they load) and RFC 8032 §7.1's test keys. Anyone holding the private half could
//! sign a placement map every server holding the key would accept (ATTACKS A21).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::jwks::PublicKey;

/// RFC 8037 Appendix A.1's example Ed25519 public key (its private key `d` is printed beside
/// it; it is also RFC 8032 §7.1 TEST 1).
pub const RFC8037_EXAMPLE_KEY: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

/// Ed25519 public keys whose private keys are published, with where: base64url.
pub const PUBLISHED_KEYS: [(&str, &str); 5] = [
    (
        "RFC 8037's example key (RFC 8032 TEST 1)",
        RFC8037_EXAMPLE_KEY,
    ),
    (
        "RFC 8032's TEST 2 key",
        "PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw",
    ),
    (
        "RFC 8032's TEST 3 key",
        "_FHNjmIYoaONpH7QAjDwWAgW7RO6MwOsXeuRFUiQgCU",
    ),
    (
        "RFC 8032's TEST 1024 key",
        "J4EX_BRMcjQPZ9DyMW6Dhs7_vyskKMnFH-98WX8dQm4",
    ),
    (
        "RFC 8032's TEST SHA(abc) key",
        "7Bcrk61eVjv0kyxw4SRQNMNUZ-8u_U1k6_gZaDRn4r8",
    ),
];

/// Why a configured map public key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapKeyError {
    /// Not a base64url Ed25519 public key at all (a placeholder left in an example, a typo).
    #[error(
        "not a base64url Ed25519 public key ({0}): set your control plane's key, \
         GET <control plane>/v1/map-public-key"
    )]
    Malformed(&'static str),
    /// A key whose private half is published.
    #[error(
        "{0}, whose private key is published: anyone could sign a placement map with it; \
         set your control plane's key, GET <control plane>/v1/map-public-key"
    )]
    Published(&'static str),
}

/// Parses a configured map public key (see the module doc).
pub fn parse(b64: &str) -> Result<PublicKey, MapKeyError> {
    // The reasons name the JWK member (`x is …`); here the key is the whole value.
    let key = PublicKey::from_b64(b64)
        .map_err(|why| MapKeyError::Malformed(why.strip_prefix("x is ").unwrap_or(why)))?;
    match PUBLISHED_KEYS
        .iter()
        .find(|(_, published)| URL_SAFE_NO_PAD.decode(published).as_deref() == Ok(key.as_bytes()))
    {
        Some((name, _)) => Err(MapKeyError::Published(name)),
        None => Ok(key),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code
    use super::*;

    /// RFC 8032 §7.1's secret keys, in the order of [`PUBLISHED_KEYS`] (hex).
    const RFC8032_SECRETS: [&str; 5] = [
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
    ];

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn every_refused_key_is_the_public_half_of_a_published_secret() {
        for ((name, public), secret) in PUBLISHED_KEYS.iter().zip(RFC8032_SECRETS) {
            let derived = ed25519_dalek::SigningKey::from_bytes(&hex32(secret)).verifying_key();
            assert_eq!(
                URL_SAFE_NO_PAD.encode(derived.as_bytes()),
                *public,
                "{name}"
            );
        }
        // RFC 8037's example as the JOSE cookbook publishes it, private key included.
        let cookbook: serde_json::Value = serde_json::from_str(include_str!(
            "../../vectors/jose-cookbook/curve25519_jws.json"
        ))
        .unwrap();
        let jwk = &cookbook["input"]["key"];
        assert_eq!(jwk["x"], RFC8037_EXAMPLE_KEY);
        let d: [u8; 32] = URL_SAFE_NO_PAD
            .decode(jwk["d"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let derived = ed25519_dalek::SigningKey::from_bytes(&d).verifying_key();
        assert_eq!(
            URL_SAFE_NO_PAD.encode(derived.as_bytes()),
            RFC8037_EXAMPLE_KEY
        );
    }

    #[test]
    fn a_published_key_is_refused_naming_where_it_was_published() {
        for (name, key) in PUBLISHED_KEYS {
            assert_eq!(parse(key), Err(MapKeyError::Published(name)));
        }
        let e = parse(RFC8037_EXAMPLE_KEY).unwrap_err().to_string();
        assert!(
            e.contains("RFC 8037") && e.contains("private key is published"),
            "{e}"
        );
        assert!(e.contains("/v1/map-public-key"), "{e}");
    }

    #[test]
    fn a_generated_key_is_accepted_and_a_placeholder_is_refused() {
        let seed = [7u8; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
        let b64 = URL_SAFE_NO_PAD.encode(public.as_bytes());
        assert_eq!(parse(&b64).unwrap().as_bytes(), public.as_bytes());
        for bad in ["", "REPLACE-ME", "AAAA", &format!("{b64}=")] {
            assert!(
                matches!(parse(bad), Err(MapKeyError::Malformed(_))),
                "{bad:?}"
            );
        }
        let e = parse("REPLACE-ME").unwrap_err().to_string();
        assert!(
            e.starts_with("not a base64url Ed25519 public key (not canonical base64url)"),
            "{e}"
        );
    }
}
