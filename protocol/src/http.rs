//! HTTP rules every Cellbind process shares: the header and cookie names, the one strict
//! credential extractor and the one credential rule, the session and CSRF cookies, and the
//! CSRF proof. The edge and the auth-service both use this copy (an auth product whose two
//! parsers disagree has a hole between them).
//!
//! # The credential rule (ATTACKS A24)
//!
//! ```text
//!   Authorization        session cookie      → the request is
//!   ───────────────────  ──────────────────    ─────────────────────────────────────────────
//!   none                 none                  SESSION_MISSING
//!   present              none                  a bearer request (a non-Bearer or malformed
//!                                              header is SESSION_INVALID)
//!   none                 present               a cookie request
//!   present              present               a bearer request only if the bearer session is
//!                                              valid (the cookie is then ignored); otherwise a
//!                                              cookie request (the header is ignored)
//! ```
//!
//! A cookie request with an unsafe method needs the CSRF proof ([`check_csrf_proof`]), on every
//! route, `/v1/sessions/*` included. So a junk `Authorization` header never turns a cookie
//! request into one that skips the proof.
//!
//! Presentation is strict and never guesses: exactly one `Authorization` header, scheme exactly
//! `Bearer` followed by one space, a non-empty token; at most one session cookie; size caps are
//! applied to the raw header before anything is parsed.

use ::http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq as _;

use crate::ids::{MAX_TOKEN_COOKIE_BYTES, MAX_TOKEN_HEADER_BYTES};
use crate::token::TokenError;

/// The browser session cookie (DESIGN §4).
pub const SESSION_COOKIE: &str = "__Host-cellbind_session";
/// The readable CSRF cookie (double submit) set beside every session cookie.
pub const CSRF_COOKIE: &str = "__Host-cellbind_csrf";
/// The header that echoes [`CSRF_COOKIE`] on unsafe cookie requests.
pub const CSRF_HEADER: &str = "x-cellbind-csrf";

/// Prefix of every header only the edge may set towards its upstreams. A client's header whose
/// name, lower-cased with `_` read as `-`, starts with it is stripped ([`is_cellbind_header`]).
pub const CELLBIND_HEADER_PREFIX: &str = "x-cellbind-";
/// The verified session's subject, set by the edge on forwarded `/api/*` requests.
pub const X_SUBJECT: &str = "x-cellbind-subject";
/// The verified session's contractor.
pub const X_CONTRACTOR: &str = "x-cellbind-contractor";
/// The verified session's placement generation (a fencing token for the app's writes).
pub const X_GENERATION: &str = "x-cellbind-generation";
/// The verified session's id (`jti`).
pub const X_SESSION: &str = "x-cellbind-session";
/// The edge's per-cell credential towards an upstream (the app token towards the app, the edge
/// token towards the auth-service).
pub const X_EDGE_KEY: &str = "x-cellbind-edge-key";
/// The client's address as the edge established it; trusted by the auth-service only together
/// with a valid [`X_EDGE_KEY`].
pub const X_CLIENT_IP: &str = "x-cellbind-client-ip";

/// The thumbprint of the device key whose `DPoP` proof the edge verified for this request
/// (`protocol::dpop`); trusted by the auth-service only together with a valid [`X_EDGE_KEY`].
pub const X_DPOP_JKT: &str = "x-cellbind-dpop-jkt";

/// A session-less request (a sign-in) of a game day's synthetic client says so with
/// `x-cellbind-synthetic: 1`. It only changes a metrics label: the edge counts the request as
/// synthetic traffic (a request with a session is synthetic by its contractor instead,
/// `ContractorId::is_synthetic`). Like every `x-cellbind-*` header it is never forwarded.
pub const SYNTHETIC_HEADER: &str = "x-cellbind-synthetic";

/// The scheme prefix of a bearer `Authorization` header, matched exactly.
pub const BEARER_PREFIX: &str = "Bearer ";

