//! Forwarding: `/v1/sessions*` to the cell's auth-service, validated `/api/*` to the cell's
//! app. Both over HTTPS (reqwest, rustls, trusting only the configured CA), both with
//! timeouts so an upstream that is down is a fast error, never a hang.

use std::fmt;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use tower::ServiceExt as _;

use crate::Edge;
use crate::config::Config;
use crate::error::{EdgeError, rescue};
use crate::limits::client_ip;
use crate::validate::Validated;

pub use protocol::http::{
    CELLBIND_HEADER_PREFIX, X_CLIENT_IP, X_CONTRACTOR, X_EDGE_KEY, X_GENERATION, X_SESSION,
    X_SUBJECT,
};

/// A secret read from a `*_file` setting. `Debug` never shows it.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// Reads a secret file, without its trailing newline.
    pub fn from_file(path: &std::path::Path) -> Result<Self, EdgeError> {
        let s = std::fs::read_to_string(path)
            .map_err(|e| EdgeError::Config(format!("{}: {e}", path.display())))?;
        let s = s.trim();
        if s.is_empty() {
            return Err(EdgeError::Config(format!("{} is empty", path.display())));
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where requests go: a real HTTPS upstream, or an in-process router (tests, benchmarks).
#[derive(Clone)]
pub enum Target {
    Http {
        client: reqwest::Client,
        /// The upstream's base URL (scheme, authority, optional path prefix, no trailing `/`).
        base: reqwest::Url,
    },
    Local(Router),
    /// Not configured: every request fails as unreachable.
    None,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Http { base, .. } => write!(f, "Http({base})"),
            Target::Local(_) => f.write_str("Local"),
            Target::None => f.write_str("None"),
        }
    }
}

/// Why an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    Unreachable,
    Timeout,
    /// The target could not be appended to the upstream's base without being changed.
    BadTarget,
}

/// The upstream URL for `path_and_query`: the base with the already validated (canonical,
/// see `target`) path appended byte for byte, never resolved against it (ATTACKS A23). A URL
/// library that would change the appended path (dot segments, re-encoding) makes this `None`.
pub fn upstream_url(base: &reqwest::Url, path_and_query: &str) -> Option<reqwest::Url> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    if !path.starts_with('/') {
        return None;
    }
    let prefix = base.path().trim_end_matches('/');
    let url = reqwest::Url::parse(&format!(
        "{}{}",
        base.as_str().trim_end_matches('/'),
        path_and_query
    ))
    .ok()?;
    let same_path = url
        .path()
        .strip_prefix(prefix)
        .is_some_and(|rest| rest == path);
    (same_path
        && url.query() == query
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default())
    .then_some(url)
}

/// Parses an upstream base URL from the configuration (https only, no query or fragment).
pub fn base_url(what: &str, url: &str) -> Result<reqwest::Url, EdgeError> {
    let u = reqwest::Url::parse(url.trim_end_matches('/'))
        .map_err(|e| EdgeError::Config(format!("{what}: {e}")))?;
    if u.scheme() != "https" || u.query().is_some() || u.fragment().is_some() {
        return Err(EdgeError::Config(format!(
            "{what} must be an https URL without query or fragment"
        )));
    }
    Ok(u)
}

impl Target {
    /// Sends a request whose URI holds only path and query.
    pub async fn send(
        &self,
        req: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> Result<Response, SendError> {
        match self {
            Target::None => Err(SendError::Unreachable),
            Target::Local(router) => {
                let (parts, body) = req.into_parts();
                let req = http::Request::from_parts(parts, Body::from(body));
                match tokio::time::timeout(timeout, router.clone().oneshot(req)).await {
                    Ok(Ok(resp)) => Ok(resp),
                    Ok(Err(never)) => match never {},
                    Err(_) => Err(SendError::Timeout),
                }
            }
            Target::Http { client, base } => {
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                let url = upstream_url(base, pq).ok_or(SendError::BadTarget)?;
                let (parts, body) = req.into_parts();
                let resp = client
                    .request(parts.method, url)
                    .headers(parts.headers)
                    .body(body)
                    .timeout(timeout)
                    .send()
                    .await
                    .map_err(|e| {
                        if e.is_timeout() {
                            SendError::Timeout
                        } else {
                            SendError::Unreachable
                        }
                    })?;
                let resp: http::Response<reqwest::Body> = resp.into();
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(parts, Body::new(body)))
            }
        }
    }
}

/// The upstreams and what the edge presents to them.
#[derive(Debug, Clone)]
pub struct Upstreams {
    /// The auth-service's public listener (`/v1/sessions*`).
    pub auth: Target,
    /// The auth-service's internal listener (the feed).
    pub feed: Target,
    /// The app's public listener (`/api/*`).
    pub app: Target,
    /// The app token as `X-Cellbind-Edge-Key` towards the app, marked sensitive (never logged
    /// by hyper/h2).
    pub app_key_header: HeaderValue,
    /// The edge token as `X-Cellbind-Edge-Key` towards the auth-service, marked sensitive.
    pub edge_key_header: HeaderValue,
    pub feed_token: Secret,
    pub auth_timeout: Duration,
    pub app_timeout: Duration,
}

