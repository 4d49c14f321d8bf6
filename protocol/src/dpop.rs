//! DPoP proofs (RFC 9449) of a device key: what binds a session to the phone that holds the key.
//!
//! A bound session carries `cnf.jkt`, the RFC 7638 thumbprint of the device's public key. Every
//! request that presents it also carries a `DPoP` header: a compact JWS the device signs per
//! request, over the method (`htm`), the URL without query (`htu`), the session's hash (`ath`),
//! a fresh id (`jti`), its clock (`iat`) and the server's nonce (`nonce`).
//!
//! The parser ([`parse`]) runs these checks in this order and stops at the first failure (each
//! row is a row of the threat model, `docs/THREAT-MODEL.md`):
//!
//! | step | check | attack |
//! |---|---|---|
//! | 1 | raw size ≤ [`MAX_PROOF_BYTES`], before anything is parsed | A43 |
//! | 2 | exactly three non-empty canonical base64url segments | A43 |
//! | 3 | header is a JSON object of exactly `{typ, alg, jwk}`, no duplicates | A43 |
//! | 4 | `typ` is exactly `dpop+jwt` | A43 |
//! | 5 | `alg` is `ES256` or `EdDSA` (never `none`, never an HMAC) and matches the key's type | A43 |
//! | 6 | `jwk` is a public P-256 or Ed25519 key: no private member, a point on the curve | A44 |
//! | 7 | claims are a JSON object with `jti`, `htm`, `htu`, integer `iat`, optional `ath`, `nonce` | A42 |
//!
//! What a verifier then checks against the request ([`Proof::check_request`]: method, URL,
//! token hash), against its nonce ([`Noncer::check`]), against the session (the thumbprint) and
//! against its replay set lives with the servers (`runtime::dpop`); [`Proof::verify_signature`]
//! is the signature.
//!
//! The client side is [`ProofBuilder`]: the claims and the signing input; the signature comes
//! from whatever holds the key (a software key here, [`SoftwareP256Key`], or the platform's
//! keystore behind the SDK's `DeviceKey` trait).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::ids::Jkt;
use crate::time::{MAX_JSON_SAFE_INT, UnixSeconds};

/// The request header that carries a proof.
pub const DPOP_HEADER: &str = "dpop";
/// The response header that carries the server's current nonce.
pub const DPOP_NONCE_HEADER: &str = "dpop-nonce";
/// The `Authorization` scheme of a bound session (RFC 9449 §7.1); `Bearer` is accepted too.
pub const DPOP_SCHEME_PREFIX: &str = "DPoP ";
/// `typ` of a proof.
pub const PROOF_TYP: &str = "dpop+jwt";
/// Largest proof accepted, in bytes (a P-256 proof with a nonce and `ath` is about 600).
pub const MAX_PROOF_BYTES: usize = 2048;
/// Longest `jti` accepted, in bytes.
pub const MAX_JTI_BYTES: usize = 128;
/// Longest `htu` accepted, in bytes.
pub const MAX_HTU_BYTES: usize = 512;
/// How far a proof's `iat` may be from the server's clock, either way, in seconds. Freshness
/// comes from the nonce; this only bounds how long a proof made for a nonce stays usable.
pub const IAT_WINDOW_S: u64 = 300;
/// The length of a nonce's time step, in seconds: a nonce is accepted during its step and the
/// next, so for 60 to 120 s.
pub const NONCE_STEP_S: u64 = 60;

