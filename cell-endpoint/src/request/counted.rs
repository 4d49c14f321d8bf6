//! The outermost layer of the edge ([`CountLayer`]): counts every request by the [`Outcome`]
//! its answer carries (put there by whoever decided it: `error::rescue` for a refusal, the
//! forwarders for an upstream's answer; none means answered locally) and times it from
//! arrival to the answer's headers. It wraps the inner future without boxing it: the request
//! path pays one clock read, one header lookup and two atomic adds.
//!
//! A request counts as a game day's synthetic traffic (the `synthetic` label, `metrics`) when
//! its answer carries [`Synthetic`] (put there by whoever read its session: the session's
//! contractor is in the reserved range), or when it carries no session and says so with
//! `x-cellbind-synthetic: 1` (a sign-in), which is read here, on arrival.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request};
use axum::response::Response;
use protocol::http::{Presented, SYNTHETIC_HEADER};
use tower::{Layer, Service};

use crate::edge::Edge;
use crate::metrics::{Outcome, Synthetic};

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
        let started = Instant::now();
        let says_synthetic = says_synthetic(req.headers());
        CountedFuture {
            started,
            says_synthetic,
            edge: Some(self.edge.clone()),
            inner: self.inner.call(req),
        }
    }
}

/// `x-cellbind-synthetic`, parsed once.
const SYNTHETIC: HeaderName = HeaderName::from_static(SYNTHETIC_HEADER);

/// Whether a request says it is synthetic traffic: `x-cellbind-synthetic: 1`, and no session
/// (neither an `Authorization` header nor a session cookie: a session's request is synthetic
/// by its contractor alone, whatever it says). The credentials are only looked at when the
/// header is there.
fn says_synthetic(headers: &HeaderMap) -> bool {
    headers
        .get(&SYNTHETIC)
        .is_some_and(|v| v.as_bytes() == b"1")
        && {
            let presented = Presented::from_headers(headers);
            presented.authorization.is_none() && presented.cookie.is_none()
        }
}

pin_project_lite::pin_project! {
    /// The future of a [`Counted`] request: the inner one, counted when it answers.
    #[derive(Debug)]
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        started: Instant,
        // The request carried no session and `x-cellbind-synthetic: 1` (`says_synthetic`).
        says_synthetic: bool,
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
            let synthetic = *this.says_synthetic || resp.extensions().get::<Synthetic>().is_some();
            edge.metrics()
                .request(outcome, synthetic, this.started.elapsed());
        }
        Poll::Ready(answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_a_session_less_request_says_it_is_synthetic() {
        assert!(says_synthetic(&headers(&[("x-cellbind-synthetic", "1")])));
        assert!(says_synthetic(&headers(&[
            ("x-cellbind-synthetic", "1"),
            ("cookie", "theme=dark"),
        ])));
        for not in [
            &[][..],
            &[("x-cellbind-synthetic", "0")][..],
            &[("x-cellbind-synthetic", "true")][..],
            &[("x-cellbind-synthetic", "")][..],
            // A session's request is synthetic by its contractor, never by the header.
            &[("x-cellbind-synthetic", "1"), ("authorization", "Bearer t")][..],
            &[("x-cellbind-synthetic", "1"), ("authorization", "Basic x")][..],
            &[
                ("x-cellbind-synthetic", "1"),
                ("cookie", "__Host-cellbind_session=t"),
            ][..],
        ] {
            assert!(!says_synthetic(&headers(not)), "{not:?}");
        }
    }
}
