//! Forwarding: `/v1/sessions*` to the cell's auth-service, validated `/api/*` to the cell's
//! app (the upstreams themselves are `upstream` and `upstreams`). Only what the edge chose travels: the
//! client's headers minus every credential, forwarding, identity and override header, plus the
//! credential the rule chose (session routes) or the verified identity (`/api/*`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use protocol::dpop::{DPOP_HEADER, DPOP_NONCE_HEADER};
use protocol::http::{
    BEARER_PREFIX, Source, X_CLIENT_IP, X_DPOP_JKT, X_EDGE_KEY, cookies_without_session,
    is_cellbind_header, session_cookie_request,
};
use protocol::ownership::Access;
use runtime::dpop::ConnectionProofs;

use crate::edge::Edge;
use crate::error::Refusal;
use crate::held::token_cache::Validated;
use crate::metrics::{Outcome, StatusClass, Synthetic, Upstream};
use crate::net::limits::client_ip;
use crate::net::upstream::SendError;
use crate::request::validate::{ProofContext, Refused};

/// Whether a client's request header is never forwarded (ATTACKS A25, A26): hop-by-hop
/// headers (RFC 9110 §7.6.1), `Host` and `Content-Length` (the upstream request has its own),
/// the credentials (the forwarder adds back the one the credential rule chose), and every
/// forwarding, client-address and method/URL override header a client could use to lie to the
/// upstream. `name` is lower case; an `_` counts as `-` (CGI, WSGI and Rack read it so).
fn never_forwarded(name: &str) -> bool {
    let normalised;
    let name = if name.contains('_') {
        normalised = name.replace('_', "-");
        normalised.as_str()
    } else {
        name
    };
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "authorization"
            | "cookie"
            | "dpop"
            | "forwarded"
            | "x-forwarded-for"
            | "x-forwarded-host"
            | "x-forwarded-proto"
            | "x-forwarded-port"
            | "x-forwarded-prefix"
            | "x-forwarded-server"
            | "x-real-ip"
            | "x-client-ip"
            | "true-client-ip"
            | "cf-connecting-ip"
            | "x-cluster-client-ip"
            | "x-original-url"
            | "x-original-uri"
            | "x-rewrite-url"
            | "x-http-method-override"
            | "x-http-method"
            | "x-method-override"
    ) || is_cellbind_header(name)
}

/// Whether header name `name` (lower case) is the `Connection` token `listed` (any case),
/// an `_` on either side counting as `-`.
fn same_name(listed: &str, name: &str) -> bool {
    let fold = |b: u8| match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    };
    listed.len() == name.len()
        && listed
            .bytes()
            .zip(name.bytes())
            .all(|(l, n)| fold(l) == fold(n))
}

/// The client's headers that may reach an upstream, plus `X-Forwarded-For` (the client address
/// the edge established) and `X-Forwarded-Proto: https`. Headers the client lists in
/// `Connection` are hop-by-hop too and go.
fn outbound_headers(incoming: &HeaderMap, client: Option<std::net::IpAddr>) -> HeaderMap {
    let listed: Vec<&str> = incoming
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    let mut h = HeaderMap::with_capacity(incoming.len() + 8);
    for (name, value) in incoming {
        let n = name.as_str();
        if never_forwarded(n) || listed.iter().any(|l| same_name(l, n)) {
            continue;
        }
        h.append(name.clone(), value.clone());
    }
    if let Some(ip) = client
        && let Ok(v) = HeaderValue::from_str(&ip.to_string())
    {
        h.insert(HeaderName::from_static("x-forwarded-for"), v);
    }
    h.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static("https"),
    );
    h
}

/// Reads a whole request body: at most `max_body_bytes` (413), within `body_read_timeout`
/// from now (408: a declared body that never arrives must not hold the connection).
pub(crate) async fn read_body(edge: &Edge, body: Body) -> Result<bytes::Bytes, Refusal> {
    // A request without a body (most `GET`s) has nothing to wait for: no timer, no read.
    if http_body::Body::is_end_stream(&body) {
        return Ok(bytes::Bytes::new());
    }
    let s = edge.settings();
    match tokio::time::timeout(
        s.listeners.timeouts().body_read,
        axum::body::to_bytes(body, s.serving.max_body_bytes),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) => Err(Refusal::PayloadTooLarge),
        Err(_) => Err(Refusal::BodyTimeout),
    }
}

async fn read_request(
    edge: &Edge,
    req: Request,
) -> Result<(http::request::Parts, bytes::Bytes), Refusal> {
    let max = edge.settings().serving.max_body_bytes;
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max as u64
    {
        return Err(Refusal::PayloadTooLarge);
    }
    let bytes = read_body(edge, body).await?;
    Ok((parts, bytes))
}

fn path_and_query(parts: &http::request::Parts) -> &str {
    parts.uri.path_and_query().map_or("/", |p| p.as_str())
}

