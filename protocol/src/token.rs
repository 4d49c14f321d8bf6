//! Session and transfer-ticket tokens (DESIGN §3): claims, minting, and the one strict verifier.
//!
//! The verifier runs these checks in this order and stops at the first failure
//! (each row is a row of the threat model, `docs/THREAT-MODEL.md`):
//!
//! | step | check | attack |
//! |---|---|---|
//! | 1 | raw size ≤ cap, before anything is parsed | A11 |
//! | 2 | exactly three non-empty segments of `[A-Za-z0-9_-]`; canonical base64url | A12, A14, A15 |
//! | 3 | header is a JSON object of exactly `{alg, typ, kid}`: no `crit`, `cty`, `jwk`, `jku`, `x5u`, `x5c`, no duplicates, not the array form serde would read | A5, A6, A10, A12 |
//! | 4 | `alg` is exactly `EdDSA` (fixed here, never read from the token's choice of key) | A1, A2, A3 |
//! | 5 | `typ` is exactly the expected kind (session vs ticket) | A16 |
//! | 6 | `kid` is a valid [`Kid`] present in the caller's [`KeySet`] | A4, A17 |
//! | 7 | Ed25519 signature, 64 bytes, over `header.payload` | A7, A8 |
//! | 8 | claims are a JSON object that deserializes into the typed struct: no unknown or duplicate members, integer times | A10, A13, A22 |
//! | 9 | `iss` and `aud` equal this verifier's exactly; `aud` is a single string | A17 |
//! | 10 | `iat`/`nbf` ≤ now + leeway, `exp` > now − leeway, `exp − iat` ≤ lifetime, times ≤ 2^53 | A13 |
//!
//! Revocation and ownership are the caller's next steps (they need state this crate does not hold).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ids::MAX_TOKEN_HEADER_BYTES;
#[cfg(feature = "mint")]
use crate::ids::SessionToken;
use crate::ids::{CellId, ClientKind, ContractorId, Generation, Jkt, Kid, SessionId, SubjectId};
use crate::jwks::{KeySet, PublicKey};
use crate::time::{MAX_JSON_SAFE_INT, UnixSeconds};

/// The only signature algorithm (ATTACKS A1–A3).
pub const ALG: &str = "EdDSA";
/// `typ` of a session.
pub const SESSION_TYP: &str = "cellbind-session+jwt";
/// `typ` of a transfer ticket.
pub const TICKET_TYP: &str = "cellbind-transfer+jwt";
/// Default session lifetime: 30 days, in seconds.
pub const DEFAULT_SESSION_LIFETIME_S: u64 = 30 * 24 * 3600;
/// Default absolute lifetime from `auth_time` across renewals: 90 days, in seconds.
pub const DEFAULT_ABSOLUTE_LIFETIME_S: u64 = 90 * 24 * 3600;
/// Longest a transfer ticket may live: 5 minutes, in seconds.
pub const TICKET_MAX_LIFETIME_S: u64 = 5 * 60;
/// Clock leeway applied to `exp`, `nbf` and `iat`, in seconds (ATTACKS A13).
pub const LEEWAY_S: u64 = 60;

/// Claims of a session token (DESIGN §3, contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionClaims {
    pub iss: String,
    pub aud: CellId,
    pub sub: SubjectId,
    pub ctr: ContractorId,
    pub cell: CellId,
    #[serde(rename = "gen")]
    pub generation: Generation,
    pub iat: UnixSeconds,
    pub nbf: UnixSeconds,
    pub exp: UnixSeconds,
    pub auth_time: UnixSeconds,
    pub jti: SessionId,
    pub cli: ClientKind,
    /// The device key the session is bound to (RFC 9449 §6.1): absent for a bearer session.
    /// A bound session is accepted only with a `DPoP` proof by that key (`dpop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Confirmation>,
}

/// The confirmation claim of a bound session: the thumbprint of its device key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Confirmation {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub jkt: Jkt,
}

