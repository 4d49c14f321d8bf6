//! The server side of device-bound sessions (RFC 9449, `protocol::dpop`): what one server
//! instance (an edge instance, an auth-service replica) holds to verify proofs with no shared
//! state.
//!
//! - Its own nonces ([`protocol::dpop::Noncer`], keyed by 32 random bytes drawn at start): a
//!   nonce names this instance and a time step, so a proof captured here is refused at every
//!   other instance (another edge of the same cell, another cell) and once its step is past.
//! - Its replay set ([`ReplaySet`]): every accepted proof's `jti`, kept while its nonce is
//!   accepted (two steps) and no longer, bounded ([`DEFAULT_MAX_PROOFS_PER_STEP`]).
//! - What a connection proved ([`ConnectionProofs`]): the keys whose signature already verified
//!   on this TLS connection. A later proof on the same connection by the same key (byte-equal
//!   proof header) skips the signature: nobody but the client that made the first proof can
//!   send on the connection (TLS), so the signature would prove nothing new. Every other check
//!   (method, URL, token hash, nonce, replay, the session's thumbprint) runs per request.
//!   Behind a proxy that terminates TLS itself, one connection carries many clients: there the
//!   caller passes no connection, and every proof's signature is verified (`docs/DESIGN.md` §3).
//!
//! [`DpopVerifier::verify`] runs the checks in this order and stops at the first failure:
//! exactly one `DPoP` header; the proof parses (`protocol::dpop::parse`); its nonce is this
//! instance's and fresh (else the challenge asks for the current one); method, URL, `ath` and
//! `iat`; the signature (unless the connection proved this key); the session's thumbprint; the
//! replay set.

use std::collections::HashSet;
use std::hash::Hasher as _;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderName, HeaderValue};
use protocol::Jkt;
use protocol::dpop::{
    DPOP_HEADER, DPOP_NONCE_HEADER, NONCE_STEP_S, Noncer, ProofError, ProofKey, ProofRequest,
    parse_remembered,
};
use protocol::time::UnixSeconds;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a server treats the sessions of one client kind (the `binding` keys): the rollout of
/// device binding is edges first (`optional`), then SDKs, then `required`
/// (`docs/COMPATIBILITY.md`). Whatever the mode, a session that is bound is never accepted
/// without a valid proof by its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BindingMode {
    /// Every session of this kind must be bound: sign-in needs a proof, an unbound session is
    /// refused.
    Required,
    /// A sign-in with a proof gets a bound session, one without an unbound session; both are
    /// served.
    #[default]
    Optional,
    /// Sessions of this kind are not bound at sign-in (a proof is ignored there).
    Off,
}

/// The binding mode of each client kind (`[binding]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Binding {
    /// Field sessions (the mobile SDK): `"optional"` by default.
    pub field: BindingMode,
    /// Desk sessions (browsers, cookie sessions): `"off"` by default; the desk app has no
    /// device key yet.
    pub desk: BindingMode,
}

impl Default for Binding {
    fn default() -> Self {
        Self {
            field: BindingMode::Optional,
            desk: BindingMode::Off,
        }
    }
}

impl Binding {
    /// The mode of `kind`'s sessions.
    pub fn of(&self, kind: protocol::ClientKind) -> BindingMode {
        match kind {
            protocol::ClientKind::Field => self.field,
            protocol::ClientKind::Desk => self.desk,
        }
    }
}

/// Default bound of the replay set: proofs accepted per nonce step (60 s), per instance. At
/// 16 bytes an entry (a keyed 128-bit hash of the `jti`) and two steps held, about 64 MiB of
/// table at the bound; past it new proofs are refused (429) until the step ends.
pub const DEFAULT_MAX_PROOFS_PER_STEP: usize = 2_000_000;
/// Keys a connection remembers (a client has one device key; a few for key rotation).
pub const CONNECTION_KEYS: usize = 4;
/// Shards of the replay set (a request takes one shard's lock, for one insert).
const SHARDS: usize = 64;