fn build(
    method: Method,
    path: &str,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Result<http::Request<bytes::Bytes>, Refusal> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(body)
        .map_err(|_| Refusal::BadRequest("request target"))?;
    *req.headers_mut() = headers;
    Ok(req)
}

/// The session routes the edge forwards to the auth-service: an allow-list (ATTACKS A23);
/// every other `/v1/sessions/...` target is answered here (404), never forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionRoute {
    /// `POST /v1/sessions`: credentials in the body, no session.
    SignIn,
    /// `GET|DELETE /v1/sessions/current`.
    Current,
    /// `POST /v1/sessions/renew`.
    Renew,
    /// `POST /v1/sessions/transfer`.
    Transfer,
    /// `POST /v1/sessions/transfer/status`: a ticket in the body, no session (another cell
    /// asks before it rebinds one of this cell's tickets).
    TransferStatus,
    /// `POST /v1/sessions/rebind`: a ticket in the body, no session.
    Rebind,
}

impl SessionRoute {
    /// Whether the route acts on the presented session (and so takes a credential).
    pub(crate) fn uses_session(self) -> bool {
        matches!(
            self,
            SessionRoute::Current | SessionRoute::Renew | SessionRoute::Transfer
        )
    }
}

/// Sends a request to the auth-service's public listener as this cell's edge: with the edge
/// token (so the auth-service believes the client address and the cookie) and the client
/// address the edge established.
pub(crate) async fn send_to_auth(
    edge: &Edge,
    method: Method,
    path: &str,
    mut headers: HeaderMap,
    body: bytes::Bytes,
    client: Option<std::net::IpAddr>,
) -> Result<Response, Refusal> {
    let up = edge.upstreams();
    if let Some(ip) = client
        && let Ok(v) = HeaderValue::from_str(&ip.to_string())
    {
        headers.insert(HeaderName::from_static(X_CLIENT_IP), v);
    }
    headers.insert(
        HeaderName::from_static(X_EDGE_KEY),
        up.edge_key_header.clone(),
    );
    let out = build(method, path, headers, body)?;
    up.auth
        .send(out, up.auth_timeout)
        .await
        .map_err(|e| match e {
            SendError::BadTarget => Refusal::BadRequest(crate::net::target::NOT_CANONICAL),
            SendError::Refused | SendError::Unreachable | SendError::Timeout => {
                Refusal::AuthUnavailable
            }
        })
}

/// `/v1/sessions*` → the auth-service. Only the credential the rule chose travels: the bearer
/// header or the session cookie, never both, never the other cookies; a cookie request with an
/// unsafe method has passed the CSRF proof here; a DPoP proof has been verified here and only
/// its key's thumbprint travels (`X-Cellbind-Dpop-Jkt`, believed with the edge token). The
/// answer to a synthetic contractor's session is marked [`Synthetic`] for the request counter.
pub(crate) async fn to_auth(edge: Edge, route: SessionRoute, req: Request) -> Response {
    let proved = req.headers().contains_key(DPOP_HEADER);
    match forward_auth(&edge, route, req).await {
        Ok(r) => {
            let status = r.status();
            with_nonce(&edge, proved, forwarded(Upstream::Auth, status, r))
        }
        Err(e) => edge.refuse(&e),
    }
}

/// The answer to a request that carried a DPoP proof carries this instance's current nonce
/// (RFC 9449 §8.2): the client's next proof uses it, and needs no challenge round trip.
fn with_nonce(edge: &Edge, proved: bool, mut resp: Response) -> Response {
    if proved {
        let nonce = edge.dpop().nonce(edge.clock().now());
        resp.headers_mut()
            .insert(HeaderName::from_static(DPOP_NONCE_HEADER), nonce);
    }
    resp
}

/// The answer to a request `upstream` answered with `status`, marked as forwarded (with the
/// status's class) for the request counter.
pub(crate) fn forwarded(
    upstream: Upstream,
    status: axum::http::StatusCode,
    mut resp: Response,
) -> Response {
    let class = StatusClass::of(status.as_u16());
    resp.extensions_mut()
        .insert(Outcome::Forwarded { upstream, class });
    resp
}