/// The app token of in-process upstreams (tests, benchmarks).
pub const LOCAL_APP_TOKEN: &str = "edge-key-for-tests";
/// The edge token of in-process upstreams (tests, benchmarks).
pub const LOCAL_EDGE_TOKEN: &str = "edge-token-for-tests";

impl Upstreams {
    /// In-process upstreams (tests, benchmarks); the feed is read from the auth router.
    pub fn local(auth: Option<Router>, app: Option<Router>) -> Self {
        let auth = auth.map_or(Target::None, Target::Local);
        Self {
            feed: auth.clone(),
            auth,
            app: app.map_or(Target::None, Target::Local),
            app_key_header: sensitive(LOCAL_APP_TOKEN).unwrap_or(HeaderValue::from_static("")),
            edge_key_header: sensitive(LOCAL_EDGE_TOKEN).unwrap_or(HeaderValue::from_static("")),
            feed_token: Secret::new("feed-token-for-tests"),
            auth_timeout: Duration::from_millis(crate::config::DEFAULT_AUTH_TIMEOUT_MS),
            app_timeout: Duration::from_millis(crate::config::DEFAULT_APP_TIMEOUT_MS),
        }
    }

    /// Real HTTPS upstreams trusting only `ca_cert`.
    pub fn from_config(c: &Config) -> Result<Self, EdgeError> {
        let client = https_client(&c.ca_cert, Duration::from_millis(c.connect_timeout_ms))?;
        let http = |what, url: &str| -> Result<Target, EdgeError> {
            Ok(Target::Http {
                client: client.clone(),
                base: base_url(what, url)?,
            })
        };
        Ok(Self {
            auth: http("auth_service_url", &c.auth_service_url)?,
            feed: http("feed_url", &c.feed_url)?,
            app: http("app_url", &c.app_url)?,
            app_key_header: sensitive(Secret::from_file(&c.app_token_file)?.expose())?,
            edge_key_header: sensitive(Secret::from_file(&c.edge_token_file)?.expose())?,
            feed_token: Secret::from_file(&c.feed_token_file)?,
            auth_timeout: Duration::from_millis(c.auth_timeout_ms),
            app_timeout: Duration::from_millis(c.app_timeout_ms),
        })
    }
}

fn sensitive(s: &str) -> Result<HeaderValue, EdgeError> {
    let mut v = HeaderValue::from_str(s)
        .map_err(|_| EdgeError::Config("a token is not a valid header value".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

/// A reqwest client that trusts only the PEM CA bundle at `ca`.
pub fn https_client(ca: &std::path::Path, connect: Duration) -> Result<reqwest::Client, EdgeError> {
    let pem = std::fs::read(ca).map_err(|e| EdgeError::Config(format!("{}: {e}", ca.display())))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| EdgeError::Tls(format!("ca_cert: {e}")))?;
    if certs.is_empty() {
        return Err(EdgeError::Tls("ca_cert holds no certificate".into()));
    }
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .connect_timeout(connect)
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| EdgeError::Tls(e.to_string()))
}

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in &HOP_BY_HOP {
        h.remove(name);
    }
}

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
    ) || protocol::http::is_cellbind_header(name)
}

/// Whether header name `name` (lower case) is `listed` (lower case, `-` only), an `_` in `name`
/// counting as `-`.
fn same_name(listed: &str, name: &str) -> bool {
    listed.len() == name.len()
        && listed
            .bytes()
            .zip(name.bytes())
            .all(|(l, n)| l == n || (l == b'-' && n == b'_'))
}

/// The client's headers that may reach an upstream, plus `X-Forwarded-For` (the client address
/// the edge established) and `X-Forwarded-Proto: https`. Headers the client lists in
/// `Connection` are hop-by-hop too and go.
fn outbound_headers(incoming: &HeaderMap, client: Option<std::net::IpAddr>) -> HeaderMap {
    let listed: Vec<String> = incoming
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase().replace('_', "-"))
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

/// The `Cookie` header without the session and CSRF cookies (the app never sees them).
fn cookies_for_app(incoming: &HeaderMap) -> Option<HeaderValue> {
    let mut kept: Vec<&str> = Vec::new();
    for v in incoming.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let pair = pair.trim_start_matches(' ');
            let ours = [protocol::http::SESSION_COOKIE, protocol::http::CSRF_COOKIE]
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

/// Reads a whole request body: at most `max_body_bytes` (413), within `body_read_timeout`
/// from now (408: a declared body that never arrives must not hold the connection).
pub(crate) async fn read_body(edge: &Edge, body: Body) -> Result<bytes::Bytes, EdgeError> {
    let s = edge.settings();
    match tokio::time::timeout(
        s.body_read_timeout,
        axum::body::to_bytes(body, s.max_body_bytes),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) => Err(EdgeError::PayloadTooLarge),
        Err(_) => Err(EdgeError::BodyTimeout),
    }
}

