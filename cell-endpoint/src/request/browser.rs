//! Browser rules of the edge (DESIGN §4): CORS only for the fleet's own origins and never on
//! an answer that can carry a session or ticket, unsafe requests only from this cell's or a
//! fleet cell's origin, and the CSRF cookie kept beside the session cookie.
//!
//! One tower layer, one decision per request ([`decide`]), taken before anything else runs:
//!
//! ```text
//!                    request
//!                       │
//!   OPTIONS + Origin + Access-Control-Request-Method?
//!        ├─ yes ─▶ a fleet cell's Origin, on a path open to CORS ─▶ Preflight: 204 + CORS
//!        │                     └─ otherwise ──────────────────────▶ Refuse: 403, no CORS headers
//!        └─ no ──▶ unsafe method and an Origin that is neither this cell's nor a fleet cell's
//!                     └─ yes ─▶ Refuse: 403
//!                  otherwise ─▶ Pass { cors }: the inner service answers; a fleet origin gets
//!                                `Access-Control-Allow-Origin` + credentials on the answer,
//!                                except on `/v1/sessions*` and `/desk/*` (ATTACKS A24: no
//!                                answer that carries a token is readable cross-origin)
//! ```
//!
//! The CSRF proof itself is part of the credential rule (`protocol::http`, checked in
//! `validate`): a request is a cookie request unless its bearer session is valid, and every
//! unsafe cookie request needs the proof, whatever route it is for. The proof is a double-submit
//! token: the readable `__Host-cellbind_csrf` cookie, set here beside every session cookie that
//! passes through (sign-in, renewal, rebind, the desk's sign-in) and cleared with it, echoed in
//! the `X-Cellbind-Csrf` header and compared in constant time. A `__Host-` cookie can only be
//! set by this exact origin over HTTPS, so a cross-site page can neither read nor plant it.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rand::Rng as _;

use crate::edge::Edge;
use crate::error::{Refusal, rescue};
use crate::held::origin::{is_fleet_origin, same_origin};
use crate::held::state::CellState;
use crate::request::guard::{Check, Guard};

/// Random bytes in a CSRF token (base64url, 22 characters).
pub(crate) const CSRF_TOKEN_BYTES: usize = 16;
/// How long a browser may cache a preflight answer, in seconds.
pub(crate) const PREFLIGHT_MAX_AGE_S: u64 = 600;
/// Methods a fleet origin may use cross-origin.
pub(crate) const CORS_METHODS: &str = "GET, POST, DELETE";
/// Request headers a fleet origin may send cross-origin.
pub(crate) const CORS_HEADERS: &str =
    "content-type, idempotency-key, x-cellbind-csrf, authorization";
/// Response headers a fleet origin's script may read.
pub(crate) const CORS_EXPOSE: &str = "retry-after";

/// Path prefixes whose answers are never readable cross-origin: they carry sessions,
/// tickets or set the session cookie.
const NO_CORS_PREFIXES: [&str; 2] = ["/v1/sessions", "/desk"];

