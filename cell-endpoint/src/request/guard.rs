//! The edge's one kind of tower layer: a [`Guard`] looks at a request before the inner
//! service does and either passes it on, answers it itself, or (rarely) needs to wait before
//! deciding. Every check the edge makes in front of its routes (browser rules, per-IP rate
//! limit, canonical targets, session validation) is a guard, wrapped by [`GuardLayer`]; what
//! each does and why it sits where it does is said where the layers are composed (`service`).
//!
//! The common case costs nothing: a guard that decides synchronously and passes the request
//! untouched returns the inner service's own future (no allocation, no extra await). Only an
//! answer that must be finished ([`Check::Finish`]) or a decision that must wait
//! ([`Check::Wait`]) is boxed.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use futures::future::Either;
use tower::{Layer, Service};

/// A decision that could not be taken at once: the request to pass on, or the answer.
pub(crate) type Deferred = Pin<Box<dyn Future<Output = Result<Request<Body>, Response>> + Send>>;

/// What a guard decided about one request.
pub(crate) enum Check<N> {
    /// Pass the request to the inner service; its answer goes out untouched.
    Pass(Request<Body>),
    /// Pass the request on, then hand the answer and the note to [`Guard::finish`].
    Finish(Request<Body>, N),
    /// Answer here; the inner service never sees the request.
    Answer(Response),
    /// Decide after waiting (e.g. for a key refetch): pass the request on or answer.
    Wait(Deferred),
}

impl<N> std::fmt::Debug for Check<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Check::Pass(_) => "Pass",
            Check::Finish(..) => "Finish",
            Check::Answer(_) => "Answer",
            Check::Wait(_) => "Wait",
        })
    }
}

/// One check in front of the edge's routes.
pub(crate) trait Guard: Clone + Send + Sync + 'static {
    /// What [`Check::Finish`] carries to [`Guard::finish`].
    type Note: Send + 'static;

    /// Looks at a request and decides (see [`Check`]).
    fn check(&self, req: Request<Body>) -> Check<Self::Note>;

    /// Finishes the answer to a request passed on with [`Check::Finish`].
    fn finish(&self, _note: Self::Note, resp: Response) -> Response {
        resp
    }
}

/// Wraps a service in a [`Guard`].
#[derive(Debug, Clone)]
pub(crate) struct GuardLayer<G> {
    guard: G,
}

impl<G> GuardLayer<G> {
    pub(crate) fn new(guard: G) -> Self {
        Self { guard }
    }
}

impl<G: Clone, S> Layer<S> for GuardLayer<G> {
    type Service = GuardService<G, S>;
    fn layer(&self, inner: S) -> Self::Service {
        GuardService {
            guard: self.guard.clone(),
            inner,
        }
    }
}

/// A service behind a [`Guard`].
#[derive(Debug, Clone)]
pub(crate) struct GuardService<G, S> {
    guard: G,
    inner: S,
}

type Boxed = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<G, S> Service<Request<Body>> for GuardService<G, S>
where
    G: Guard,
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future =
        Either<S::Future, Either<std::future::Ready<Result<Response, Infallible>>, Boxed>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        // The ready service is the one we were polled for; keep the clone for next time.
        let mut inner = std::mem::replace(&mut self.inner, clone);
        match self.guard.check(req) {
            Check::Pass(req) => Either::Left(inner.call(req)),
            Check::Answer(resp) => Either::Right(Either::Left(std::future::ready(Ok(resp)))),
            Check::Finish(req, note) => {
                let guard = self.guard.clone();
                Either::Right(Either::Right(Box::pin(async move {
                    Ok(guard.finish(note, inner.call(req).await?))
                })))
            }
            Check::Wait(decision) => Either::Right(Either::Right(Box::pin(async move {
                match decision.await {
                    Ok(req) => inner.call(req).await,
                    Err(resp) => Ok(resp),
                }
            }))),
        }
    }
}