/// The auth-service's answer (already marked [`Synthetic`] when the session it acted on was a
/// synthetic contractor's), or the refusal.
async fn forward_auth(edge: &Edge, route: SessionRoute, req: Request) -> Result<Response, Refused> {
    let ip = client_ip(&req);
    let connection = req.extensions().get::<Arc<ConnectionProofs>>().cloned();
    let (parts, body) = read_request(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers, ip);
    let ctx = ProofContext {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        connection: connection.as_deref(),
    };
    let jkt = match route {
        // No session: a proof, when there is one, is verified on its own (its key binds the
        // new session, or must be the ticket's: the auth-service compares).
        SessionRoute::SignIn | SessionRoute::Rebind => {
            edge.check_binding(None, None, &parts.headers, &ctx)?
        }
        SessionRoute::TransferStatus => None,
        SessionRoute::Current | SessionRoute::Renew | SessionRoute::Transfer => None,
    };
    if let Some(jkt) = jkt
        && let Ok(v) = HeaderValue::from_str(jkt.as_str())
    {
        headers.insert(HeaderName::from_static(X_DPOP_JKT), v);
    }
    // Whether the session the route acts on is a synthetic contractor's (none: not).
    let mut synthetic = false;
    if route.uses_session() {
        let chosen = edge
            .resolve_credential(&parts.headers, &parts.method)
            .await?;
        synthetic = chosen.validated.synthetic;
        // A bound session's proof, by its key, for this very request.
        if let Some(jkt) = edge
            .check_binding(
                Some(&chosen.validated.claims),
                Some(chosen.token),
                &parts.headers,
                &ctx,
            )
            .map_err(Refused::of_session(synthetic))?
            && let Ok(v) = HeaderValue::from_str(jkt.as_str())
        {
            headers.insert(HeaderName::from_static(X_DPOP_JKT), v);
        }
        let (name, value) = match chosen.source {
            Source::Bearer => (
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("{BEARER_PREFIX}{}", chosen.token)).ok(),
            ),
            Source::Cookie => (header::COOKIE, session_cookie_request(chosen.token)),
        };
        let mut v = value
            .ok_or(Refusal::Token(protocol::token::TokenError::Malformed))
            .map_err(Refused::of_session(synthetic))?;
        v.set_sensitive(true);
        headers.insert(name, v);
    }
    send_to_auth(
        edge,
        parts.method.clone(),
        path_and_query(&parts),
        headers,
        body,
        ip,
    )
    .await
    .map(|resp| Synthetic::mark(synthetic, resp))
    .map_err(Refused::of_session(synthetic))
}

/// Validated `/api/*` → the app, with the session's identity in `X-Cellbind-*` headers and
/// without the bearer token or session cookie. The answer to a synthetic contractor's session,
/// the app's or a refusal, is marked [`Synthetic`] for the request counter.
pub(crate) async fn to_app(State(edge): State<Edge>, req: Request) -> Response {
    let proved = req.headers().contains_key(DPOP_HEADER);
    let Some(v) = req.extensions().get::<Arc<Validated>>().cloned() else {
        return edge.rescue(&Refusal::SessionMissing);
    };
    let synthetic = v.synthetic;
    let resp = match forward_app(&edge, v, req).await {
        Ok(r) => {
            let status = r.status();
            with_nonce(&edge, proved, forwarded(Upstream::App, status, r))
        }
        Err(e) => edge.rescue(&e),
    };
    Synthetic::mark(synthetic, resp)
}

/// Forwards `req` of the validated session `v`.
async fn forward_app(edge: &Edge, v: Arc<Validated>, req: Request) -> Result<Response, Refusal> {
    // A write registers itself, then looks at ownership again (see `drain`): a handoff applied
    // since validation refuses it, or the drain report that follows counts it.
    let _in_flight = if Access::of_method(req.method().as_str()) == Access::Write {
        let guard = edge.in_flight().begin(&v.claims.ctr);
        crate::held::drain::recheck(edge.current().as_deref(), &v.claims)?;
        Some(guard)
    } else {
        None
    };
    let ip = client_ip(&req);
    let (parts, body) = read_request(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers, ip);
    if let Some(c) = cookies_without_session(&parts.headers) {
        headers.insert(header::COOKIE, c);
    }
    let up = edge.upstreams();
    for (name, value) in &v.identity_headers {
        headers.insert(name.clone(), value.clone());
    }
    headers.insert(
        HeaderName::from_static(X_EDGE_KEY),
        up.app_key_header.clone(),
    );
    let out = build(parts.method.clone(), path_and_query(&parts), headers, body)?;
    up.app.send(out, up.app_timeout).await.map_err(|e| match e {
        SendError::Timeout => Refusal::AppTimeout,
        SendError::Refused | SendError::Unreachable => Refusal::AppUnavailable,
        SendError::BadTarget => Refusal::BadRequest(crate::net::target::NOT_CANONICAL),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn forwarding_and_identity_headers_never_come_from_the_client() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-cellbind-contractor", "c-1"),
            ("x_cellbind_contractor", "c-1"),
            ("X_Cellbind_Subject", "s"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x_forwarded_for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("x-original-url", "/internal/v1/x"),
            ("x-rewrite-url", "/internal/v1/x"),
            ("x-http-method-override", "DELETE"),
            ("connection", "x-secret-hop, keep-alive"),
            ("x-secret-hop", "1"),
            ("authorization", "Bearer t"),
            ("cookie", "__Host-cellbind_session=t"),
            ("accept", "application/json"),
        ] {
            h.append(
                HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).unwrap(),
                HeaderValue::from_static(v),
            );
        }
        let out = outbound_headers(&h, Some("192.0.2.7".parse().unwrap()));
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["accept", "x-forwarded-for", "x-forwarded-proto"],
            "{out:?}"
        );
        assert_eq!(out["x-forwarded-for"], "192.0.2.7");
        assert_eq!(out["x-forwarded-proto"], "https");
    }
}
