//! Every request of a protected connection ([`Tracked`]): it counts for the connection's
//! [`Phase`] from its dispatch until its answer's body ends, and its body must arrive within the
//! body read timeout (ATTACKS A29: a declared body that never arrives must not hold a
//! connection and a handler).
//!
//! The body's clock starts when the server first waits for body bytes (a handler that reads
//! the body at once: right after the headers), so a request without a body, a long-poll
//! included, never has one. When it runs out, the body read fails and the request is answered
//! `408 INVALID_REQUEST` ("the request body did not arrive in time"), whatever the handler made
//! of the failed read; an HTTP/1.1 connection is closed after that answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body::{Body, Frame, SizeHint};
use protocol::{ErrorBody, ErrorCode};
use tokio::time::Sleep;

use super::phase::Phase;

/// A boxed error, what bodies fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a body that missed the body read timeout fails with.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body did not arrive within the body read timeout")]
pub struct BodyTimedOut;

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
        let (body, timed_out) = RequestBody::new(body, self.body_timeout);
        TrackedFuture {
            inner: self.inner.call(Request::from_parts(parts, body)),
            busy: Some(busy),
            timed_out,
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
        timed_out: Option<Arc<AtomicBool>>,
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
        let resp = match this.inner.poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(resp)) => resp,
        };
        let busy = this.busy.take();
        let late = this
            .timed_out
            .as_ref()
            .is_some_and(|t| t.load(Ordering::Acquire));
        Poll::Ready(Ok(if late {
            body_timeout_answer(*this.http1, busy)
        } else {
            resp.map(|inner| ResponseBody {
                kind: Kind::Inner { inner },
                _busy: busy,
            })
        }))
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
    /// A request body that must arrive within the body read timeout (see the module doc).
    #[derive(Debug)]
    pub struct RequestBody<B> {
        #[pin]
        inner: B,
        clock: Option<BodyClock>,
    }
}

/// The body read timeout of one body that is still to come.
#[derive(Debug)]
struct BodyClock {
    timeout: Duration,
    /// Started at the first wait for body bytes.
    timer: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl<B: Body> RequestBody<B> {
    /// `inner` with the body read timeout `timeout`, and the flag set when it runs out (`None`
    /// for a body that has already ended: nothing to wait for).
    fn new(inner: B, timeout: Duration) -> (Self, Option<Arc<AtomicBool>>) {
        if inner.is_end_stream() {
            return (Self { inner, clock: None }, None);
        }
        let timed_out = Arc::new(AtomicBool::new(false));
        let clock = BodyClock {
            timeout,
            timer: None,
            timed_out: timed_out.clone(),
        };
        (
            Self {
                inner,
                clock: Some(clock),
            },
            Some(timed_out),
        )
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
        let this = self.project();
        if let Some(clock) = this.clock.as_ref()
            && clock.timed_out.load(Ordering::Acquire)
        {
            return Poll::Ready(Some(Err(BodyTimedOut.into())));
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(frame) => return Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {}
        }
        let Some(clock) = this.clock.as_mut() else {
            return Poll::Pending;
        };
        let timeout = clock.timeout;
        let timer = clock
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                clock.timed_out.store(true, Ordering::Release);
                Poll::Ready(Some(Err(BodyTimedOut.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