/// Why a proof was refused. Each maps to one public code via [`ProofError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    #[error("the request carries no DPoP proof")]
    Missing,
    #[error("the request carries more than one DPoP proof")]
    Multiple,
    #[error("the DPoP proof is larger than {MAX_PROOF_BYTES} bytes")]
    TooLarge,
    #[error("the DPoP proof is not a compact JWS of three canonical base64url segments")]
    Malformed,
    #[error("the DPoP proof header is not exactly typ, alg and jwk")]
    BadHeader,
    #[error("the DPoP proof typ is not dpop+jwt")]
    BadType,
    #[error("the DPoP proof alg is not ES256 or EdDSA, or not the key's")]
    BadAlgorithm,
    #[error("the DPoP proof key is not a public P-256 or Ed25519 key: {0}")]
    BadKey(&'static str),
    #[error("the DPoP proof key carries private key material")]
    PrivateKey,
    #[error("the DPoP proof claims are malformed: {0}")]
    BadClaims(&'static str),
    #[error("the DPoP proof signature does not verify")]
    BadSignature,
    #[error("the DPoP proof is for another method")]
    WrongMethod,
    #[error("the DPoP proof is for another URL")]
    WrongUrl,
    #[error("the DPoP proof is for another session (ath)")]
    WrongToken,
    #[error("the DPoP proof's iat is too far from the server's clock")]
    IatOutOfWindow,
    #[error("the DPoP proof carries no nonce")]
    NonceMissing,
    #[error("the DPoP proof's nonce is not one this server issued")]
    NonceUnknown,
    #[error("the DPoP proof's nonce has expired")]
    NonceStale,
    #[error("the DPoP proof was seen before")]
    Replayed,
    #[error("the DPoP proof is signed by another key than the session's")]
    KeyMismatch,
    #[error("this server has seen too many proofs this nonce step; retry after it")]
    ReplaySetFull,
    #[error("the DPoP proof could not be made: {0}")]
    Signing(String),
}

impl ProofError {
    /// The public error code of a refused proof (one mapping table).
    pub fn code(&self) -> crate::ErrorCode {
        use crate::ErrorCode as C;
        match self {
            ProofError::Missing => C::DpopProofMissing,
            ProofError::Replayed => C::DpopProofReplayed,
            ProofError::KeyMismatch => C::DpopKeyMismatch,
            ProofError::NonceMissing | ProofError::NonceUnknown => C::DpopNonceRequired,
            ProofError::NonceStale => C::DpopNonceStale,
            ProofError::ReplaySetFull => C::RateLimited,
            ProofError::Multiple
            | ProofError::TooLarge
            | ProofError::Malformed
            | ProofError::BadHeader
            | ProofError::BadType
            | ProofError::BadAlgorithm
            | ProofError::BadKey(_)
            | ProofError::PrivateKey
            | ProofError::BadClaims(_)
            | ProofError::BadSignature
            | ProofError::WrongMethod
            | ProofError::WrongUrl
            | ProofError::WrongToken
            | ProofError::IatOutOfWindow
            | ProofError::Signing(_) => C::DpopProofInvalid,
        }
    }

    /// The RFC 9449 `error` of the `WWW-Authenticate: DPoP` challenge answering this refusal:
    /// `use_dpop_nonce` tells a client to retry with the `DPoP-Nonce` it was sent.
    pub fn challenge_error(&self) -> &'static str {
        match self {
            ProofError::NonceMissing | ProofError::NonceUnknown | ProofError::NonceStale => {
                "use_dpop_nonce"
            }
            ProofError::KeyMismatch => "invalid_token",
            _ => "invalid_dpop_proof",
        }
    }

    /// Whether a client should retry once with the server's current nonce.
    pub fn wants_nonce(&self) -> bool {
        self.challenge_error() == "use_dpop_nonce"
    }
}

/// A device's public proof key, parsed from a proof's `jwk`.
#[derive(Clone, PartialEq, Eq)]
pub enum ProofKey {
    /// ES256: a P-256 point (uncompressed coordinates).
    P256 { x: [u8; 32], y: [u8; 32] },
    /// EdDSA: an Ed25519 public key.
    Ed25519([u8; 32]),
}

impl fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProofKey({}, {})", self.alg(), self.thumbprint())
    }
}

/// The members a public `jwk` may carry besides the key itself (WebCrypto exports `ext` and
/// `key_ops`; libraries add `alg`, `use`, `kid`). Anything else is refused.
const JWK_OPTIONAL: [&str; 5] = ["alg", "use", "kid", "ext", "key_ops"];
/// The private members of EC, OKP and RSA keys: their presence is refused with its own reason.
const JWK_PRIVATE: [&str; 7] = ["d", "p", "q", "dp", "dq", "qi", "oth"];

fn b64_fixed<const N: usize>(v: Option<&serde_json::Value>) -> Result<[u8; N], ProofError> {
    let s = v
        .and_then(|v| v.as_str())
        .ok_or(ProofError::BadKey("a coordinate is missing"))?;
    let bytes = decode_canonical(s).ok_or(ProofError::BadKey("a coordinate is not base64url"))?;
    bytes
        .try_into()
        .map_err(|_| ProofError::BadKey("a coordinate has the wrong length"))
}

