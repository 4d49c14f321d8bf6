//! Session validation: the `/api/*` guard ([`ValidateGuard`]) and what the session routes use
//! to resolve their credential ([`Edge::resolve_credential`]). The verified-token cache and
//! [`Validated`] are `token_cache`.
//!
//! Order (each step only runs if the previous passed):
//! 1. cell state loaded, else `503 NOT_READY` (never 401: the client keeps its session);
//! 2. the credential, by the one rule of `protocol::http` (a bearer request only if its bearer
//!    session is valid, else a cookie request), size-capped (8 KiB header, 4 KiB cookie) before
//!    anything is parsed; none → `401 SESSION_MISSING`. "Valid" is steps 3 and 4:
//! 3. the verified-token cache (the token's keyed 128-bit fingerprint, its second half compared
//!    in constant time, entries die at `exp`), else `protocol::token::parse` + the key from the held set
//!    (an unknown kid triggers at most one single-flight refetch per cooldown) + `verify`;
//! 4. revocation (every time, cached or not) → `401 SESSION_REVOKED`;
//!    then a cookie request with an unsafe method needs the CSRF proof → `403 FORBIDDEN`;
//!    then device binding ([`Edge::check_binding`]): a bound session (`cnf.jkt`) needs a valid
//!    DPoP proof by its key (`runtime::dpop`: this instance's nonce, method, URL, `ath`,
//!    signature once per connection and key, replay) → `401 DPOP_*` with the RFC 9449
//!    challenge; an unbound session of a kind whose `binding` is `required` → `401
//!    SESSION_INVALID`;
//! 5. per-subject rate limit → `429`;
//! 6. the ownership decision (`protocol::ownership::decide`) → served, `409`, `404` or `503`;
//! 7. for writes, the write lease → `503 CELL_STATE_STALE`.
//!
//! The verified claims are put in the request extensions for the forwarder. Steps 5 and 6 (and
//! the revocation freshness bound, when configured) apply to `/api/*` only.
//!
//! A refusal after step 3 verified the token says whether the refused session was a game day's
//! synthetic one ([`Refused`]), so its answer counts as synthetic traffic (`metrics::Synthetic`)
//! like a served request of that session does; a refusal before (no session, an unreadable,
//! forged or expired token) is real traffic's.
//!
//! A cached session that passed the key, revocation and ownership checks under the installed
//! view (active here at its generation) is remembered to have (`token_cache::ServedUnder`):
//! until another view is installed its requests skip those three lookups, whose answers cannot
//! have changed. Expiry, the CSRF proof, the rate limit, the freshness bound and the lease are
//! checked on every request.

use std::sync::Arc;
use std::time::Duration;

/// The validation-latency clock: read twice per request, so the time-stamp counter (~10 ns a
/// read) rather than the system's monotonic clock (~30 ns through the vDSO on our machines).
use quanta::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use protocol::dpop::{DPOP_HEADER, ProofRequest};
use protocol::http::{Presented, Source};
use protocol::ownership::{Access, Decision, OwnershipRecord, decide, wrong_cell_target};
use protocol::token::{Expectations, LEEWAY_S, SESSION_TYP, SessionClaims, TokenError, parse};
use protocol::{Jkt, Kid};
use runtime::dpop::{BindingMode, ConnectionProofs};

use crate::edge::Edge;
use crate::error::{Refusal, rescue};
use crate::held::state::CellState;
use crate::held::subject_limit::SubjectLimiter;
use crate::held::token_cache::{Validated, VerifiedSession};
use crate::metrics::Synthetic;
use crate::request::guard::{Check, Guard};

/// Longest a request waits for an unknown-kid key refetch, in milliseconds.
pub(crate) const KID_REFETCH_TIMEOUT_MS: u64 = 3_000;

/// The credential the rule chose, verified.
#[derive(Debug)]
pub(crate) struct Resolved<'h> {
    pub validated: Arc<Validated>,
    /// The subject's rate limit.
    pub limiter: Arc<SubjectLimiter>,
    pub source: Source,
    /// The token as presented (the forwarder passes exactly this one on).
    pub token: &'h str,
}

