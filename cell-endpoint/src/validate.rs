//! Session validation as one tower layer.
//!
//! Order (each step only runs if the previous passed):
//! 1. cell state loaded, else `503 NOT_READY` (never 401: the client keeps its session);
//! 2. the credential, by the one rule of `protocol::http` (a bearer request only if its bearer
//!    session is valid, else a cookie request), size-capped (8 KiB header, 4 KiB cookie) before
//!    anything is parsed; none → `401 SESSION_MISSING`. "Valid" is steps 3 and 4:
//! 3. the verified-token cache (a keyed 64-bit hash, constant-time comparison of the whole
//!    token, entries die at `exp`), else `protocol::token::parse` + the key from the held set
//!    (an unknown kid triggers at most one single-flight refetch per cooldown) + `verify`;
//! 4. revocation (every time, cached or not) → `401 SESSION_REVOKED`;
//!    then a cookie request with an unsafe method needs the CSRF proof → `403 FORBIDDEN`;
//! 5. per-subject rate limit → `429`;
//! 6. the ownership decision (`protocol::ownership::decide`) → served, `409`, `404` or `503`;
//! 7. for writes, the write lease → `503 CELL_STATE_STALE`.
//!
//! The verified claims are put in the request extensions for the forwarder.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request};
use axum::response::Response;
use futures::future::Either;
use protocol::Kid;
use protocol::http::{Presented, Source};
use protocol::ownership::{Access, Decision, decide};
use protocol::token::{Expectations, LEEWAY_S, SESSION_TYP, SessionClaims, TokenError, parse};
use subtle::ConstantTimeEq as _;
use tower::{Layer, Service};

use crate::Edge;
use crate::error::{EdgeError, rescue};
use crate::state::CellState;
use protocol::http::{X_CONTRACTOR, X_GENERATION, X_SESSION, X_SUBJECT};
/// Most verified tokens kept in the cache (about 1 KiB each: the token, its claims and the
/// rendered identity headers, so at most ~32 MiB). More active sessions than this per
/// instance only cost signature checks, never a wrong verdict.
pub const TOKEN_CACHE_CAPACITY: usize = 32_768;
/// Longest a request waits for an unknown-kid key refetch, in milliseconds.
pub const KID_REFETCH_TIMEOUT_MS: u64 = 3_000;

