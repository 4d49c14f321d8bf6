//! The HTTP answer of a refused or failed request, the same in every server: the JSON
//! [`ErrorBody`] with its status, plus the `Retry-After` header when the body carries one
//! (DESIGN §4).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use protocol::{ErrorBody, ErrorCode};

/// `body` as JSON with `status` (500 if `status` is not one), and `Retry-After` from the
/// body's `retry_after_s`.
pub fn error_response(status: u16, body: ErrorBody) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry = body.retry_after_s;
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// The answer of a failed request whose status is its code's: [`error_response`], after
/// logging `err` when the body is `INTERNAL` (the body then says only "internal error"; the
/// details stay in the log).
pub fn failed_request(err: &dyn std::fmt::Display, body: ErrorBody) -> Response {
    if body.error == ErrorCode::Internal {
        tracing::error!(error = %err, "request failed");
    }
    error_response(body.status().as_u16(), body)
}

#[cfg(test)]
mod tests {
    use protocol::{ErrorBody, ErrorCode};

    #[test]
    fn retry_after_is_both_in_the_body_and_the_header() {
        let r = super::error_response(
            409,
            ErrorBody::new(ErrorCode::HandoffInProgress, "moving").retry_after(1),
        );
        assert_eq!(r.status(), 409);
        assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "1");
        let r = super::error_response(404, ErrorBody::new(ErrorCode::NotFound, "none"));
        assert!(!r.headers().contains_key(axum::http::header::RETRY_AFTER));
    }
}