/// A refused request, and whether the session it refused is a game day's synthetic one
/// (`Validated::synthetic`): known once the session's token was verified, false before (what
/// `?` on a plain [`Refusal`] gives).
#[derive(Debug)]
pub struct Refused {
    pub refusal: Refusal,
    pub synthetic: bool,
}

impl Refused {
    /// A refusal of a verified session, synthetic or not (for `map_err`).
    pub(crate) fn of_session(synthetic: bool) -> impl Fn(Refusal) -> Refused {
        move |refusal| Refused { refusal, synthetic }
    }
}

impl From<Refusal> for Refused {
    fn from(refusal: Refusal) -> Self {
        Refused {
            refusal,
            synthetic: false,
        }
    }
}

impl From<TokenError> for Refused {
    fn from(e: TokenError) -> Self {
        Refusal::Token(e).into()
    }
}

/// What a request's DPoP proof is checked against besides its headers: the request line, and
/// what its TLS connection proved already (none in-process or behind a TLS-terminating proxy:
/// every signature is then verified).
#[derive(Debug, Clone, Copy)]
pub struct ProofContext<'a> {
    pub method: &'a str,
    /// The request's path (the proof's `htu` is this cell's public URL and this path).
    pub path: &'a str,
    pub connection: Option<&'a ConnectionProofs>,
}

impl<'a> ProofContext<'a> {
    /// The context of `req`.
    pub fn of<B>(req: &'a Request<B>) -> Self {
        Self {
            method: req.method().as_str(),
            path: req.uri().path(),
            connection: req
                .extensions()
                .get::<Arc<ConnectionProofs>>()
                .map(|c| &**c),
        }
    }
}

impl Edge {
    /// [`rescue`], plus for a refused DPoP proof the challenge RFC 9449 asks for
    /// (`WWW-Authenticate: DPoP error="…"` and this instance's current `DPoP-Nonce`).
    pub(crate) fn rescue(&self, refusal: &Refusal) -> axum::response::Response {
        let mut resp = rescue(refusal);
        if let Refusal::Dpop(e) = refusal {
            for (name, value) in self.dpop().challenge(e, self.clock().now()) {
                resp.headers_mut().insert(name, value);
            }
        }
        resp
    }

    /// [`Edge::rescue`] of a refused request, marked as synthetic traffic for the request
    /// counter when the refused session was a synthetic contractor's.
    pub(crate) fn refuse(&self, refused: &Refused) -> axum::response::Response {
        Synthetic::mark(refused.synthetic, self.rescue(&refused.refusal))
    }

    /// Device binding (step 4's end): a bound session's proof, verified against this request
    /// (`access_token`: the session as presented) and the session's thumbprint; an unbound
    /// session of a `required` kind is refused. Returns the proven thumbprint of a bound
    /// session. A request with no session (sign-in, rebind) passes `claims = None`: its proof,
    /// when it carries one, is verified without a thumbprint to match.
    pub(crate) fn check_binding(
        &self,
        claims: Option<&SessionClaims>,
        access_token: Option<&str>,
        headers: &HeaderMap,
        ctx: &ProofContext<'_>,
    ) -> Result<Option<Jkt>, Refusal> {
        let expected = match claims {
            Some(c) => match c.jkt() {
                Some(jkt) => Some(jkt),
                None if self.settings().serving.binding.of(c.cli) == BindingMode::Required => {
                    return Err(Refusal::Unbound);
                }
                None => return Ok(None),
            },
            None if !headers.contains_key(DPOP_HEADER) => return Ok(None),
            None => None,
        };
        let htu = protocol::dpop::htu(self.settings().public_url.as_str(), ctx.path);
        let request = ProofRequest {
            method: ctx.method,
            htu: &htu,
            access_token,
        };
        let connection = if self.settings().serving.dpop_verify_per_request {
            None
        } else {
            ctx.connection
        };
        let now = self.clock().now();
        let verified = self
            .dpop()
            .verify(headers, &request, expected, now, connection)
            .map_err(Refusal::Dpop)?;
        self.metrics().dpop_proof(verified.signature_checked);
        Ok(Some(verified.jkt))
    }

