//! The edge's two error types, kept apart because they go to different places:
//! - [`EdgeError`]: what fails outside a request (starting: the configuration, secrets,
//!   certificates, I/O, the disk copy; keeping the held state: the feed). It is logged, or
//!   stops the binary; it never becomes an HTTP answer.
//! - [`Refusal`]: why a request is refused. [`answer`] is the one table that turns each into
//!   its HTTP answer (`ErrorBody` JSON, `Retry-After` where DESIGN §4 says): the status is the
//!   code's own (`protocol::ErrorCode::status`, the one mapping table for statuses) except for
//!   the few named in [`exception`]; [`rescue`] adds the request counter's [`Outcome`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::token::TokenError;
use protocol::{CellId, ErrorBody, ErrorCode};

use crate::metrics::{Outcome, Upstream};

/// `Retry-After` for a write refused during a handoff, in seconds.
pub(crate) const HANDOFF_RETRY_AFTER_S: u64 = 1;
/// `Retry-After` when this instance's view is stale or not loaded yet, in seconds.
pub(crate) const STALE_RETRY_AFTER_S: u64 = 2;
/// `Retry-After` when the auth-service cannot be reached, in seconds.
pub(crate) const UPSTREAM_RETRY_AFTER_S: u64 = 2;

/// What fails outside a request: starting (configuration, secrets, certificates, I/O, the disk
/// copy) and keeping the held state (a feed request or document, the revocation handback).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EdgeError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("configuration: {0}")]
    Secret(#[from] runtime::secret::SecretError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("tls: {0}")]
    Tls(String),
    #[error("state file: {0}")]
    StateFile(String),
    #[error("feed document refused: {0}")]
    Feed(String),
    #[error("upstream: {0}")]
    Upstream(String),
    /// No replica of an upstream accepted a connection (the request never left).
    #[error("upstream: no replica accepted a connection: {0}")]
    UpstreamRefused(String),
}