/// The replay set: the `jti`s of the proofs accepted under each nonce step still accepted.
#[derive(Debug)]
pub struct ReplaySet {
    shards: Box<[Mutex<Shard>]>,
    hash_key: (u64, u64),
    max_per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// (step, the jti hashes of proofs whose nonce is of that step): at most two steps.
    steps: Vec<(u64, HashSet<u128>)>,
}

impl ReplaySet {
    /// A set holding at most `max_per_step` proofs per nonce step.
    pub fn new(max_per_step: usize) -> Self {
        let mut key = [0u8; 16];
        // The hash key only spreads entries; a fixed key would let a client aim collisions at
        // one shard, so it is random, and a failure to draw one is not worth refusing to start.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key);
        let (a, b) = key.split_at(8);
        let hash_key = (
            u64::from_le_bytes(a.try_into().unwrap_or([0; 8])),
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
        );
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hash_key,
            max_per_shard: max_per_step.div_ceil(SHARDS).max(1),
        }
    }

    fn hash(&self, jti: &str) -> u128 {
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(self.hash_key.0, self.hash_key.1);
        h.write(jti.as_bytes());
        siphasher::sip128::Hasher128::finish128(&h).as_u128()
    }

    /// Records `jti` under nonce step `step` (the current step is `current`): refused when it
    /// was recorded before under that step, or when the step's share of the bound is full.
    pub fn insert(&self, step: u64, current: u64, jti: &str) -> Result<(), ProofError> {
        let h = self.hash(jti);
        // Top bits choose the shard (the low bits are the table's).
        let shard = (h >> 122) as usize % SHARDS;
        let mut s = self.shards[shard]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Steps no nonce of which is still accepted are forgotten.
        s.steps.retain(|(st, _)| current.saturating_sub(*st) <= 1);
        let set = match s.steps.iter().position(|(st, _)| *st == step) {
            Some(i) => &mut s.steps[i].1,
            None => {
                s.steps.push((step, HashSet::new()));
                let last = s.steps.len() - 1;
                &mut s.steps[last].1
            }
        };
        if set.contains(&h) {
            return Err(ProofError::Replayed);
        }
        if set.len() >= self.max_per_shard {
            return Err(ProofError::ReplaySetFull);
        }
        set.insert(h);
        Ok(())
    }

    /// Proofs held (tests, metrics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .steps
                    .iter()
                    .map(|(_, set)| set.len())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Whether no proof is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The keys whose proof signature verified on one connection (see the module doc). Put in
/// every request's extensions by the listener that owns the connection.
#[derive(Debug, Default)]
pub struct ConnectionProofs {
    keys: Mutex<Vec<(Box<str>, ProofKey, Jkt)>>,
}

impl ConnectionProofs {
    /// A new connection's (empty).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lookup(&self, header_segment: &str) -> Option<(ProofKey, Jkt)> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|(h, _, _)| &**h == header_segment)
            .map(|(_, k, j)| (k.clone(), j.clone()))
    }

    fn remember(&self, header_segment: &str, key: &ProofKey, jkt: &Jkt) {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.len() >= CONNECTION_KEYS {
            keys.remove(0);
        }
        keys.push((header_segment.into(), key.clone(), jkt.clone()));
    }

    /// Keys remembered (tests).
    pub fn len(&self) -> usize {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a verified proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The proof key's thumbprint.
    pub jkt: Jkt,
    /// Whether the signature was verified for this request (false: the connection had proved
    /// this key already).
    pub signature_checked: bool,
}

/// One instance's proof verifier: its nonces and its replay set.
#[derive(Debug)]
pub struct DpopVerifier {
    noncer: Noncer,
    replay: ReplaySet,
    /// The current step's nonce as a header value (made once per step).
    current: Mutex<Option<(u64, HeaderValue)>>,
}

/// `WWW-Authenticate`.
const WWW_AUTHENTICATE: HeaderName = http::header::WWW_AUTHENTICATE;

impl DpopVerifier {
    /// The verifier of `instance` (its nonces name it), holding at most `max_proofs_per_step`
    /// proofs per nonce step.
    pub fn new(instance: &str, max_proofs_per_step: usize) -> Result<Self, ProofError> {
        Ok(Self {
            noncer: Noncer::new(&Noncer::random_secret()?, instance, NONCE_STEP_S),
            replay: ReplaySet::new(max_proofs_per_step),
            current: Mutex::new(None),
        })
    }

