//! The admin client's services ([`Api`]), its errors, and how an admin call is made: the retry
//! policy, one attempt, the retries around it, and the typed answer (see the module
//! documentation of [`crate::admin`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use fleet_description::{FleetCell, FleetFile};
use protocol::{Endpoint, ErrorBody, ErrorCode};
use reqwest::Method;
use runtime::Secret;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One service's admin API: where it is (one URL, or its replicas' in order) and the token it
/// accepts.
#[derive(Debug, Clone)]
pub struct Api {
    /// At least one; a retry goes to the next (a replica that died is skipped).
    bases: Vec<Endpoint>,
    token: Secret,
}

impl Api {
    /// A service at `base` accepting `token`.
    pub fn new(base: Endpoint, token: Secret) -> Self {
        Api {
            bases: vec![base],
            token,
        }
    }

    /// A cell's auth-service admin API (its replicas' internal listeners, replica 0 first, the
    /// cell's own admin token): each retry of a call goes to the next replica.
    pub fn auth(cell: &FleetCell) -> fleet_description::Result<Api> {
        let mut bases = vec![cell.auth_admin_endpoint()?];
        for r in cell.replicas().iter().skip(1) {
            bases.push(Endpoint::parse(&r.url).map_err(|e| {
                fleet_description::Error::Config(format!("cells[].auth_services[].url: {e}"))
            })?);
        }
        Ok(Api {
            bases,
            token: cell.admin(),
        })
    }

    /// A cell's app migration interface (its internal listener, the app's own internal token;
    /// never the cell's admin token, which the app does not hold).
    pub fn app(cell: &FleetCell) -> fleet_description::Result<Api> {
        Ok(Api::new(cell.app_internal_endpoint()?, cell.app_internal()))
    }

    /// The control plane's admin API (the control plane's own token).
    pub fn control_plane(fleet: &FleetFile) -> fleet_description::Result<Api> {
        Ok(Api::new(
            fleet.control_plane_endpoint()?,
            fleet.control_plane_admin(),
        ))
    }

    /// The service's (first) base URL.
    pub fn base(&self) -> &Endpoint {
        &self.bases[0]
    }

    /// The URL of `path` at the base of attempt `n` (1-based): attempts rotate over the bases.
    fn url(&self, n: usize, path: &str) -> String {
        self.bases[n.saturating_sub(1) % self.bases.len()].join(path)
    }
}

/// Why an admin call failed (after its retries).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No answer: connect error, timeout, or a broken answer.
    #[error("{call}: {message}")]
    Transport { call: String, message: String },
    /// The service answered with a status other than the one expected.
    #[error("{call} answered {status}: {detail}")]
    Refused {
        call: String,
        status: u16,
        /// The error code of the answer, when it was an [`ErrorBody`].
        code: Option<ErrorCode>,
        detail: String,
    },
    /// A 2xx answer that is not the endpoint's answer type.
    #[error("{call}: unexpected answer: {message}")]
    Decode { call: String, message: String },
}

impl AdminError {
    /// The status the service answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            AdminError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A result with the number of attempts it took.
#[derive(Debug)]
pub struct Attempted<T> {
    pub result: Result<T, AdminError>,
    pub attempts: usize,
}

/// The typed admin client (see the module documentation). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdminClient {
    http: reqwest::Client,
    policy: RetryPolicy,
    deadline: Option<Instant>,
}

impl AdminClient {
    /// A client over `http` (an HTTPS client trusting the fleet's CA) with the default policy.
    pub fn new(http: reqwest::Client) -> Self {
        AdminClient {
            http,
            policy: RetryPolicy::default(),
            deadline: None,
        }
    }

    /// A client trusting the CA of `fleet`.
    pub fn for_fleet(fleet: &FleetFile) -> fleet_description::Result<Self> {
        Ok(AdminClient::new(fleet_description::client_trusting_file(
            &fleet.ca_cert,
        )?))
    }

    /// The same client, retrying until `deadline` instead of a number of attempts.
    pub fn until(&self, deadline: Instant) -> Self {
        AdminClient {
            deadline: Some(deadline),
            ..self.clone()
        }
    }