impl SessionClaims {
    /// The thumbprint of the key this session is bound to, if it is bound.
    pub fn jkt(&self) -> Option<&Jkt> {
        self.cnf.as_ref().map(|c| &c.jkt)
    }
}

/// Claims of a transfer ticket: signed by the source cell for the target cell (`aud`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TicketClaims {
    /// The source cell's endpoint URL.
    pub iss: String,
    /// The target cell.
    pub aud: CellId,
    /// The source cell.
    pub src: CellId,
    pub sub: SubjectId,
    pub ctr: ContractorId,
    /// The generation the source released (the old session's `gen`).
    #[serde(rename = "gen")]
    pub generation: Generation,
    /// The generation the target must be active at.
    pub new_gen: Generation,
    /// The old session's id and expiry: the new session never outlives it.
    pub sid: SessionId,
    pub sexp: UnixSeconds,
    pub auth_time: UnixSeconds,
    pub cli: ClientKind,
    pub iat: UnixSeconds,
    pub nbf: UnixSeconds,
    pub exp: UnixSeconds,
    /// The ticket's own id (burned at the target: single use).
    pub jti: SessionId,
    /// The old session's device-key thumbprint: the target rebinds only with a proof by the
    /// same key, and the new session is bound to it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub jkt: Option<Jkt>,
}

/// What a token kind must provide to the verifier.
pub trait TokenClaims: DeserializeOwned + Serialize {
    const TYP: &'static str;
    fn iss(&self) -> &str;
    fn aud(&self) -> &CellId;
    fn iat(&self) -> UnixSeconds;
    fn nbf(&self) -> UnixSeconds;
    fn exp(&self) -> UnixSeconds;
    /// Kind-specific consistency checks.
    fn check(&self) -> Result<(), TokenError> {
        Ok(())
    }
}

/// The registered-claim accessors of [`TokenClaims`], read from the fields of the same name
/// (both token kinds declare them; their types stay in the signed structs).
macro_rules! registered_claims {
    () => {
        fn iss(&self) -> &str {
            &self.iss
        }
        fn aud(&self) -> &CellId {
            &self.aud
        }
        fn iat(&self) -> UnixSeconds {
            self.iat
        }
        fn nbf(&self) -> UnixSeconds {
            self.nbf
        }
        fn exp(&self) -> UnixSeconds {
            self.exp
        }
    };
}

impl TokenClaims for SessionClaims {
    const TYP: &'static str = SESSION_TYP;
    registered_claims!();
    fn check(&self) -> Result<(), TokenError> {
        if self.cell != self.aud {
            return Err(TokenError::WrongAudience);
        }
        if self.auth_time > self.iat || self.auth_time > MAX_JSON_SAFE_INT {
            return Err(TokenError::BadClaims("auth_time after iat".into()));
        }
        Ok(())
    }
}

impl TokenClaims for TicketClaims {
    const TYP: &'static str = TICKET_TYP;
    registered_claims!();
    fn check(&self) -> Result<(), TokenError> {
        if self.new_gen <= self.generation {
            return Err(TokenError::BadClaims("new_gen not above gen".into()));
        }
        if self.src == self.aud {
            return Err(TokenError::WrongAudience);
        }
        Ok(())
    }
}

/// Why a token was refused. Each maps to one public code via [`TokenError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    #[error("token is larger than {max} bytes")]
    TooLarge { max: usize },
    #[error("token is not a compact JWS of three canonical base64url segments")]
    Malformed,
    #[error("token header is not exactly alg, typ and kid")]
    BadHeader,
    #[error("token alg is not EdDSA")]
    BadAlgorithm,
    #[error("token typ is not {expected}")]
    BadType { expected: &'static str },
    #[error("token kid is not a valid key id")]
    BadKid,
    #[error("token is signed with a key this cell does not know")]
    UnknownKid(Kid),
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token claims are malformed: {0}")]
    BadClaims(String),
    #[error("token was issued by another issuer")]
    WrongIssuer,
    #[error("token is for another audience")]
    WrongAudience,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token lifetime exceeds the allowed maximum")]
    LifetimeTooLong,
    #[error("token could not be signed: {0}")]
    Signing(String),
}