/// The credential the rule chose, verified.
#[derive(Debug)]
pub struct Resolved<'h> {
    pub validated: Arc<Validated>,
    pub source: Source,
    /// The token as presented (the forwarder passes exactly this one on).
    pub token: &'h str,
}

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
    fn get(&self, token: &str, state: &CellState, now: u64) -> Option<Arc<Validated>> {
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

    fn insert(
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

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

/// Single-flight, rate-limited key refetch for unknown kids (ATTACKS A4).
#[derive(Debug)]
pub struct KeyRefetch {
    cooldown: Duration,
    last: std::sync::Mutex<Option<Instant>>,
    flight: tokio::sync::Mutex<()>,
}

impl KeyRefetch {
    pub fn new(cooldown: Duration) -> Self {
        Self {
            cooldown,
            last: std::sync::Mutex::new(None),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    fn cooling(&self) -> bool {
        match self.last.lock() {
            Ok(g) => g.is_some_and(|t| t.elapsed() < self.cooldown),
            Err(_) => true,
        }
    }

    /// Claims the right to fetch now; false while cooling down.
    fn claim(&self) -> bool {
        match self.last.lock() {
            Ok(mut g) => {
                if g.is_some_and(|t| t.elapsed() < self.cooldown) {
                    return false;
                }
                *g = Some(Instant::now());
                true
            }
            Err(_) => false,
        }
    }
}

impl Edge {
    /// After an unknown kid: at most one refetch per cooldown, shared by every request that
    /// waits for it. Returns the view to retry with when it now holds `kid`.
    async fn refetch_for(&self, kid: &Kid) -> Option<Arc<CellState>> {
        if self.refetch.cooling() {
            return None;
        }
        let _flight = self.refetch.flight.lock().await;
        if let Some(s) = self.current().filter(|s| s.has_kid(kid)) {
            return Some(s);
        }
        if !self.refetch.claim() {
            return None;
        }
        self.metrics().key_refetched();
        let timeout = Duration::from_millis(KID_REFETCH_TIMEOUT_MS);
        match tokio::time::timeout(timeout, crate::sync::fetch_once(self)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "key refetch after an unknown kid failed"),
            Err(_) => tracing::warn!("key refetch after an unknown kid timed out"),
        }
        self.current().filter(|s| s.has_kid(kid))
    }

    /// Steps 2–4 for one token: cached or verified, and not revoked.
    fn verify_token(
        &self,
        state: &CellState,
        token: &str,
        source: Source,
    ) -> Result<Arc<Validated>, EdgeError> {
        let now = self.clock().now();
        let settings = self.settings();
        let verified = match self.cache.get(token, state, now) {
            Some(v) => v,
            None => {
                let parsed = parse(token, SESSION_TYP, source.cap())?;
                // A revoked key has left the set: its sessions are revoked, not unknown, and
                // never worth a key refetch.
                if state.revocations.is_key_revoked(&parsed.kid) {
                    return Err(EdgeError::Revoked);
                }
                let Some(key) = state.keyset.get(parsed.kid.as_str()).cloned() else {
                    return Err(TokenError::UnknownKid(parsed.kid).into());
                };
                let expect = Expectations {
                    issuer: &settings.public_url,
                    audience: &settings.cell_id,
                    max_lifetime_s: settings.session_lifetime_s,
                    leeway_s: LEEWAY_S,
                };
                let v = parsed.verify::<SessionClaims>(&key, &expect, now)?;
                self.cache.insert(token, v)?
            }
        };
        if state
            .revocations
            .is_revoked(&verified.claims, &verified.kid)
        {
            return Err(EdgeError::Revoked);
        }
        Ok(verified)
    }

    /// The credential rule (`protocol::http`) with this edge's verification, then the CSRF
    /// proof for a cookie request with an unsafe method. Never waits: an unknown kid is
    /// returned as `TokenError::UnknownKid`.
    fn resolve_now<'h>(
        &self,
        state: &CellState,
        headers: &'h HeaderMap,
        access: Access,
    ) -> Result<Resolved<'h>, EdgeError> {
        let ((validated, token), source) = Presented::from_headers(headers)
            .resolve(EdgeError::SessionMissing, |t, src| {
                self.verify_token(state, t, src).map(|v| (v, t))
            })?;
        if source == Source::Cookie && access == Access::Write {
            protocol::http::check_csrf_proof(headers, |o| {
                crate::browser::origin_allowed(o, &self.settings().public_url, Some(state))
            })
            .map_err(EdgeError::CsrfProof)?;
        }
        Ok(Resolved {
            validated,
            source,
            token,
        })
    }

    /// The held view, when it has keys.
    fn ready_state(&self) -> Result<Arc<CellState>, EdgeError> {
        self.current()
            .filter(|s| !s.keyset.is_empty())
            .ok_or(EdgeError::NotReady)
    }

    /// Steps 1–4 and the CSRF proof, with the unknown-kid refetch: what the session routes
    /// forwarded to the auth-service need (they act on the session, not on ownership).
    pub async fn resolve_credential<'h>(
        &self,
        headers: &'h HeaderMap,
        method: &http::Method,
    ) -> Result<Resolved<'h>, EdgeError> {
        let access = Access::of_method(method.as_str());
        let state = self.ready_state()?;
        match self.resolve_now(&state, headers, access) {
            Err(EdgeError::Token(TokenError::UnknownKid(kid))) => {
                match self.refetch_for(&kid).await {
                    Some(state) => self.resolve_now(&state, headers, access),
                    None => Err(TokenError::UnknownKid(kid).into()),
                }
            }
            other => other,
        }
    }

    /// Steps 1–7 of the module doc, including the unknown-kid refetch.
    pub async fn validate(
        &self,
        headers: &HeaderMap,
        access: Access,
    ) -> Result<Arc<Validated>, EdgeError> {
        let started = Instant::now();
        let mut result = self.validate_now(headers, access);
        if let Err(EdgeError::Token(TokenError::UnknownKid(kid))) = &result
            && self.refetch_for(kid).await.is_some()
        {
            result = self.validate_now(headers, access);
        }
        self.metrics()
            .validation_latency(started.elapsed().as_secs_f64());
        result
    }

    /// Steps 1–7 without waiting for anything: an unknown kid is returned as
    /// `TokenError::UnknownKid` for [`Edge::validate`] to refetch and retry.
    pub fn validate_now(
        &self,
        headers: &HeaderMap,
        access: Access,
    ) -> Result<Arc<Validated>, EdgeError> {
        let state = self.ready_state()?;
        let settings = self.settings();
        let verified = self.resolve_now(&state, headers, access)?.validated;
        self.limits.check_subject(&verified.claims.sub)?;
        let c = &verified.claims;
        match decide(state.ownership(&c.ctr), c.r#gen, access) {
            Decision::Serve => {}
            Decision::HandoffInProgress => return Err(EdgeError::Handoff),
            Decision::WrongCell { owner } => {
                let endpoint = state.endpoint_of(&owner);
                return Err(EdgeError::WrongCell { owner, endpoint });
            }
            Decision::StaleSessionHere => {
                return Err(EdgeError::WrongCell {
                    owner: settings.cell_id.clone(),
                    endpoint: settings.public_url.clone(),
                });
            }
            Decision::NoRecord => {
                let other = state
                    .map()
                    .and_then(|m| m.map.cell_for(&c.ctr))
                    .filter(|e| e.id != settings.cell_id);
                return Err(match other {
                    Some(e) => EdgeError::WrongCell {
                        owner: e.id.clone(),
                        endpoint: e.endpoint.clone(),
                    },
                    None => EdgeError::UnknownContractor,
                });
            }
            Decision::ViewBehind => return Err(EdgeError::ViewBehind),
        }
        self.check_revocation_freshness(access)?;
        if access == Access::Write && !self.lease_current() {
            return Err(EdgeError::LeaseLapsed);
        }
        Ok(verified)
    }
}

