//! The edge's upstreams: the cell's auth-service (public listener for `/v1/sessions*`,
//! internal listener for the feed) and the cell's app. Real ones over HTTPS (reqwest, rustls,
//! trusting only the configured CA) with timeouts, so an upstream that is down is a fast
//! error, never a hang; or in-process routers (tests, benchmarks). The auth-service may be
//! several replicas sharing one database: a target then holds every replica's base and fails
//! over between them ([`Target::send`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use protocol::Endpoint;
use runtime::Secret;
use tower::ServiceExt as _;

use crate::config::{Config, Replicas};
use crate::error::EdgeError;

/// Where requests go: a real HTTPS upstream (one base, or the bases of several replicas), or an
/// in-process router (tests, benchmarks).
#[derive(Clone)]
pub enum Target {
    Http {
        client: reqwest::Client,
        /// The upstream's base URLs (scheme, authority, optional path prefix, no trailing
        /// `/`), in configuration order; never empty.
        bases: Arc<[reqwest::Url]>,
        /// Index into `bases` of the one that answered last: requests start there. Shared
        /// by every clone.
        preferred: Arc<AtomicUsize>,
    },
    Local(Router),
    /// Not configured: every request fails as unreachable.
    None,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Http { bases, .. } => {
                let list: Vec<&str> = bases.iter().map(reqwest::Url::as_str).collect();
                write!(f, "Http({})", list.join(", "))
            }
            Target::Local(_) => f.write_str("Local"),
            Target::None => f.write_str("None"),
        }
    }
}

/// Why an upstream call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No base accepted a connection (refused, unroutable, TLS handshake failed): the
    /// request never left.
    Refused,
    /// The request failed in transit, or may have reached a server that did not answer.
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

/// An upstream base URL from the configuration (https only; an [`Endpoint`] has no query or
/// fragment and no trailing `/`).
pub fn base_url(what: &str, url: &Endpoint) -> Result<reqwest::Url, EdgeError> {
    let u =
        reqwest::Url::parse(url.as_str()).map_err(|e| EdgeError::Config(format!("{what}: {e}")))?;
    if u.scheme() != "https" || u.query().is_some() || u.fragment().is_some() {
        return Err(EdgeError::Config(format!(
            "{what} must be an https URL without query or fragment"
        )));
    }
    Ok(u)
}

/// Whether a request may be sent again after a transport failure that happened once it may
/// have left (RFC 9110 §9.2.2 safe methods; the feed and the JWKS are `GET`).
fn resendable(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl Target {
    /// An HTTPS target over `bases` (tried in order, starting with the first); `None` when
    /// `bases` is empty.
    pub fn http(client: reqwest::Client, bases: Vec<reqwest::Url>) -> Option<Target> {
        (!bases.is_empty()).then(|| Target::Http {
            client,
            bases: bases.into(),
            preferred: Arc::default(),
        })
    }

    /// Sends a request whose URI holds only path and query.
    ///
    /// Over HTTPS with several bases it starts at the preferred one (the last that answered)
    /// and fails over to the next at once when a connection cannot be made (the request never
    /// left, whatever its method); a `GET`, `HEAD` or `OPTIONS` also fails over on any other
    /// transport error or a timeout (a replica killed mid-request). A request that may have
    /// reached a server is never sent again otherwise. `timeout` bounds each attempt.
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
            Target::Http {
                client,
                bases,
                preferred,
            } => {
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                if let [base] = &bases[..] {
                    // One base (a load balancer, the app): nothing to fail over to, so the
                    // request is moved, not copied.
                    let url = upstream_url(base, pq).ok_or(SendError::BadTarget)?;
                    let (parts, body) = req.into_parts();
                    return client
                        .request(parts.method, url)
                        .headers(parts.headers)
                        .body(body)
                        .timeout(timeout)
                        .send()
                        .await
                        .map(into_response)
                        .map_err(|e| failure(&e));
                }
                // Every base gets the ATTACKS A23 check before anything is sent.
                let urls = bases
                    .iter()
                    .map(|b| upstream_url(b, pq).ok_or(SendError::BadTarget))
                    .collect::<Result<Vec<_>, _>>()?;
                let (parts, body) = req.into_parts();
                let resend = resendable(&parts.method);
                let n = urls.len();
                let start = preferred
                    .load(Ordering::Relaxed)
                    .checked_rem(n)
                    .unwrap_or(0);
                let mut outcome = if n == 0 {
                    SendError::Unreachable
                } else {
                    SendError::Refused
                };
                let order = bases
                    .iter()
                    .zip(urls)
                    .enumerate()
                    .cycle()
                    .skip(start)
                    .take(n);
                for (i, (base, url)) in order {
                    let attempt = client
                        .request(parts.method.clone(), url)
                        .headers(parts.headers.clone())
                        .body(body.clone())
                        .timeout(timeout)
                        .send()
                        .await;
                    let e = match attempt {
                        Ok(resp) => {
                            if i != start {
                                preferred.store(i, Ordering::Relaxed);
                                tracing::info!(upstream = %base, "failed over to another replica");
                            }
                            return Ok(into_response(resp));
                        }
                        Err(e) => e,
                    };
                    tracing::debug!(upstream = %base, error = %e, "upstream attempt failed");
                    let failed = failure(&e);
                    if failed != SendError::Refused {
                        outcome = failed;
                        if !resend {
                            return Err(outcome);
                        }
                    }
                }
                Err(outcome)
            }
        }
    }
}

