//! The browser desk app (DESIGN §2 `desk/`), served by every edge at `/desk/`.
//!
//! The assets are built into the binary from the workspace's `desk/` directory; nothing is
//! fetched from anywhere else. Every answer carries the security headers (a CSP that allows
//! scripts only from this origin and no framing, `nosniff`, no referrer).
//!
//! `POST /desk/sign-in` (form fields `contractor_id`, `login`, `password`) signs a dispatcher in
//! at this cell from a top-level form, sets this cell's cookies and sends the browser to
//! `/desk/`. The desk uses it after another fleet cell answered `WRONG_CELL` naming this one:
//! browsers refuse a `SameSite=Strict` cookie set by a cross-site fetch, and no answer that
//! carries a session is readable cross-origin (ATTACKS A24), so the credentials go to the owner
//! in a navigation and the session never reaches a script. The form must come from this cell's
//! or a fleet cell's origin (login CSRF); the browser layer adds the CSRF cookie beside the
//! session cookie. Failures land on `/desk/?error=CODE`.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use protocol::api::SignInRequest;
use protocol::{ClientKind, ContractorId, ErrorBody, Login, Password};
use serde::Deserialize;

use crate::edge::Edge;
use crate::error::Refusal;
use crate::held::origin::{fleet_origins, origin_allowed};
use crate::held::state::CellState;
use crate::metrics::Upstream;

/// The desk page.
pub(crate) const INDEX_HTML: &str = include_str!("../../../desk/index.html");
/// The desk script.
pub(crate) const APP_JS: &str = include_str!("../../../desk/app.js");
/// The desk style sheet.
pub(crate) const APP_CSS: &str = include_str!("../../../desk/app.css");
/// Where the desk lives.
pub(crate) const DESK_PATH: &str = "/desk/";
/// The desk's referrer policy.
pub(crate) const REFERRER_POLICY: &str = "strict-origin";
/// Largest `POST /desk/sign-in` body, in bytes.
pub(crate) const MAX_SIGN_IN_FORM_BYTES: usize = 4096;
/// The desk's error code when the cell a sign-in was sent to names yet another owner: the
/// cells disagree, and the desk follows a redirect once only.
pub(crate) const CELLS_DISAGREE: &str = "CELLS_DISAGREE";

/// The desk's routes (merged into the edge's router).
pub(crate) fn routes() -> Router<Edge> {
    Router::new()
        .route("/desk", get(to_desk))
        .route(DESK_PATH, get(index))
        .route("/desk/index.html", get(index))
        .route("/desk/app.js", get(app_js))
        .route("/desk/app.css", get(app_css))
        .route("/desk/sign-in", post(sign_in))
}

/// The page's CSP: everything from this origin only, except that the sign-in may post its
/// form to the fleet's other cells, named by the signed map (it never fetches from them).
pub(crate) fn content_security_policy(state: Option<&CellState>) -> String {
    // Only plain origins: a `;` or space in a map entry must not add a directive.
    let fleet: String = fleet_origins(state).map(|o| format!(" {o}")).collect();
    format!(
        "default-src 'self'; connect-src 'self'; form-action 'self'{fleet}; \
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
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Only the origin, and only over HTTPS: `no-referrer` would also make the browser send
        // `Origin: null` on the hand-over form POST, which the owner must see to trust it.
        (header::REFERRER_POLICY, REFERRER_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
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

/// The desk, without its trailing slash: a redirect to `/desk/`.
#[utoipa::path(
    get,
    path = "/desk",
    tag = "desk",
    responses((status = 308, description = "To `/desk/`."))
)]
pub(crate) async fn to_desk(State(edge): State<Edge>) -> Response {
    secure(
        &edge,
        (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, HeaderValue::from_static(DESK_PATH))],
        )
            .into_response(),
    )
}

/// The desk page.
#[utoipa::path(
    get,
    path = "/desk/",
    tag = "desk",
    responses((status = 200, description = "The desk page.", body = String, content_type = "text/html"))
)]
pub(crate) async fn index(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/html; charset=utf-8", INDEX_HTML)
}

/// The desk script.
#[utoipa::path(
    get,
    path = "/desk/app.js",
    tag = "desk",
    responses((status = 200, description = "The desk script.", body = String, content_type = "text/javascript"))
)]
pub(crate) async fn app_js(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/javascript; charset=utf-8", APP_JS)
}

/// The desk style sheet.
#[utoipa::path(
    get,
    path = "/desk/app.css",
    tag = "desk",
    responses((status = 200, description = "The desk style sheet.", body = String, content_type = "text/css"))
)]
pub(crate) async fn app_css(State(edge): State<Edge>) -> Response {
    asset(&edge, "text/css; charset=utf-8", APP_CSS)
}