    /// After an unknown kid: at most one refetch per cooldown, shared by every request that
    /// waits for it (`runtime::refetch`). Returns the view to retry with when it now holds
    /// `kid`.
    async fn refetch_for(&self, kid: &Kid) -> Option<Arc<CellState>> {
        let holding = || self.current().filter(|s| s.has_kid(kid));
        let fetch = async {
            self.metrics().key_refetched();
            let timeout = Duration::from_millis(KID_REFETCH_TIMEOUT_MS);
            match tokio::time::timeout(timeout, crate::feed::sync::fetch_once(self)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "key refetch after an unknown kid failed"),
                Err(_) => tracing::warn!("key refetch after an unknown kid timed out"),
            }
        };
        self.key_refetch().refetch(holding, fetch).await
    }

    /// Steps 2–4 for one token: cached or verified, and not revoked (a verified session's
    /// revocation is refused as its contractor's: synthetic or not).
    fn verify_token(
        &self,
        state: &CellState,
        token: &str,
        source: Source,
    ) -> Result<VerifiedSession, Refused> {
        let now = self.clock().now();
        let settings = self.settings();
        let session = match self.token_cache().get(token, state, now) {
            Some(s) => s,
            None => {
                let parsed = parse(token, SESSION_TYP, source.cap())?;
                // A revoked key has left the set: its sessions are revoked, not unknown, and
                // never worth a key refetch.
                if state.revocations.is_key_revoked(&parsed.kid) {
                    return Err(Refusal::Revoked.into());
                }
                let Some(key) = state.keyset.get(parsed.kid.as_str()).cloned() else {
                    return Err(TokenError::UnknownKid(parsed.kid).into());
                };
                let expect = Expectations {
                    issuer: &settings.public_url,
                    audience: &settings.cell_id,
                    max_lifetime_s: settings.serving.session_lifetime_s,
                    leeway_s: LEEWAY_S,
                };
                let v = parsed.verify::<SessionClaims>(&key, &expect, now)?;
                let limiter = self.limits().subject(&v.claims.sub);
                self.token_cache().insert(token, v, limiter, now)?
            }
        };
        let verified = &session.validated;
        // Passed under this very view: its revocations were checked then (`ServedUnder`).
        if !verified.served_under.is(state)
            && state
                .revocations
                .is_revoked(&verified.claims, &verified.kid)
        {
            return Err(Refused {
                refusal: Refusal::Revoked,
                synthetic: verified.synthetic,
            });
        }
        Ok(session)
    }

    /// The credential rule (`protocol::http`) with this edge's verification, then the CSRF
    /// proof for a cookie request with an unsafe method. Never waits: an unknown kid is
    /// returned as `TokenError::UnknownKid`.
    fn resolve_now<'h>(
        &self,
        state: &CellState,
        headers: &'h HeaderMap,
        access: Access,
    ) -> Result<Resolved<'h>, Refused> {
        let ((session, token), source) = Presented::from_headers(headers)
            .resolve(Refused::from(Refusal::SessionMissing), |t, src| {
                self.verify_token(state, t, src).map(|v| (v, t))
            })?;
        if source == Source::Cookie && access == Access::Write {
            protocol::http::check_csrf_proof(headers, |o| {
                crate::held::origin::origin_allowed(o, &self.settings().public_url, Some(state))
            })
            .map_err(Refusal::CsrfProof)
            .map_err(Refused::of_session(session.validated.synthetic))?;
        }
        Ok(Resolved {
            validated: session.validated,
            limiter: session.limiter,
            source,
            token,
        })
    }

    /// The held view, when it has keys.
    fn ready_state(&self) -> Result<Arc<CellState>, Refusal> {
        self.current()
            .filter(|s| !s.keyset.is_empty())
            .ok_or(Refusal::NotReady)
    }

    /// Steps 1–4 and the CSRF proof, with the unknown-kid refetch: what the session routes
    /// forwarded to the auth-service need (they act on the session, not on ownership).
    pub(crate) async fn resolve_credential<'h>(
        &self,
        headers: &'h HeaderMap,
        method: &http::Method,
    ) -> Result<Resolved<'h>, Refused> {
        let access = Access::of_method(method.as_str());
        let state = self.ready_state()?;
        match self.resolve_now(&state, headers, access) {
            Err(Refused {
                refusal: Refusal::Token(TokenError::UnknownKid(kid)),
                ..
            }) => match self.refetch_for(&kid).await {
                Some(state) => self.resolve_now(&state, headers, access),
                None => Err(TokenError::UnknownKid(kid).into()),
            },
            other => other,
        }
    }

    /// Steps 1–7 of the module doc for one `/api/*` request: the one validation function,
    /// which the guard (`ValidateGuard`) and the benchmarks call. The common case is decided
    /// at once, without a future ([`Validation::Decided`]); a token naming a key this instance
    /// does not hold waits for the key refetch ([`Validation::AfterRefetch`]). The time it
    /// takes goes into the validation-latency histogram either way.
    pub fn validate(
        &self,
        headers: &HeaderMap,
        access: Access,
        ctx: &ProofContext<'_>,
    ) -> Validation {
        let started = Instant::now();
        match self.validate_now(headers, access, ctx) {
            Err(Refused {
                refusal: Refusal::Token(TokenError::UnknownKid(kid)),
                ..
            }) => Validation::AfterRefetch(AfterRefetch {
                edge: self.clone(),
                kid,
                access,
                started,
            }),
            decided => {
                self.metrics()
                    .validation_latency(started.elapsed().as_secs_f64());
                Validation::Decided(decided)
            }
        }
    }

    /// After [`Edge::validate_now`] met an unknown kid: validates again once the held view has
    /// it (another request's refetch may already have brought it), else refuses with that kid.
    async fn validate_after_refetch(
        &self,
        kid: Kid,
        headers: &HeaderMap,
        access: Access,
        ctx: &ProofContext<'_>,
    ) -> Result<Arc<Validated>, Refused> {
        if self.current().is_some_and(|s| s.has_kid(&kid)) || self.refetch_for(&kid).await.is_some()
        {
            self.validate_now(headers, access, ctx)
        } else {
            Err(TokenError::UnknownKid(kid).into())
        }
    }

    /// Steps 1–7 without waiting for anything: an unknown kid is returned as
    /// `TokenError::UnknownKid` for [`Edge::validate`] to refetch and retry.
    fn validate_now(
        &self,
        headers: &HeaderMap,
        access: Access,
        ctx: &ProofContext<'_>,
    ) -> Result<Arc<Validated>, Refused> {
        let state = self.ready_state()?;
        let resolved = self.resolve_now(&state, headers, access)?;
        let synthetic = resolved.validated.synthetic;
        self.admit(&state, resolved, headers, access, ctx)
            .map_err(Refused::of_session(synthetic))
    }

    /// The rest of steps 4–7 for a verified session (`resolved`): device binding, the rate
    /// limit, ownership, the revocation freshness bound and the write lease.
    fn admit(
        &self,
        state: &CellState,
        resolved: Resolved<'_>,
        headers: &HeaderMap,
        access: Access,
        ctx: &ProofContext<'_>,
    ) -> Result<Arc<Validated>, Refusal> {
        let settings = self.settings();
        self.check_binding(
            Some(&resolved.validated.claims),
            Some(resolved.token),
            headers,
            ctx,
        )?;
        resolved.limiter.check()?;
        let verified = resolved.validated;
        let c = &verified.claims;
        // The ownership decision, unless the session passed every check of this view already.
        let decision = if verified.served_under.is(state) {
            Decision::Serve
        } else {
            let record = state.ownership(&c.ctr);
            let decision = decide(record, c.generation, access);
            // Served for any access (active here at the session's generation), and its key
            // and revocations checked under this view by `resolve_now`: remembered.
            if decision == Decision::Serve && matches!(record, Some(OwnershipRecord::Active { .. }))
            {
                verified.served_under.set(state);
            }
            decision
        };
        match decision {
            Decision::Serve => {}
            Decision::HandoffInProgress => return Err(Refusal::Handoff),
            Decision::StaleSessionHere => {
                return Err(Refusal::WrongCell {
                    owner: settings.cell_id.clone(),
                    endpoint: settings.public_url.clone(),
                });
            }
            Decision::ViewBehind => return Err(Refusal::ViewBehind),
            Decision::WrongCell { .. } | Decision::NoRecord => {
                let map = state.map().map(|m| &m.map);
                return Err(
                    match wrong_cell_target(&decision, &c.ctr, &settings.cell_id, map) {
                        Some(t) => Refusal::WrongCell {
                            owner: t.owner,
                            endpoint: t.endpoint.unwrap_or_default(),
                        },
                        None => Refusal::UnknownContractor,
                    },
                );
            }
        }
        self.check_revocation_freshness(access)?;
        if access == Access::Write && !self.lease_current() {
            return Err(Refusal::LeaseLapsed);
        }
        Ok(verified)
    }
}

