//! JWKS (RFC 7517/8037, `OKP`/`Ed25519` only) and the validated [`KeySet`] built from it.
//!
//! A fetched document is taken whole or not at all (ATTACKS A9): every key must be `kty=OKP`,
//! `crv=Ed25519`, a 32-byte `x` that decodes to a curve point not of small order, no private
//! `d`, a unique `kid`, `use` `sig` or absent, `alg` `EdDSA` or absent. Unknown members are
//! refused. The key object carries its algorithm, so a token can never choose it (A2, A3).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::ids::Kid;

/// Largest JWKS document a fetcher should read, in bytes.
pub const MAX_JWKS_BYTES: usize = 64 * 1024;
/// Most keys a JWKS may hold.
pub const MAX_JWKS_KEYS: usize = 32;

/// One public key as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Jwk {
    pub kty: String,
    pub crv: String,
    pub x: String,
    pub kid: String,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// Never published; present only so a document carrying private material is refused
    /// with a precise reason instead of a generic one.
    #[serde(default, skip_serializing)]
    pub d: Option<serde_json::Value>,
}

impl Jwk {
    /// The JWK for an Ed25519 public key.
    pub fn ed25519(kid: &Kid, public: &[u8; 32]) -> Self {
        Self {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: URL_SAFE_NO_PAD.encode(public),
            kid: kid.as_str().to_owned(),
            use_: Some("sig".into()),
            alg: Some("EdDSA".into()),
            d: None,
        }
    }
}

/// A JWKS document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// Why a key or a key document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("key document is not valid JSON of the JWKS shape: {0}")]
    Malformed(String),
    #[error("key document is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    #[error("key document holds no keys")]
    Empty,
    #[error("key document holds more than {MAX_JWKS_KEYS} keys")]
    TooManyKeys,
    #[error("key {kid:?}: {reason}")]
    BadKey { kid: String, reason: &'static str },
    #[error("key id {0:?} appears twice")]
    DuplicateKid(String),
}

/// A validated Ed25519 public key, bound to the only algorithm it may verify (EdDSA).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: ed25519_dalek::VerifyingKey,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PublicKey({})",
            URL_SAFE_NO_PAD.encode(self.key.as_bytes())
        )
    }
}

impl PublicKey {
    /// Validates 32 raw bytes: a canonical point that is not of small order.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, &'static str> {
        let arr: &[u8; 32] = bytes.try_into().map_err(|_| "x is not 32 bytes")?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(arr)
            .map_err(|_| "x is not a valid Ed25519 point")?;
        if key.is_weak() {
            return Err("x is a small-order point");
        }
        Ok(Self { key })
    }

    /// Parses the base64url `x` member of a JWK.
    pub fn from_b64(x: &str) -> Result<Self, &'static str> {
        let bytes = URL_SAFE_NO_PAD
            .decode(x)
            .map_err(|_| "x is not canonical base64url")?;
        Self::from_bytes(&bytes)
    }

    /// Our own key, derived from a seed we generated.
    pub(crate) fn from_dalek(key: ed25519_dalek::VerifyingKey) -> Self {
        Self { key }
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        self.key.as_bytes()
    }

    /// Verifies an Ed25519 signature (RFC 8032, the ed25519-dalek verdicts pinned in tests).
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        use ed25519_dalek::Verifier as _;
        let Ok(sig) = <&[u8; 64]>::try_from(signature) else {
            return false;
        };
        self.key
            .verify(message, &ed25519_dalek::Signature::from_bytes(sig))
            .is_ok()
    }
}

/// Validates one JWK.
pub fn validate_jwk(jwk: &Jwk) -> Result<(Kid, PublicKey), KeyError> {
    let bad = |reason| KeyError::BadKey {
        kid: jwk.kid.chars().take(64).collect(),
        reason,
    };
    let kid = Kid::new(jwk.kid.clone()).map_err(|_| bad("kid is not [A-Za-z0-9_-]{1,64}"))?;
    if jwk.d.is_some() {
        return Err(bad("private key material (d) present"));
    }
    if jwk.kty != "OKP" {
        return Err(bad("kty is not OKP"));
    }
    if jwk.crv != "Ed25519" {
        return Err(bad("crv is not Ed25519"));
    }
    if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
        return Err(bad("use is not sig"));
    }
    if jwk.alg.as_deref().is_some_and(|a| a != "EdDSA") {
        return Err(bad("alg is not EdDSA"));
    }
    let key = PublicKey::from_b64(&jwk.x).map_err(bad)?;
    Ok((kid, key))
}

/// The verification keys a component trusts, by kid. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Arc<BTreeMap<Kid, PublicKey>>,
}

impl KeySet {
    pub fn new(keys: BTreeMap<Kid, PublicKey>) -> Self {
        Self {
            keys: Arc::new(keys),
        }
    }

    /// Validates a whole JWKS document; any defect refuses all of it.
    pub fn from_jwks(jwks: &Jwks) -> Result<Self, KeyError> {
        if jwks.keys.is_empty() {
            return Err(KeyError::Empty);
        }
        if jwks.keys.len() > MAX_JWKS_KEYS {
            return Err(KeyError::TooManyKeys);
        }
        let mut map = BTreeMap::new();
        for jwk in &jwks.keys {
            let (kid, key) = validate_jwk(jwk)?;
            if map.insert(kid, key).is_some() {
                return Err(KeyError::DuplicateKid(jwk.kid.clone()));
            }
        }
        Ok(Self::new(map))
    }

    /// Parses and validates raw JWKS bytes (size-capped).
    pub fn from_json(bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(KeyError::TooLarge);
        }
        let jwks: Jwks = crate::json::from_object_slice(bytes)
            .map_err(|e| KeyError::Malformed(e.to_string()))?;
        Self::from_jwks(&jwks)
    }

    pub fn get(&self, kid: &str) -> Option<&PublicKey> {
        self.keys.get(kid)
    }

    pub fn contains(&self, kid: &str) -> bool {
        self.keys.contains_key(kid)
    }

    pub fn kids(&self) -> impl Iterator<Item = &Kid> {
        self.keys.keys()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn to_jwks(&self) -> Jwks {
        Jwks {
            keys: self
                .keys
                .iter()
                .map(|(kid, k)| Jwk::ed25519(kid, k.as_bytes()))
                .collect(),
        }
    }
}

impl std::borrow::Borrow<str> for Kid {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}