impl TokenError {
    /// The public error code for a refused session (one mapping table).
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            TokenError::Expired => crate::ErrorCode::SessionExpired,
            TokenError::Signing(_) => crate::ErrorCode::Internal,
            _ => crate::ErrorCode::SessionInvalid,
        }
    }
}

/// The header we mint and the only one we accept.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictHeader {
    alg: String,
    typ: String,
    kid: String,
}

/// What the verifier expects of a token.
#[derive(Debug, Clone)]
pub struct Expectations<'a> {
    /// `iss` exactly.
    pub issuer: &'a str,
    /// `aud` exactly.
    pub audience: &'a CellId,
    /// Longest allowed `exp - iat`, in seconds.
    pub max_lifetime_s: u64,
    /// Clock leeway, in seconds.
    pub leeway_s: u64,
}

/// A token that passed every check.
#[derive(Debug, Clone)]
pub struct Verified<C> {
    pub kid: Kid,
    pub claims: C,
}

fn b64(segment: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| TokenError::Malformed)
}

/// The parts of a token after the structural checks (steps 1–6): enough to look up the key.
#[derive(Debug)]
pub struct Parsed<'t> {
    pub kid: Kid,
    signing_input: &'t str,
    payload_b64: &'t str,
    signature_b64: &'t str,
}

/// Steps 1–5 and the kid syntax of step 6. `max_bytes` is the cap for where the token came
/// from (cookie or header).
pub fn parse<'t>(
    token: &'t str,
    expected_typ: &'static str,
    max_bytes: usize,
) -> Result<Parsed<'t>, TokenError> {
    let cap = max_bytes.min(MAX_TOKEN_HEADER_BYTES);
    if token.len() > cap {
        return Err(TokenError::TooLarge { max: cap });
    }
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let mut parts = token.splitn(4, '.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    if !(ok(h) && ok(p) && ok(s)) {
        return Err(TokenError::Malformed);
    }
    let header_json = b64(h)?;
    let header: StrictHeader =
        crate::json::from_object_slice(&header_json).map_err(|_| TokenError::BadHeader)?;
    if header.alg != ALG {
        return Err(TokenError::BadAlgorithm);
    }
    if header.typ != expected_typ {
        return Err(TokenError::BadType {
            expected: expected_typ,
        });
    }
    let kid = Kid::new(header.kid).map_err(|_| TokenError::BadKid)?;
    Ok(Parsed {
        kid,
        signing_input: &token[..h.len() + 1 + p.len()],
        payload_b64: p,
        signature_b64: s,
    })
}

impl Parsed<'_> {
    /// Steps 7–10 with the key the caller found for [`Parsed::kid`].
    pub fn verify<C: TokenClaims>(
        self,
        key: &PublicKey,
        expect: &Expectations<'_>,
        now: UnixSeconds,
    ) -> Result<Verified<C>, TokenError> {
        let sig = b64(self.signature_b64)?;
        if sig.len() != 64 || !key.verify(self.signing_input.as_bytes(), &sig) {
            return Err(TokenError::BadSignature);
        }
        let payload = b64(self.payload_b64)?;
        let claims: C = crate::json::from_object_slice(&payload)
            .map_err(|e| TokenError::BadClaims(e.classify_name().into()))?;
        check_claims(&claims, expect, now)?;
        Ok(Verified {
            kid: self.kid,
            claims,
        })
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Data => "missing, unknown, duplicate or mistyped claim",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}

