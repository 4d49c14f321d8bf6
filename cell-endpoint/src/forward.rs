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
use crate::validate::{SESSION_COOKIE, Validated};

pub const X_CLIENT_IP: &str = "x-cellbind-client-ip";
pub const X_SUBJECT: &str = "x-cellbind-subject";
pub const X_CONTRACTOR: &str = "x-cellbind-contractor";
pub const X_GENERATION: &str = "x-cellbind-generation";
pub const X_SESSION: &str = "x-cellbind-session";
pub const X_EDGE_KEY: &str = "x-cellbind-edge-key";
/// Prefix of every header the edge owns; a client's copies are stripped.
pub const CELLBIND_PREFIX: &str = "x-cellbind-";

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
        base: String,
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
                let path = req
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_owned();
                let (parts, body) = req.into_parts();
                let resp = client
                    .request(parts.method, format!("{base}{path}"))
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

/// The two upstreams and what the edge presents to them.
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub auth: Target,
    pub app: Target,
    pub app_token: Secret,
    /// `app_token` as a header value, marked sensitive (never logged by hyper/h2).
    pub app_key_header: HeaderValue,
    pub feed_token: Secret,
    pub auth_timeout: Duration,
    pub app_timeout: Duration,
}

impl Upstreams {
    /// In-process upstreams (tests, benchmarks).
    pub fn local(auth: Option<Router>, app: Option<Router>) -> Self {
        Self {
            auth: auth.map_or(Target::None, Target::Local),
            app: app.map_or(Target::None, Target::Local),
            app_token: Secret::new("edge-key-for-tests"),
            app_key_header: sensitive("edge-key-for-tests").unwrap_or(HeaderValue::from_static("")),
            feed_token: Secret::new("feed-token-for-tests"),
            auth_timeout: Duration::from_millis(crate::config::DEFAULT_AUTH_TIMEOUT_MS),
            app_timeout: Duration::from_millis(crate::config::DEFAULT_APP_TIMEOUT_MS),
        }
    }

    /// Real HTTPS upstreams trusting only `ca_cert`.
    pub fn from_config(c: &Config) -> Result<Self, EdgeError> {
        let client = https_client(&c.ca_cert, Duration::from_millis(c.connect_timeout_ms))?;
        let app_token = Secret::from_file(&c.app_token_file)?;
        let app_key_header = sensitive(app_token.expose())?;
        Ok(Self {
            auth: Target::Http {
                client: client.clone(),
                base: c.auth_service_url.trim_end_matches('/').to_owned(),
            },
            app: Target::Http {
                client,
                base: c.app_url.trim_end_matches('/').to_owned(),
            },
            app_token,
            app_key_header,
            feed_token: Secret::from_file(&c.feed_token_file)?,
            auth_timeout: Duration::from_millis(c.auth_timeout_ms),
            app_timeout: Duration::from_millis(c.app_timeout_ms),
        })
    }
}

fn sensitive(s: &str) -> Result<HeaderValue, EdgeError> {
    let mut v = HeaderValue::from_str(s)
        .map_err(|_| EdgeError::Config("the app token is not a valid header value".into()))?;
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

/// The client's headers minus hop-by-hop, `Host`, `Content-Length` (recomputed) and every
/// `X-Cellbind-*` (only the edge sets those).
fn outbound_headers(incoming: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(incoming.len() + 8);
    for (name, value) in incoming {
        if HOP_BY_HOP.contains(name)
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || name.as_str().starts_with(CELLBIND_PREFIX)
        {
            continue;
        }
        h.append(name.clone(), value.clone());
    }
    h
}

/// The `Cookie` header without the session cookie (the app never sees the session).
fn cookies_without_session(incoming: &HeaderMap) -> Option<HeaderValue> {
    let mut kept: Vec<&str> = Vec::new();
    for v in incoming.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for pair in v.split(';') {
            let pair = pair.trim_start_matches(' ');
            let is_session = pair
                .strip_prefix(SESSION_COOKIE)
                .is_some_and(|r| r.starts_with('='));
            if !is_session && !pair.is_empty() {
                kept.push(pair);
            }
        }
    }
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join("; ")).ok()
}

async fn read_body(
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
    let bytes = axum::body::to_bytes(body, max)
        .await
        .map_err(|_| EdgeError::PayloadTooLarge)?;
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

/// `/v1/sessions*` → the auth-service, verbatim plus `X-Cellbind-Client-Ip`.
pub async fn to_auth(State(edge): State<Edge>, req: Request) -> Response {
    match forward_auth(&edge, req).await {
        Ok(r) => r,
        Err(e) => rescue(&e),
    }
}

async fn forward_auth(edge: &Edge, req: Request) -> Result<Response, EdgeError> {
    let ip = client_ip(&req);
    let (parts, body) = read_body(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers);
    if let Some(ip) = ip
        && let Ok(v) = HeaderValue::from_str(&ip.to_string())
    {
        headers.insert(X_CLIENT_IP, v);
    }
    let out = build(parts.method.clone(), path_and_query(&parts), headers, body)?;
    let up = edge.upstreams();
    up.auth
        .send(out, up.auth_timeout)
        .await
        .map_err(|_| EdgeError::AuthUnavailable)
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
    let (parts, body) = read_body(edge, req).await?;
    let mut headers = outbound_headers(&parts.headers);
    headers.remove(header::AUTHORIZATION);
    headers.remove(header::COOKIE);
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
        SendError::Timeout => EdgeError::AppTimeout,
        SendError::Unreachable => EdgeError::AppUnavailable,
    })
}