impl ProofKey {
    /// The JWS `alg` this key signs with.
    pub fn alg(&self) -> &'static str {
        match self {
            ProofKey::P256 { .. } => "ES256",
            ProofKey::Ed25519(_) => "EdDSA",
        }
    }

    /// Parses a public JWK (step 6 of the module doc).
    pub fn from_jwk(jwk: &serde_json::Value) -> Result<Self, ProofError> {
        let obj = jwk
            .as_object()
            .ok_or(ProofError::BadKey("jwk is not an object"))?;
        if JWK_PRIVATE.iter().any(|m| obj.contains_key(*m)) {
            return Err(ProofError::PrivateKey);
        }
        let kty = obj.get("kty").and_then(|v| v.as_str());
        let crv = obj.get("crv").and_then(|v| v.as_str());
        let (key, members): (Self, &[&str]) = match (kty, crv) {
            (Some("EC"), Some("P-256")) => {
                let x = b64_fixed::<32>(obj.get("x"))?;
                let y = b64_fixed::<32>(obj.get("y"))?;
                let key = ProofKey::P256 { x, y };
                key.check_point()?;
                (key, &["kty", "crv", "x", "y"])
            }
            (Some("OKP"), Some("Ed25519")) => {
                let x = b64_fixed::<32>(obj.get("x"))?;
                let key = ProofKey::Ed25519(x);
                key.check_point()?;
                (key, &["kty", "crv", "x"])
            }
            _ => return Err(ProofError::BadKey("not an EC P-256 or OKP Ed25519 key")),
        };
        if obj
            .keys()
            .any(|k| !members.contains(&k.as_str()) && !JWK_OPTIONAL.contains(&k.as_str()))
        {
            return Err(ProofError::BadKey("jwk has an unknown member"));
        }
        if let Some(alg) = obj.get("alg")
            && alg.as_str() != Some(key.alg())
        {
            return Err(ProofError::BadAlgorithm);
        }
        Ok(key)
    }

    /// Refuses an Ed25519 key that does not decompress or is of small order (ATTACKS A9's rule
    /// for our own keys, applied to devices' keys).
    fn check_point(&self) -> Result<(), ProofError> {
        match self {
            // ring validates the point (on the curve, not the identity) before it verifies a
            // signature; a bad point fails there as a bad signature, and a connection only
            // remembers a key whose signature verified.
            ProofKey::P256 { .. } => Ok(()),
            ProofKey::Ed25519(x) => {
                let vk = ed25519_dalek::VerifyingKey::from_bytes(x)
                    .map_err(|_| ProofError::BadKey("not an Ed25519 point"))?;
                if vk.is_weak() {
                    return Err(ProofError::BadKey("an Ed25519 key of small order"));
                }
                Ok(())
            }
        }
    }

    /// The uncompressed SEC1 encoding of a P-256 point (`04 || x || y`); empty for Ed25519.
    fn sec1(&self) -> Vec<u8> {
        match self {
            ProofKey::P256 { x, y } => {
                let mut v = Vec::with_capacity(65);
                v.push(4);
                v.extend_from_slice(x);
                v.extend_from_slice(y);
                v
            }
            ProofKey::Ed25519(_) => Vec::new(),
        }
    }

    /// The P-256 key of an uncompressed SEC1 point (`04 || x || y`, what ring and the platform
    /// keystores export).
    pub fn p256_from_sec1(sec1: &[u8]) -> Result<Self, ProofError> {
        if sec1.len() != 65 || sec1[0] != 4 {
            return Err(ProofError::BadKey("not an uncompressed P-256 point"));
        }
        let mut x = [0u8; 32];
        let mut y = [0u8; 32];
        x.copy_from_slice(&sec1[1..33]);
        y.copy_from_slice(&sec1[33..65]);
        Ok(ProofKey::P256 { x, y })
    }

    /// The RFC 7638 canonical JWK: the required members only, in lexicographic order, no
    /// whitespace. Also what a proof's header carries as `jwk`.
    pub fn canonical_jwk(&self) -> String {
        match self {
            ProofKey::P256 { x, y } => format!(
                r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
                URL_SAFE_NO_PAD.encode(x),
                URL_SAFE_NO_PAD.encode(y)
            ),
            ProofKey::Ed25519(x) => format!(
                r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
                URL_SAFE_NO_PAD.encode(x)
            ),
        }
    }

    /// The RFC 7638 thumbprint (SHA-256 of the canonical JWK): a bound session's `cnf.jkt`.
    pub fn thumbprint(&self) -> Jkt {
        Jkt::from_digest(Sha256::digest(self.canonical_jwk().as_bytes()).into())
    }

    /// Verifies a JWS signature (`r || s` for ES256, 64 bytes either way) over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), ProofError> {
        match self {
            ProofKey::P256 { .. } => ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_FIXED,
                self.sec1(),
            )
            .verify(message, signature)
            .map_err(|_| ProofError::BadSignature),
            ProofKey::Ed25519(x) => {
                let vk = ed25519_dalek::VerifyingKey::from_bytes(x)
                    .map_err(|_| ProofError::BadSignature)?;
                let sig = ed25519_dalek::Signature::from_slice(signature)
                    .map_err(|_| ProofError::BadSignature)?;
                vk.verify_strict(message, &sig)
                    .map_err(|_| ProofError::BadSignature)
            }
        }
    }
}