async fn read_request(
    edge: &Edge,
    req: Request,
) -> Result<(http::request::Parts, bytes::Bytes), EdgeError> {
    let max = edge.settings().max_body_bytes;
    let (parts, body) = req.into_parts();
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max as u64
    {
        return Err(EdgeError::PayloadTooLarge);
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
) -> Result<http::Request<bytes::Bytes>, EdgeError> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(body)
        .map_err(|_| EdgeError::BadRequest("request target"))?;
    *req.headers_mut() = headers;
    Ok(req)
}

/// The session routes the edge forwards to the auth-service: an allow-list (ATTACKS A23);
/// every other `/v1/sessions/...` target is answered here (404), never forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRoute {
    /// `POST /v1/sessions`: credentials in the body, no session.
    SignIn,
    /// `GET|DELETE /v1/sessions/current`.
    Current,
    /// `POST /v1/sessions/renew`.
    Renew,
    /// `POST /v1/sessions/transfer`.
    Transfer,
    /// `POST /v1/sessions/rebind`: a ticket in the body, no session.
    Rebind,
}

impl SessionRoute {
    /// Whether the route acts on the presented session (and so takes a credential).
    pub fn uses_session(self) -> bool {
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
) -> Result<Response, EdgeError> {
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
            SendError::BadTarget => EdgeError::BadRequest(crate::target::NOT_CANONICAL),
            SendError::Unreachable | SendError::Timeout => EdgeError::AuthUnavailable,
        })
}

/// `/v1/sessions*` → the auth-service. Only the credential the rule chose travels: the bearer
/// header or the session cookie, never both, never the other cookies; a cookie request with an
/// unsafe method has passed the CSRF proof here.
pub async fn to_auth(edge: Edge, route: SessionRoute, req: Request) -> Response {
    match forward_auth(&edge, route, req).await {
        Ok(r) => r,
        Err(e) => {
            edge.metrics().outcome(e.outcome());
            rescue(&e)
        }
    }
}

async fn forward_auth(
    edge: &Edge,
    route: SessionRoute,
    req: Request,
) -> Result<Response, EdgeError> {
    let ip = client_ip(&req);
    let (parts, body) = read_request(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers, ip);
    if route.uses_session() {
        let chosen = edge
            .resolve_credential(&parts.headers, &parts.method)
            .await?;
        let (name, value) = match chosen.source {
            protocol::http::Source::Bearer => (
                header::AUTHORIZATION,
                format!("{}{}", protocol::http::BEARER_PREFIX, chosen.token),
            ),
            protocol::http::Source::Cookie => (
                header::COOKIE,
                format!("{}={}", protocol::http::SESSION_COOKIE, chosen.token),
            ),
        };
        let mut v = HeaderValue::from_str(&value)
            .map_err(|_| EdgeError::Token(protocol::token::TokenError::Malformed))?;
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
}

/// Validated `/api/*` → the app, with the session's identity in `X-Cellbind-*` headers and
/// without the bearer token or session cookie.
pub async fn to_app(State(edge): State<Edge>, req: Request) -> Response {
    match forward_app(&edge, req).await {
        Ok(r) => {
            edge.metrics().outcome("served");
            r
        }
        Err(e) => {
            edge.metrics().outcome(e.outcome());
            rescue(&e)
        }
    }
}

async fn forward_app(edge: &Edge, req: Request) -> Result<Response, EdgeError> {
    let Some(v) = req.extensions().get::<std::sync::Arc<Validated>>().cloned() else {
        return Err(EdgeError::SessionMissing);
    };
    // A write registers itself, then looks at ownership again (see `drain`): a handoff applied
    // since validation refuses it, or the drain report that follows counts it.
    let _in_flight = if protocol::ownership::Access::of_method(req.method().as_str())
        == protocol::ownership::Access::Write
    {
        let guard = edge.in_flight().begin(&v.claims.ctr);
        crate::drain::recheck(edge.current().as_deref(), &v.claims)?;
        Some(guard)
    } else {
        None
    };
    let ip = client_ip(&req);
    let (parts, body) = read_request(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers, ip);
    if let Some(c) = cookies_for_app(&parts.headers) {
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
        SendError::Timeout => EdgeError::AppTimeout,
        SendError::Unreachable => EdgeError::AppUnavailable,
        SendError::BadTarget => EdgeError::BadRequest(crate::target::NOT_CANONICAL),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn upstream_urls_are_appended_never_resolved() {
        let base = base_url("t", "https://127.0.0.3:8444/").unwrap();
        assert_eq!(
            upstream_url(&base, "/v1/sessions/current?x=1")
                .unwrap()
                .as_str(),
            "https://127.0.0.3:8444/v1/sessions/current?x=1"
        );
        for bad in [
            "/v1/sessions/../../admin/v1/status",
            "/v1/sessions/%2e%2e/admin",
            "/api/./x",
            "api/x",
            "/api/{x}",
        ] {
            assert!(upstream_url(&base, bad).is_none(), "{bad}");
        }
        let prefixed = base_url("t", "https://app.internal/cell-03").unwrap();
        assert_eq!(
            upstream_url(&prefixed, "/api/routes/today")
                .unwrap()
                .as_str(),
            "https://app.internal/cell-03/api/routes/today"
        );
        assert!(base_url("t", "http://x").is_err());
    }

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