/// Whether `path` is under one of [`NO_CORS_PREFIXES`]: its answers may carry a session or
/// set or clear the session cookie.
fn session_path(path: &str) -> bool {
    NO_CORS_PREFIXES.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether answers on `path` may be shared with a fleet origin.
pub(crate) fn cors_allowed(path: &str) -> bool {
    !session_path(path)
}

/// The one decision of this layer.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A preflight from a fleet origin: answered here.
    Preflight(HeaderValue),
    /// Refused here with 403.
    Refuse(&'static str),
    /// Served by the inner service; `cors` is the fleet origin to allow on the answer.
    Pass { cors: Option<HeaderValue> },
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether the request rides on the session cookie alone (no `Authorization`): its answers
/// may set or clear that cookie, and a 401 to it clears it.
pub fn uses_session_cookie(headers: &HeaderMap) -> bool {
    !headers.contains_key(header::AUTHORIZATION) && protocol::http::has_session_cookie(headers)
}

/// The decision for one request (the diagram of the module doc).
pub fn decide(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    public_url: &str,
    state: Option<&CellState>,
) -> Verdict {
    let origin = header_str(headers, header::ORIGIN);
    let own = origin.is_some_and(|o| same_origin(o, public_url));
    let fleet = origin.is_some_and(|o| !own && is_fleet_origin(o, state));
    let cors = (fleet && cors_allowed(path))
        .then(|| origin.and_then(|o| HeaderValue::from_str(o).ok()))
        .flatten();
    let preflight =
        *method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    match (preflight, origin) {
        (true, Some(_)) if own => Verdict::Pass { cors: None },
        (true, Some(_)) => match cors {
            Some(allowed) => Verdict::Preflight(allowed),
            None if fleet => Verdict::Refuse("this path is not open to other origins"),
            None => Verdict::Refuse("this origin is not a cell of the fleet"),
        },
        (_, Some(_)) if !own && !fleet && protocol::http::is_unsafe(method) => {
            Verdict::Refuse("this origin is not a cell of the fleet")
        }
        _ => Verdict::Pass { cors },
    }
}

/// A fresh CSRF token.
pub(crate) fn new_csrf_token() -> String {
    let mut bytes = [0u8; CSRF_TOKEN_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Adds the CORS headers for a fleet origin and keeps the CSRF cookie beside the session one.
/// A cookie session refused with 401 (revoked, expired, not valid here) is cleared: it can
/// never work again, and the browser should stop sending it.
fn finish(mut resp: Response, cors: Option<HeaderValue>, cookie_session: bool) -> Response {
    use protocol::http::{SessionCookieChange, csrf_cookie, session_cookie_change};
    let change = match session_cookie_change(resp.headers()) {
        None if cookie_session && resp.status() == StatusCode::UNAUTHORIZED => {
            resp.headers_mut()
                .append(header::SET_COOKIE, protocol::http::clear_session_cookie());
            Some(SessionCookieChange::Cleared)
        }
        other => other,
    };
    let csrf = match change {
        Some(SessionCookieChange::Cleared) => csrf_cookie("", Some(0)),
        Some(SessionCookieChange::Set { max_age_s }) => csrf_cookie(&new_csrf_token(), max_age_s),
        None => None,
    };
    if let Some(c) = csrf {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    if let Some(origin) = cors {
        let h = resp.headers_mut();
        allow_origin(h, origin);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(CORS_EXPOSE),
        );
        h.append(header::VARY, HeaderValue::from_static("origin"));
    }
    resp
}

/// `Access-Control-Allow-Origin: origin` with credentials.
fn allow_origin(h: &mut HeaderMap, origin: HeaderValue) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
}

fn preflight(origin: HeaderValue) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    allow_origin(h, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(CORS_METHODS),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(CORS_HEADERS),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(PREFLIGHT_MAX_AGE_S),
    );
    h.insert(header::VARY, HeaderValue::from_static("origin"));
    resp
}

/// The browser guard (the outermost layer): answers preflights, refuses cross-site unsafe
/// requests, finishes answers (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct BrowserGuard {
    edge: Edge,
}

impl BrowserGuard {
    pub(crate) fn new(edge: Edge) -> Self {
        Self { edge }
    }
}

/// What [`finish`] needs of the request: the fleet origin to allow, and whether the request
/// rode on the session cookie.
#[derive(Debug)]
pub(crate) struct Finishing {
    cors: Option<HeaderValue>,
    cookie_session: bool,
}

impl Guard for BrowserGuard {
    type Note = Finishing;

    fn check(&self, req: Request<Body>) -> Check<Finishing> {
        // The fleet's origins come from the held map: only a request with an Origin needs it.
        let state = if req.headers().contains_key(header::ORIGIN) {
            self.edge.current()
        } else {
            None
        };
        let verdict = decide(
            req.method(),
            req.uri().path(),
            req.headers(),
            &self.edge.settings().public_url,
            state.as_deref(),
        );
        let cookie_session = uses_session_cookie(req.headers());
        match verdict {
            // The common case (a bearer request from a non-browser client, or any request
            // whose answer cannot touch the session cookie): no allocation, no extra await.
            Verdict::Pass { cors: None } if !cookie_session && !session_path(req.uri().path()) => {
                Check::Pass(req)
            }
            Verdict::Preflight(origin) => Check::Answer(preflight(origin)),
            Verdict::Refuse(why) => Check::Answer(rescue(&Refusal::Csrf(why))),
            Verdict::Pass { cors } => Check::Finish(
                req,
                Finishing {
                    cors,
                    cookie_session,
                },
            ),
        }
    }

    fn finish(&self, note: Finishing, resp: Response) -> Response {
        finish(resp, note.cors, note.cookie_session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                *k,
                HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    const ME: &str = "https://127.0.0.4:8443";

    #[test]
    fn no_session_or_desk_answer_is_open_to_cors() {
        for closed in [
            "/v1/sessions",
            "/v1/sessions/renew",
            "/v1/sessions/transfer",
            "/v1/sessions/transfer/status",
            "/v1/sessions/current",
            "/desk",
            "/desk/",
            "/desk/sign-in",
        ] {
            assert!(!cors_allowed(closed), "{closed}");
        }
        for open in [
            "/api/routes/today",
            "/v1/placement-map",
            "/.well-known/jwks.json",
            "/v1/sessionsx",
        ] {
            assert!(cors_allowed(open), "{open}");
        }
    }

    #[test]
    fn cookie_requests_are_not_this_layers_business_beyond_the_origin() {
        // The CSRF proof is checked with the credential rule (validate), not here.
        let same = headers(&[("origin", ME), ("cookie", "__Host-cellbind_session=t")]);
        assert_eq!(
            decide(&Method::POST, "/v1/sessions/renew", &same, ME, None),
            Verdict::Pass { cors: None }
        );
    }

    #[test]
    fn foreign_preflights_and_writes_are_refused() {
        let pre = headers(&[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "POST"),
        ]);
        assert!(matches!(
            decide(&Method::OPTIONS, "/v1/sessions", &pre, ME, None),
            Verdict::Refuse(_)
        ));
        let sign_in = headers(&[("origin", "https://evil.example")]);
        assert!(matches!(
            decide(&Method::POST, "/v1/sessions", &sign_in, ME, None),
            Verdict::Refuse(_)
        ));
        // Without an Origin (not a browser), sign-in is not this layer's business.
        assert_eq!(
            decide(&Method::POST, "/v1/sessions", &HeaderMap::new(), ME, None),
            Verdict::Pass { cors: None }
        );
    }
}