fn see_other(edge: &Edge, location: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    secure(edge, resp)
}

/// The form of `POST /desk/sign-in`. Unknown fields are refused.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignInForm {
    contractor_id: ContractorId,
    login: Login,
    password: Password,
}

/// Where a failed desk sign-in lands.
fn failed(edge: &Edge, code: &str) -> Response {
    let code: String = code
        .bytes()
        .filter(|b| b.is_ascii_uppercase() || *b == b'_')
        .map(char::from)
        .collect();
    see_other(edge, &format!("{DESK_PATH}?error={code}"))
}

async fn sign_in_inner(edge: &Edge, req: Request) -> Result<Response, Refusal> {
    // A browser always sends Origin on a form POST; the browser layer refused foreign ones.
    let origin_ok = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .is_some_and(|o| origin_allowed(o, &edge.settings().public_url, edge.current().as_deref()));
    if !origin_ok {
        return Err(Refusal::Csrf(
            "the desk sign-in form must come from a cell of the fleet",
        ));
    }
    let client = crate::net::limits::client_ip(&req);
    let body = crate::request::forward::read_body(edge, req.into_body()).await;
    let body = match body {
        Ok(b) if b.len() <= MAX_SIGN_IN_FORM_BYTES => b,
        Ok(_) => return Err(Refusal::PayloadTooLarge),
        Err(e) => return Err(e),
    };
    let form: SignInForm =
        serde_urlencoded::from_bytes(&body).map_err(|_| Refusal::BadRequest("sign-in form"))?;
    let json = serde_json::to_vec(&SignInRequest {
        contractor_id: form.contractor_id,
        login: form.login,
        password: form.password,
        client: ClientKind::Desk,
        device_token: None,
    })
    .map_err(|_| Refusal::BadRequest("sign-in form"))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let answer = crate::request::forward::send_to_auth(
        edge,
        Method::POST,
        "/v1/sessions",
        headers,
        json.into(),
        client,
    )
    .await?;
    let status = answer.status();
    let (parts, body) = answer.into_parts();
    // Whatever page the browser lands on, the request was the auth-service's to answer.
    let forwarded = |resp| crate::request::forward::forwarded(Upstream::Auth, status, resp);
    if status == StatusCode::CREATED {
        let mut resp = see_other(edge, DESK_PATH);
        for c in parts.headers.get_all(header::SET_COOKIE) {
            resp.headers_mut().append(header::SET_COOKIE, c.clone());
        }
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Ok(forwarded(resp));
    }
    let body = axum::body::to_bytes(body, 16 * 1024)
        .await
        .unwrap_or_default();
    let code = serde_json::from_slice::<ErrorBody>(&body)
        .ok()
        .map(|b| b.error);
    Ok(forwarded(match code {
        // The owner named by the first cell names yet another: never followed twice.
        Some(protocol::ErrorCode::WrongCell) => failed(edge, CELLS_DISAGREE),
        Some(c) => failed(edge, c.as_str()),
        None => failed(edge, "UPSTREAM_UNAVAILABLE"),
    }))
}

/// `POST /desk/sign-in`: see the module doc. Every answer is a redirect: to `/desk/` with the
/// session cookie set, or to `/desk/?error=CODE`.
#[utoipa::path(
    post,
    path = "/desk/sign-in",
    tag = "desk",
    request_body(content = SignInForm, content_type = "application/x-www-form-urlencoded"),
    responses((status = 303, description = "To `/desk/` (signed in, the session and CSRF \
        cookies set) or to `/desk/?error=CODE`."))
)]
pub(crate) async fn sign_in(State(edge): State<Edge>, req: Request) -> Response {
    match sign_in_inner(&edge, req).await {
        Ok(r) => r,
        Err(e) => {
            let code = crate::error::answer(&e).1.error;
            let mut resp = failed(&edge, code.as_str());
            resp.extensions_mut().insert(e.outcome(code));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_in_form_is_exact() {
        let ok: SignInForm =
            serde_urlencoded::from_bytes(b"contractor_id=c-1&login=tech-1&password=p%26w%3D")
                .unwrap();
        assert_eq!(ok.contractor_id.as_str(), "c-1");
        for bad in [
            &b"contractor_id=c-1&login=tech-1"[..],
            b"contractor_id=../x&login=tech-1&password=p",
            b"contractor_id=c-1&login=tech-1&password=p&client=field",
        ] {
            assert!(serde_urlencoded::from_bytes::<SignInForm>(bad).is_err());
        }
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
