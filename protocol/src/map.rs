//! The placement map (DESIGN §5): which cell serves which contractor, signed by the control
//! plane with a detached Ed25519 signature.
//!
//! Wire form (the "signed map", served at `GET /v1/placement-map` and built into the SDK):
//! ```json
//! {"map":{"schema":1,"version":7,"issued_at":1790000000,
//!         "cells":[{"id":"cell-01","endpoint":"https://127.0.0.1:8443"}, …],
//!         "buckets":[0,1,2,3,4,0,…],"overrides":{"c-40711":"cell-04"}},
//!  "signature":"<base64url Ed25519 signature>"}
//! ```
//! The signature covers `MAP_SIGNING_CONTEXT || canonical(map)`, where `canonical` is the
//! compact serde_json serialization of [`PlacementMap`] (fixed member order, overrides sorted).
//! The verifier re-serializes what it parsed, so only the map's content is signed, never
//! incidental whitespace; the context string keeps a map signature from ever being valid as
//! anything else, and the map key is dedicated to maps (ATTACKS A16, A21).
//!
//! Bucket hash (fixed; changing it moves contractors): the first 8 bytes of
//! `SHA-256("cellbind-bucket-v1:" || contractor_id)` read big-endian as a u64, modulo the
//! number of buckets.

use std::collections::{BTreeMap, HashSet};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::ids::{CellId, ContractorId};
use crate::jwks::PublicKey;
use crate::time::UnixSeconds;
use crate::token::SigningKey;

/// Schema version of the map document.
pub const MAP_SCHEMA: u32 = 1;
/// Domain-separation prefix of the map signature.
pub const MAP_SIGNING_CONTEXT: &[u8] = b"cellbind-placement-map-v1\0";
/// Prefix of the bucket hash input.
pub const BUCKET_HASH_CONTEXT: &[u8] = b"cellbind-bucket-v1:";
/// Largest signed map accepted, in bytes.
pub const MAX_MAP_BYTES: usize = 8 * 1024 * 1024;
/// Most cells a map may list.
pub const MAX_CELLS: usize = 1024;
/// Most buckets a map may hold.
pub const MAX_BUCKETS: usize = 65_536;

/// One cell and its public endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellEntry {
    pub id: CellId,
    pub endpoint: String,
}

/// The map's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementMap {
    pub schema: u32,
    pub version: u64,
    pub issued_at: UnixSeconds,
    pub cells: Vec<CellEntry>,
    /// Cell index (into `cells`) per bucket.
    pub buckets: Vec<u16>,
    #[serde(default)]
    pub overrides: BTreeMap<ContractorId, CellId>,
}

/// The map with its detached signature, as transported and stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedMap {
    pub map: PlacementMap,
    pub signature: String,
}

/// Why a map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    #[error("map is larger than {MAX_MAP_BYTES} bytes")]
    TooLarge,
    #[error("map is not valid JSON of the signed-map shape: {0}")]
    Malformed(String),
    #[error("map signature does not verify with the pinned key")]
    BadSignature,
    #[error("map is inconsistent: {0}")]
    Invalid(&'static str),
    #[error("map version {offered} is not newer than the held version {held}")]
    NotNewer { held: u64, offered: u64 },
}

/// The bucket of a contractor for a map with `n` buckets (see module doc).
pub fn bucket_of(contractor: &ContractorId, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut h = sha2::Sha256::new();
    h.update(BUCKET_HASH_CONTEXT);
    h.update(contractor.as_str().as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % n as u64) as usize
}

impl PlacementMap {
    /// Canonical bytes that the signature covers (without the context prefix).
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, MapError> {
        serde_json::to_vec(self).map_err(|e| MapError::Malformed(e.to_string()))
    }

    /// Internal consistency: schema, non-empty, indexes in range, unique cells, known overrides,
    /// https endpoints.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.schema != MAP_SCHEMA {
            return Err(MapError::Invalid("unknown schema"));
        }
        if self.cells.is_empty() || self.cells.len() > MAX_CELLS {
            return Err(MapError::Invalid("cell count out of range"));
        }
        if self.buckets.is_empty() || self.buckets.len() > MAX_BUCKETS {
            return Err(MapError::Invalid("bucket count out of range"));
        }
        let mut ids = HashSet::new();
        for c in &self.cells {
            if !ids.insert(&c.id) {
                return Err(MapError::Invalid("a cell is listed twice"));
            }
            if !c.endpoint.starts_with("https://") || c.endpoint.len() > 256 {
                return Err(MapError::Invalid("a cell endpoint is not an https URL"));
            }
        }
        if self.buckets.iter().any(|&b| b as usize >= self.cells.len()) {
            return Err(MapError::Invalid(
                "a bucket names a cell index out of range",
            ));
        }
        if self.overrides.values().any(|c| !ids.contains(c)) {
            return Err(MapError::Invalid("an override names an unknown cell"));
        }
        Ok(())
    }

    /// The cell a contractor belongs to: `overrides[c]`, else `buckets[hash(c) % len]`.
    pub fn cell_for(&self, contractor: &ContractorId) -> Option<&CellEntry> {
        if let Some(id) = self.overrides.get(contractor) {
            return self.cell(id);
        }
        let idx = *self
            .buckets
            .get(bucket_of(contractor, self.buckets.len()))?;
        self.cells.get(idx as usize)
    }

    pub fn cell(&self, id: &CellId) -> Option<&CellEntry> {
        self.cells.iter().find(|c| &c.id == id)
    }

    /// Signs the map with the control plane's key.
    pub fn sign(self, key: &SigningKey) -> Result<SignedMap, MapError> {
        self.validate()?;
        let mut msg = MAP_SIGNING_CONTEXT.to_vec();
        msg.extend(self.canonical_bytes()?);
        let sig = key.sign_raw(&msg);
        Ok(SignedMap {
            map: self,
            signature: URL_SAFE_NO_PAD.encode(sig),
        })
    }
}

impl SignedMap {
    /// Parses, checks the signature against the pinned key, and validates.
    pub fn verify_bytes(bytes: &[u8], key: &PublicKey) -> Result<SignedMap, MapError> {
        if bytes.len() > MAX_MAP_BYTES {
            return Err(MapError::TooLarge);
        }
        let signed: SignedMap =
            serde_json::from_slice(bytes).map_err(|e| MapError::Malformed(e.to_string()))?;
        signed.verify(key)?;
        Ok(signed)
    }

    /// Checks the signature and the content.
    pub fn verify(&self, key: &PublicKey) -> Result<(), MapError> {
        let sig = URL_SAFE_NO_PAD
            .decode(&self.signature)
            .map_err(|_| MapError::BadSignature)?;
        let mut msg = MAP_SIGNING_CONTEXT.to_vec();
        msg.extend(self.map.canonical_bytes()?);
        if !key.verify(&msg, &sig) {
            return Err(MapError::BadSignature);
        }
        self.map.validate()
    }

    /// Accepts `self` as a replacement for `held` only if it is strictly newer (rollback
    /// protection, ATTACKS A21). The signature must already have been verified.
    pub fn newer_than(&self, held: Option<&SignedMap>) -> Result<(), MapError> {
        match held {
            Some(h) if self.map.version <= h.map.version => Err(MapError::NotNewer {
                held: h.map.version,
                offered: self.map.version,
            }),
            _ => Ok(()),
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>, MapError> {
        serde_json::to_vec(self).map_err(|e| MapError::Malformed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
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
}
