//! The crate's one error enum and [`rescue`], the one function that turns any of them into
//! an HTTP answer (`ErrorBody` JSON, the status of DESIGN §4, `Retry-After` where it says).

use axum::response::{IntoResponse, Response};
use protocol::token::TokenError;
use protocol::{CellId, ErrorBody, ErrorCode};

use crate::metrics::{Outcome, Upstream};

/// `Retry-After` for a write refused during a handoff, in seconds.
pub const HANDOFF_RETRY_AFTER_S: u64 = 1;
/// `Retry-After` when this instance's view is stale or not loaded yet, in seconds.
pub const STALE_RETRY_AFTER_S: u64 = 2;
/// `Retry-After` when the auth-service cannot be reached, in seconds.
pub const UPSTREAM_RETRY_AFTER_S: u64 = 2;

/// Everything that can go wrong in the edge.
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

    // Request outcomes.
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
}

impl EdgeError {
    /// How a request answered with this error counts (`metrics`), given the code its answer
    /// carries: rate limits and unreachable upstreams are outcomes of their own, every other
    /// error a refusal with its code.
    pub fn outcome(&self, code: ErrorCode) -> Outcome {
        match self {
            EdgeError::RateLimited { .. } => Outcome::RateLimited,
            EdgeError::AuthUnavailable => Outcome::UpstreamUnavailable(Upstream::Auth),
            EdgeError::AppUnavailable | EdgeError::AppTimeout => {
                Outcome::UpstreamUnavailable(Upstream::App)
            }
            _ => Outcome::Refused(code),
        }
    }
}

/// Maps every error to its HTTP answer (see [`answer`]), with its [`Outcome`] in the
/// answer's extensions for the request counter.
pub fn rescue(err: &EdgeError) -> Response {
    let (status, body) = answer(err);
    let outcome = err.outcome(body.error);
    let mut resp = runtime::error_response(status, body);
    resp.extensions_mut().insert(outcome);
    resp
}

/// The status and body of every error: the only place statuses and codes are chosen.
pub fn answer(err: &EdgeError) -> (u16, ErrorBody) {
    match err {
        EdgeError::NotReady => (
            503,
            ErrorBody::new(ErrorCode::NotReady, "this edge has no cell state yet")
                .retry_after(STALE_RETRY_AFTER_S),
        ),
        EdgeError::SessionMissing => (
            401,
            ErrorBody::new(ErrorCode::SessionMissing, "no session presented"),
        ),
        EdgeError::Token(e) => {
            let code = e.code();
            (code.status(), ErrorBody::new(code, e.to_string()))
        }
        EdgeError::Revoked => (
            401,
            ErrorBody::new(ErrorCode::SessionRevoked, "this session has been revoked"),
        ),
        EdgeError::Handoff => (
            409,
            ErrorBody::new(
                ErrorCode::HandoffInProgress,
                "this contractor is moving; writes are paused",
            )
            .retry_after(HANDOFF_RETRY_AFTER_S),
        ),
        EdgeError::WrongCell { owner, endpoint } => {
            (409, ErrorBody::wrong_cell(owner.clone(), endpoint.clone()))
        }
        EdgeError::UnknownContractor => (
            404,
            ErrorBody::new(
                ErrorCode::UnknownContractor,
                "no cell this cell knows of owns this contractor",
            ),
        ),
        EdgeError::ViewBehind => (
            503,
            ErrorBody::new(
                ErrorCode::CellStateStale,
                "this edge's ownership view is behind the session",
            )
            .retry_after(STALE_RETRY_AFTER_S),
        ),
        EdgeError::RevocationsStale => (
            503,
            ErrorBody::new(
                ErrorCode::CellStateStale,
                "this edge cannot prove its revocation list is fresh",
            )
            .retry_after(STALE_RETRY_AFTER_S),
        ),
        EdgeError::LeaseLapsed => (
            503,
            ErrorBody::new(
                ErrorCode::CellStateStale,
                "this edge cannot prove its ownership view is fresh; writes are refused",
            )
            .retry_after(STALE_RETRY_AFTER_S),
        ),
        EdgeError::RateLimited { retry_after_s } => (
            429,
            ErrorBody::new(ErrorCode::RateLimited, "too many requests")
                .retry_after((*retry_after_s).max(1)),
        ),
        EdgeError::PayloadTooLarge => (
            413,
            ErrorBody::new(ErrorCode::PayloadTooLarge, "request body too large"),
        ),
        // DESIGN §4: the auth-service being down is a 503 (sign-in fails fast, retry later).
        EdgeError::AuthUnavailable => (
            503,
            ErrorBody::new(
                ErrorCode::UpstreamUnavailable,
                "the cell's auth-service cannot be reached",
            )
            .retry_after(UPSTREAM_RETRY_AFTER_S),
        ),
        EdgeError::AppUnavailable => (
            502,
            ErrorBody::new(
                ErrorCode::UpstreamUnavailable,
                "the cell's app cannot be reached",
            ),
        ),
        EdgeError::AppTimeout => (
            504,
            ErrorBody::new(ErrorCode::UpstreamUnavailable, "the cell's app timed out"),
        ),
        EdgeError::Csrf(why) => (403, ErrorBody::new(ErrorCode::Forbidden, *why)),
        EdgeError::CsrfProof(why) => (403, ErrorBody::new(ErrorCode::Forbidden, why.to_string())),
        EdgeError::BodyTimeout => (
            408,
            ErrorBody::new(
                ErrorCode::InvalidRequest,
                "the request body was not received in time",
            ),
        ),
        EdgeError::NotFound => (404, ErrorBody::new(ErrorCode::NotFound, "no such route")),
        EdgeError::MethodNotAllowed => (
            405,
            ErrorBody::new(
                ErrorCode::InvalidRequest,
                "method not allowed on this route",
            ),
        ),
        EdgeError::BadRequest(why) => (400, ErrorBody::new(ErrorCode::InvalidRequest, *why)),
        EdgeError::Config(_)
        | EdgeError::Secret(_)
        | EdgeError::Io(_)
        | EdgeError::Tls(_)
        | EdgeError::StateFile(_)
        | EdgeError::Feed(_)
        | EdgeError::Upstream(_)
        | EdgeError::UpstreamRefused(_) => {
            (500, ErrorBody::new(ErrorCode::Internal, "internal error"))
        }
    }
}