/// The claims of a proof (RFC 9449 §4.2). Other claims are allowed and ignored (the RFC lets a
/// client add its own); these must be present with these types, once each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofClaims {
    pub jti: String,
    pub htm: String,
    pub htu: String,
    pub iat: UnixSeconds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ath: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

/// The proof header, exactly (step 3).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProofHeader {
    typ: String,
    alg: String,
    jwk: serde_json::Value,
}

/// A parsed proof: its key and claims, and what its signature covers. Not yet verified.
#[derive(Debug, Clone)]
pub struct Proof {
    key: ProofKey,
    jkt: Jkt,
    claims: ProofClaims,
    /// `header.payload`, the signing input.
    signing_input: String,
    /// The header segment as sent (what a connection remembers it verified a key from).
    header_len: usize,
    signature: Vec<u8>,
}

/// Decodes base64url without padding, refusing non-canonical encodings (trailing bits set).
fn decode_canonical(s: &str) -> Option<Vec<u8>> {
    let bytes = URL_SAFE_NO_PAD.decode(s).ok()?;
    (URL_SAFE_NO_PAD.encode(&bytes) == s).then_some(bytes)
}

fn is_b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Parses a proof (steps 1–7 of the module doc). The signature is not checked here.
pub fn parse(raw: &str) -> Result<Proof, ProofError> {
    parse_remembered(raw, |_| None).map(|(p, _)| p)
}

/// [`parse`], except that a header segment `remembered` knows (one whose key a connection
/// already verified a signature from) is not decoded again: its key and thumbprint are the
/// remembered ones. Returns whether it was remembered.
pub fn parse_remembered(
    raw: &str,
    remembered: impl FnOnce(&str) -> Option<(ProofKey, Jkt)>,
) -> Result<(Proof, bool), ProofError> {
    if raw.len() > MAX_PROOF_BYTES {
        return Err(ProofError::TooLarge);
    }
    let mut parts = raw.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ProofError::Malformed);
    };
    if [h, p, s]
        .iter()
        .any(|seg| seg.is_empty() || !seg.bytes().all(is_b64url))
    {
        return Err(ProofError::Malformed);
    }
    let payload_bytes = decode_canonical(p).ok_or(ProofError::Malformed)?;
    let signature = decode_canonical(s).ok_or(ProofError::Malformed)?;
    let (key, jkt, was_remembered) = match remembered(h) {
        Some((key, jkt)) => (key, jkt, true),
        None => {
            let key = parse_header(h)?;
            let jkt = key.thumbprint();
            (key, jkt, false)
        }
    };
    if signature.len() != 64 {
        return Err(ProofError::BadSignature);
    }
    let claims: ProofClaims = crate::json::from_object_slice(&payload_bytes)
        .map_err(|_| ProofError::BadClaims("not the jti, htm, htu, iat object"))?;
    if claims.jti.is_empty() || claims.jti.len() > MAX_JTI_BYTES {
        return Err(ProofError::BadClaims("jti is empty or too long"));
    }
    if claims.htu.len() > MAX_HTU_BYTES {
        return Err(ProofError::BadClaims("htu is too long"));
    }
    if claims.iat > MAX_JSON_SAFE_INT {
        return Err(ProofError::BadClaims("iat is out of range"));
    }
    Ok((
        Proof {
            key,
            jkt,
            claims,
            signing_input: format!("{h}.{p}"),
            header_len: h.len(),
            signature,
        },
        was_remembered,
    ))
}