    /// The HTTPS client underneath (for the few calls that are not admin calls).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// Attempts of a call without a deadline, the first included.
pub const MAX_ATTEMPTS: usize = 5;
/// First retry delay, in milliseconds.
pub const RETRY_MIN_DELAY_MS: u64 = 100;
/// Longest retry delay, in milliseconds.
pub const RETRY_MAX_DELAY_MS: u64 = 1_000;
/// Timeout of one request, in milliseconds.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Longest part of an unreadable answer quoted in an error, in characters.
pub const QUOTE_CHARS: usize = 200;

/// The retry policy of every admin call (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts of a call without a deadline, the first included.
    pub attempts: usize,
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Timeout of one request.
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: MAX_ATTEMPTS,
            min_delay: Duration::from_millis(RETRY_MIN_DELAY_MS),
            max_delay: Duration::from_millis(RETRY_MAX_DELAY_MS),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS),
        }
    }
}

/// Whether a call may be repeated after an attempt whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Repeat {
    /// The service does the same thing once or many times.
    Idempotent,
    /// Repeat only what surely was not carried out (connect error, 429, 503).
    NotCarriedOut,
}

/// One attempt's failure, and whether another attempt may help.
#[derive(Debug)]
pub(super) struct Failure {
    retry: bool,
    error: AdminError,
}

/// A raw answer: status and body.
pub(super) type Answer = (u16, bytes::Bytes);

impl AdminClient {
    pub(super) fn backoff(&self) -> ExponentialBuilder {
        let b = ExponentialBuilder::default()
            .with_min_delay(self.policy.min_delay)
            .with_max_delay(self.policy.max_delay)
            .with_jitter();
        match self.deadline {
            Some(_) => b.without_max_times(),
            None => b.with_max_times(self.policy.attempts.saturating_sub(1)),
        }
    }

