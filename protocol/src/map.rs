//! The placement map (DESIGN §5): which cell serves which contractor, signed by the control
//! plane with a detached Ed25519 signature.
//!
//! Wire form (the "signed map", served at `GET /v1/placement-map` and built into the SDK):
//! ```json
//! {"map":{"schema":2,"version":7,"issued_at":1790000000,
//!         "cells":[{"id":"cell-01","endpoint":"https://127.0.0.1:8443",
//!                   "tls_pins":{"current":"<base64url SHA-256>","next":"<base64url SHA-256>"}},
//!                  …],
//!         "buckets":[0,1,2,3,4,0,…],"overrides":{"c-40711":"cell-04"}},
//!  "signature":"<base64url Ed25519 signature>"}
//! ```
//! `tls_pins` (schema 2): the SHA-256 of the DER `SubjectPublicKeyInfo` of the END-ENTITY
//! certificate the cell's edge serves ([`SpkiPin`], base64url without padding), `current` and,
//! during a certificate rotation, `next`. Clients refuse a cell whose certificate matches
//! neither, even when a trusted CA issued it. `next` is omitted when there is none; `tls_pins`
//! itself is required: [`PlacementMap::validate`] refuses a cell without it (so the control
//! plane can never sign one), and an entry whose pins were stripped from a signed map still
//! parses but no longer matches the signature, so it fails with [`MapError::BadSignature`]:
//! an unpinned entry is refused by the map signature check, not trusted.
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
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest as _;
use subtle::ConstantTimeEq as _;

use crate::ids::{CellId, ContractorId};
use crate::jwks::PublicKey;
use crate::time::UnixSeconds;
use crate::token::SigningKey;

/// Schema version of the map document.
pub const MAP_SCHEMA: u32 = 2;
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

/// One cell, its public endpoint and the pins of its TLS certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CellEntry {
    pub id: CellId,
    pub endpoint: String,
    /// Required by [`PlacementMap::validate`]; optional in the type only so that a map whose
    /// pins were stripped parses and is then refused by its signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_pins: Option<TlsPins>,
}

/// The SHA-256 of the DER `SubjectPublicKeyInfo` of a certificate, as pinned in the map.
/// Wire form: base64url without padding (43 characters).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpkiPin([u8; 32]);

/// Why a pin, or the certificate it should be computed from, was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    #[error("a TLS pin is not 32 bytes in base64url without padding")]
    Encoding,
    #[error("not a DER X.509 certificate: {0}")]
    Certificate(String),
}

impl SpkiPin {
    /// A pin from its SHA-256 digest.
    pub const fn from_sha256(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The pin of a DER `SubjectPublicKeyInfo`.
    pub fn of_spki_der(spki: &[u8]) -> Self {
        Self(sha2::Sha256::digest(spki).into())
    }

    /// The pin of a DER X.509 certificate: the digest of its `SubjectPublicKeyInfo`, read
    /// from `tbsCertificate` (version, serial, signature algorithm, issuer, validity and
    /// subject come first). Only the structure is read; nothing is verified.
    pub fn of_certificate_der(cert: &[u8]) -> Result<Self, PinError> {
        use der::{Reader as _, Tag, TagNumber};
        let bad = |e: der::Error| PinError::Certificate(e.to_string());
        let mut reader = der::SliceReader::new(cert).map_err(bad)?;
        let spki = reader
            .sequence(|cert| {
                let spki = cert.sequence(|tbs| {
                    if let Tag::ContextSpecific {
                        number: TagNumber(0),
                        ..
                    } = Tag::peek(tbs)?
                    {
                        tbs.tlv_bytes()?; // version
                    }
                    for _ in 0..5 {
                        tbs.tlv_bytes()?; // serial, signature, issuer, validity, subject
                    }
                    Tag::peek(tbs)?.assert_eq(Tag::Sequence)?;
                    let spki = tbs.tlv_bytes()?;
                    tbs.drain(tbs.remaining_len())?; // unique ids, extensions
                    Ok::<_, der::Error>(spki)
                })?;
                cert.drain(cert.remaining_len())?; // signature algorithm and value
                Ok::<_, der::Error>(spki)
            })
            .map_err(bad)?;
        reader.finish().map_err(bad)?;
        Ok(Self::of_spki_der(spki))
    }

    /// Parses the wire form.
    pub fn parse(s: &str) -> Result<Self, PinError> {
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| PinError::Encoding)?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map(Self)
            .map_err(|_| PinError::Encoding)
    }

    /// Whether `other` is this pin, in constant time.
    pub fn matches(&self, other: &SpkiPin) -> bool {
        self.0.ct_eq(&other.0).into()
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Display for SpkiPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&URL_SAFE_NO_PAD.encode(self.0))
    }
}

impl std::fmt::Debug for SpkiPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpkiPin({self})")
    }
}

impl Serialize for SpkiPin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SpkiPin {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SpkiPin::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The pins of a cell: the certificate served now and, during a rotation, the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TlsPins {
    pub current: SpkiPin,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<SpkiPin>,
}

impl TlsPins {
    /// Whether `pin` is the current or the next pin (both compared, in constant time).
    pub fn matches(&self, pin: &SpkiPin) -> bool {
        let current = self.current.matches(pin);
        let next = self.next.is_some_and(|n| n.matches(pin));
        current | next
    }
}

/// The map's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// https endpoints, a TLS pin for every cell.
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
            if c.tls_pins.is_none() {
                return Err(MapError::Invalid("a cell has no TLS pin"));
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
        let signed: SignedMap = crate::json::from_object_slice(bytes)
            .map_err(|e| MapError::Malformed(e.to_string()))?;
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
mod pin_tests;
#[cfg(test)]
mod tests;
