//! How the edge calls one upstream ([`Target`]: the cell's auth-service's public listener for
//! `/v1/sessions*`, its internal listener for the feed, the cell's app; which ones and what the
//! edge presents to them is `upstreams`). Real ones over HTTPS (hyper's HTTP/2 or
//! HTTP/1.1 client connections on rustls, trusting only the configured CA, kept per thread by
//! [`crate::net::pool`]) with timeouts, so an upstream that is down is a fast error, never a hang;
//! or in-process routers (tests, benchmarks). The auth-service may be several replicas sharing
//! one database: a target then holds every replica's base and fails over between them
//! ([`Target::send`]).
//!
//! The client is a proxy's, not a browser's: it follows no redirect (a `302` of the app is
//! the client's to follow), adds no header (no default `Accept`, no `User-Agent`), decodes
//! nothing, and streams the answer's body to the client as it arrives. It offers HTTP/2 and
//! HTTP/1.1 in the TLS handshake (`upstream_http`): an upstream that picks HTTP/2 gets one
//! connection per serving thread carrying all that thread's requests at once (a thread's
//! requests already run one after another, so the connection serialises nothing that was not
//! serialised), and receives the requests of a busy moment in one read; one that picks
//! HTTP/1.1 gets kept-alive connections, one request at a time on each (`pool`).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use protocol::Endpoint;
use tower::ServiceExt as _;

use crate::config::UpstreamHttp;
use crate::error::EdgeError;
use crate::net::pool::{PoolError, PooledBody};

/// The edge's client towards its upstreams (see the module doc): its connections are kept per
/// thread (`pool`). The public listener is served by one single-threaded runtime per core
/// (`tls::serve_per_core`), so a request, its upstream connection and that connection's task
/// all stay on one thread: no lock and no cross-thread wake-up on the request path.
#[derive(Clone)]
pub struct HttpsClient {
    /// Tells this client's connections apart in a thread's pool.
    id: usize,
    connector: HttpsConnector<HttpConnector>,
}

impl fmt::Debug for HttpsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpsClient({})", self.id)
    }
}

/// An upstream's base: `https://authority` and an optional path prefix (no trailing `/`).
#[derive(Debug, Clone)]
pub struct Base {
    authority: Authority,
    /// `Host` of every request to it.
    host: HeaderValue,
    /// Empty, or `/segment...` without a trailing `/`.
    prefix: Box<str>,
    /// The base as configured, for logs and `Debug`.
    url: reqwest::Url,
}

impl Base {
    /// The base of an `https` URL (see [`base_url`]); `None` for another scheme or a URL without
    /// a host.
    pub(crate) fn of(url: &reqwest::Url) -> Option<Base> {
        if url.scheme() != "https" {
            return None;
        }
        let origin = url.origin().ascii_serialization();
        let authority = Authority::try_from(origin.strip_prefix("https://")?).ok()?;
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        Some(Base {
            authority,
            host,
            prefix: url.path().trim_end_matches('/').into(),
            url: url.clone(),
        })
    }
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.url.as_str())
    }
}

/// Where requests go: a real HTTPS upstream (one base, or the bases of several replicas), or an
/// in-process router (tests, benchmarks).
#[derive(Clone)]
pub enum Target {
    Http {
        client: HttpsClient,
        /// The upstream's bases, in configuration order; never empty.
        bases: Arc<[Base]>,
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
                let list: Vec<&str> = bases.iter().map(|b| b.url.as_str()).collect();
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

/// The origin-form target (what goes on the request line) for `path_and_query` at `base`:
/// the base's prefix with the already validated path appended byte for byte, never resolved
/// against it (ATTACKS A23); the request goes to the base's authority. The path is held to the
/// edge's canonical-target rule once more here (`target::check_path`), so a caller that
/// skipped the routing guard still cannot send a dot segment or an encoded slash; a target
/// `http` would read differently from the bytes given is `None`.
fn upstream_target(base: &Base, path_and_query: &str) -> Option<PathAndQuery> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    crate::net::target::check_path(path).ok()?;
    let pq = if base.prefix.is_empty() {
        PathAndQuery::try_from(path_and_query).ok()?
    } else {
        PathAndQuery::try_from(format!("{}{path_and_query}", base.prefix)).ok()?
    };
    let same = pq.path().strip_prefix(&*base.prefix) == Some(path) && pq.query() == query;
    same.then_some(pq)
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
    /// An `http` base, which [`base_url`] never gives, is left out.
    pub fn http(client: HttpsClient, bases: Vec<reqwest::Url>) -> Option<Target> {
        let bases: Vec<Base> = bases.iter().filter_map(Base::of).collect();
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
                    let target = upstream_target(base, pq).ok_or(SendError::BadTarget)?;
                    let (parts, body) = req.into_parts();
                    return exchange(client, base, target, parts, body, timeout).await;
                }
                // Every base gets the ATTACKS A23 check before anything is sent.
                let targets = bases
                    .iter()
                    .map(|b| upstream_target(b, pq).ok_or(SendError::BadTarget))
                    .collect::<Result<Vec<_>, _>>()?;
                let (parts, body) = req.into_parts();
                let resend = resendable(&parts.method);
                let n = targets.len();
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
                    .zip(targets)
                    .enumerate()
                    .cycle()
                    .skip(start)
                    .take(n);
                for (i, (base, target)) in order {
                    let attempt =
                        exchange(client, base, target, parts.clone(), body.clone(), timeout).await;
                    let failed = match attempt {
                        Ok(resp) => {
                            if i != start {
                                preferred.store(i, Ordering::Relaxed);
                                tracing::info!(upstream = %base, "failed over to another replica");
                            }
                            return Ok(resp);
                        }
                        Err(e) => e,
                    };
                    tracing::debug!(upstream = %base, error = ?failed, "upstream attempt failed");
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

/// One attempt: `parts` (method and headers; a fresh HTTP/1.1 request, see `forward::build`)
/// with `body` to `target` of `base` (checked by [`upstream_target`]), with `base`'s `Host`. `timeout` bounds the whole exchange: the answer's head, then its body as
/// the client reads it (an upstream that stalls mid-body ends the answer with an error rather
/// than holding the client's connection).
async fn exchange(
    client: &HttpsClient,
    base: &Base,
    target: PathAndQuery,
    mut parts: http::request::Parts,
    body: Bytes,
    timeout: Duration,
) -> Result<Response, SendError> {
    parts.uri = http::Uri::from(target);
    parts.headers.insert(header::HOST, base.host.clone());
    let req = http::Request::from_parts(parts, Full::new(body));
    let deadline = tokio::time::Instant::now() + timeout;
    let sent = crate::net::pool::send(client.id, &client.connector, &base.authority, req);
    match tokio::time::timeout_at(deadline, sent).await {
        Err(_) => Err(SendError::Timeout),
        Ok(Err(PoolError::Connect)) => Err(SendError::Refused),
        Ok(Err(PoolError::Exchange)) => Err(SendError::Unreachable),
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                Body::new(DeadlineBody::new(body, deadline)),
            ))
        }
    }
}

