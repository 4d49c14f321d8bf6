//! The edge's upstream connections over rustls, per serving thread and destination: one
//! shared HTTP/2 connection when the upstream chose HTTP/2 in the TLS handshake (every request
//! of the thread is a stream on it; an answer dropped early resets its stream only), else
//! HTTP/1.1 connections kept alive and reused, one request at a time:
//!
//! ```text
//!   connect (TCP, TLS, HTTP/1.1) ──► busy ──(the answer's body ends)──► idle ──(checkout)──► busy
//!                                     │                                   │
//!                                     └─(body dropped early, error)       ├─(the peer closed it)
//!                                                  │                      ├─(idle > UPSTREAM_IDLE_TIMEOUT)
//!                                                  ▼                      ▼
//!                                               closed ◄──────────────────┘ (also over the idle cap)
//!
//!   connect (TCP, TLS, HTTP/2) ──► shared by the thread's requests ──(closed, GOAWAY)──► forgotten
//!                                                                     (the next request connects)
//! ```
//!
//! Why not hyper-util's pooled client: per request it
//! locks a pool shared by every thread, hashes the destination, races a checkout against a
//! lazily built connect future, and spawns a task that waits for the connection to come back
//! idle. Here the thread that serves a request owns its idle connections (a `Vec` per
//! destination, no lock: the edge serves each connection on one thread, `tls::serve_per_core`),
//! takes the most recently used one, and puts it back when the answer's body has ended,
//! without a task. A connection whose answer was not read to the end is closed, never reused.
//!
//! A request that never left (its connection turned out closed when it was handed the
//! request) is sent again on another connection, as hyper-util's client does; so is, once, a request
//! whose HTTP/2 stream the upstream refused unprocessed (a GOAWAY that did not count it,
//! `REFUSED_STREAM`); a request that may have reached the upstream never is (the failover
//! rules are `upstream::Target::send`'s).

use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Authority;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::client::conn::http2;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection as _, HttpConnector};
use tower::ServiceExt as _;

/// How long an idle upstream connection is kept for reuse.
pub(crate) const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times one request is sent again after an HTTP/2 upstream refused its stream
/// unprocessed (a GOAWAY that did not count it, or `REFUSED_STREAM`): once, on another
/// connection; an upstream refusing that one too is going away, and the failover rules take it.
pub(crate) const REFUSED_RESENDS: u32 = 1;
/// Most idle connections kept per serving thread and destination (more are closed when their
/// answer ends): a burst's connections are not all held afterwards.
pub(crate) const MAX_IDLE_PER_DESTINATION: usize = 256;

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolError {
    /// No connection could be made (refused, unreachable, TLS refused), or an HTTP/2 upstream
    /// refused the request unprocessed (again, after [`REFUSED_RESENDS`]): nothing reached it.
    Connect,
    /// The connection failed after the request may have been sent.
    Exchange,
}

/// One destination's idle connection.
struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

/// The idle connections of one client (`id`) to one destination.
struct Destination {
    client: usize,
    authority: Authority,
    idle: Vec<Idle>,
    /// This thread's HTTP/2 connection to the destination, when it chose HTTP/2: every
    /// request of the thread shares it.
    shared: Option<http2::SendRequest<Full<Bytes>>>,
}

/// A connection a request can be sent on.
enum Sender {
    /// HTTP/1.1: one request at a time, the connection is the request's until its answer ends.
    Exclusive(SendRequest<Full<Bytes>>),
    /// HTTP/2: shared by every request of the thread.
    Shared(http2::SendRequest<Full<Bytes>>),
}

