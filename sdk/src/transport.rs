//! HTTPS to one cell, with the retry rules of DESIGN §7:
//!
//! - connection errors and `503`: bounded exponential backoff with full jitter, for reads and
//!   for writes that carry an idempotency key (the SDK gives every write one);
//! - `409 HANDOFF_IN_PROGRESS` and `429`: wait `Retry-After` (bounded by
//!   [`RetryPolicy::max_retry_after`]; a longer wait is surfaced as the typed error), retry;
//! - everything else is answered at once.
//!
//! The capped exponential sequence comes from `backon`; full jitter draws each wait uniformly
//! between zero and that ceiling.

use std::time::Duration;

use backon::BackoffBuilder as _;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use protocol::{ErrorBody, ErrorCode, SessionToken};

use crate::Error;

/// Most attempts of one request (the first one included).
pub const DEFAULT_MAX_ATTEMPTS: usize = 4;
/// Ceiling of the first backoff wait.
pub const DEFAULT_MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Largest backoff ceiling.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest `Retry-After` the SDK waits out by itself.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Wait when a `409 HANDOFF_IN_PROGRESS`/`429` carries no `Retry-After`.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Largest response body read, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Header carrying the idempotency key of a write.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How hard the SDK retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: usize,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            min_backoff: DEFAULT_MIN_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

/// A successful (or non-Cellbind) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

/// One request to send.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub method: Method,
    pub url: String,
    pub token: Option<&'a SessionToken>,
    pub body: Option<Bytes>,
    pub idempotency_key: Option<String>,
    /// Whether sending it twice is harmless although it is a write without a key (sign-in and
    /// renewal: a second session is as good as the first).
    pub replay_safe: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    policy: RetryPolicy,
}

enum Outcome {
    Done(Result<Response, Error>),
    /// Retry after a backoff wait; `true` when nothing reached the cell.
    Backoff(Error, bool),
    After(Error, Option<Duration>),
}

impl Transport {
    pub fn new(http: reqwest::Client, policy: RetryPolicy) -> Self {
        Self { http, policy }
    }

