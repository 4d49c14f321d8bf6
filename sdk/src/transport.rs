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
//!
//! A failure without an answer becomes a typed [`Error::Network`] in one place,
//! [`network_error`]:
//!
//! | reqwest says                                   | kind                  | the cell may have seen it |
//! |------------------------------------------------|-----------------------|---------------------------|
//! | the cell's certificate matches none of its pins | — ([`Error::PinMismatch`]) | no                   |
//! | connect error with a TLS (rustls) error inside  | `Tls`                 | no                        |
//! | connect error that timed out                   | `TimeoutBeforeSend`   | no                        |
//! | any other connect error (DNS, refused, unreachable) | `Connect`        | no                        |
//! | a timeout after connecting (request or body)   | `TimeoutAfterSend`    | maybe                     |
//! | anything else (reset, closed mid-answer, body) | `Interrupted`         | maybe                     |
//!
//! Every cell is reached through its own HTTPS client, which checks the cell's TLS pins from
//! the signed map during the handshake (the `pins` module); a pin mismatch is never retried and
//! is reported to the observer as a TLS failure.
//!
//! A call for a device-bound session (or a sign-in, a rebind) carries a DPoP proof made for
//! each attempt (`crate::proof`): every attempt has its own `jti`, the endpoint's latest nonce
//! and its clock. A `401` asking for a nonce (`use_dpop_nonce`), or refusing a proof whose
//! `iat` the answer's `Date` shows was far off, is sent again at once with a fresh proof, once
//! per call and beside the bounded retries above (the edge refused it before forwarding it).
//!
//! "Maybe" is the conservative answer: reqwest cannot say whether the request bytes left the
//! device, so a write may have been applied. Over several attempts, the request may have
//! reached the cell if any attempt may have. Each call ends with one event to the client's
//! [`RequestObserver`](crate::RequestObserver), if it has one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::BackoffBuilder as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use protocol::dpop::{DPOP_HEADER, ProofClaims};
use protocol::time::SharedClock;
use protocol::{CellId, ErrorBody, ErrorCode, SessionToken};
use serde::Deserialize;

use crate::Error;
use crate::error::NetworkErrorKind;
use crate::observer::{Observer, RequestEvent, RequestOutcome};
use crate::pins::{self, CellClients};
use crate::proof::{ServerTimes, Signer, date_of, new_jti};
use crate::request::Body;

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
/// How far a refused proof's `iat` may be from the answer's `Date` before the refusal is taken
/// for the device's clock having moved (and the call is sent again with the corrected time).
const CLOCK_JUMP_S: u64 = 60;

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
    /// The cell it goes to (for the observer).
    pub cell: &'a CellId,
    /// Its endpoint, as the map lists it (whose nonce and clock the proofs use).
    pub endpoint: &'a str,
    pub method: Method,
    /// The path without the query (for the observer and the proof's `htu`).
    pub path: &'a str,
    pub url: String,
    pub token: Option<&'a SessionToken>,
    /// The key that proves each attempt (DPoP), when the call needs proofs.
    pub proof: Option<&'a Signer>,
    /// The app's extra headers, already checked.
    pub headers: &'a [(HeaderName, HeaderValue)],
    pub body: Option<Body>,
    pub idempotency_key: Option<String>,
    /// Whether sending it twice is harmless although it is a write without a key (sign-in and
    /// renewal: a second session is as good as the first).
    pub replay_safe: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Transport {
    /// One HTTPS client per cell, checking its pins.
    clients: Arc<CellClients>,
    policy: RetryPolicy,
    observer: Observer,
    /// The device's clock (a proof's `iat` is it, corrected by the endpoint's offset).
    clock: SharedClock,
    /// Every endpoint's latest nonce and clock offset.
    times: Arc<ServerTimes>,
}

enum Outcome {
    Done(Result<Response, Error>),
    /// Retry after a backoff wait; `true` when nothing reached the cell.
    Backoff(Error, bool),
    After(Error, Option<Duration>),
    /// The proof was refused for its nonce or time: send again at once with a fresh one.
    FreshProof(Error),
}

/// What the attempts of one call saw (for the observer and `reached_cell`).
#[derive(Debug, Default)]
struct Trace {
    attempts: u32,
    /// Some attempt may have been received by the cell.
    reached: bool,
    /// The last attempt's status and Cellbind error code, when it was answered.
    status: Option<u16>,
    code: Option<String>,
}

impl Transport {
    pub fn new(
        clients: CellClients,
        policy: RetryPolicy,
        observer: Observer,
        clock: SharedClock,
    ) -> Self {
        Self {
            clients: Arc::new(clients),
            policy,
            observer,
            clock,
            times: Arc::new(ServerTimes::default()),
        }
    }

