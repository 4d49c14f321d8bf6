//! The access log of a server's listeners: one line per request, the same on every server, so
//! operators and tests read them alike (tests grep them to prove what a refused request did
//! *not* reach):
//!
//! ```text
//! ... INFO access: request listener="public" method=GET path=/api/routes/today status=200 elapsed_us=57 peer=Some(127.0.0.1:50412)
//! ```
//!
//! The path never carries the query string (it could hold something secret); no header and no
//! body is logged.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// Target of the access log lines.
pub const ACCESS_LOG_TARGET: &str = "access";

/// Which listener answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `listen`: what the cell's edge forwards public traffic to.
    Public,
    /// `internal_listen`: admin, internal and migration routes, metrics; never forwarded to.
    Internal,
}

impl Listener {
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Public => "public",
            Listener::Internal => "internal",
        }
    }
}

/// Adds the access log to every route of `router` (its fallback included).
pub fn logged<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    listener: Listener,
) -> Router<S> {
    router.layer(axum::middleware::from_fn_with_state(listener, access_log))
}

async fn access_log(State(listener): State<Listener>, req: Request, next: Next) -> Response {
    let t0 = std::time::Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let resp = next.run(req).await;
    tracing::info!(
        target: ACCESS_LOG_TARGET,
        listener = listener.as_str(),
        method = %method,
        path = %path,
        status = resp.status().as_u16(),
        elapsed_us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX),
        peer = ?peer,
        "request"
    );
    resp
}