pin_project_lite::pin_project! {
    /// An upstream answer's body that fails once the exchange's deadline has passed. The timer
    /// is made only if the body is not all there when first read (most answers are).
    struct DeadlineBody {
        #[pin]
        inner: PooledBody,
        deadline: tokio::time::Instant,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl DeadlineBody {
    fn new(inner: PooledBody, deadline: tokio::time::Instant) -> Self {
        Self {
            inner,
            deadline,
            timer: None,
        }
    }
}

/// The error a [`DeadlineBody`] ends with.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's answer did not arrive in time")]
struct BodyDeadline;

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = *this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyDeadline.into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The upstream client (see the module doc): trusts only the PEM CA bundle at `ca`, gives a
/// TCP connection `connect` to be made, offers the versions `http`, keeps idle connections
/// `pool::UPSTREAM_IDLE_TIMEOUT`.
pub fn https_client(
    ca: &std::path::Path,
    connect: Duration,
    http: UpstreamHttp,
) -> Result<HttpsClient, EdgeError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let pem = std::fs::read(ca).map_err(|e| EdgeError::Config(format!("{}: {e}", ca.display())))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| EdgeError::Tls(format!("{}: {e}", ca.display())))?;
        roots
            .add(cert)
            .map_err(|e| EdgeError::Tls(format!("{}: {e}", ca.display())))?;
    }
    if roots.is_empty() {
        return Err(EdgeError::Tls(format!(
            "{}: no certificate in the bundle",
            ca.display()
        )));
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| EdgeError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only();
    let https = match http {
        UpstreamHttp::Http2OrHttp1 => https.enable_all_versions().wrap_connector(tcp),
        UpstreamHttp::Http1 => https.enable_http1().wrap_connector(tcp),
    };
    static NEXT_ID: AtomicUsize = AtomicUsize::new(0);
    Ok(HttpsClient {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        connector: https,
    })
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

    use http::uri::Scheme;

    /// The whole URI a request for `path_and_query` goes to (see [`upstream_target`]).
    fn upstream_uri(base: &Base, path_and_query: &str) -> Option<http::Uri> {
        http::Uri::builder()
            .scheme(Scheme::HTTPS)
            .authority(base.authority.clone())
            .path_and_query(upstream_target(base, path_and_query)?)
            .build()
            .ok()
    }

    fn endpoint(s: &str) -> Endpoint {
        Endpoint::parse(s).unwrap()
    }

    #[test]
    fn upstream_urls_are_appended_never_resolved() {
        let base = Base::of(&base_url("t", &endpoint("https://127.0.0.3:8444/")).unwrap()).unwrap();
        assert_eq!(
            upstream_uri(&base, "/v1/sessions/current?x=1")
                .unwrap()
                .to_string(),
            "https://127.0.0.3:8444/v1/sessions/current?x=1"
        );
        for bad in [
            "/v1/sessions/../../admin/v1/status",
            "/v1/sessions/%2e%2e/admin",
            "/api/./x",
            "/api//x",
            "/api/%2f",
            "api/x",
            "/api/x y",
        ] {
            assert!(upstream_uri(&base, bad).is_none(), "{bad}");
        }
        let prefixed =
            Base::of(&base_url("t", &endpoint("https://app.internal/cell-03")).unwrap()).unwrap();
        assert_eq!(
            upstream_uri(&prefixed, "/api/routes/today")
                .unwrap()
                .to_string(),
            "https://app.internal/cell-03/api/routes/today"
        );
        assert!(base_url("t", &endpoint("http://x")).is_err());
    }
}
