//! Device-bound sessions (DPoP, RFC 9449; `protocol::dpop`) on the client side.
//!
//! A cell binds a session to a device key when its sign-in carries a proof by that key: the
//! session's token then names the key's thumbprint (`cnf.jkt`), and every request that presents
//! the session must carry a fresh proof by the same key, made for that request (method, URL
//! without query, the token's hash, a new `jti`, the server's time and its latest nonce).
//!
//! - **The key**: the app's own [`DeviceKey`] (Android Keystore / StrongBox, the Secure
//!   Enclave: [`crate::ClientBuilder::device_key`]), else a software P-256 key the SDK makes at
//!   each sign-in and keeps with the session in the app's store (its PKCS#8 in the session
//!   blob, never in `Debug` or a log), so it lives and dies with the session: renewals, transfers
//!   and rebinds keep it, a sign-out or an ended session forgets it, the next sign-in makes a
//!   new one.
//! - **When a proof is sent**: on every sign-in and rebind (so an `optional` cell binds the
//!   session and a `required` one accepts it), and on every request that presents a session
//!   whose token names a key ([`crate::SessionInfo::key_thumbprint`]: the token's payload is
//!   read without verifying it, as a hint of what the cell will ask for). A session without
//!   `cnf` (minted before binding, or at a cell whose binding is `off`) is sent as before,
//!   without proofs.
//! - **Nonces and clocks, per endpoint**: every answer's `DPoP-Nonce` is the nonce of the next
//!   proof to that endpoint, and every answer's `Date` tells how far the device's clock is from
//!   the cell's, so a proof's `iat` is the cell's time even on a phone whose clock is minutes
//!   off (the cells accept ±300 s). An endpoint not heard from yet gets the offset last learned
//!   from any endpoint.
//! - **One retry with a fresh proof** (the transport): a `401` that asks for a nonce
//!   (`use_dpop_nonce`: `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`), or a `DPOP_PROOF_INVALID`
//!   whose answer's `Date` shows that the proof's `iat` was far off (the device's clock jumped),
//!   is sent again once, at once, with a new proof (new `jti`, the new nonce, the corrected
//!   time). The edge refused it before anything was forwarded, so this is safe for any request.
//!   Every other attempt (the retries of DESIGN §7, an outbox write at every flush) makes its
//!   own proof too: a proof is never sent twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use protocol::Jkt;
use protocol::dpop::{DPOP_NONCE_HEADER, ProofBuilder, ProofClaims, SoftwareP256Key};

pub use protocol::dpop::ProofKey;

use crate::Error;

/// Why a [`DeviceKey`] could not give its public key or a signature, with a human reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceKeyError(pub String);

/// A key that proves this device: what signs the DPoP proofs of bound sessions. Give the
/// client one ([`crate::ClientBuilder::device_key`]) to keep the private key in the platform's
/// keystore; without one the SDK uses a software P-256 key it keeps with the session.
///
/// Implementations must be cheap to call repeatedly; `sign` runs on a blocking thread of the
/// SDK's runtime, once per request attempt of a bound session.
pub trait DeviceKey: Send + Sync + 'static {
    /// The public key: P-256 (`ES256`) or Ed25519 (`EdDSA`). Read once, when the client is
    /// built; [`public_key_from_jwk`] reads one from a public JWK.
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError>;
    /// Signs `message` with the private key: for P-256, ECDSA with SHA-256 over `message`,
    /// either as the 64-byte `r || s` or DER-encoded (what Android Keystore and the Secure
    /// Enclave return; the SDK converts it); for Ed25519, the 64-byte signature.
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DeviceKeyError>;
}

/// A public key from its JWK (JSON text): `{"kty":"EC","crv":"P-256","x":…,"y":…}` or
/// `{"kty":"OKP","crv":"Ed25519","x":…}`, coordinates in base64url; a private member is refused.
pub fn public_key_from_jwk(jwk: &str) -> Result<ProofKey, DeviceKeyError> {
    let v: serde_json::Value = serde_json::from_str(jwk)
        .map_err(|e| DeviceKeyError(format!("the public key is not a JWK: {e}")))?;
    ProofKey::from_jwk(&v).map_err(|e| DeviceKeyError(format!("the public key: {e}")))
}

/// The SDK's own software key.
impl DeviceKey for SoftwareP256Key {
    fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
        Ok(self.public().clone())
    }
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
        SoftwareP256Key::sign(self, message).map_err(|e| DeviceKeyError(e.to_string()))
    }
}

