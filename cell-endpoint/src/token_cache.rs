//! What validation proves about a request ([`Validated`]: the verified claims and the identity
//! headers rendered from them) and the verified-token cache that lets a repeat token skip the
//! signature check, and nothing else (revocation, ownership and limits run every time).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use protocol::Kid;
use protocol::http::{X_CONTRACTOR, X_GENERATION, X_SESSION, X_SUBJECT};
use protocol::token::{LEEWAY_S, SessionClaims};
use subtle::ConstantTimeEq as _;

use crate::error::EdgeError;
use crate::state::CellState;

/// Most verified tokens kept in the cache (about 1 KiB each: the token, its claims and the
/// rendered identity headers, so at most ~32 MiB). More active sessions than this per
/// instance only cost signature checks, never a wrong verdict.
pub const TOKEN_CACHE_CAPACITY: usize = 32_768;

/// What the validation layer proved about a request; the forwarder reads it (as
/// `Arc<Validated>` in the request extensions).
#[derive(Debug, Clone)]
pub struct Validated {
    pub kid: Kid,
    pub claims: SessionClaims,
    /// `X-Cellbind-Subject`, `-Contractor`, `-Generation`, `-Session`, rendered once when the
    /// token was verified (a cached token reuses them).
    pub identity_headers: [(HeaderName, HeaderValue); 4],
}

impl Validated {
    /// Builds the forwarded identity headers from verified claims. Every id type is
    /// restricted to header-safe ASCII, so this cannot fail for a verified token.
    pub fn new(kid: Kid, claims: SessionClaims) -> Result<Self, EdgeError> {
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
            kid,
            claims,
            identity_headers,
        })
    }
}

#[derive(Debug)]
struct CachedToken {
    token: Box<[u8]>,
    verified: Arc<Validated>,
}

/// Constant-time equality of two byte strings, eight bytes at a time. Unequal lengths return
/// early: a length is not a secret.
fn ct_eq_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // OR of the XORs of every word: zero exactly when all bytes are equal, computed without a
    // data-dependent branch; `subtle` makes the final test constant-time.
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    let mut diff = 0u64;
    for (x, y) in ac.zip(bc) {
        let x = u64::from_le_bytes(x.try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(y.try_into().unwrap_or([0; 8]));
        diff |= x ^ y;
    }
    for (x, y) in ar.iter().zip(br) {
        diff |= u64::from(x ^ y);
    }
    bool::from(diff.ct_eq(&0))
}

/// The verified-token cache: a repeat token skips the signature, nothing else.
#[derive(Debug)]
pub struct TokenCache {
    hasher: RandomState,
    cache: quick_cache::sync::Cache<u64, Arc<CachedToken>>,
}

impl Default for TokenCache {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenCache {
    pub fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            cache: quick_cache::sync::Cache::new(TOKEN_CACHE_CAPACITY),
        }
    }

    fn key(&self, token: &str) -> u64 {
        self.hasher.hash_one(token.as_bytes())
    }

    /// A verified token still inside its lifetime whose key is still held.
    pub(crate) fn get(&self, token: &str, state: &CellState, now: u64) -> Option<Arc<Validated>> {
        let k = self.key(token);
        let hit = self.cache.get(&k)?;
        if !ct_eq_bytes(&hit.token, token.as_bytes()) {
            return None;
        }
        if now >= hit.verified.claims.exp.saturating_add(LEEWAY_S) {
            self.cache.remove(&k);
            return None;
        }
        if !state.has_kid(&hit.verified.kid) {
            return None;
        }
        Some(hit.verified.clone())
    }

    pub(crate) fn insert(
        &self,
        token: &str,
        v: protocol::token::Verified<SessionClaims>,
    ) -> Result<Arc<Validated>, EdgeError> {
        let verified = Arc::new(Validated::new(v.kid, v.claims)?);
        self.cache.insert(
            self.key(token),
            Arc::new(CachedToken {
                token: token.as_bytes().into(),
                verified: verified.clone(),
            }),
        );
        Ok(verified)
    }
}