/// The address a per-client limit counts a client under (ATTACKS A36): an IPv4 address as it
/// is, an IPv6 address by its /64 network (one subscriber's prefix: a client that rotates
/// through the addresses of its /64 stays one client). An IPv4-mapped IPv6 address counts as
/// its IPv4 address. Every per-address limit (the edge's rate limit and connection cap, every
/// listener's connection cap, the sign-in throttles) keys on this.
pub fn client_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv6Addr};
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Whether a header belongs to the edge: its name, lower-cased with `_` read as `-` (as CGI,
/// WSGI and Rack read it), starts with [`CELLBIND_HEADER_PREFIX`] (ATTACKS A25).
pub fn is_cellbind_header(name: &str) -> bool {
    let p = CELLBIND_HEADER_PREFIX.as_bytes();
    let n = name.as_bytes();
    n.len() >= p.len()
        && n[..p.len()]
            .iter()
            .zip(p)
            .all(|(a, b)| a.to_ascii_lowercase() == *b || (*a == b'_' && *b == b'-'))
}

/// Why a presented credential could not even be read. Each is a `401 SESSION_INVALID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    #[error("more than one Authorization header")]
    TwoAuthorizationHeaders,
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
    #[error("more than one session cookie")]
    TwoSessionCookies,
    #[error("the presented token is empty")]
    Empty,
    #[error("the credential is not visible ASCII")]
    NotText,
    #[error("the presented credential is larger than {max} bytes")]
    TooLarge { max: usize },
}

impl From<CredentialError> for TokenError {
    fn from(e: CredentialError) -> Self {
        match e {
            CredentialError::TooLarge { max } => TokenError::TooLarge { max },
            _ => TokenError::Malformed,
        }
    }
}

/// Where a presented session came from. The size caps differ (ATTACKS A11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `Authorization: Bearer <token>`.
    Bearer,
    /// The [`SESSION_COOKIE`] cookie.
    Cookie,
}

impl Source {
    /// The largest token accepted from this source, in bytes.
    pub fn cap(self) -> usize {
        match self {
            Source::Bearer => MAX_TOKEN_HEADER_BYTES,
            Source::Cookie => MAX_TOKEN_COOKIE_BYTES,
        }
    }
}

/// What a request presents, read strictly and nothing verified yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presented<'a> {
    /// The `Authorization` header, when there is one: its bearer token, or why it is not one.
    pub authorization: Option<Result<&'a str, CredentialError>>,
    /// The session cookie, when there is one: its value, or why it cannot be read.
    pub cookie: Option<Result<&'a str, CredentialError>>,
}

impl<'a> Presented<'a> {
    /// Reads the credentials of a request (the one extractor).
    pub fn from_headers(headers: &'a HeaderMap) -> Self {
        Presented {
            authorization: authorization(headers),
            cookie: cookie(headers, SESSION_COOKIE).transpose(),
        }
    }

