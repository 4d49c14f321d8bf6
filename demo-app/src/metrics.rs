//! Prometheus metrics (prometheus-client), served on the management listener
//! (`runtime::management`): requests by listener, route and status class, every series
//! labelled with the app's `cell`. The route is the matched route's template
//! (`/api/jobs/{id}/complete`), or `unmatched`: never a request's own path, so the label set
//! stays as small as the router.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use protocol::CellId;
use runtime::access::Listener;

type Labels = [(&'static str, Cow<'static, str>); 3];

/// The `route` of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// The app's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    connections_refused: runtime::listener::RefusedConnections,
}

/// The class of a status: `2xx` … `5xx`.
fn class(status: u16) -> &'static str {
    match status {
        0..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

impl Metrics {
    /// The metrics of cell `cell`'s app.
    pub fn new(cell: &CellId) -> Self {
        let mut registry = Registry::with_prefix_and_labels(
            "cellbind_app",
            [(Cow::Borrowed("cell"), Cow::Owned(cell.to_string()))].into_iter(),
        );
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "requests",
            "Requests by listener, route (the matched route's template) and status class",
            requests.clone(),
        );
        let connections_refused = runtime::listener::RefusedConnections::register(
            &mut registry,
            &["public", "internal", "management"],
        );
        Metrics {
            registry,
            requests,
            connections_refused,
        }
    }

    /// The refused-connections counter of `listener` (`public`, `internal`, `management`).
    pub fn connections_refused(&self, listener: &'static str) -> Counter {
        self.connections_refused.of(listener)
    }

    /// Creates the series of `routes` on `listener` (at zero), so a dashboard sees zeros, not
    /// gaps.
    pub fn expect(&self, listener: Listener, routes: &[&'static str]) {
        for route in routes {
            for c in ["2xx", "4xx", "5xx"] {
                let _ = self.requests.get_or_create(&[
                    ("listener", Cow::Borrowed(listener.as_str())),
                    ("route", Cow::Borrowed(*route)),
                    ("class", Cow::Borrowed(c)),
                ]);
            }
        }
    }

    /// One request on `listener`, matched to `route`, answered with `status`.
    pub fn request(&self, listener: Listener, route: &str, status: u16) {
        self.requests
            .get_or_create(&[
                ("listener", Cow::Borrowed(listener.as_str())),
                ("route", Cow::Owned(route.to_owned())),
                ("class", Cow::Borrowed(class(status))),
            ])
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        runtime::management::exposition(&self.registry)
    }
}

/// Counts every request of `router` (its fallback included) on `listener`.
pub fn counted<S: Clone + Send + Sync + 'static>(
    router: axum::Router<S>,
    listener: Listener,
    metrics: Arc<Metrics>,
) -> axum::Router<S> {
    router.layer(axum::middleware::from_fn_with_state(
        (listener, metrics),
        count,
    ))
}

async fn count(
    State((listener, metrics)): State<(Listener, Arc<Metrics>)>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let resp = next.run(req).await;
    metrics.request(listener, &route, resp.status().as_u16());
    resp
}
