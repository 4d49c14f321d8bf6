//! The management listener every server runs beside its public (and internal) ones, the same
//! on all four: `GET /healthz` (200 `ok`: the process answers), `GET /readyz` (200 `ready`, or
//! 503 with the JSON error body saying what is missing) and `GET /metrics` (the server's
//! Prometheus metrics as OpenMetrics text). Every other request is `404 NOT_FOUND`.
//!
//! It serves HTTPS with the server's own certificate and key, on the server's
//! `management_listen` address, loopback by default: metrics and probes never share a listener
//! with client traffic, and a public listener never serves `/metrics`. Like every listener it
//! has the protections of [`crate::listener`] (its own per-address cap,
//! `management_max_connections_per_ip`), so one address holding connections to it cannot keep
//! a liveness probe out (ATTACKS A33). What is ready and what
//! is measured is the server's own business: it hands both in as a [`Probe`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use protocol::{ErrorBody, ErrorCode};

use crate::io::{IoContext as _, IoError};

/// `Content-Type` of `GET /metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text exposition of `registry`, for [`Probe::metrics`] (empty if encoding
/// fails, which writing into a `String` does not).
pub fn exposition(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// What a server tells its management listener: whether it is ready, and its metrics.
pub trait Probe: Send + Sync + 'static {
    /// `Ok` when the server can serve; otherwise the body of the `503` (usually `NOT_READY`,
    /// saying what is missing). Called on every `GET /readyz`: an in-memory check.
    fn readiness(&self) -> Result<(), ErrorBody>;

    /// The metrics in the OpenMetrics text exposition (gauges brought up to date first).
    fn metrics(&self) -> String;
}

/// The management routes over `probe`: `/healthz`, `/readyz`, `/metrics`, and `404` for
/// everything else (any other method on those paths included).
pub fn router(probe: Arc<dyn Probe>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .with_state(probe)
}

/// The management listener's document (`docs/openapi/management.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Cellbind management listener",
        description = "Health, readiness and metrics of every Cellbind server (edge, \
            auth-service, demo app, control plane), on each server's management listener."
    ),
    paths(healthz, readyz, metrics)
)]
#[derive(Debug, Clone, Copy)]
pub struct ManagementApi;

/// Liveness: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "management",
    responses(
        (status = 200, description = "Alive.", body = String, content_type = "text/plain"),
        (status = 404, description = "`NOT_FOUND`: another method than GET.")
    )
)]
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the server can serve (its keys, state or map are held).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "management",
    responses(
        (status = 200, description = "Ready.", body = String, content_type = "text/plain"),
        (status = 404, description = "`NOT_FOUND`: another method than GET."),
        (status = 503, description = "`NOT_READY`: what is missing, in the message.")
    )
)]
async fn readyz(State(probe): State<Arc<dyn Probe>>) -> Response {
    match probe.readiness() {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(body) => crate::answer::error_response(StatusCode::SERVICE_UNAVAILABLE.as_u16(), body),
    }
}

/// The metrics in the OpenMetrics text exposition.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "management",
    responses(
        (status = 200, description = "The metrics.", body = String,
            content_type = "application/openmetrics-text"),
        (status = 404, description = "`NOT_FOUND`: another method than GET.")
    )
)]
async fn metrics(State(probe): State<Arc<dyn Probe>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
        )],
        probe.metrics(),
    )
        .into_response()
}

async fn not_found() -> Response {
    crate::answer::error_response(
        StatusCode::NOT_FOUND.as_u16(),
        ErrorBody::new(ErrorCode::NotFound, "no such route"),
    )
}

/// A bound management listener, not serving yet: servers bind it before anything else starts,
/// so a taken address stops the start-up at once, naming the address.
#[derive(Debug)]
pub struct ManagementListener {
    listener: std::net::TcpListener,
    addr: SocketAddr,
}

impl ManagementListener {
    /// Binds `addr` (port 0: any free port, see [`ManagementListener::local_addr`]).
    pub fn bind(addr: SocketAddr) -> Result<Self, IoError> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("management listener: bind {addr}"))?;
        Self::from_std(listener)
    }

    /// An already bound listener (tests bind port 0 themselves).
    pub fn from_std(listener: std::net::TcpListener) -> Result<Self, IoError> {
        listener
            .set_nonblocking(true)
            .context("management listener: set non-blocking")?;
        let addr = listener
            .local_addr()
            .context("management listener: local address")?;
        Ok(Self { listener, addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves [`router`] over `probe` with `tls` and `protection` until `handle` (or the
    /// control it shares with the server's other listeners) shuts it down.
    pub async fn serve(
        self,
        tls: RustlsConfig,
        handle: Handle<SocketAddr>,
        probe: Arc<dyn Probe>,
        protection: &crate::listener::Protection,
    ) -> Result<(), IoError> {
        let addr = self.addr;
        tracing::info!(%addr, "management listener serving /healthz, /readyz and /metrics");
        crate::listener::https_server(self.listener, tls, protection)
            .with_context(|| format!("management listener {addr}"))?
            .handle(handle)
            .serve(router(probe).into_make_service())
            .await
            .with_context(|| format!("management listener {addr}"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tower::ServiceExt as _;

    struct Fixed {
        ready: bool,
    }

    impl Probe for Fixed {
        fn readiness(&self) -> Result<(), ErrorBody> {
            if self.ready {
                Ok(())
            } else {
                Err(ErrorBody::new(ErrorCode::NotReady, "no keys yet"))
            }
        }
        fn metrics(&self) -> String {
            "# TYPE x counter\nx_total 1\n# EOF\n".into()
        }
    }

    async fn get(ready: bool, method: &str, path: &str) -> (u16, String, Option<String>) {
        let r = router(Arc::new(Fixed { ready }))
            .oneshot(
                axum::http::Request::builder()
                    .method(method)
                    .uri(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), ct)
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics_and_nothing_else() {
        assert_eq!(get(true, "GET", "/healthz").await.1, "ok");
        assert_eq!(get(true, "GET", "/readyz").await.0, 200);
        let (status, body, ct) = get(false, "GET", "/readyz").await;
        assert_eq!(status, 503);
        assert!(
            body.contains("NOT_READY") && body.contains("no keys yet"),
            "{body}"
        );
        assert_eq!(ct.as_deref(), Some("application/json"));
        let (status, body, ct) = get(true, "GET", "/metrics").await;
        assert_eq!(
            (status, body.as_str()),
            (200, "# TYPE x counter\nx_total 1\n# EOF\n")
        );
        assert_eq!(ct.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        for (method, path) in [("GET", "/"), ("GET", "/v1/sessions"), ("POST", "/metrics")] {
            let (status, body, _) = get(true, method, path).await;
            assert_eq!(status, 404, "{method} {path}");
            assert!(body.contains("NOT_FOUND"), "{body}");
        }
    }
}