/// The thumbprint of the key a session's token is bound to (`cnf.jkt` of its payload), read
/// without verifying the token: `None` for an unbound session or a token that does not parse
/// (the cell decides in any case; a wrong reading costs one refused request).
pub(crate) fn bound_key(token: &str) -> Option<Jkt> {
    #[derive(serde::Deserialize)]
    struct Payload {
        cnf: Option<Cnf>,
    }
    #[derive(serde::Deserialize)]
    struct Cnf {
        jkt: Jkt,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<Payload>(&bytes)
        .ok()?
        .cnf
        .map(|c| c.jkt)
}

/// A device key in use: the key, its thumbprint and its proofs' header (made once). Cheap to
/// clone. Two are equal when their thumbprints are; `Debug` shows the thumbprint only.
#[derive(Clone)]
pub(crate) struct Signer(Arc<SignerInner>);

struct SignerInner {
    key: Arc<dyn DeviceKey>,
    jkt: Jkt,
    builder: ProofBuilder,
    /// The SDK's own key (persisted with the session); `None` for the app's.
    software: Option<Arc<SoftwareP256Key>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.0.software.is_some() {
            "software"
        } else {
            "app"
        };
        write!(f, "Signer({kind}, {})", self.0.jkt)
    }
}

impl PartialEq for Signer {
    fn eq(&self, other: &Self) -> bool {
        self.0.jkt == other.0.jkt
    }
}
impl Eq for Signer {}

fn key_error(e: impl std::fmt::Display) -> Error {
    Error::DeviceKey(e.to_string())
}

impl Signer {
    fn of(key: Arc<dyn DeviceKey>, software: Option<Arc<SoftwareP256Key>>) -> Result<Self, Error> {
        let public = key.public_key().map_err(key_error)?;
        Ok(Self(Arc::new(SignerInner {
            key,
            jkt: public.thumbprint(),
            builder: ProofBuilder::new(&public),
            software,
        })))
    }

    /// The app's key (its public key is read now).
    pub(crate) fn app(key: Arc<dyn DeviceKey>) -> Result<Self, Error> {
        Self::of(key, None)
    }

    /// A new software key.
    pub(crate) fn generate() -> Result<Self, Error> {
        Self::software(SoftwareP256Key::generate().map_err(key_error)?)
    }

    /// The software key of a stored PKCS#8 document.
    pub(crate) fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, Error> {
        Self::software(SoftwareP256Key::from_pkcs8(pkcs8).map_err(key_error)?)
    }

    fn software(key: SoftwareP256Key) -> Result<Self, Error> {
        let key = Arc::new(key);
        Self::of(key.clone(), Some(key))
    }

    /// The key's thumbprint (what a session bound to it names as `cnf.jkt`).
    pub(crate) fn jkt(&self) -> &Jkt {
        &self.0.jkt
    }

    /// The PKCS#8 document of the SDK's own key (persisted with the session); `None` for the
    /// app's key.
    pub(crate) fn pkcs8(&self) -> Option<&[u8]> {
        self.0.software.as_deref().map(SoftwareP256Key::pkcs8)
    }

    /// A proof with `claims`, signed by the key. The app's key signs on a blocking thread (a
    /// keystore may take tens of milliseconds); the SDK's own in place.
    pub(crate) async fn proof(&self, claims: &ProofClaims) -> Result<String, Error> {
        let input = self.0.builder.signing_input(claims).map_err(key_error)?;
        let signature = if let Some(key) = &self.0.software {
            DeviceKey::sign(&**key, input.as_bytes()).map_err(key_error)?
        } else {
            let key = self.0.key.clone();
            let message = input.clone();
            tokio::task::spawn_blocking(move || key.sign(message.as_bytes()))
                .await
                .map_err(|e| Error::DeviceKey(format!("the signing task failed: {e}")))?
                .map_err(key_error)?
        };
        ProofBuilder::finish(input, &signature).map_err(key_error)
    }
}

/// Most endpoints whose nonce and clock are kept (a client talks to a handful of cells).
const MAX_ENDPOINTS: usize = 64;
/// Longest nonce kept, in bytes (the edges' are 32).
const MAX_NONCE_BYTES: usize = 256;

/// What one endpoint last said about itself.
#[derive(Debug, Default, Clone)]
struct Heard {
    /// Its latest `DPoP-Nonce`.
    nonce: Option<String>,
    /// Its clock minus the device's, in seconds (from its latest `Date`).
    offset: Option<i64>,
}

/// The nonces and clock offsets of the endpoints, learned from every answer.
#[derive(Debug, Default)]
pub(crate) struct ServerTimes {
    /// Never held across an await.
    heard: Mutex<(HashMap<String, Heard>, Option<i64>)>,
}

/// The time an answer's `Date` header names, in unix seconds (HTTP dates have whole seconds).
pub(crate) fn date_of(headers: &HeaderMap) -> Option<u64> {
    parse_imf_fixdate(headers.get(http::header::DATE)?.to_str().ok()?)
}