    /// Applies the credential rule of the module doc. `verify` checks one token from one
    /// source (signature, claims, revocation: whatever "valid" means to the caller); the first
    /// valid credential in the rule's order wins and is returned with its source.
    pub fn resolve<T, E: From<TokenError>>(
        self,
        missing: E,
        mut verify: impl FnMut(&'a str, Source) -> Result<T, E>,
    ) -> Result<(T, Source), E> {
        let read =
            |c: Result<&'a str, CredentialError>| c.map_err(|e| E::from(TokenError::from(e)));
        match (self.authorization, self.cookie) {
            (None, None) => Err(missing),
            (Some(a), None) => read(a)
                .and_then(|t| verify(t, Source::Bearer))
                .map(|v| (v, Source::Bearer)),
            (None, Some(c)) => read(c)
                .and_then(|t| verify(t, Source::Cookie))
                .map(|v| (v, Source::Cookie)),
            (Some(a), Some(c)) => {
                if let Ok(v) = read(a).and_then(|t| verify(t, Source::Bearer)) {
                    return Ok((v, Source::Bearer));
                }
                read(c)
                    .and_then(|t| verify(t, Source::Cookie))
                    .map(|v| (v, Source::Cookie))
            }
        }
    }
}

fn authorization(headers: &HeaderMap) -> Option<Result<&str, CredentialError>> {
    let mut all = headers.get_all(header::AUTHORIZATION).iter();
    let value = all.next()?;
    if all.next().is_some() {
        return Some(Err(CredentialError::TwoAuthorizationHeaders));
    }
    Some(bearer_token(value))
}

/// `value` as text when it is ASCII: what `HeaderValue::to_str` decides (a header value never
/// holds a control byte other than tab, nor DEL, so the two differ only in speed), checked a
/// machine word at a time instead of a byte at a time — a token is read on every request.
fn header_text(value: &HeaderValue) -> Option<&str> {
    let bytes = value.as_bytes();
    if !bytes.is_ascii() {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

fn bearer_token(value: &HeaderValue) -> Result<&str, CredentialError> {
    if value.len() > MAX_TOKEN_HEADER_BYTES + BEARER_PREFIX.len() {
        return Err(CredentialError::TooLarge {
            max: MAX_TOKEN_HEADER_BYTES,
        });
    }
    let text = header_text(value).ok_or(CredentialError::NotText)?;
    // A bound session may come with RFC 9449's `DPoP` scheme; whether it must come with a
    // proof is decided by its `cnf` claim, not by the scheme.
    let token = text
        .strip_prefix(BEARER_PREFIX)
        .or_else(|| text.strip_prefix(crate::dpop::DPOP_SCHEME_PREFIX))
        .ok_or(CredentialError::NotBearer)?;
    if token.is_empty() {
        return Err(CredentialError::Empty);
    }
    Ok(token)
}

/// The value of cookie `name`: `None` when absent, an error when sent twice (ambiguous: never
/// pick one), over the cookie cap, or in a `Cookie` header that is not text. A `Cookie` header
/// longer than [`MAX_TOKEN_HEADER_BYTES`] is refused before it is split.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, CredentialError> {
    let mut found = None;
    for value in headers.get_all(header::COOKIE) {
        if value.len() > MAX_TOKEN_HEADER_BYTES {
            return Err(CredentialError::TooLarge {
                max: MAX_TOKEN_COOKIE_BYTES,
            });
        }
        let Ok(value) = value.to_str() else {
            // A cookie header we cannot read may hold the session cookie: refuse rather than
            // ignore it only when it mentions the name.
            if value
                .as_bytes()
                .windows(name.len())
                .any(|w| w == name.as_bytes())
            {
                return Err(CredentialError::NotText);
            }
            continue;
        };
        for pair in value.split(';') {
            let Some(v) = pair
                .trim_start_matches(' ')
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix('='))
            else {
                continue;
            };
            if found.is_some() {
                return Err(CredentialError::TwoSessionCookies);
            }
            if v.len() > MAX_TOKEN_COOKIE_BYTES {
                return Err(CredentialError::TooLarge {
                    max: MAX_TOKEN_COOKIE_BYTES,
                });
            }
            found = Some(v);
        }
    }
    match found {
        Some("") => Err(CredentialError::Empty),
        other => Ok(other),
    }
}

/// Whether the request carries a session cookie at all (readable or not).
pub fn has_session_cookie(headers: &HeaderMap) -> bool {
    !matches!(cookie(headers, SESSION_COOKIE), Ok(None))
}

/// The request `Cookie` header that presents session `token`: `<SESSION_COOKIE>=<token>`, and
/// nothing else (how the edge forwards a cookie session). `None` for a token that is not
/// header-safe.
pub fn session_cookie_request(token: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("{SESSION_COOKIE}={token}")).ok()
}

/// The request's `Cookie` headers without the session and CSRF cookies, joined into one `Cookie`
/// header (what an app behind the edge may see); `None` when no other cookie is left. A
/// `Cookie` header that is not text is dropped.
pub fn cookies_without_session(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut kept: Vec<&str> = Vec::new();
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let pair = pair.trim_start_matches(' ');
            let ours = [SESSION_COOKIE, CSRF_COOKIE]
                .iter()
                .any(|c| pair.strip_prefix(c).is_some_and(|r| r.starts_with('=')));
            if !ours && !pair.is_empty() {
                kept.push(pair);
            }
        }
    }
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

