//! Where a connection stands between its requests, and the read deadline that follows from it
//! (ATTACKS A29, A33):
//!
//! ```text
//!   TLS done ──► waiting for the first request's headers ──(dispatched)──► busy: no read
//!                deadline: header_read_timeout from now                    deadline (a body
//!                                                                          has its own)
//!   HTTP/1.1:  busy ──(last answer ended)──► idle ──(a byte arrives)──► reading headers
//!                                            deadline:                  deadline: header_read_
//!                                            keep_alive_timeout         timeout from that byte
//!   HTTP/2:    after its first request no read deadline (streams share the connection; the
//!              per-address cap bounds how many one address holds)
//! ```
//!
//! A long-poll is a request in flight, so nothing here cuts it. The deadline is enforced where
//! the server reads: [`Phased`] wraps the connection's stream and fails a read that is still
//! waiting when the deadline passes. The server then closes the connection; an idle one closes
//! as if the client had (no answer is owed), one with half a request head is dropped.
//!
//! The header timeout counts from the first byte of a request, not from the end of the last
//! answer: an idle kept-alive connection has [`keep_alive_timeout`](super::Timeouts) (longer than
//! the clients' own idle timeouts, so that a client, not the server, closes an idle connection
//! and no request is ever sent on a connection the server is closing).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// "Not set", for the instants kept as nanoseconds since the connection's start.
const UNSET: u64 = u64::MAX;

/// The phase of one connection, shared by its stream ([`Phased`]) and its requests
/// (`requests::Tracked`).
#[derive(Debug)]
pub(crate) struct Phase {
    /// The end of the TLS handshake.
    origin: Instant,
    /// Whether the connection speaks HTTP/1 (ALPN `http/1.1`, or none): only then do the idle
    /// and later-header deadlines apply.
    http1: bool,
    /// Requests dispatched whose answer has not ended.
    in_flight: AtomicU32,
    /// When the head of the next request began to arrive (nanoseconds since `origin`), or
    /// [`UNSET`]; the start of the connection for its first request.
    head_since: AtomicU64,
    /// When the last answer ended (nanoseconds since `origin`).
    idle_since: AtomicU64,
}

impl Phase {
    /// A connection whose TLS handshake just ended; `http1` unless ALPN chose `h2`.
    pub(crate) fn new(http1: bool) -> Self {
        Self {
            origin: Instant::now(),
            http1,
            in_flight: AtomicU32::new(0),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
        }
    }

    fn since_origin(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(UNSET - 1)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos)
    }

    /// Bytes arrived: on an idle HTTP/1 connection, the next request's head has begun.
    fn bytes_arrived(&self) {
        if self.http1 && self.in_flight.load(Ordering::Acquire) == 0 {
            let now = self.since_origin();
            // Only the first byte of a head starts its clock.
            let _ =
                self.head_since
                    .compare_exchange(UNSET, now, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// A request was dispatched (its head is complete).
    pub(crate) fn dispatched(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(UNSET, Ordering::Release);
    }

    /// A request's answer ended (or the request was dropped).
    pub(crate) fn finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle_since
                .store(self.since_origin(), Ordering::Release);
        }
    }

    /// The instant a read still waiting must fail, if any.
    fn read_deadline(&self, header: Duration, keep_alive: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        match self.head_since.load(Ordering::Acquire) {
            UNSET if self.http1 => {
                Some(self.at(self.idle_since.load(Ordering::Acquire)) + keep_alive)
            }
            UNSET => None,
            head => Some(self.at(head) + header),
        }
    }
}

/// A connection's stream whose reads fail once the [`Phase`] deadline passes.
#[derive(Debug)]
pub struct Phased<S> {
    inner: S,
    phase: std::sync::Arc<Phase>,
    header_timeout: Duration,
    keep_alive_timeout: Duration,
    /// Armed at `armed_for`; allocated on the first wait with a deadline.
    timer: Option<Pin<Box<Sleep>>>,
    armed_for: Option<Instant>,
}

impl<S> Phased<S> {
    pub(crate) fn new(
        inner: S,
        phase: std::sync::Arc<Phase>,
        header_timeout: Duration,
        keep_alive_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            phase,
            header_timeout,
            keep_alive_timeout,
            timer: None,
            armed_for: None,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// `Ready(Err)` once `deadline` has passed, else `Pending` with the timer armed for it.
    fn wait_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if self.armed_for != Some(deadline) {
            timer.as_mut().reset(deadline);
            self.armed_for = Some(deadline);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within the header read or keep-alive timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Phased<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.phase.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let (header, keep_alive) = (self.header_timeout, self.keep_alive_timeout);
                match self.phase.read_deadline(header, keep_alive) {
                    Some(deadline) => self.wait_until(deadline, cx),
                    None => Poll::Pending,
                }
            }
        }
    }
}

super::write_through::write_through!(Phased);

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(10);
    const K: Duration = Duration::from_secs(75);

    #[test]
    fn the_deadline_follows_the_connection_from_request_to_request() {
        let p = Phase::new(true);
        // The first request's headers: from the start.
        assert_eq!(p.read_deadline(H, K), Some(p.origin + H));
        p.dispatched();
        assert_eq!(p.read_deadline(H, K), None, "busy: no read deadline");
        p.finished();
        let idle = p.at(p.idle_since.load(Ordering::Acquire));
        assert_eq!(p.read_deadline(H, K), Some(idle + K), "idle: keep-alive");
        p.bytes_arrived();
        let head = p.at(p.head_since.load(Ordering::Acquire));
        assert_eq!(p.read_deadline(H, K), Some(head + H), "a head began");
        // Later bytes of the same head do not move its clock.
        p.bytes_arrived();
        assert_eq!(p.read_deadline(H, K), Some(head + H));
        p.dispatched();
        p.dispatched();
        p.finished();
        assert_eq!(p.read_deadline(H, K), None, "one request still in flight");
    }

    #[test]
    fn an_http2_connection_has_a_deadline_only_before_its_first_request() {
        let p = Phase::new(false);
        assert_eq!(p.read_deadline(H, K), Some(p.origin + H));
        p.dispatched();
        p.finished();
        p.bytes_arrived();
        assert_eq!(p.read_deadline(H, K), None);
    }
}