std::thread_local! {
    /// This thread's upstream connections: a handful of destinations (the app, each
    /// auth-service replica), so a linear search.
    static IDLE: RefCell<Vec<Destination>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's entry for `client` and `authority` (made on first use). `None`
/// while the thread is ending (its thread-local is gone: a body dropped then just closes its
/// connection) or if the table is already in use on this thread (nothing `f` drops puts a
/// connection back, so that would be a bug, met with a new connection, not a panic).
fn with_destination<T>(
    client: usize,
    authority: &Authority,
    f: impl FnOnce(&mut Destination) -> T,
) -> Option<T> {
    IDLE.try_with(|cell| {
        let mut dests = cell.try_borrow_mut().ok()?;
        let i = match dests
            .iter()
            .position(|d| d.client == client && d.authority == *authority)
        {
            Some(i) => i,
            None => {
                dests.push(Destination {
                    client,
                    authority: authority.clone(),
                    idle: Vec::new(),
                    shared: None,
                });
                dests.len() - 1
            }
        };
        Some(f(&mut dests[i]))
    })
    .ok()
    .flatten()
}

/// A connection this thread already has to `authority`: its live HTTP/2 one (a closed one is
/// forgotten), else its most recently used live idle HTTP/1.1 one (closing any found closed
/// or idle too long on the way).
fn reusable(client: usize, authority: &Authority) -> Option<Sender> {
    with_destination(client, authority, |dest| {
        match &dest.shared {
            Some(s) if !s.is_closed() => return Some(Sender::Shared(s.clone())),
            Some(_) => dest.shared = None,
            None => {}
        }
        let now = Instant::now();
        while let Some(idle) = dest.idle.pop() {
            if !idle.sender.is_closed() && now.duration_since(idle.since) <= UPSTREAM_IDLE_TIMEOUT {
                return Some(Sender::Exclusive(idle.sender));
            }
        }
        None
    })
    .flatten()
}

/// Forgets this thread's HTTP/2 connection to `authority` (found closing): requests already
/// on it finish there, the next one makes a new connection.
fn unshare(client: usize, authority: &Authority) {
    with_destination(client, authority, |dest| dest.shared = None);
}

/// Keeps `sender` as this thread's HTTP/2 connection to `authority`.
fn share(client: usize, authority: &Authority, sender: &http2::SendRequest<Full<Bytes>>) {
    with_destination(client, authority, |dest| dest.shared = Some(sender.clone()));
}

/// Puts a connection whose answer has ended back with this thread's idle ones; the oldest
/// go first when they are too old or too many.
fn checkin(back: Checkin) {
    let Checkin {
        client,
        authority,
        sender,
    } = back;
    if sender.is_closed() {
        return;
    }
    with_destination(client, &authority, |dest| {
        let now = Instant::now();
        let idle = &mut dest.idle;
        let stale = idle
            .iter()
            .take_while(|c| now.duration_since(c.since) > UPSTREAM_IDLE_TIMEOUT)
            .count();
        idle.drain(..stale);
        if idle.len() >= MAX_IDLE_PER_DESTINATION {
            idle.remove(0);
        }
        idle.push(Idle { sender, since: now });
    });
}

/// Sends `req` (origin-form target, `Host` set) to `authority` on a pooled connection or a
/// new one made with `connector`. The answer's body puts the connection back when it ends.
pub(crate) async fn send(
    client: usize,
    connector: &HttpsConnector<HttpConnector>,
    authority: &Authority,
    mut req: http::Request<Full<Bytes>>,
) -> Result<http::Response<PooledBody>, PoolError> {
    let mut resends = REFUSED_RESENDS;
    loop {
        let (sender, reused) = match reusable(client, authority) {
            Some(sender) => (sender, true),
            None => (connect(client, connector, authority).await?, false),
        };
        let sent = match sender {
            Sender::Shared(mut sender) => {
                if sender.ready().await.is_err() {
                    // Closing (the upstream said GOAWAY, or the connection failed): the next
                    // request of the thread makes a new one.
                    unshare(client, authority);
                    if reused {
                        continue;
                    }
                    return Err(PoolError::Connect);
                }
                // HTTP/2 names the scheme and authority in the request itself (`:scheme`,
                // `:authority`; `Host`, the same authority, stays).
                if req.uri().authority().is_none() {
                    let mut parts = std::mem::take(req.uri_mut()).into_parts();
                    parts.scheme = Some(http::uri::Scheme::HTTPS);
                    parts.authority = Some(authority.clone());
                    *req.uri_mut() =
                        http::Uri::from_parts(parts).map_err(|_| PoolError::Connect)?;
                }
                *req.version_mut() = http::Version::HTTP_2;
                // Kept until the answer's head comes: an upstream that is going away may refuse
                // the stream unprocessed, and then the request is sent again.
                let again = (resends > 0).then(|| copy_of(&req));
                match sender.try_send_request(req).await {
                    Ok(resp) => Ok(resp.map(|body| PooledBody {
                        inner: body,
                        back: None,
                    })),
                    Err(e) if e.message().is_none() && refused_unprocessed(e.error()) => {
                        unshare(client, authority);
                        let Some(again) = again else {
                            // Refused again: nothing reached the app (the failover rules may
                            // try another replica).
                            return Err(PoolError::Connect);
                        };
                        tracing::debug!("upstream refused a stream unprocessed: sent again");
                        resends -= 1;
                        req = again;
                        continue;
                    }
                    // Given back unsent, or failed after it may have been processed: the
                    // rules below.
                    Err(e) => Err(e),
                }
            }
            Sender::Exclusive(mut sender) => {
                if sender.ready().await.is_err() {
                    if reused {
                        continue;
                    }
                    return Err(PoolError::Connect);
                }
                // (A request that found a shared HTTP/2 connection closed and comes here keeps
                // its absolute target: HTTP/1.1 servers accept the absolute form.)
                *req.version_mut() = http::Version::HTTP_11;
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        let back = Checkin {
                            client,
                            authority: authority.clone(),
                            sender,
                        };
                        Ok(resp.map(|body| PooledBody {
                            inner: body,
                            back: Some(back),
                        }))
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match sent {
            Ok(resp) => return Ok(resp),
            Err(mut e) => match e.take_message() {
                // Never written: the connection was found closed. Another one is tried (a new
                // one at the latest, when every idle one was closed).
                Some(unsent) if reused => {
                    unshare(client, authority);
                    req = unsent;
                }
                Some(_) => return Err(PoolError::Connect),
                None => {
                    tracing::debug!(error = %e.into_error(), "upstream exchange failed");
                    return Err(PoolError::Exchange);
                }
            },
        }
    }
}

/// Whether an HTTP/2 exchange failed because the upstream refused the request's stream
/// without processing it (RFC 9113 §8.7): the stream was above the last one a GOAWAY counted
/// (or opened after it), or was reset with `REFUSED_STREAM`. Nothing of the request reached
/// the app, so it can be sent again whatever its method. A stream the upstream may have
/// started (at or below the GOAWAY's count, then cut by the connection closing) fails with
/// another error and is never sent again.
fn refused_unprocessed(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM));
        }
        source = s.source();
    }
    false
}