/// Whether a method changes state (everything but `GET`, `HEAD`, `OPTIONS`).
pub fn is_unsafe(method: &::http::Method) -> bool {
    !matches!(
        *method,
        ::http::Method::GET | ::http::Method::HEAD | ::http::Method::OPTIONS
    )
}

/// `Set-Cookie` of the session cookie: `Secure; HttpOnly; SameSite=Strict; Path=/`, no
/// `Domain`, `Max-Age` = the session's remaining lifetime. `None` for a token over the cookie
/// cap (ATTACKS A20: such a cookie is never issued) or one that is not header-safe.
pub fn session_cookie(token: &str, max_age_s: u64) -> Option<HeaderValue> {
    if token.len() > MAX_TOKEN_COOKIE_BYTES {
        return None;
    }
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={token}; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}"
    ))
    .ok()
}

/// `Set-Cookie` that clears the session cookie.
pub fn clear_session_cookie() -> HeaderValue {
    HeaderValue::from_static(
        "__Host-cellbind_session=; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
    )
}

/// `Set-Cookie` of the CSRF cookie (readable by the page's script: no `HttpOnly`); without a
/// `Max-Age` it lasts as long as the browser session.
pub fn csrf_cookie(value: &str, max_age_s: Option<u64>) -> Option<HeaderValue> {
    let max_age = max_age_s
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    HeaderValue::from_str(&format!(
        "{CSRF_COOKIE}={value}; Secure; SameSite=Strict; Path=/{max_age}"
    ))
    .ok()
}

/// What an answer's `Set-Cookie` headers do to the session cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionCookieChange {
    /// Sets one (with its `Max-Age`, if any).
    Set { max_age_s: Option<u64> },
    /// Clears it (empty value or `Max-Age=0`).
    Cleared,
}

/// The last change an answer makes to the session cookie, if any.
pub fn session_cookie_change(headers: &HeaderMap) -> Option<SessionCookieChange> {
    let mut out = None;
    for v in headers.get_all(header::SET_COOKIE) {
        let Some(rest) = v
            .to_str()
            .ok()
            .and_then(|s| s.strip_prefix(SESSION_COOKIE))
            .and_then(|r| r.strip_prefix('='))
        else {
            continue;
        };
        let mut parts = rest.split(';');
        let value = parts.next().unwrap_or("");
        let max_age_s = parts
            .filter_map(|p| p.trim().strip_prefix("Max-Age="))
            .find_map(|n| n.parse::<u64>().ok());
        out = Some(if value.is_empty() || max_age_s == Some(0) {
            SessionCookieChange::Cleared
        } else {
            SessionCookieChange::Set { max_age_s }
        });
    }
    out
}

/// Why an unsafe cookie request was refused (each a `403 FORBIDDEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsrfError {
    #[error("this origin is not a cell of the fleet")]
    ForeignOrigin,
    #[error("a cookie session's unsafe request needs an Origin")]
    NoOrigin,
    #[error("missing CSRF proof")]
    Missing,
    #[error("CSRF proof does not match")]
    Mismatch,
}

/// The CSRF proof of an unsafe cookie request: an allowed `Origin` (or, from a browser that
/// sends none, `Sec-Fetch-Site: same-origin`) and [`CSRF_HEADER`] equal to [`CSRF_COOKIE`]
/// (constant-time). `origin_allowed` says whether an origin is this cell's or a fleet cell's.
pub fn check_csrf_proof(
    headers: &HeaderMap,
    origin_allowed: impl FnOnce(&str) -> bool,
) -> Result<(), CsrfError> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    match text(header::ORIGIN.as_str()) {
        Some(o) if origin_allowed(o) => {}
        Some(_) => return Err(CsrfError::ForeignOrigin),
        None if text("sec-fetch-site") == Some("same-origin") => {}
        None => return Err(CsrfError::NoOrigin),
    }
    let sent = text(CSRF_HEADER).unwrap_or("");
    let held = cookie(headers, CSRF_COOKIE).ok().flatten().unwrap_or("");
    if sent.is_empty() || held.is_empty() {
        return Err(CsrfError::Missing);
    }
    if !bool::from(sent.as_bytes().ct_eq(held.as_bytes())) {
        return Err(CsrfError::Mismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