/// Steps 3–6: the header segment's key.
fn parse_header(h: &str) -> Result<ProofKey, ProofError> {
    let header_bytes = decode_canonical(h).ok_or(ProofError::Malformed)?;
    let header: ProofHeader =
        crate::json::from_object_slice(&header_bytes).map_err(|_| ProofError::BadHeader)?;
    if header.typ != PROOF_TYP {
        return Err(ProofError::BadType);
    }
    if header.alg != "ES256" && header.alg != "EdDSA" {
        return Err(ProofError::BadAlgorithm);
    }
    let key = ProofKey::from_jwk(&header.jwk)?;
    if key.alg() != header.alg {
        return Err(ProofError::BadAlgorithm);
    }
    Ok(key)
}

/// What a proof must match: the request it came with.
#[derive(Debug, Clone, Copy)]
pub struct ProofRequest<'a> {
    /// The request's method (`GET`, `POST`, …).
    pub method: &'a str,
    /// The URL the client was told to use, without query or fragment: the server's public base
    /// URL followed by the request's path.
    pub htu: &'a str,
    /// The session the request presents, when it presents one (then `ath` must be its hash).
    pub access_token: Option<&'a str>,
}

impl Proof {
    /// The key's thumbprint.
    pub fn jkt(&self) -> &Jkt {
        &self.jkt
    }

    /// The key.
    pub fn key(&self) -> &ProofKey {
        &self.key
    }

    /// The claims.
    pub fn claims(&self) -> &ProofClaims {
        &self.claims
    }

    /// The header segment as sent: a connection that verified a signature by this header's key
    /// remembers it.
    pub fn header_segment(&self) -> &str {
        &self.signing_input[..self.header_len]
    }

    /// Verifies the signature with the proof's own key.
    pub fn verify_signature(&self) -> Result<(), ProofError> {
        self.key
            .verify(self.signing_input.as_bytes(), &self.signature)
    }

    /// Checks method, URL and token hash against the request, and `iat` against `now`
    /// (± [`IAT_WINDOW_S`]).
    pub fn check_request(
        &self,
        req: &ProofRequest<'_>,
        now: UnixSeconds,
    ) -> Result<(), ProofError> {
        let c = &self.claims;
        if c.htm != req.method {
            return Err(ProofError::WrongMethod);
        }
        if !same_htu(&c.htu, req.htu) {
            return Err(ProofError::WrongUrl);
        }
        match (req.access_token, c.ath.as_deref()) {
            (Some(token), Some(ath)) => {
                let want = token_hash(token);
                if !bool::from(subtle::ConstantTimeEq::ct_eq(
                    want.as_bytes(),
                    ath.as_bytes(),
                )) {
                    return Err(ProofError::WrongToken);
                }
            }
            (Some(_), None) => return Err(ProofError::WrongToken),
            (None, _) => {}
        }
        if c.iat.abs_diff(now) > IAT_WINDOW_S {
            return Err(ProofError::IatOutOfWindow);
        }
        Ok(())
    }
}

/// Whether a proof's `htu` names the request's URL: equal, ignoring a query or fragment the
/// client left on it (RFC 9449 §4.3 compares without them) and the case of scheme and host.
fn same_htu(claimed: &str, expected: &str) -> bool {
    let claimed = claimed.split(['?', '#']).next().unwrap_or("");
    if claimed.len() != expected.len() {
        return false;
    }
    // Scheme and authority are case-insensitive; the path is not.
    let authority_end = |s: &str| {
        s.find("://")
            .map(|i| i + 3 + s[i + 3..].find('/').unwrap_or(s.len() - i - 3))
            .unwrap_or(0)
    };
    let (a, b) = (authority_end(claimed), authority_end(expected));
    a == b && claimed[..a].eq_ignore_ascii_case(&expected[..b]) && claimed[a..] == expected[b..]
}