/// What [`Edge::validate`] decided about one request.
#[derive(Debug)]
pub enum Validation {
    /// Decided at once: the verified session, or the refusal.
    Decided(Result<Arc<Validated>, Refused>),
    /// The token names a key this instance does not hold: [`AfterRefetch::decide`] decides
    /// once the key refetch is done.
    AfterRefetch(AfterRefetch),
}

impl Validation {
    /// The decision, waiting for the key refetch when there is one to wait for.
    pub async fn settle(
        self,
        headers: &HeaderMap,
        ctx: &ProofContext<'_>,
    ) -> Result<Arc<Validated>, Refused> {
        match self {
            Validation::Decided(decided) => decided,
            Validation::AfterRefetch(wait) => wait.decide(headers, ctx).await,
        }
    }
}

/// A validation waiting for a key refetch (rare: at most one refetch per cooldown, shared by
/// every request that waits for it).
#[derive(Debug)]
pub struct AfterRefetch {
    edge: Edge,
    kid: Kid,
    access: Access,
    started: Instant,
}

impl AfterRefetch {
    /// The key the token names, which this instance does not hold.
    pub fn kid(&self) -> &Kid {
        &self.kid
    }

    /// Validates the request of `headers` (the same request) again once the key is held, else
    /// refuses it with the unknown kid; times the whole validation.
    pub async fn decide(
        self,
        headers: &HeaderMap,
        ctx: &ProofContext<'_>,
    ) -> Result<Arc<Validated>, Refused> {
        let result = self
            .edge
            .validate_after_refetch(self.kid, headers, self.access, ctx)
            .await;
        self.edge
            .metrics()
            .validation_latency(self.started.elapsed().as_secs_f64());
        result
    }
}

