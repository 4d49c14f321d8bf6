//! Every request of a protected connection ([`Tracked`]): it counts for the connection's
//! [`Phase`] from its dispatch until its answer's body ends, and its body must arrive within the
//! body read timeout (ATTACKS A29: a declared body that never arrives must not hold a
//! connection and a handler).
//!
//! The body's clock starts when the server first waits for body bytes (a handler that reads
//! the body at once: right after the headers), so a request without a body, a long-poll
//! included, never has one, and it stops when the body has ended (or was dropped). When it runs
//! out, the handler (still waiting for the body) is dropped and the request is answered `408
//! INVALID_REQUEST` ("the request body did not arrive in time"); an HTTP/1.1 connection is
//! closed after that answer. A handler with its own, earlier body deadline (the edge's
//! forwarder) answers first: it is polled before the listener's clock is looked at.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body::{Body, Frame, SizeHint};
use protocol::{ErrorBody, ErrorCode};
use tokio::time::{Instant, Sleep};

use super::phase::Phase;

/// A boxed error, what bodies fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The message of the `408` answered when a body misses its timeout.
pub const BODY_TIMEOUT_MESSAGE: &str = "the request body did not arrive in time";

/// A request counted in its connection's [`Phase`] while its answer is under way.
#[derive(Debug)]
struct Busy(Arc<Phase>);

impl Busy {
    fn new(phase: Arc<Phase>) -> Self {
        phase.dispatched();
        Self(phase)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// The service of a protected connection: wraps the server's own (see the module doc).
#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
    phase: Arc<Phase>,
    body_timeout: Duration,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, phase: Arc<Phase>, body_timeout: Duration) -> Self {
        Self {
            inner,
            phase,
            body_timeout,
        }
    }
}

impl<S, ReqB, ResB> tower::Service<Request<ReqB>> for Tracked<S>
where
    S: tower::Service<Request<RequestBody<ReqB>>, Response = Response<ResB>>,
    ReqB: Body,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let busy = Busy::new(self.phase.clone());
        let http1 = req.version() < Version::HTTP_2;
        let (parts, body) = req.into_parts();
        let (body, watch) = RequestBody::new(body, self.body_timeout);
        TrackedFuture {
            inner: self.inner.call(Request::from_parts(parts, body)),
            busy: Some(busy),
            watch,
            timer: None,
            http1,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a [`Tracked`] request.
    #[derive(Debug)]
    pub struct TrackedFuture<F> {
        #[pin]
        inner: F,
        busy: Option<Busy>,
        // The request body's clock (none without a body).
        watch: Option<Arc<BodyWatch>>,
        // Armed at the body's deadline once its clock runs.
        timer: Option<Pin<Box<Sleep>>>,
        http1: bool,
    }
}

impl<F, ResB, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.poll(cx) {
            Poll::Ready(Ok(resp)) => {
                let busy = this.busy.take();
                return Poll::Ready(Ok(resp.map(|inner| ResponseBody {
                    kind: Kind::Inner { inner },
                    _busy: busy,
                })));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        let Some(deadline) = this.watch.as_ref().and_then(|w| w.deadline()) else {
            return Poll::Pending;
        };
        // A started clock's deadline never moves.
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Ok(body_timeout_answer(*this.http1, this.busy.take())))
    }
}

/// `408 INVALID_REQUEST` (the JSON error body), closing an HTTP/1 connection after it.
fn body_timeout_answer<B>(http1: bool, busy: Option<Busy>) -> Response<ResponseBody<B>> {
    let body = ErrorBody::new(ErrorCode::InvalidRequest, BODY_TIMEOUT_MESSAGE);
    let bytes = serde_json::to_vec(&body)
        .map(Bytes::from)
        .unwrap_or_default();
    let mut resp = Response::new(ResponseBody {
        kind: Kind::Answer { bytes: Some(bytes) },
        _busy: busy,
    });
    *resp.status_mut() = StatusCode::REQUEST_TIMEOUT;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if http1 {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

pin_project_lite::pin_project! {
    /// The body of an answer: the server's own, or the 408 of a body that missed its timeout.
    /// The request stays counted as in flight until it is dropped.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        _busy: Option<Busy>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] inner: B },
        Answer { bytes: Option<Bytes> },
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            KindProj::Inner { inner } => inner.poll_frame(cx).map_err(Into::into),
            KindProj::Answer { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { inner } => inner.is_end_stream(),
            Kind::Answer { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { inner } => inner.size_hint(),
            Kind::Answer { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body whose reads start and stop its clock (see the module doc).
    #[derive(Debug)]
    pub struct RequestBody<B> {
        #[pin]
        inner: B,
        watch: Option<WatchGuard>,
        timeout: Duration,
    }
}

/// The clock of one request body, shared by the body and its request's future.
#[derive(Debug, Default)]
struct BodyWatch(Mutex<Watch>);

#[derive(Debug, Default)]
struct Watch {
    /// Set at the first wait for body bytes.
    deadline: Option<Instant>,
    /// The body ended, failed or was dropped: no deadline any more.
    done: bool,
}

impl BodyWatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        // One field set at a time under the lock: a poisoned lock is whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The server waits for body bytes: the clock starts, unless it already runs or stopped.
    fn waiting(&self, timeout: Duration) {
        let mut w = self.lock();
        if !w.done && w.deadline.is_none() {
            w.deadline = Some(Instant::now() + timeout);
        }
    }

    fn done(&self) {
        self.lock().done = true;
    }

    /// The deadline of a clock that runs.
    fn deadline(&self) -> Option<Instant> {
        let w = self.lock();
        if w.done { None } else { w.deadline }
    }
}

/// Stops the clock when the body is dropped.
#[derive(Debug)]
struct WatchGuard(Arc<BodyWatch>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.done();
    }
}

impl<B: Body> RequestBody<B> {
    /// `inner` with the body read timeout `timeout`, and its clock (`None` for a body that
    /// has already ended: nothing to wait for).
    fn new(inner: B, timeout: Duration) -> (Self, Option<Arc<BodyWatch>>) {
        if inner.is_end_stream() {
            let body = Self {
                inner,
                watch: None,
                timeout,
            };
            return (body, None);
        }
        let watch = Arc::new(BodyWatch::default());
        let body = Self {
            inner,
            watch: Some(WatchGuard(watch.clone())),
            timeout,
        };
        (body, Some(watch))
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        if let Some(WatchGuard(watch)) = this.watch.as_ref() {
            match &polled {
                Poll::Pending => watch.waiting(*this.timeout),
                Poll::Ready(None | Some(Err(_))) => watch.done(),
                // The last frame of a body of known length: the reader need not poll again.
                Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => watch.done(),
                Poll::Ready(Some(Ok(_))) => {}
            }
        }
        polled.map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