/// `ath`: base64url(SHA-256(token)).
pub fn token_hash(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()))
}

/// The `htu` of a request: `base` (a server's public URL, without trailing `/`) and the path,
/// without the query.
pub fn htu(base: &str, path_and_query: &str) -> String {
    let path = path_and_query.split(['?', '#']).next().unwrap_or("/");
    format!("{}{}", base.trim_end_matches('/'), path)
}

/// The stateless nonces of one server instance (RFC 9449 §8): a nonce is the time step it was
/// issued in and a MAC over the instance and that step, under a key only this instance holds.
/// A nonce from another instance (another edge of the same cell, another cell) does not verify;
/// one older than the previous step is stale. No state is shared and none is stored.
pub struct Noncer {
    key: ring::hmac::Key,
    instance: String,
    step_s: u64,
}

impl fmt::Debug for Noncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Noncer")
            .field("instance", &self.instance)
            .field("step_s", &self.step_s)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Length of a nonce's MAC, in bytes (128 bits).
const NONCE_MAC_BYTES: usize = 16;

impl Noncer {
    /// The nonces of `instance`, keyed by `secret` (32 random bytes the instance draws at start:
    /// a restart invalidates its nonces, and its clients retry once with the new one).
    pub fn new(secret: &[u8; 32], instance: &str, step_s: u64) -> Self {
        Self {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
            instance: instance.to_owned(),
            step_s: step_s.max(1),
        }
    }

    /// A fresh random key for [`Noncer::new`].
    pub fn random_secret() -> Result<[u8; 32], ProofError> {
        let mut s = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut s)
            .map_err(|_| ProofError::Signing("no randomness for the nonce key".into()))?;
        Ok(s)
    }

    fn mac(&self, step: u64) -> ring::hmac::Tag {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(b"cellbind-dpop-nonce/1\0");
        ctx.update(self.instance.as_bytes());
        ctx.update(b"\0");
        ctx.update(&step.to_be_bytes());
        ctx.sign()
    }

    /// The step `now` falls in.
    pub fn step(&self, now: UnixSeconds) -> u64 {
        now / self.step_s
    }

    /// The nonce of step `step`.
    pub fn nonce_of(&self, step: u64) -> String {
        let mut raw = Vec::with_capacity(8 + NONCE_MAC_BYTES);
        raw.extend_from_slice(&step.to_be_bytes());
        raw.extend_from_slice(&self.mac(step).as_ref()[..NONCE_MAC_BYTES]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The nonce to hand out at `now`.
    pub fn issue(&self, now: UnixSeconds) -> String {
        self.nonce_of(self.step(now))
    }

    /// Checks a proof's nonce: this instance's, of the current step or the one before. Returns
    /// its step (the replay set keeps a proof's `jti` until that step is no longer accepted).
    pub fn check(&self, nonce: Option<&str>, now: UnixSeconds) -> Result<u64, ProofError> {
        let nonce = nonce.ok_or(ProofError::NonceMissing)?;
        let raw = decode_canonical(nonce).ok_or(ProofError::NonceUnknown)?;
        if raw.len() != 8 + NONCE_MAC_BYTES {
            return Err(ProofError::NonceUnknown);
        }
        let mut step_bytes = [0u8; 8];
        step_bytes.copy_from_slice(&raw[..8]);
        let step = u64::from_be_bytes(step_bytes);
        let tag = self.mac(step);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            &tag.as_ref()[..NONCE_MAC_BYTES],
            &raw[8..],
        )) {
            return Err(ProofError::NonceUnknown);
        }
        let current = self.step(now);
        if step > current {
            // Ours, from a step that has not begun: this instance's clock went back.
            return Err(ProofError::NonceStale);
        }
        if current - step > 1 {
            return Err(ProofError::NonceStale);
        }
        Ok(step)
    }

    /// The length of a step, in seconds.
    pub fn step_s(&self) -> u64 {
        self.step_s
    }
}

/// Builds proofs for one key (the client side): the header is made once per key.
#[derive(Debug, Clone)]
pub struct ProofBuilder {
    header_segment: String,
}

