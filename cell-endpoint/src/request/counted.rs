//! The outermost layer of the edge ([`CountLayer`]): counts every request by the [`Outcome`]
//! its answer carries (put there by whoever decided it: `error::rescue` for a refusal, the
//! forwarders for an upstream's answer; none means answered locally) and times it from
//! arrival to the answer's headers. It wraps the inner future without boxing it: the request
//! path pays one clock read and two atomic adds.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use tower::{Layer, Service};

use crate::edge::Edge;
use crate::metrics::Outcome;

/// Counts and times every request of the service it wraps.
#[derive(Debug, Clone)]
pub(crate) struct CountLayer {
    edge: Edge,
}

impl CountLayer {
    pub(crate) fn new(edge: Edge) -> Self {
        Self { edge }
    }
}

impl<S> Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            edge: self.edge.clone(),
            inner,
        }
    }
}

/// A service whose requests are counted ([`CountLayer`]).
#[derive(Debug, Clone)]
pub(crate) struct Counted<S> {
    edge: Edge,
    inner: S,
}

impl<S> Service<Request<Body>> for Counted<S>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        CountedFuture {
            started: Instant::now(),
            edge: Some(self.edge.clone()),
            inner: self.inner.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`Counted`] request: the inner one, counted when it answers.
    #[derive(Debug)]
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        started: Instant,
        // Taken when the answer is counted (a future is never polled after it is ready).
        edge: Option<Edge>,
    }
}

impl<F> Future for CountedFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = std::task::ready!(this.inner.poll(cx));
        if let (Ok(resp), Some(edge)) = (&answer, this.edge.take()) {
            let outcome = resp
                .extensions()
                .get::<Outcome>()
                .copied()
                .unwrap_or(Outcome::Local);
            edge.metrics().request(outcome, this.started.elapsed());
        }
        Poll::Ready(answer)
    }
}