    /// One attempt.
    pub(super) async fn attempt(
        &self,
        method: &Method,
        url: &str,
        token: &Secret,
        body: Option<&bytes::Bytes>,
        repeat: Repeat,
    ) -> Result<Answer, Failure> {
        let call = || format!("{method} {url}");
        let mut timeout = self.policy.request_timeout;
        if let Some(d) = self.deadline {
            timeout = timeout.min(d.saturating_duration_since(Instant::now()));
        }
        let mut req = self
            .http
            .request(method.clone(), url)
            .bearer_auth(token.expose())
            .timeout(timeout);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.clone());
        }
        let transport = |e: reqwest::Error, sent: bool| Failure {
            retry: repeat == Repeat::Idempotent || !sent,
            error: AdminError::Transport {
                call: call(),
                message: if e.is_timeout() {
                    "timed out".to_owned()
                } else {
                    e.to_string()
                },
            },
        };
        let resp = req.send().await.map_err(|e| {
            let sent = !e.is_connect();
            transport(e, sent)
        })?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| transport(e, true))?;
        let retry = match repeat {
            Repeat::Idempotent => status == 429 || status >= 500,
            Repeat::NotCarriedOut => status == 429 || status == 503,
        };
        if retry {
            return Err(Failure {
                retry: true,
                error: refused(call(), status, &bytes),
            });
        }
        Ok((status, bytes))
    }

    /// Sends a request with the retry policy; answers the last result and the attempts made.
    pub(super) async fn exchange(
        &self,
        api: &Api,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        repeat: Repeat,
    ) -> Attempted<Answer> {
        // Made once: every attempt sends the same bytes (a cheap clone each).
        let body = body.map(bytes::Bytes::from);
        let attempts = AtomicUsize::new(0);
        let deadline = self.deadline;
        let (method, body) = (&method, body.as_ref());
        let result = (|| {
            let n = attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let url = api.url(n, path);
            async move { self.attempt(method, &url, &api.token, body, repeat).await }
        })
        .retry(self.backoff())
        .sleep(tokio::time::sleep)
        .when(|f: &Failure| f.retry)
        .adjust(move |_, delay| match (deadline, delay) {
            // Stop when the next attempt would start after the deadline.
            (Some(d), Some(delay)) if Instant::now() + delay >= d => None,
            (_, delay) => delay,
        })
        .notify(|f: &Failure, delay| {
            tracing::debug!(error = %f.error, ?delay, "retrying an admin call");
        })
        .await
        .map_err(|f| f.error);
        Attempted {
            result,
            attempts: attempts.load(Ordering::Relaxed),
        }
    }

    /// A call whose 2xx answer is a `T`; `absent` is the status that means "none" (404 for a
    /// lookup), if any.
    pub(super) async fn typed<T: DeserializeOwned>(
        &self,
        api: &Api,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        repeat: Repeat,
        absent: Option<u16>,
    ) -> Attempted<Option<T>> {
        let call = || format!("{method} {}", api.base().join(path));
        let Attempted { result, attempts } =
            self.exchange(api, method.clone(), path, body, repeat).await;
        let result = result.and_then(|(status, bytes)| {
            if absent == Some(status) {
                return Ok(None);
            }
            if !(200..300).contains(&status) {
                return Err(refused(call(), status, &bytes));
            }
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| AdminError::Decode {
                    call: call(),
                    message: e.to_string(),
                })
        });
        Attempted { result, attempts }
    }

    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        api: &Api,
        path: &str,
    ) -> Result<T, AdminError> {
        let r = self
            .typed(api, Method::GET, path, None, Repeat::Idempotent, None)
            .await;
        r.result.map(expect_some)?
    }

    pub(super) async fn lookup<T: DeserializeOwned>(
        &self,
        api: &Api,
        path: &str,
    ) -> Result<Option<T>, AdminError> {
        self.typed(api, Method::GET, path, None, Repeat::Idempotent, Some(404))
            .await
            .result
    }

    pub(super) async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        api: &Api,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Attempted<T> {
        let call = || format!("{method} {}", api.base().join(path));
        let body = match body.map(serde_json::to_vec).transpose() {
            Ok(b) => b,
            Err(e) => {
                return Attempted {
                    result: Err(AdminError::Decode {
                        call: call(),
                        message: format!("the request body: {e}"),
                    }),
                    attempts: 0,
                };
            }
        };
        let r = self
            .typed(api, method, path, body, Repeat::Idempotent, None)
            .await;
        Attempted {
            result: r.result.and_then(expect_some),
            attempts: r.attempts,
        }
    }
}

/// A `T` that a call without an "absent" status always has.
pub(super) fn expect_some<T>(v: Option<T>) -> Result<T, AdminError> {
    v.ok_or_else(|| AdminError::Decode {
        call: String::new(),
        message: "no answer".to_owned(),
    })
}

/// The error of an answer with an unexpected status: its [`ErrorBody`] when it has one, else
/// the start of its text.
pub(super) fn refused(call: String, status: u16, bytes: &[u8]) -> AdminError {
    let (code, detail) = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(b) => (Some(b.error), format!("{} {}", b.error, b.message)),
        Err(_) => (
            None,
            String::from_utf8_lossy(bytes)
                .chars()
                .take(QUOTE_CHARS)
                .collect(),
        ),
    };
    AdminError::Refused {
        call,
        status,
        code,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::ErrorCode;

    #[test]
    fn the_default_policy_is_bounded() {
        let p = RetryPolicy::default();
        assert_eq!(p.attempts, MAX_ATTEMPTS);
        assert!(p.min_delay < p.max_delay);
    }

    #[test]
    fn a_refusal_names_the_call_and_the_code() {
        let e = refused(
            "GET https://a.example/admin/v1/status".into(),
            403,
            br#"{"error":"FORBIDDEN","message":"a valid admin token is required"}"#,
        );
        assert_eq!(e.status(), Some(403));
        assert!(matches!(
            &e,
            AdminError::Refused {
                code: Some(ErrorCode::Forbidden),
                ..
            }
        ));
        assert!(e.to_string().contains("answered 403: FORBIDDEN"), "{e}");
        let e = refused("GET x".into(), 502, b"bad gateway");
        assert!(e.to_string().ends_with("answered 502: bad gateway"), "{e}");
    }
}