    /// Sends `call`, retrying as the module doc says. Error answers become typed errors;
    /// other answers (2xx, and 3xx/4xx that are not a Cellbind error body) are returned.
    pub async fn send(&self, call: Call<'_>) -> Result<Response, Error> {
        let started = Instant::now();
        let mut trace = Trace::default();
        let result = self
            .send_retrying(&call, &mut trace)
            .await
            .map_err(|e| e.reached_earlier(trace.reached));
        if self.observer.is_set()
            && let Some(event) = event(&call, &trace, &result, started.elapsed())
        {
            self.observer.tell(&event);
        }
        result
    }

    async fn send_retrying(&self, call: &Call<'_>, trace: &mut Trace) -> Result<Response, Error> {
        let retryable =
            call.method.is_idempotent() || call.idempotency_key.is_some() || call.replay_safe;
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.policy.min_backoff)
            .with_max_delay(self.policy.max_backoff)
            .with_max_times(usize::MAX)
            .build();
        let mut attempt = 1;
        let mut fresh_proof = call.proof.is_some();
        loop {
            let outcome = self.once(call, trace).await;
            let (err, wait) = match outcome {
                Outcome::Done(r) => return r,
                Outcome::FreshProof(e) if fresh_proof => {
                    tracing::debug!(error = %e, "proof refused for its nonce or time; once more");
                    fresh_proof = false;
                    continue;
                }
                Outcome::FreshProof(e) => return Err(e),
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

    async fn once(&self, call: &Call<'_>, trace: &mut Trace) -> Outcome {
        trace.attempts += 1;
        trace.status = None;
        trace.code = None;
        let http = match self.clients.client_for(call.cell) {
            Ok(c) => c,
            Err(e) => return Outcome::Done(Err(e)),
        };
        let mut req = http.request(call.method.clone(), &call.url);
        for (name, value) in call.headers {
            req = req.header(name, value);
        }
        if let Some(t) = call.token {
            req = req.bearer_auth(t.expose());
        }
        let mut iat = None;
        if let Some(signer) = call.proof {
            let claims = ProofClaims {
                jti: new_jti(),
                htm: call.method.as_str().to_owned(),
                htu: htu_of(call),
                iat: self.times.server_now(call.endpoint, self.clock.now()),
                ath: call.token.map(|t| protocol::dpop::token_hash(t.expose())),
                nonce: self.times.nonce(call.endpoint),
            };
            match signer.proof(&claims).await {
                Ok(proof) => req = req.header(DPOP_HEADER, proof),
                Err(e) => return Outcome::Done(Err(e)),
            }
            iat = Some(claims.iat);
        }
        if let Some(k) = &call.idempotency_key {
            req = req.header(IDEMPOTENCY_KEY, k);
        }
        if let Some(b) = &call.body {
            req = req
                .header(http::header::CONTENT_TYPE, b.content_type.clone())
                .body(b.bytes.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return failed(network_error(&e), trace),
        };
        trace.reached = true;
        let status = resp.status();
        trace.status = Some(status.as_u16());
        let retry_after = retry_after(resp.headers());
        self.times
            .learn(call.endpoint, resp.headers(), self.clock.now());
        let refused_proof = iat.map(|iat| ProofRefusal::of(resp.headers(), iat));
        let body = match read_capped(resp).await {
            Ok(b) => b,
            Err(e) => return failed(e, trace),
        };
        let outcome = match (refused_proof, classify(status, retry_after, body)) {
            (Some(why), Outcome::Done(Err(e))) if why.wants_fresh_proof(&e) => {
                Outcome::FreshProof(e)
            }
            (_, outcome) => outcome,
        };
        trace.code = match &outcome {
            Outcome::Done(Err(e))
            | Outcome::Backoff(e, _)
            | Outcome::After(e, _)
            | Outcome::FreshProof(e) => wire_code(e),
            Outcome::Done(Ok(_)) => None,
        };
        outcome
    }
}

/// A proof's `htu`: the URL the request goes to, without query and fragment (RFC 9449 §4.2),
/// as it is sent (so a path character the URL standard escapes is escaped here too).
fn htu_of(call: &Call<'_>) -> String {
    match reqwest::Url::parse(&call.url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.into()
        }
        // never sent (reqwest refuses it as well)
        Err(_) => protocol::dpop::htu(call.endpoint, call.path),
    }
}

/// What an answer to a proved attempt says about its proof.
#[derive(Debug, Clone, Copy)]
struct ProofRefusal {
    /// The challenge asks for the nonce the answer carries (RFC 9449 `use_dpop_nonce`).
    use_nonce: bool,
    /// The proof's `iat` was further than [`CLOCK_JUMP_S`] from the answer's `Date`.
    clock_off: bool,
}

impl ProofRefusal {
    fn of(headers: &HeaderMap, iat: u64) -> Self {
        Self {
            use_nonce: headers
                .get_all(http::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("use_dpop_nonce")),
            clock_off: date_of(headers).is_some_and(|d| d.abs_diff(iat) > CLOCK_JUMP_S),
        }
    }

    /// Whether `e` (the typed refusal) is one a fresh proof can fix.
    fn wants_fresh_proof(self, e: &Error) -> bool {
        match e {
            Error::Rejected {
                code: ErrorCode::DpopNonceRequired | ErrorCode::DpopNonceStale,
                ..
            } => true,
            Error::Rejected {
                code: ErrorCode::DpopProofInvalid,
                ..
            } => self.clock_off || self.use_nonce,
            Error::Rejected { code, .. } if crate::error::is_proof_code(*code) => self.use_nonce,
            _ => false,
        }
    }
}

/// An attempt without a (complete) answer: retried after a backoff unless it is a TLS failure;
/// retried even for a write without a key when nothing was sent.
fn failed(e: Error, trace: &mut Trace) -> Outcome {
    match &e {
        Error::Network { kind, .. } => {
            let reached = kind.may_have_reached_cell();
            trace.reached |= reached;
            if *kind == NetworkErrorKind::Tls {
                Outcome::Done(Err(e))
            } else {
                Outcome::Backoff(e, !reached)
            }
        }
        _ => Outcome::Done(Err(e)),
    }
}

/// The observer's event for a finished call; none when nothing was attempted on the network.
fn event(
    call: &Call<'_>,
    trace: &Trace,
    result: &Result<Response, Error>,
    duration: Duration,
) -> Option<RequestEvent> {
    let outcome = match (result, trace.status) {
        (Err(Error::Network { kind, .. }), _) => RequestOutcome::Network { kind: *kind },
        (Err(Error::PinMismatch { .. }), _) => RequestOutcome::Network {
            kind: NetworkErrorKind::Tls,
        },
        (_, Some(s)) if s >= 400 => RequestOutcome::Refused {
            code: trace.code.clone(),
        },
        (_, Some(_)) => RequestOutcome::Answered,
        (_, None) => return None,
    };
    Some(RequestEvent {
        cell_id: call.cell.clone(),
        method: call.method.clone(),
        path: call.path.to_owned(),
        outcome,
        status: trace.status,
        reached_cell: trace.reached,
        attempts: trace.attempts,
        duration,
    })
}

/// The wire code behind a typed error answer.
fn wire_code(e: &Error) -> Option<String> {
    let code = match e {
        Error::InvalidCredentials => ErrorCode::InvalidCredentials,
        Error::UnknownContractor => ErrorCode::UnknownContractor,
        Error::SessionExpired => ErrorCode::SessionExpired,
        Error::SessionRevoked => ErrorCode::SessionRevoked,
        Error::SessionInvalid => ErrorCode::SessionInvalid,
        Error::WrongCell { .. } => ErrorCode::WrongCell,
        Error::HandoffInProgress { .. } => ErrorCode::HandoffInProgress,
        Error::RateLimited { .. } => ErrorCode::RateLimited,
        Error::CellStateStale => ErrorCode::CellStateStale,
        Error::Upstream { code, .. } => return code.map(|c| c.as_str().to_owned()),
        Error::Rejected { code, .. } => *code,
        Error::UnknownErrorCode { code, .. } => return Some(code.clone()),
        _ => return None,
    };
    Some(code.as_str().to_owned())
}

/// An error body whose code this SDK does not know: only the two fields every Cellbind error
/// body has, and a code shaped like one (`SCREAMING_SNAKE_CASE`).
#[derive(Deserialize)]
struct UnknownErrorBody {
    error: String,
    message: String,
}

/// The typed error of a body that has a Cellbind error's shape but not a code this SDK knows.
fn unknown_error(status: StatusCode, body: &[u8]) -> Option<Error> {
    let b = serde_json::from_slice::<UnknownErrorBody>(body).ok()?;
    let shaped = !b.error.is_empty()
        && b.error.len() <= 64
        && b.error.starts_with(|c: char| c.is_ascii_uppercase())
        && b.error
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
    if !shaped {
        return None;
    }
    if serde_json::from_value::<ErrorCode>(serde_json::Value::String(b.error.clone())).is_ok() {
        // A code we know, in a body that did not parse: not the protocol.
        return Some(Error::InvalidResponse(format!(
            "a {} error body that does not parse",
            b.error
        )));
    }
    Some(Error::UnknownErrorCode {
        code: b.error,
        status: status.as_u16(),
        message: b.message,
    })
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
        if let Some(e) = unknown_error(status, &body) {
            return if status == StatusCode::SERVICE_UNAVAILABLE {
                Outcome::Backoff(e, false)
            } else {
                Outcome::Done(Err(e))
            };
        }
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
            Err(e) => return Err(network_error(&e)),
        }
    }
}