/// A copy of a request about to be sent as an HTTP/2 stream (the body is shared bytes).
fn copy_of(req: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut copy = http::Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// A new connection to `authority`: TCP, TLS (the connector's trust), then the HTTP/2
/// handshake if the TLS handshake chose `h2` (the connection becomes the thread's shared one),
/// else HTTP/1.1; the connection's task runs on this thread's runtime.
async fn connect(
    client: usize,
    connector: &HttpsConnector<HttpConnector>,
    authority: &Authority,
) -> Result<Sender, PoolError> {
    let uri = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTPS)
        .authority(authority.clone())
        .path_and_query("/")
        .build()
        .map_err(|_| PoolError::Connect)?;
    let io = connector.clone().oneshot(uri).await.map_err(|e| {
        tracing::debug!(error = %e, upstream = %authority, "upstream connect failed");
        PoolError::Connect
    })?;
    if io.connected().is_negotiated_h2() {
        let (sender, conn) = http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .map_err(|_| PoolError::Connect)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection closed");
            }
        });
        share(client, authority, &sender);
        return Ok(Sender::Shared(sender));
    }
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| PoolError::Connect)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection closed");
        }
    });
    Ok(Sender::Exclusive(sender))
}

/// What a finished answer gives back to the pool.
struct Checkin {
    client: usize,
    authority: Authority,
    sender: SendRequest<Full<Bytes>>,
}

pin_project_lite::pin_project! {
    /// An upstream answer's body; when it has been read to its end, its connection goes back to
    /// the pool (dropped earlier, the connection closes).
    pub struct PooledBody {
        #[pin]
        inner: Incoming,
        back: Option<Checkin>,
    }

    impl PinnedDrop for PooledBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // A body with nothing more to read (its last frame read, or none at all, as for a
            // `204` or a `HEAD`) leaves its connection reusable; any other closes it.
            if http_body::Body::is_end_stream(&*this.inner)
                && let Some(back) = this.back.take()
            {
                checkin(back);
            }
        }
    }
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PooledBody")
    }
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none()
            && let Some(back) = this.back.take()
        {
            checkin(back);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