/// The validation guard (the `/api/*` layer): refuses with [`rescue`] or passes the request on
/// with `Arc<Validated>` in its extensions.
#[derive(Debug, Clone)]
pub(crate) struct ValidateGuard {
    edge: Edge,
}

impl ValidateGuard {
    pub(crate) fn new(edge: Edge) -> Self {
        Self { edge }
    }
}

impl Guard for ValidateGuard {
    type Note = ();

    fn check(&self, mut req: Request<Body>) -> Check<()> {
        let access = Access::of_method(req.method().as_str());
        // The common case decides synchronously: no boxed future, no extra await.
        let decided = self
            .edge
            .validate(req.headers(), access, &ProofContext::of(&req));
        match decided {
            Validation::Decided(Ok(v)) => {
                req.extensions_mut().insert(v);
                Check::Pass(req)
            }
            Validation::Decided(Err(e)) => Check::Answer(self.edge.refuse(&e)),
            Validation::AfterRefetch(wait) => {
                let edge = self.edge.clone();
                Check::Wait(Box::pin(async move {
                    match wait.decide(req.headers(), &ProofContext::of(&req)).await {
                        Ok(v) => {
                            req.extensions_mut().insert(v);
                            Ok(req)
                        }
                        Err(e) => Err(edge.refuse(&e)),
                    }
                }))
            }
        }
    }
}