impl IntoResponse for EdgeError {
    fn into_response(self) -> Response {
        rescue(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::REFUSAL_CODES;

    #[test]
    fn every_refusal_counts_under_a_pre_created_code() {
        let owner = CellId::new("cell-02").unwrap_or_else(|_| unreachable!());
        let all = [
            EdgeError::Config("x".into()),
            EdgeError::Io(std::io::Error::other("x")),
            EdgeError::Tls("x".into()),
            EdgeError::StateFile("x".into()),
            EdgeError::Feed("x".into()),
            EdgeError::Upstream("x".into()),
            EdgeError::UpstreamRefused("x".into()),
            EdgeError::NotReady,
            EdgeError::SessionMissing,
            EdgeError::Token(TokenError::Expired),
            EdgeError::Token(TokenError::Malformed),
            EdgeError::Revoked,
            EdgeError::Handoff,
            EdgeError::WrongCell {
                owner,
                endpoint: "https://x".into(),
            },
            EdgeError::UnknownContractor,
            EdgeError::ViewBehind,
            EdgeError::LeaseLapsed,
            EdgeError::RevocationsStale,
            EdgeError::PayloadTooLarge,
            EdgeError::NotFound,
            EdgeError::MethodNotAllowed,
            EdgeError::Csrf("x"),
            EdgeError::BodyTimeout,
            EdgeError::BadRequest("x"),
        ];
        for e in &all {
            let (status, body) = answer(e);
            match e.outcome(body.error) {
                Outcome::Refused(code) => {
                    assert!(REFUSAL_CODES.contains(&code), "{e:?}: {code}");
                    assert!(status >= 400, "{e:?}");
                }
                other => panic!("{e:?} counts as {other:?}"),
            }
        }
        let limited = EdgeError::RateLimited { retry_after_s: 1 };
        assert_eq!(
            limited.outcome(answer(&limited).1.error),
            Outcome::RateLimited
        );
        for (e, up) in [
            (EdgeError::AuthUnavailable, Upstream::Auth),
            (EdgeError::AppUnavailable, Upstream::App),
            (EdgeError::AppTimeout, Upstream::App),
        ] {
            assert_eq!(
                e.outcome(answer(&e).1.error),
                Outcome::UpstreamUnavailable(up)
            );
        }
        let r = rescue(&EdgeError::Revoked);
        assert_eq!(
            r.extensions().get::<Outcome>(),
            Some(&Outcome::Refused(ErrorCode::SessionRevoked))
        );
    }
}
