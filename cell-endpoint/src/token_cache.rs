//! What validation proves about a request ([`Validated`]: the verified claims and the identity
//! headers rendered from them) and the verified-token cache that lets a repeat token skip the
//! signature check, and nothing else (revocation, ownership and limits run every time).
//!
//! The cache holds a token's SHA-256, never the token: the slot is a keyed hash of the digest
//! and a hit needs the whole presented token's digest to equal the held one (compared in
//! constant time), which is as strict as comparing the tokens and saves ~450 bytes a session.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderName, HeaderValue};
use protocol::Kid;
use protocol::http::{X_CONTRACTOR, X_GENERATION, X_SESSION, X_SUBJECT};
use protocol::token::{LEEWAY_S, SessionClaims};
use sha2::Digest as _;
use subtle::ConstantTimeEq as _;

use crate::error::EdgeError;
use crate::state::CellState;
use crate::subject_limit::SubjectLimiter;

/// Default most verified tokens kept in the cache (`token_cache_capacity`), in entries. More
/// active sessions than this per instance only cost signature checks, never a wrong verdict.
pub const TOKEN_CACHE_CAPACITY: usize = 32_768;

/// Memory one cached session costs, in bytes, as measured by `benches/state.rs` (790–830 from
/// 10k to 1M sessions): the token's SHA-256 (not the ~500-byte token), its claims, the
/// rendered identity headers, the view stamp, the expiry, the subject limiter's pointer and the
/// cache's slot (the subject's limiter itself, ~170 bytes, is per subject). The default bound
/// is thus ~27 MiB; 1M cached sessions take ~790 MiB.
pub const CACHED_SESSION_BYTES: usize = 830;

/// What the validation layer proved about a request; the forwarder reads it (as
/// `Arc<Validated>` in the request extensions).
///
/// Laid out in declaration order (`repr(C)`): what a cached request reads — the stamp, the
/// expiry, the limiter — comes first, beside the `Arc`'s counts it touches anyway, so a
/// session that is not in the CPU caches costs one miss here rather than three.
#[derive(Debug)]
#[repr(C)]
pub struct Validated {
    /// The view under which this session last passed the checks that depend only on the
    /// view ([`ServedUnder`]).
    pub served_under: ServedUnder,
    /// `claims.exp` plus the leeway: from then on the cached entry is dead.
    dead_at: u64,
    /// The subject's rate limit, shared with the subject's other sessions.
    pub subject_limiter: Arc<SubjectLimiter>,
    pub kid: Kid,
    pub claims: SessionClaims,
    /// `X-Cellbind-Subject`, `-Contractor`, `-Generation`, `-Session`, rendered once when the
    /// token was verified (a cached token reuses them).
    pub identity_headers: [(HeaderName, HeaderValue); 4],
}

/// The stamp ([`CellState::stamp`]) of the installed view under which a session's key was
/// held, the session not revoked, and its contractor active here at its generation — every
/// check that depends on the view alone. Views are immutable once installed and each install
/// takes a new stamp, so while the same view is installed those checks would give the same
/// answer: a cached session skips them (their hash probes were most of a cached request's
/// cost at scale). A new view (a revocation, a key or ownership change) has another stamp, so
/// the first request under it checks everything again. Expiry, the rate limit, the revocation
/// freshness bound and the write lease are checked on every request.
#[derive(Debug, Default)]
pub struct ServedUnder(AtomicU64);

impl ServedUnder {
    /// Whether the session passed the view's checks under `state` (never for an uninstalled
    /// view: stamp 0).
    pub fn is(&self, state: &CellState) -> bool {
        let stamp = state.stamp();
        stamp != 0 && self.0.load(Ordering::Relaxed) == stamp
    }

    /// Records that the session passed the view's checks under `state` (only validation,
    /// after those checks, may say so).
    pub(crate) fn set(&self, state: &CellState) {
        self.0.store(state.stamp(), Ordering::Relaxed);
    }
}