/// The validation layer.
#[derive(Debug, Clone)]
pub struct ValidateLayer {
    edge: Edge,
}

impl ValidateLayer {
    pub fn new(edge: Edge) -> Self {
        Self { edge }
    }
}

impl<S> Layer<S> for ValidateLayer {
    type Service = ValidateService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ValidateService {
            edge: self.edge.clone(),
            inner,
        }
    }
}

/// The validation service: refuses with [`rescue`] or passes the request on with
/// [`Validated`] in its extensions.
#[derive(Debug, Clone)]
pub struct ValidateService<S> {
    edge: Edge,
    inner: S,
}

impl<S> Service<Request<Body>> for ValidateService<S>
where
    S: Service<Request<Body>, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Either<
        S::Future,
        Either<
            std::future::Ready<Result<Response, Self::Error>>,
            Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>,
        >,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        // The ready service is the one we were polled for; keep the clone for next time.
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let edge = &self.edge;
        let access = Access::of_method(req.method().as_str());
        // The common case decides synchronously: no boxed future, no extra await.
        let started = Instant::now();
        let result = edge.validate_now(req.headers(), access);
        match result {
            Ok(v) => {
                edge.metrics()
                    .validation_latency(started.elapsed().as_secs_f64());
                req.extensions_mut().insert(v);
                Either::Left(inner.call(req))
            }
            Err(EdgeError::Token(TokenError::UnknownKid(_))) => {
                // Rare: at most one key refetch per cooldown, shared by all waiters.
                let edge = edge.clone();
                Either::Right(Either::Right(Box::pin(async move {
                    match edge.validate(req.headers(), access).await {
                        Ok(v) => {
                            req.extensions_mut().insert(v);
                            inner.call(req).await
                        }
                        Err(e) => {
                            edge.metrics().outcome(e.outcome());
                            Ok(rescue(&e))
                        }
                    }
                })))
            }
            Err(e) => {
                edge.metrics()
                    .validation_latency(started.elapsed().as_secs_f64());
                edge.metrics().outcome(e.outcome());
                Either::Right(Either::Left(std::future::ready(Ok(rescue(&e)))))
            }
        }
    }
}