/// An HTTP date in the IMF-fixdate form every HTTP/1.1 server must send (RFC 9110 §5.6.7),
/// `Sun, 06 Nov 1994 08:49:37 GMT`, as unix seconds; `None` for anything else (the obsolete
/// RFC 850 and asctime forms included: the cells send IMF-fixdate). Its own parser rather than a
/// crate: 30 lines against a dependency of the shipped library.
fn parse_imf_fixdate(s: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = s.as_bytes();
    if b.len() != 29 || &b[3..5] != b", " || &b[25..] != b" GMT" {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let digits = s.get(r)?;
        digits
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let day = num(5..7)?;
    let month = 1 + MONTHS.iter().position(|m| s.get(8..11) == Some(*m))? as u64;
    let year = num(12..16)?;
    let (h, m, sec) = (num(17..19)?, num(20..22)?, num(23..25)?);
    let separators = [(7, b' '), (11, b' '), (16, b' '), (19, b':'), (22, b':')];
    let shaped = separators.iter().all(|(i, c)| b[*i] == *c);
    if !shaped || year < 1970 || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

fn signed(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

impl ServerTimes {
    /// Learns from an answer of `endpoint` received at device time `local_now`: its nonce and
    /// its clock.
    pub(crate) fn learn(&self, endpoint: &str, headers: &HeaderMap, local_now: u64) {
        let nonce = headers
            .get(DPOP_NONCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|n| !n.is_empty() && n.len() <= MAX_NONCE_BYTES)
            .map(str::to_owned);
        let offset = date_of(headers).map(|d| signed(d).saturating_sub(signed(local_now)));
        if nonce.is_none() && offset.is_none() {
            return;
        }
        let Ok(mut held) = self.heard.lock() else {
            return;
        };
        let (endpoints, last_offset) = &mut *held;
        if !endpoints.contains_key(endpoint) && endpoints.len() >= MAX_ENDPOINTS {
            endpoints.clear();
        }
        let heard = endpoints.entry(endpoint.to_owned()).or_default();
        if nonce.is_some() {
            heard.nonce = nonce;
        }
        if offset.is_some() {
            heard.offset = offset;
            *last_offset = offset;
        }
    }

    /// The nonce for the next proof to `endpoint`, if it sent one.
    pub(crate) fn nonce(&self, endpoint: &str) -> Option<String> {
        let held = self.heard.lock().ok()?;
        held.0.get(endpoint)?.nonce.clone()
    }

    /// `endpoint`'s time when the device's clock says `local_now`: corrected by its last
    /// offset, else by the offset last learned from any endpoint.
    pub(crate) fn server_now(&self, endpoint: &str, local_now: u64) -> u64 {
        let offset = self
            .heard
            .lock()
            .ok()
            .and_then(|held| held.0.get(endpoint).and_then(|h| h.offset).or(held.1));
        let t = signed(local_now).saturating_add(offset.unwrap_or(0));
        u64::try_from(t).unwrap_or(0)
    }
}

/// A new proof id: 128 random bits, base64url.
pub(crate) fn new_jti() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn nonces_and_clock_offsets_are_kept_per_endpoint() {
        let t = ServerTimes::default();
        let (a, b) = ("https://a.example", "https://b.example");
        assert_eq!(t.nonce(a), None);
        assert_eq!(t.server_now(a, 1000), 1000, "nothing learned yet");
        // 2015-10-21T07:28:00Z = 1445412480
        let date = "Wed, 21 Oct 2015 07:28:00 GMT";
        t.learn(
            a,
            &headers(&[("date", date), ("dpop-nonce", "n-a")]),
            1_445_412_480 - 600,
        );
        assert_eq!(t.nonce(a).as_deref(), Some("n-a"));
        assert_eq!(t.server_now(a, 1_445_412_480 - 600), 1_445_412_480);
        // b was never heard from: the last offset learned anywhere, and no nonce
        assert_eq!(t.server_now(b, 100), 700);
        assert_eq!(t.nonce(b), None);
        // b's own clock runs behind; a keeps its own offset
        t.learn(b, &headers(&[("date", date)]), 1_445_412_480 + 30);
        assert_eq!(t.server_now(b, 1000), 970);
        assert_eq!(t.server_now(a, 1000), 1600);
        // an answer without a nonce keeps the nonce held; a new one replaces it
        t.learn(a, &headers(&[("date", date)]), 1_445_412_480);
        assert_eq!(t.nonce(a).as_deref(), Some("n-a"));
        t.learn(a, &headers(&[("dpop-nonce", "n-a2")]), 0);
        assert_eq!(t.nonce(a).as_deref(), Some("n-a2"));
        assert_eq!(t.server_now(a, 1000), 1000, "the offset of its last Date");
        // a date that does not parse teaches nothing
        t.learn(b, &headers(&[("date", "yesterday")]), 5);
        assert_eq!(t.server_now(b, 1000), 970);
        // bounded
        for i in 0..MAX_ENDPOINTS + 5 {
            t.learn(
                &format!("https://c{i}.example"),
                &headers(&[("dpop-nonce", "n")]),
                0,
            );
        }
        assert!(t.heard.lock().unwrap().0.len() <= MAX_ENDPOINTS);
    }

    #[test]
    fn http_dates_are_read_in_the_imf_fixdate_form() {
        for (date, want) in [
            ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
            ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777),
            ("Wed, 21 Oct 2015 07:28:00 GMT", 1_445_412_480),
            ("Tue, 29 Feb 2028 23:59:59 GMT", 1_835_481_599),
            ("Fri, 15 Jan 2027 08:00:00 GMT", 1_800_000_000),
        ] {
            assert_eq!(parse_imf_fixdate(date), Some(want), "{date}");
        }
        let mut h = HeaderMap::new();
        h.insert("date", "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap());
        assert_eq!(date_of(&h), Some(784_111_777));
        for bad in [
            "",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Xyz 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT ",
            "Sun, 06 Nov 1994 24:49:37 GMT",
            "Sun, 06 Nov 1969 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08-49-37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMTé",
        ] {
            assert_eq!(parse_imf_fixdate(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_bound_key_is_read_from_the_tokens_payload() {
        let jkt = SoftwareP256Key::generate().unwrap().public().thumbprint();
        let payload = URL_SAFE_NO_PAD.encode(format!(
            r#"{{"sub":"c-1.ana","cnf":{{"jkt":"{jkt}"}},"gen":3}}"#
        ));
        assert_eq!(bound_key(&format!("e30.{payload}.c2ln")), Some(jkt));
        let unbound = URL_SAFE_NO_PAD.encode(r#"{"sub":"c-1.ana"}"#);
        assert_eq!(bound_key(&format!("e30.{unbound}.c2ln")), None);
        for junk in ["", "tok.sign.in", "a.!!.c", "e30.e30"] {
            assert_eq!(bound_key(junk), None, "{junk}");
        }
        let bad_jkt = URL_SAFE_NO_PAD.encode(r#"{"cnf":{"jkt":"short"}}"#);
        assert_eq!(bound_key(&format!("e30.{bad_jkt}.c2ln")), None);
    }

    /// A P-256 key that answers in DER, as the platform keystores do.
    struct DerKey(SoftwareP256Key);

    impl DeviceKey for DerKey {
        fn public_key(&self) -> Result<ProofKey, DeviceKeyError> {
            Ok(self.0.public().clone())
        }
        fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DeviceKeyError> {
            let fixed = DeviceKey::sign(&self.0, message)?;
            Ok(crate::testing::der_of(&fixed))
        }
    }

    #[tokio::test]
    async fn proofs_verify_whoever_holds_the_key_and_debug_shows_only_the_thumbprint() {
        let claims = ProofClaims {
            jti: new_jti(),
            htm: "GET".into(),
            htu: "https://cell.example/api/x".into(),
            iat: 1_800_000_000,
            ath: Some(protocol::dpop::token_hash("tok")),
            nonce: Some("n".into()),
        };
        let software = Signer::generate().unwrap();
        let pkcs8 = software.pkcs8().unwrap().to_vec();
        let again = Signer::from_pkcs8(&pkcs8).unwrap();
        assert_eq!(again, software);
        let app = Signer::app(Arc::new(DerKey(SoftwareP256Key::generate().unwrap()))).unwrap();
        assert!(app.pkcs8().is_none());
        assert_ne!(app, software);
        for s in [&software, &again, &app] {
            let raw = s.proof(&claims).await.unwrap();
            let p = protocol::dpop::parse(&raw).unwrap();
            p.verify_signature().unwrap();
            assert_eq!(p.jkt(), s.jkt());
            assert_eq!(p.claims(), &claims);
        }
        let shown = format!("{software:?}");
        assert!(shown.contains(software.jkt().as_str()), "{shown}");
        let b64 = URL_SAFE_NO_PAD.encode(&pkcs8);
        assert!(!shown.contains(&b64[..16]), "{shown}");
        assert!(matches!(
            Signer::from_pkcs8(b"junk"),
            Err(Error::DeviceKey(_))
        ));
        assert!(public_key_from_jwk("{}").is_err());
        assert!(
            public_key_from_jwk(r#"{"kty":"EC","crv":"P-256","x":"AA","y":"AA","d":"AA"}"#)
                .is_err()
        );
        let jwk = software_jwk(&software);
        assert_eq!(
            public_key_from_jwk(&jwk).unwrap().thumbprint(),
            *software.jkt()
        );
    }

    fn software_jwk(s: &Signer) -> String {
        let key = SoftwareP256Key::from_pkcs8(s.pkcs8().unwrap()).unwrap();
        key.public().canonical_jwk()
    }
}