/// The one mapping from a reqwest failure to a typed error (the table in the module doc).
/// `reached_cell` is the attempt's own; the transport ORs in earlier attempts.
pub fn network_error(e: &reqwest::Error) -> Error {
    if let Some(cell) = pins::refused_cell(e) {
        return Error::PinMismatch { cell };
    }
    let detail = error_chain(e);
    if e.is_builder() {
        return Error::InvalidInput(detail);
    }
    let kind = if e.is_connect() {
        if has_tls_error(e) {
            NetworkErrorKind::Tls
        } else if e.is_timeout() {
            NetworkErrorKind::TimeoutBeforeSend
        } else {
            NetworkErrorKind::Connect
        }
    } else if e.is_timeout() {
        NetworkErrorKind::TimeoutAfterSend
    } else {
        NetworkErrorKind::Interrupted
    };
    Error::Network {
        kind,
        reached_cell: kind.may_have_reached_cell(),
        detail,
    }
}

/// Whether a rustls error is in the chain (through `io::Error` wrappers: [`pins::causes`]).
fn has_tls_error(e: &(dyn std::error::Error + 'static)) -> bool {
    pins::causes(e).any(|c| c.is::<rustls::Error>())
}

/// An error with its sources, on one line (reqwest's own Display hides the cause).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
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

    #[test]
    fn an_unknown_code_is_the_fallback_and_other_bodies_are_not_guessed_at() {
        let json = |v: serde_json::Value| Bytes::from(serde_json::to_vec(&v).unwrap());
        let newer = json(
            serde_json::json!({"error": "QUOTA_EXCEEDED_V2", "message": "m",
            "some_new_field": [1, 2]}),
        );
        match classify(StatusCode::FORBIDDEN, None, newer.clone()) {
            Outcome::Done(Err(Error::UnknownErrorCode {
                code,
                status,
                message,
            })) => {
                assert_eq!(
                    (code.as_str(), status, message.as_str()),
                    ("QUOTA_EXCEEDED_V2", 403, "m")
                )
            }
            _ => panic!("not the fallback"),
        }
        // a 503 with an unknown code is retried like any 503
        assert!(matches!(
            classify(StatusCode::SERVICE_UNAVAILABLE, None, newer),
            Outcome::Backoff(Error::UnknownErrorCode { status: 503, .. }, false)
        ));
        // not shaped like a Cellbind code: an answer for the app, as before
        for body in [
            serde_json::json!({"error": "not found", "message": "m"}),
            serde_json::json!({"error": "NOT_OURS"}),
            serde_json::json!({"error": 7, "message": "m"}),
        ] {
            assert!(matches!(
                classify(StatusCode::NOT_FOUND, None, json(body)),
                Outcome::Done(Ok(Response { status: 404, .. }))
            ));
        }
        // a code we know in a body that does not parse is not the protocol
        let broken = json(serde_json::json!({"error": "WRONG_CELL", "message": "m",
            "owner_cell": "NOT A CELL ID"}));
        assert!(matches!(
            classify(StatusCode::CONFLICT, None, broken),
            Outcome::Done(Err(Error::InvalidResponse(_)))
        ));
    }

    #[test]
    fn only_failures_before_sending_say_the_cell_never_saw_it() {
        use NetworkErrorKind as K;
        for (kind, reached) in [
            (K::Connect, false),
            (K::Tls, false),
            (K::TimeoutBeforeSend, false),
            (K::TimeoutAfterSend, true),
            (K::Interrupted, true),
        ] {
            assert_eq!(kind.may_have_reached_cell(), reached, "{kind}");
        }
        let e = Error::Network {
            kind: K::Connect,
            reached_cell: false,
            detail: "refused".into(),
        };
        assert!(matches!(
            e.reached_earlier(true),
            Error::Network {
                kind: K::Connect,
                reached_cell: true,
                ..
            }
        ));
    }
}