fn check_claims<C: TokenClaims>(
    c: &C,
    expect: &Expectations<'_>,
    now: UnixSeconds,
) -> Result<(), TokenError> {
    let (iat, nbf, exp) = (c.iat(), c.nbf(), c.exp());
    if iat > MAX_JSON_SAFE_INT || nbf > MAX_JSON_SAFE_INT || exp > MAX_JSON_SAFE_INT {
        return Err(TokenError::BadClaims("time beyond 2^53".into()));
    }
    if c.iss() != expect.issuer {
        return Err(TokenError::WrongIssuer);
    }
    if c.aud() != expect.audience {
        return Err(TokenError::WrongAudience);
    }
    c.check()?;
    let leeway = expect.leeway_s;
    if iat > now.saturating_add(leeway) || nbf > now.saturating_add(leeway) {
        return Err(TokenError::NotYetValid);
    }
    if exp < iat || exp - iat > expect.max_lifetime_s {
        return Err(TokenError::LifetimeTooLong);
    }
    if exp
        > now
            .saturating_add(expect.max_lifetime_s)
            .saturating_add(leeway)
    {
        return Err(TokenError::LifetimeTooLong);
    }
    if now >= exp.saturating_add(leeway) {
        return Err(TokenError::Expired);
    }
    Ok(())
}

/// The whole verification (steps 1–10) against a key set.
pub fn verify<C: TokenClaims>(
    token: &str,
    keys: &KeySet,
    expect: &Expectations<'_>,
    now: UnixSeconds,
    max_bytes: usize,
) -> Result<Verified<C>, TokenError> {
    let parsed = parse(token, C::TYP, max_bytes)?;
    let Some(key) = keys.get(parsed.kid.as_str()) else {
        return Err(TokenError::UnknownKid(parsed.kid));
    };
    let key = key.clone();
    parsed.verify(&key, expect, now)
}

/// An Ed25519 signing key with its kid. `Debug` never shows the secret.
pub struct SigningKey {
    kid: Kid,
    key: ed25519_dalek::SigningKey,
    /// The key as PKCS#8, the form jsonwebtoken signs with (minting only).
    #[cfg(feature = "mint")]
    pkcs8: zeroize::Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({}, <redacted>)", self.kid)
    }
}

impl SigningKey {
    /// From a 32-byte seed (the caller supplies the randomness).
    pub fn from_seed(kid: Kid, seed: &[u8; 32]) -> Result<Self, TokenError> {
        let key = ed25519_dalek::SigningKey::from_bytes(seed);
        #[cfg(feature = "mint")]
        let pkcs8 = {
            use ed25519_dalek::pkcs8::EncodePrivateKey as _;
            let der = key
                .to_pkcs8_der()
                .map_err(|e| TokenError::Signing(e.to_string()))?;
            zeroize::Zeroizing::new(der.as_bytes().to_vec())
        };
        Ok(Self {
            kid,
            key,
            #[cfg(feature = "mint")]
            pkcs8,
        })
    }

    pub fn kid(&self) -> &Kid {
        &self.kid
    }

    /// The 32-byte seed, for encrypting at rest. Handle with care.
    pub fn seed(&self) -> zeroize::Zeroizing<[u8; 32]> {
        zeroize::Zeroizing::new(self.key.to_bytes())
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey::from_dalek(self.key.verifying_key())
    }

    pub fn public_bytes(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// Raw Ed25519 signature (used for the placement map's detached signature).
    pub fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer as _;
        self.key.sign(message).to_bytes()
    }

    /// Mints a compact JWS with header `{"alg":"EdDSA","typ":C::TYP,"kid":kid}` through
    /// jsonwebtoken (rust_crypto backend). Only with the `mint` feature: the servers mint,
    /// clients only verify.
    #[cfg(feature = "mint")]
    pub fn mint<C: TokenClaims>(&self, claims: &C) -> Result<SessionToken, TokenError> {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.typ = Some(C::TYP.to_owned());
        header.kid = Some(self.kid.as_str().to_owned());
        let key = jsonwebtoken::EncodingKey::from_ed_der(&self.pkcs8);
        let token = jsonwebtoken::encode(&header, claims, &key)
            .map_err(|e| TokenError::Signing(e.to_string()))?;
        SessionToken::new(token).map_err(|e| TokenError::Signing(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