/// What a failed attempt means: refused (the request never left), timed out, or lost in transit.
fn failure(e: &reqwest::Error) -> SendError {
    if e.is_connect() {
        SendError::Refused
    } else if e.is_timeout() {
        SendError::Timeout
    } else {
        SendError::Unreachable
    }
}

fn into_response(resp: reqwest::Response) -> Response {
    let resp: http::Response<reqwest::Body> = resp.into();
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
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
        let http = |what, urls: &Replicas| -> Result<Target, EdgeError> {
            let bases = urls
                .urls()
                .iter()
                .map(|u| base_url(what, u))
                .collect::<Result<Vec<_>, _>>()?;
            Target::http(client.clone(), bases)
                .ok_or_else(|| EdgeError::Config(format!("{what}: an empty list")))
        };
        Ok(Self {
            auth: http("auth_service_url", &c.auth_service_url)?,
            feed: http("feed_url", &c.feed_url)?,
            app: http("app_url", &Replicas::one(c.app_url.clone()))?,
            app_key_header: sensitive(Secret::from_file(&c.app_token_file)?.expose())?,
            edge_key_header: sensitive(Secret::from_file(&c.edge_token_file)?.expose())?,
            feed_token: Secret::from_file(&c.feed_token_file)?,
            auth_timeout: Duration::from_millis(c.auth_timeout_ms),
            app_timeout: Duration::from_millis(c.app_timeout_ms),
        })
    }

    /// `Authorization: Bearer <feed token>`, marked sensitive: what the feed and the
    /// revocation handback present to the auth-service's internal listener.
    pub fn feed_authorization(&self) -> Result<HeaderValue, EdgeError> {
        let bearer = format!(
            "{}{}",
            protocol::http::BEARER_PREFIX,
            self.feed_token.expose()
        );
        let mut auth = HeaderValue::from_str(&bearer)
            .map_err(|_| EdgeError::Config("feed token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        Ok(auth)
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
    runtime::tls::client_trusting(&pem)
        .map_err(|e| EdgeError::Tls(e.to_string()))?
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn endpoint(s: &str) -> Endpoint {
        Endpoint::parse(s).unwrap()
    }

    #[test]
    fn upstream_urls_are_appended_never_resolved() {
        let base = base_url("t", &endpoint("https://127.0.0.3:8444/")).unwrap();
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
        let prefixed = base_url("t", &endpoint("https://app.internal/cell-03")).unwrap();
        assert_eq!(
            upstream_url(&prefixed, "/api/routes/today")
                .unwrap()
                .as_str(),
            "https://app.internal/cell-03/api/routes/today"
        );
        assert!(base_url("t", &endpoint("http://x")).is_err());
    }
}