impl ProofBuilder {
    /// The builder for proofs signed by `key`.
    pub fn new(key: &ProofKey) -> Self {
        let header = format!(
            r#"{{"typ":"{PROOF_TYP}","alg":"{}","jwk":{}}}"#,
            key.alg(),
            key.canonical_jwk()
        );
        Self {
            header_segment: URL_SAFE_NO_PAD.encode(header.as_bytes()),
        }
    }

    /// The signing input (`header.payload`) of a proof with `claims`.
    pub fn signing_input(&self, claims: &ProofClaims) -> Result<String, ProofError> {
        let payload =
            serde_json::to_vec(claims).map_err(|e| ProofError::Signing(format!("claims: {e}")))?;
        Ok(format!(
            "{}.{}",
            self.header_segment,
            URL_SAFE_NO_PAD.encode(payload)
        ))
    }

    /// The compact proof: the signing input and the JWS signature over it (64 bytes; an ES256
    /// signature in DER, as Android Keystore and the Secure Enclave return it, is converted).
    pub fn finish(signing_input: String, signature: &[u8]) -> Result<String, ProofError> {
        let fixed = match signature.len() {
            64 => signature.to_vec(),
            _ => es256_der_to_fixed(signature)?.to_vec(),
        };
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(fixed)))
    }
}

/// An ECDSA signature in DER (`SEQUENCE { INTEGER r, INTEGER s }`) as the JWS `r || s` form.
pub fn es256_der_to_fixed(der: &[u8]) -> Result<[u8; 64], ProofError> {
    let bad = || ProofError::Signing("the signature is neither 64 bytes nor DER".into());
    let rest = der.strip_prefix(&[0x30]).ok_or_else(bad)?;
    let (&len, rest) = rest.split_first().ok_or_else(bad)?;
    if usize::from(len) != rest.len() || len >= 0x80 {
        return Err(bad());
    }
    let mut out = [0u8; 64];
    let mut rest = rest;
    for half in 0..2 {
        let r = rest.strip_prefix(&[0x02]).ok_or_else(bad)?;
        let (&n, r) = r.split_first().ok_or_else(bad)?;
        let n = usize::from(n);
        if n == 0 || n > 33 || r.len() < n {
            return Err(bad());
        }
        let (int, r) = r.split_at(n);
        let int = match int {
            [0, tail @ ..] if n == 33 => tail,
            _ if n == 33 => return Err(bad()),
            _ => int,
        };
        let start = half * 32 + (32 - int.len());
        out[start..half * 32 + 32].copy_from_slice(int);
        rest = r;
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// A software P-256 key (ES256): what the SDK keeps in its store slot when the app gives it no
/// platform key. Its PKCS#8 document is the persisted form; `Debug` never shows it.
pub struct SoftwareP256Key {
    pair: ring::signature::EcdsaKeyPair,
    pkcs8: zeroize::Zeroizing<Vec<u8>>,
    public: ProofKey,
}

impl fmt::Debug for SoftwareP256Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SoftwareP256Key({})", self.public.thumbprint())
    }
}

impl SoftwareP256Key {
    /// A new random key.
    pub fn generate() -> Result<Self, ProofError> {
        let rng = ring::rand::SystemRandom::new();
        let doc = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .map_err(|_| ProofError::Signing("could not generate a P-256 key".into()))?;
        Self::from_pkcs8(doc.as_ref())
    }

    /// The key of a PKCS#8 document (as [`SoftwareP256Key::pkcs8`] returned it).
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, ProofError> {
        let rng = ring::rand::SystemRandom::new();
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &rng,
        )
        .map_err(|_| ProofError::Signing("not a P-256 PKCS#8 key".into()))?;
        let public =
            ProofKey::p256_from_sec1(ring::signature::KeyPair::public_key(&pair).as_ref())?;
        Ok(Self {
            pair,
            pkcs8: zeroize::Zeroizing::new(pkcs8.to_vec()),
            public,
        })
    }

    /// The persisted form (secret: store it as the session token is stored).
    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The public key.
    pub fn public(&self) -> &ProofKey {
        &self.public
    }

    /// An ES256 signature (`r || s`) over `message`.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, ProofError> {
        let rng = ring::rand::SystemRandom::new();
        self.pair
            .sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| ProofError::Signing("P-256 signing failed".into()))
    }
}

#[cfg(test)]
mod tests;