    /// The replay set (tests, metrics).
    pub fn replay_set(&self) -> &ReplaySet {
        &self.replay
    }

    /// The nonce to hand out at `now`, as a `DPoP-Nonce` header value.
    pub fn nonce(&self, now: UnixSeconds) -> HeaderValue {
        let step = self.noncer.step(now);
        let mut cur = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*cur {
            Some((s, v)) if *s == step => v.clone(),
            _ => {
                // A nonce is base64url: always a valid header value.
                let v = HeaderValue::from_str(&self.noncer.nonce_of(step))
                    .unwrap_or_else(|_| HeaderValue::from_static(""));
                *cur = Some((step, v.clone()));
                v
            }
        }
    }

    /// The headers answering a refused proof: the `WWW-Authenticate: DPoP` challenge naming
    /// the RFC 9449 error, and the current nonce.
    pub fn challenge(
        &self,
        error: &ProofError,
        now: UnixSeconds,
    ) -> [(HeaderName, HeaderValue); 2] {
        let challenge = format!(
            r#"DPoP error="{}", algs="ES256 EdDSA""#,
            error.challenge_error()
        );
        [
            (
                WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge)
                    .unwrap_or_else(|_| HeaderValue::from_static("DPoP")),
            ),
            (HeaderName::from_static(DPOP_NONCE_HEADER), self.nonce(now)),
        ]
    }

    /// Verifies the request's proof (the order of the module doc). `expected` is the thumbprint
    /// of the session the request presents (a bound session: the proof must be by that key);
    /// `connection` is what the request's TLS connection proved (none behind a TLS-terminating
    /// proxy: every signature is verified).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        request: &ProofRequest<'_>,
        expected: Option<&Jkt>,
        now: UnixSeconds,
        connection: Option<&ConnectionProofs>,
    ) -> Result<Verified, ProofError> {
        let mut values = headers.get_all(DPOP_HEADER).iter();
        let raw = match (values.next(), values.next()) {
            (None, _) => return Err(ProofError::Missing),
            (Some(_), Some(_)) => return Err(ProofError::Multiple),
            (Some(v), None) => v.to_str().map_err(|_| ProofError::Malformed)?,
        };
        let (proof, remembered) = parse_remembered(raw, |h| connection.and_then(|c| c.lookup(h)))?;
        let step = self.noncer.check(proof.claims().nonce.as_deref(), now)?;
        proof.check_request(request, now)?;
        if !remembered {
            proof.verify_signature()?;
        }
        if let Some(want) = expected
            && want != proof.jkt()
        {
            return Err(ProofError::KeyMismatch);
        }
        self.replay
            .insert(step, self.noncer.step(now), &proof.claims().jti)?;
        if !remembered && let Some(c) = connection {
            c.remember(proof.header_segment(), proof.key(), proof.jkt());
        }
        Ok(Verified {
            jkt: proof.jkt().clone(),
            signature_checked: !remembered,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use protocol::dpop::{ProofBuilder, ProofClaims, SoftwareP256Key, token_hash};

    const NOW: UnixSeconds = 1_800_000_000;
    const HTU: &str = "https://cell.example/api/routes/today";

    fn proof(key: &SoftwareP256Key, jti: &str, nonce: &str, token: &str) -> HeaderMap {
        let c = ProofClaims {
            jti: jti.into(),
            htm: "GET".into(),
            htu: HTU.into(),
            iat: NOW,
            ath: Some(token_hash(token)),
            nonce: Some(nonce.into()),
        };
        let b = ProofBuilder::new(key.public());
        let input = b.signing_input(&c).unwrap();
        let sig = key.sign(input.as_bytes()).unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            DPOP_HEADER,
            HeaderValue::from_str(&ProofBuilder::finish(input, &sig).unwrap()).unwrap(),
        );
        h
    }

    fn req(token: &str) -> ProofRequest<'_> {
        ProofRequest {
            method: "GET",
            htu: HTU,
            access_token: Some(token),
        }
    }

    #[test]
    fn a_proof_is_accepted_once_at_the_instance_that_issued_its_nonce() {
        let a = DpopVerifier::new("edge-a", 1000).unwrap();
        let b = DpopVerifier::new("edge-b", 1000).unwrap();
        let key = SoftwareP256Key::generate().unwrap();
        let jkt = key.public().thumbprint();
        let nonce = a.nonce(NOW);
        let h = proof(&key, "j1", nonce.to_str().unwrap(), "tok");
        let ok = a.verify(&h, &req("tok"), Some(&jkt), NOW, None).unwrap();
        assert_eq!(ok.jkt, jkt);
        // Replayed at the same instance, one second later.
        assert_eq!(
            a.verify(&h, &req("tok"), Some(&jkt), NOW + 1, None),
            Err(ProofError::Replayed)
        );
        // At the other instance.
        assert_eq!(
            b.verify(&h, &req("tok"), Some(&jkt), NOW + 1, None),
            Err(ProofError::NonceUnknown)
        );
        // Ten minutes later, with a new jti: the nonce is stale.
        let late = proof(&key, "j2", nonce.to_str().unwrap(), "tok");
        assert_eq!(
            a.verify(&late, &req("tok"), Some(&jkt), NOW + 600, None),
            Err(ProofError::NonceStale)
        );
        // By another key than the session's.
        let other = SoftwareP256Key::generate().unwrap();
        let h = proof(&other, "j3", nonce.to_str().unwrap(), "tok");
        assert_eq!(
            a.verify(&h, &req("tok"), Some(&jkt), NOW, None),
            Err(ProofError::KeyMismatch)
        );
        assert_eq!(
            a.verify(&HeaderMap::new(), &req("tok"), Some(&jkt), NOW, None),
            Err(ProofError::Missing)
        );
        let [(_, www), (_, n)] = a.challenge(&ProofError::NonceStale, NOW);
        assert!(www.to_str().unwrap().contains("use_dpop_nonce"));
        assert_eq!(n, nonce);
    }

    #[test]
    fn a_connection_verifies_a_keys_signature_once() {
        let a = DpopVerifier::new("edge-a", 1000).unwrap();
        let key = SoftwareP256Key::generate().unwrap();
        let nonce = a.nonce(NOW);
        let conn = ConnectionProofs::new();
        let first = proof(&key, "j1", nonce.to_str().unwrap(), "tok");
        let v = a
            .verify(&first, &req("tok"), None, NOW, Some(&conn))
            .unwrap();
        assert!(v.signature_checked);
        let second = proof(&key, "j2", nonce.to_str().unwrap(), "tok");
        let v = a
            .verify(&second, &req("tok"), None, NOW, Some(&conn))
            .unwrap();
        assert!(!v.signature_checked);
        assert_eq!(conn.len(), 1);
        // A proof with a broken signature on another connection is refused.
        let mut bad = second.clone();
        let raw = bad[DPOP_HEADER].to_str().unwrap().to_owned();
        let broken = format!("{}AAAA", &raw[..raw.len() - 4]);
        bad.insert(DPOP_HEADER, HeaderValue::from_str(&broken).unwrap());
        let fresh = ConnectionProofs::new();
        assert!(
            a.verify(&bad, &req("tok"), None, NOW, Some(&fresh))
                .is_err()
        );
        assert!(fresh.is_empty());
    }

    #[test]
    fn the_replay_set_is_bounded_and_forgets_past_steps() {
        let set = ReplaySet::new(SHARDS);
        let mut full = 0;
        for i in 0..(SHARDS * 8) {
            if set.insert(10, 10, &format!("j{i}")) == Err(ProofError::ReplaySetFull) {
                full += 1;
            }
        }
        assert!(full > 0);
        assert!(set.len() <= SHARDS);
        // Two steps later the old entries are gone.
        for i in 0..(SHARDS * 8) {
            let _ = set.insert(12, 12, &format!("k{i}"));
        }
        assert!(set.len() <= SHARDS, "{}", set.len());
    }
}