impl Validated {
    /// Builds the forwarded identity headers from verified claims. Every id type is
    /// restricted to header-safe ASCII, so this cannot fail for a verified token.
    pub fn new(
        kid: Kid,
        claims: SessionClaims,
        subject_limiter: Arc<SubjectLimiter>,
    ) -> Result<Self, EdgeError> {
        let value = |s: &str| {
            HeaderValue::from_str(s).map_err(|_| EdgeError::Upstream("identity header".into()))
        };
        let identity_headers = [
            (
                HeaderName::from_static(X_SUBJECT),
                value(claims.sub.as_str())?,
            ),
            (
                HeaderName::from_static(X_CONTRACTOR),
                value(claims.ctr.as_str())?,
            ),
            (
                HeaderName::from_static(X_GENERATION),
                HeaderValue::from(claims.r#gen.get()),
            ),
            (
                HeaderName::from_static(X_SESSION),
                value(claims.jti.as_str())?,
            ),
        ];
        Ok(Self {
            served_under: ServedUnder::default(),
            dead_at: claims.exp.saturating_add(LEEWAY_S),
            subject_limiter,
            kid,
            claims,
            identity_headers,
        })
    }
}

/// SHA-256 of a token: what the cache keeps instead of the token (32 bytes instead of ~500).
/// Equal digests mean equal tokens (finding two tokens with one digest is a SHA-256
/// collision), so comparing digests decides what comparing the tokens did.
type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    sha2::Sha256::digest(token.as_bytes()).into()
}

#[derive(Debug, Clone)]
struct CachedToken {
    digest: TokenDigest,
    verified: Arc<Validated>,
}

/// The verified-token cache: a repeat token skips the signature, nothing else.
#[derive(Debug)]
pub struct TokenCache {
    hasher: RandomState,
    cache: quick_cache::sync::Cache<u64, CachedToken>,
}

impl Default for TokenCache {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenCache {
    /// A cache of [`TOKEN_CACHE_CAPACITY`] entries.
    pub fn new() -> Self {
        Self::with_capacity(TOKEN_CACHE_CAPACITY)
    }

    /// A cache of at most about `entries` verified tokens (`token_cache_capacity`). Nothing is
    /// allocated up front: memory grows with the tokens actually held.
    pub fn with_capacity(entries: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            cache: quick_cache::sync::Cache::new(entries.max(1)),
        }
    }

    /// Changes the bound; entries beyond a smaller one are evicted.
    pub fn set_capacity(&self, entries: usize) {
        self.cache.set_capacity(entries.max(1) as u64);
    }

    /// Verified tokens held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The slot of a digest: a keyed hash of it (the key is this process's secret).
    fn key(&self, digest: &TokenDigest) -> u64 {
        self.hasher.hash_one(digest)
    }

    /// A verified token still inside its lifetime whose key is still held. The presented
    /// token's digest is compared whole, in constant time, with the cached one.
    pub(crate) fn get(&self, token: &str, state: &CellState, now: u64) -> Option<Arc<Validated>> {
        let d = digest(token);
        let k = self.key(&d);
        let hit = self.cache.get(&k)?;
        if !bool::from(hit.digest[..].ct_eq(&d[..])) {
            return None;
        }
        if now >= hit.verified.dead_at {
            self.cache.remove(&k);
            return None;
        }
        if !hit.verified.served_under.is(state) && !state.has_kid(&hit.verified.kid) {
            return None;
        }
        Some(hit.verified)
    }

    pub(crate) fn insert(
        &self,
        token: &str,
        v: protocol::token::Verified<SessionClaims>,
        subject_limiter: Arc<SubjectLimiter>,
    ) -> Result<Arc<Validated>, EdgeError> {
        let verified = Arc::new(Validated::new(v.kid, v.claims, subject_limiter)?);
        let d = digest(token);
        self.cache.insert(
            self.key(&d),
            CachedToken {
                digest: d,
                verified: verified.clone(),
            },
        );
        Ok(verified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_one_byte_apart_has_another_digest() {
        let a = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJjLTEudCJ9.c2ln";
        let b = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJjLTEudCJ9.c2lo";
        assert_ne!(digest(a), digest(b));
        assert_eq!(digest(a), digest(a));
        let cache = TokenCache::default();
        assert_ne!(cache.key(&digest(a)), cache.key(&digest(b)));
    }

    #[test]
    fn the_bound_is_set_and_changed_without_allocating_up_front() {
        let cache = TokenCache::with_capacity(1_000_000);
        assert!(cache.is_empty());
        cache.set_capacity(10);
        assert_eq!(cache.len(), 0);
        // A bound of zero is taken as one: the cache is never unusable.
        let tiny = TokenCache::with_capacity(0);
        assert!(tiny.is_empty());
    }
}
