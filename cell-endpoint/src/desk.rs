//! The browser desk app (DESIGN §2 `desk/`), served by every edge at `/desk/`.
//!
//! The assets are built into the binary from the workspace's `desk/` directory; nothing is
//! fetched from anywhere else. Every answer carries the security headers (a CSP that allows
//! scripts only from this origin and no framing, `nosniff`, no referrer).
//!
//! `POST /desk/session` (form field `session`) turns a desk session this cell minted into this
//! cell's cookie, then sends the browser to `/desk/`. The desk uses it after following a
//! `WRONG_CELL` from another fleet cell: that page signs in here with a CORS request, but
//! browsers refuse a `SameSite=Strict` cookie set by a cross-site fetch, so the cookie is set on
//! this top-level navigation instead. The session goes through the same validation as any
//! request (signature, revocation, ownership); the browser layer has already checked that the
//! form came from a fleet origin, and adds the CSRF cookie beside the session cookie.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use protocol::ClientKind;
use protocol::ids::MAX_TOKEN_COOKIE_BYTES;
use protocol::ownership::Access;

use crate::Edge;
use crate::browser::origin_of;
use crate::error::{EdgeError, rescue};
use crate::state::CellState;
use crate::validate::SESSION_COOKIE;

/// The desk page.
pub const INDEX_HTML: &str = include_str!("../../desk/index.html");
/// The desk script.
pub const APP_JS: &str = include_str!("../../desk/app.js");
/// The desk style sheet.
pub const APP_CSS: &str = include_str!("../../desk/app.css");
/// Where the desk lives.
pub const DESK_PATH: &str = "/desk/";
/// The desk's referrer policy.
pub const REFERRER_POLICY: &str = "strict-origin";
/// Largest `POST /desk/session` body, in bytes (the field name plus a cookie-sized token).
pub const MAX_ADOPT_BODY_BYTES: usize = MAX_TOKEN_COOKIE_BYTES + 64;

/// The desk's routes (merged into the edge's router).
pub fn routes() -> Router<Edge> {
    Router::new()
        .route("/desk", get(to_desk))
        .route(DESK_PATH, get(index))
        .route("/desk/index.html", get(index))
        .route("/desk/app.js", get(app_js))
        .route("/desk/app.css", get(app_css))
        .route("/desk/session", post(adopt))
}

/// The page's CSP: everything from this origin only, except that the sign-in may talk to
/// (and post its hand-over form to) the fleet's other cells, named by the signed map.
pub fn content_security_policy(state: Option<&CellState>) -> String {
    let mut fleet = String::new();
    if let Some(m) = state.and_then(CellState::map) {
        for c in &m.map.cells {
            // Only plain origins: a `;` or space in a map entry must not add a directive.
            if let Some(o) = origin_of(&c.endpoint).filter(|o| {
                o.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:/[]".contains(&b))
            }) {
                fleet.push(' ');
                fleet.push_str(&o);
            }
        }
    }
    format!(
        "default-src 'self'; connect-src 'self'{fleet}; form-action 'self'{fleet}; \
         frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    )
}

/// The security headers of every desk answer.
fn secure(edge: &Edge, mut resp: Response) -> Response {
    let csp = content_security_policy(edge.current().as_deref());
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Only the origin, and only over HTTPS: `no-referrer` would also make the browser send
    // `Origin: null` on the hand-over form POST, which the owner must see to trust it.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static(REFERRER_POLICY),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

fn asset(edge: &Edge, content_type: &'static str, body: &'static str) -> Response {
    secure(
        edge,
        (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
        )
            .into_response(),
    )
}

async fn to_desk(State(edge): State<Edge>) -> Response {
    secure(
        &edge,
        (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, HeaderValue::from_static(DESK_PATH))],
        )
            .into_response(),
    )
}

async fn index(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/javascript; charset=utf-8", APP_JS)
}

async fn app_css(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/css; charset=utf-8", APP_CSS)
}

fn see_other(edge: &Edge, location: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    secure(edge, resp)
}

/// `Set-Cookie` of the session cookie (DESIGN §4 attributes; `Max-Age` = remaining lifetime).
pub fn session_cookie(token: &str, max_age_s: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={token}; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}"
    ))
    .ok()
}

/// The `session` field of an `application/x-www-form-urlencoded` body. A session token is
/// base64url and dots, which form encoding leaves as they are: anything else is refused.
fn session_field(body: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(body).ok()?;
    let token = s.strip_prefix("session=")?;
    let ok = !token.is_empty()
        && token.len() <= MAX_TOKEN_COOKIE_BYTES
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ok.then_some(token)
}

/// The error code the one mapping ([`rescue`]) gives `err`, for the desk's `?error=` message.
async fn code_of(err: &EdgeError) -> String {
    let body = axum::body::to_bytes(rescue(err).into_body(), 4096)
        .await
        .unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "INTERNAL".to_owned())
}

async fn adopt_inner(edge: &Edge, body: &[u8]) -> Result<Response, EdgeError> {
    let token = session_field(body).ok_or(EdgeError::BadRequest("session field"))?;
    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| EdgeError::BadRequest("session field"))?;
    headers.insert(header::AUTHORIZATION, bearer);
    let v = edge.validate(&headers, Access::Read).await?;
    if v.claims.cli != ClientKind::Desk {
        return Err(EdgeError::BadRequest(
            "only a desk session becomes a cookie",
        ));
    }
    let max_age = v.claims.exp.saturating_sub(edge.clock().now());
    let cookie = session_cookie(token, max_age).ok_or(EdgeError::BadRequest("session field"))?;
    let mut resp = see_other(edge, DESK_PATH);
    let h = resp.headers_mut();
    h.append(header::SET_COOKIE, cookie);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    tracing::info!(sub = %v.claims.sub, jti = %v.claims.jti, "desk session adopted");
    Ok(resp)
}

/// `POST /desk/session`: see the module doc. Failures land on `/desk/?error=CODE`.
async fn adopt(State(edge): State<Edge>, body: Bytes) -> Response {
    if body.len() > MAX_ADOPT_BODY_BYTES {
        return rescue(&EdgeError::PayloadTooLarge);
    }
    match adopt_inner(&edge, &body).await {
        Ok(r) => r,
        Err(e) => {
            edge.metrics().outcome(e.outcome());
            let code = code_of(&e).await;
            see_other(&edge, &format!("{DESK_PATH}?error={code}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_field_is_exact() {
        assert_eq!(session_field(b"session=a.b-c_d"), Some("a.b-c_d"));
        for bad in [
            &b"session="[..],
            b"token=a.b.c",
            b"session=a%2Eb",
            b"session=a.b&x=1",
            b"session=a b",
        ] {
            assert_eq!(session_field(bad), None);
        }
        let long = format!("session={}", "a".repeat(MAX_TOKEN_COOKIE_BYTES + 1));
        assert_eq!(session_field(long.as_bytes()), None);
    }

    #[test]
    fn the_csp_allows_only_this_origin_without_a_map() {
        let csp = content_security_policy(None);
        assert!(csp.starts_with("default-src 'self';"));
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(!csp.contains("unsafe-inline"));
    }

    #[test]
    fn the_assets_have_no_inline_script_and_no_remote_source() {
        assert!(INDEX_HTML.contains(r#"<script src="app.js" defer></script>"#));
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(!INDEX_HTML.contains("http://") && !INDEX_HTML.contains("https://"));
        for handler in ["onclick=", "onload=", "onsubmit=", "javascript:"] {
            assert!(!INDEX_HTML.contains(handler), "{handler} in index.html");
        }
    }
}