/// Why a request is refused; `answer` says how each is answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    #[error("this instance has no cell state yet")]
    NotReady,
    #[error("no session presented")]
    SessionMissing,
    #[error("session refused: {0}")]
    Token(#[from] TokenError),
    #[error("session revoked")]
    Revoked,
    #[error("contractor is in handoff: writes refused")]
    Handoff,
    #[error("contractor is served by {owner}")]
    WrongCell { owner: CellId, endpoint: String },
    #[error("no cell owns this contractor")]
    UnknownContractor,
    #[error("this instance's ownership view is behind the session")]
    ViewBehind,
    #[error("write refused: the last feed sync is older than the write lease")]
    LeaseLapsed,
    #[error("refused: the revocation view is older than revocation_max_age_ms")]
    RevocationsStale,
    #[error("rate limited")]
    RateLimited { retry_after_s: u64 },
    #[error("request body too large")]
    PayloadTooLarge,
    #[error("auth-service unavailable")]
    AuthUnavailable,
    #[error("app unavailable")]
    AppUnavailable,
    #[error("app timed out")]
    AppTimeout,
    #[error("not found")]
    NotFound,
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    #[error("refused by the browser rules: {0}")]
    Csrf(&'static str),
    #[error("refused: {0}")]
    CsrfProof(protocol::http::CsrfError),
    #[error("the request body was not received in time")]
    BodyTimeout,
    #[error("malformed request: {0}")]
    BadRequest(&'static str),
    /// A bound session's DPoP proof (or a sign-in's, a rebind's) was refused.
    #[error("DPoP proof refused: {0}")]
    Dpop(protocol::dpop::ProofError),
    /// An unbound session of a client kind whose binding is `required`.
    #[error("this cell requires device-bound sessions of this kind")]
    Unbound,
    /// The edge's own failure while answering (a verified session's identity that cannot be
    /// written as a header); the client sees only `INTERNAL`.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl Refusal {
    /// How a request answered with this refusal counts (`metrics`), given the code its answer
    /// carries: rate limits and unreachable upstreams are outcomes of their own, every other
    /// refusal a refusal with its code.
    pub(crate) fn outcome(&self, code: ErrorCode) -> Outcome {
        match self {
            Refusal::RateLimited { .. }
            | Refusal::Dpop(protocol::dpop::ProofError::ReplaySetFull) => Outcome::RateLimited,
            Refusal::AuthUnavailable => Outcome::UpstreamUnavailable(Upstream::Auth),
            Refusal::AppUnavailable | Refusal::AppTimeout => {
                Outcome::UpstreamUnavailable(Upstream::App)
            }
            _ => Outcome::Refused(code),
        }
    }
}

/// Maps every refusal to its HTTP answer (see `answer`), with its [`Outcome`] in the
/// answer's extensions for the request counter.
pub fn rescue(refusal: &Refusal) -> Response {
    let (status, body) = answer(refusal);
    let outcome = refusal.outcome(body.error);
    let mut resp = runtime::error_response(status.as_u16(), body);
    resp.extensions_mut().insert(outcome);
    resp
}

/// The status and body of every refusal: the only place the edge chooses codes and statuses.
/// The status is the code's (`ErrorCode::status`) unless [`exception`] names another.
pub(crate) fn answer(refusal: &Refusal) -> (StatusCode, ErrorBody) {
    let body = body(refusal);
    let status = exception(refusal).unwrap_or_else(|| body.error.status());
    (status, body)
}

/// The refusals the edge answers with another status than their code's, and why.
pub(crate) fn exception(refusal: &Refusal) -> Option<StatusCode> {
    match refusal {
        // DESIGN §4: the auth-service being down is a 503 (sign-in fails fast, retry later);
        // the code's own 502 is for the app.
        Refusal::AuthUnavailable => Some(StatusCode::SERVICE_UNAVAILABLE),
        // The app did not answer in time: a gateway timeout, not a bad gateway.
        Refusal::AppTimeout => Some(StatusCode::GATEWAY_TIMEOUT),
        // A body that never arrived (ATTACKS A29): the client was too slow, not malformed.
        Refusal::BodyTimeout => Some(StatusCode::REQUEST_TIMEOUT),
        // A route that exists, with another method: HTTP's own answer.
        Refusal::MethodNotAllowed => Some(StatusCode::METHOD_NOT_ALLOWED),
        Refusal::NotReady
        | Refusal::SessionMissing
        | Refusal::Token(_)
        | Refusal::Revoked
        | Refusal::Handoff
        | Refusal::WrongCell { .. }
        | Refusal::UnknownContractor
        | Refusal::ViewBehind
        | Refusal::LeaseLapsed
        | Refusal::RevocationsStale
        | Refusal::RateLimited { .. }
        | Refusal::PayloadTooLarge
        | Refusal::AppUnavailable
        | Refusal::NotFound
        | Refusal::Csrf(_)
        | Refusal::CsrfProof(_)
        | Refusal::BadRequest(_)
        | Refusal::Dpop(_)
        | Refusal::Unbound
        | Refusal::Internal(_) => None,
    }
}

/// The body of every refusal: its code, its message, and `Retry-After` where it has one.
fn body(refusal: &Refusal) -> ErrorBody {
    match refusal {
        Refusal::NotReady => ErrorBody::new(ErrorCode::NotReady, "this edge has no cell state yet")
            .retry_after(STALE_RETRY_AFTER_S),
        Refusal::SessionMissing => {
            ErrorBody::new(ErrorCode::SessionMissing, "no session presented")
        }
        Refusal::Token(e) => ErrorBody::new(e.code(), e.to_string()),
        Refusal::Revoked => {
            ErrorBody::new(ErrorCode::SessionRevoked, "this session has been revoked")
        }
        Refusal::Handoff => ErrorBody::new(
            ErrorCode::HandoffInProgress,
            "this contractor is moving; writes are paused",
        )
        .retry_after(HANDOFF_RETRY_AFTER_S),
        Refusal::WrongCell { owner, endpoint } => {
            ErrorBody::wrong_cell(owner.clone(), endpoint.clone())
        }
        Refusal::UnknownContractor => ErrorBody::new(
            ErrorCode::UnknownContractor,
            "no cell this cell knows of owns this contractor",
        ),
        Refusal::ViewBehind => ErrorBody::new(
            ErrorCode::CellStateStale,
            "this edge's ownership view is behind the session",
        )
        .retry_after(STALE_RETRY_AFTER_S),
        Refusal::RevocationsStale => ErrorBody::new(
            ErrorCode::CellStateStale,
            "this edge cannot prove its revocation list is fresh",
        )
        .retry_after(STALE_RETRY_AFTER_S),
        Refusal::LeaseLapsed => ErrorBody::new(
            ErrorCode::CellStateStale,
            "this edge cannot prove its ownership view is fresh; writes are refused",
        )
        .retry_after(STALE_RETRY_AFTER_S),
        Refusal::RateLimited { retry_after_s } => {
            ErrorBody::new(ErrorCode::RateLimited, "too many requests")
                .retry_after((*retry_after_s).max(1))
        }
        Refusal::PayloadTooLarge => {
            ErrorBody::new(ErrorCode::PayloadTooLarge, "request body too large")
        }
        Refusal::AuthUnavailable => ErrorBody::new(
            ErrorCode::UpstreamUnavailable,
            "the cell's auth-service cannot be reached",
        )
        .retry_after(UPSTREAM_RETRY_AFTER_S),
        Refusal::AppUnavailable => ErrorBody::new(
            ErrorCode::UpstreamUnavailable,
            "the cell's app cannot be reached",
        ),
        Refusal::AppTimeout => {
            ErrorBody::new(ErrorCode::UpstreamUnavailable, "the cell's app timed out")
        }
        Refusal::Csrf(why) => ErrorBody::new(ErrorCode::Forbidden, *why),
        Refusal::CsrfProof(why) => ErrorBody::new(ErrorCode::Forbidden, why.to_string()),
        Refusal::BodyTimeout => ErrorBody::new(
            ErrorCode::InvalidRequest,
            "the request body was not received in time",
        ),
        Refusal::NotFound => ErrorBody::new(ErrorCode::NotFound, "no such route"),
        Refusal::MethodNotAllowed => ErrorBody::new(
            ErrorCode::InvalidRequest,
            "method not allowed on this route",
        ),
        Refusal::BadRequest(why) => ErrorBody::new(ErrorCode::InvalidRequest, *why),
        Refusal::Internal(_) => ErrorBody::new(ErrorCode::Internal, "internal error"),
        Refusal::Dpop(e) => {
            let body = ErrorBody::new(e.code(), e.to_string());
            match e {
                protocol::dpop::ProofError::ReplaySetFull => {
                    body.retry_after(protocol::dpop::NONCE_STEP_S)
                }
                _ => body,
            }
        }
        Refusal::Unbound => ErrorBody::new(
            ErrorCode::SessionInvalid,
            "this cell requires device-bound sessions: sign in again with a DPoP proof",
        ),
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        rescue(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::REFUSAL_CODES;

    /// One of every refusal (a token refusal twice: its status is its code's).
    fn every_refusal() -> Vec<Refusal> {
        let owner = CellId::new("cell-02").unwrap_or_else(|_| unreachable!());
        vec![
            Refusal::NotReady,
            Refusal::SessionMissing,
            Refusal::Token(TokenError::Expired),
            Refusal::Token(TokenError::Malformed),
            Refusal::Revoked,
            Refusal::Handoff,
            Refusal::WrongCell {
                owner,
                endpoint: "https://x".into(),
            },
            Refusal::UnknownContractor,
            Refusal::ViewBehind,
            Refusal::LeaseLapsed,
            Refusal::RevocationsStale,
            Refusal::RateLimited { retry_after_s: 0 },
            Refusal::PayloadTooLarge,
            Refusal::AuthUnavailable,
            Refusal::AppUnavailable,
            Refusal::AppTimeout,
            Refusal::NotFound,
            Refusal::MethodNotAllowed,
            Refusal::Csrf("x"),
            Refusal::CsrfProof(protocol::http::CsrfError::Missing),
            Refusal::BodyTimeout,
            Refusal::BadRequest("x"),
            Refusal::Internal("x"),
            Refusal::Dpop(protocol::dpop::ProofError::Missing),
            Refusal::Dpop(protocol::dpop::ProofError::BadSignature),
            Refusal::Dpop(protocol::dpop::ProofError::Replayed),
            Refusal::Dpop(protocol::dpop::ProofError::NonceUnknown),
            Refusal::Dpop(protocol::dpop::ProofError::NonceStale),
            Refusal::Dpop(protocol::dpop::ProofError::KeyMismatch),
            Refusal::Dpop(protocol::dpop::ProofError::ReplaySetFull),
            Refusal::Unbound,
        ]
    }

    /// The edge's answers, pinned: each refusal's status, code and `Retry-After`. A status
    /// differs from its code's only where `exception` names it.
    #[test]
    fn every_refusal_has_its_status_code_and_retry_after() {
        use ErrorCode as C;
        let expected: [(u16, ErrorCode, Option<u64>); 31] = [
            (503, C::NotReady, Some(STALE_RETRY_AFTER_S)),
            (401, C::SessionMissing, None),
            (401, C::SessionExpired, None),
            (401, C::SessionInvalid, None),
            (401, C::SessionRevoked, None),
            (409, C::HandoffInProgress, Some(HANDOFF_RETRY_AFTER_S)),
            (409, C::WrongCell, None),
            (404, C::UnknownContractor, None),
            (503, C::CellStateStale, Some(STALE_RETRY_AFTER_S)),
            (503, C::CellStateStale, Some(STALE_RETRY_AFTER_S)),
            (503, C::CellStateStale, Some(STALE_RETRY_AFTER_S)),
            (429, C::RateLimited, Some(1)),
            (413, C::PayloadTooLarge, None),
            (503, C::UpstreamUnavailable, Some(UPSTREAM_RETRY_AFTER_S)),
            (502, C::UpstreamUnavailable, None),
            (504, C::UpstreamUnavailable, None),
            (404, C::NotFound, None),
            (405, C::InvalidRequest, None),
            (403, C::Forbidden, None),
            (403, C::Forbidden, None),
            (408, C::InvalidRequest, None),
            (400, C::InvalidRequest, None),
            (500, C::Internal, None),
            (401, C::DpopProofMissing, None),
            (401, C::DpopProofInvalid, None),
            (401, C::DpopProofReplayed, None),
            (401, C::DpopNonceRequired, None),
            (401, C::DpopNonceStale, None),
            (401, C::DpopKeyMismatch, None),
            (429, C::RateLimited, Some(protocol::dpop::NONCE_STEP_S)),
            (401, C::SessionInvalid, None),
        ];
        let all = every_refusal();
        assert_eq!(all.len(), expected.len());
        for (r, (status, code, retry)) in all.iter().zip(expected) {
            let (s, body) = answer(r);
            assert_eq!(
                (s.as_u16(), body.error, body.retry_after_s),
                (status, code, retry),
                "{r:?}"
            );
            match exception(r) {
                Some(named) => assert_eq!(s, named, "{r:?}"),
                None => assert_eq!(s, code.status(), "{r:?}: not its code's status"),
            }
        }
    }

    #[test]
    fn every_refusal_counts_under_a_pre_created_code() {
        for r in &every_refusal() {
            let (status, body) = answer(r);
            match r.outcome(body.error) {
                Outcome::Refused(code) => {
                    assert!(REFUSAL_CODES.contains(&code), "{r:?}: {code}");
                    assert!(status.as_u16() >= 400, "{r:?}");
                }
                Outcome::RateLimited => assert!(matches!(
                    r,
                    Refusal::RateLimited { .. }
                        | Refusal::Dpop(protocol::dpop::ProofError::ReplaySetFull)
                )),
                Outcome::UpstreamUnavailable(Upstream::Auth) => {
                    assert!(matches!(r, Refusal::AuthUnavailable))
                }
                Outcome::UpstreamUnavailable(Upstream::App) => {
                    assert!(matches!(r, Refusal::AppUnavailable | Refusal::AppTimeout))
                }
                other => panic!("{r:?} counts as {other:?}"),
            }
        }
        let r = rescue(&Refusal::Revoked);
        assert_eq!(
            r.extensions().get::<Outcome>(),
            Some(&Outcome::Refused(ErrorCode::SessionRevoked))
        );
    }
}