    /// Sends `call`, retrying as the module doc says. Error answers become typed errors;
    /// other answers (2xx, and 3xx/4xx that are not a Cellbind error body) are returned.
    pub async fn send(&self, call: Call<'_>) -> Result<Response, Error> {
        let retryable =
            call.method.is_idempotent() || call.idempotency_key.is_some() || call.replay_safe;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.policy.min_backoff)
            .with_max_delay(self.policy.max_backoff)
            .with_max_times(usize::MAX)
            .build();
        let mut attempt = 1;
        loop {
            let outcome = self.once(&call).await;
            let (err, wait) = match outcome {
                Outcome::Done(r) => return r,
                Outcome::Backoff(e, unsent) if retryable || unsent => {
                    let ceiling = backoff.next().unwrap_or(self.policy.max_backoff);
                    (e, full_jitter(ceiling))
                }
                Outcome::Backoff(e, _) => return Err(e),
                Outcome::After(e, after) => {
                    let wait = after.unwrap_or(DEFAULT_RETRY_AFTER);
                    if wait > self.policy.max_retry_after {
                        return Err(e);
                    }
                    (e, wait)
                }
            };
            if attempt >= self.policy.max_attempts.max(1) {
                return Err(err);
            }
            tracing::debug!(attempt, ?wait, error = %err, "retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    async fn once(&self, call: &Call<'_>) -> Outcome {
        let mut req = self.http.request(call.method.clone(), &call.url);
        if let Some(t) = call.token {
            req = req.bearer_auth(t.expose());
        }
        if let Some(k) = &call.idempotency_key {
            req = req.header(IDEMPOTENCY_KEY, k);
        }
        if let Some(b) = &call.body {
            req = req
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(b.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::Backoff(Error::Network(error_chain(&e)), e.is_connect()),
        };
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let body = match read_capped(resp).await {
            Ok(b) => b,
            Err(e) => return Outcome::Backoff(e, false),
        };
        classify(status, retry_after, body)
    }
}

fn classify(status: StatusCode, retry_after: Option<Duration>, body: Bytes) -> Outcome {
    if status.is_success() {
        return Outcome::Done(Ok(Response {
            status: status.as_u16(),
            body,
        }));
    }
    let parsed = serde_json::from_slice::<ErrorBody>(&body).ok();
    let Some(parsed) = parsed else {
        if status.is_server_error() {
            let e = Error::Upstream {
                status: status.as_u16(),
                code: None,
            };
            return if status == StatusCode::SERVICE_UNAVAILABLE {
                Outcome::Backoff(e, false)
            } else {
                Outcome::Done(Err(e))
            };
        }
        return Outcome::Done(Ok(Response {
            status: status.as_u16(),
            body,
        }));
    };
    let code = parsed.error;
    let after = retry_after.or(parsed.retry_after_s.map(Duration::from_secs));
    let err = Error::from_body(status.as_u16(), parsed, retry_after);
    match code {
        ErrorCode::HandoffInProgress | ErrorCode::RateLimited => Outcome::After(err, after),
        _ if status == StatusCode::SERVICE_UNAVAILABLE => Outcome::Backoff(err, false),
        _ => Outcome::Done(Err(err)),
    }
}

/// A wait drawn uniformly from `[0, ceiling]`.
fn full_jitter(ceiling: Duration) -> Duration {
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::random_range(0..=ms))
}

/// `Retry-After` in delta-seconds (the only form Cellbind sends).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Bytes, Error> {
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(Error::InvalidResponse(format!(
            "response larger than {MAX_RESPONSE_BYTES} bytes"
        )));
    }
    let mut out = bytes::BytesMut::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if out.len() + c.len() > MAX_RESPONSE_BYTES {
                    return Err(Error::InvalidResponse(format!(
                        "response larger than {MAX_RESPONSE_BYTES} bytes"
                    )));
                }
                out.extend_from_slice(&c);
            }
            Ok(None) => return Ok(out.freeze()),
            Err(e) => return Err(Error::Network(error_chain(&e))),
        }
    }
}

/// An error with its sources, on one line (reqwest's own Display hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_stays_under_the_ceiling() {
        let c = Duration::from_millis(300);
        let draws: Vec<_> = (0..200).map(|_| full_jitter(c)).collect();
        assert!(draws.iter().all(|d| *d <= c));
        // full jitter, not "ceiling plus a bit": some draws land in the lower half
        assert!(draws.iter().any(|d| *d < c / 2));
    }

    #[test]
    fn classify_sorts_answers() {
        let body =
            |code: ErrorCode| Bytes::from(serde_json::to_vec(&ErrorBody::new(code, "m")).unwrap());
        assert!(matches!(
            classify(StatusCode::OK, None, Bytes::new()),
            Outcome::Done(Ok(_))
        ));
        assert!(matches!(
            classify(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                body(ErrorCode::CellStateStale)
            ),
            Outcome::Backoff(Error::CellStateStale, false)
        ));
        assert!(matches!(
            classify(StatusCode::SERVICE_UNAVAILABLE, None, Bytes::new()),
            Outcome::Backoff(Error::Upstream { status: 503, .. }, false)
        ));
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(3)), body(ErrorCode::RateLimited)),
            Outcome::After(Error::RateLimited { .. }, Some(d)) if d == Duration::from_secs(3)
        ));
        assert!(matches!(
            classify(StatusCode::NOT_FOUND, None, Bytes::from_static(b"<html>")),
            Outcome::Done(Ok(Response { status: 404, .. }))
        ));
        assert!(matches!(
            classify(
                StatusCode::UNAUTHORIZED,
                None,
                body(ErrorCode::SessionRevoked)
            ),
            Outcome::Done(Err(Error::SessionRevoked))
        ));
    }
}
