//! State sync: long-polls the auth-service feed and applies what it answers, in sequence
//! order, into a new immutable view; persists each change as the last-known-good copy.
//! Failures back off from 1 s to 5 min with jitter and keep serving what is held, except
//! when no replica of the auth-service accepts a connection: then the next try is within
//! [`REFUSED_RETRY_MAX`], so an auth-service restarted (after a restore, say) is seen within
//! seconds. After a restore the revocations carried over are handed back (`reapply`).

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBuilder};
use http::header;
use protocol::feed::{FEED_PATH, FeedResponse};

use crate::edge::{Applied, Edge};
use crate::error::EdgeError;
use crate::held::state::CellState;
use crate::net::upstream::SendError;

/// First retry delay after a failed sync.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Longest retry delay while no replica of the auth-service accepts a connection.
pub(crate) const REFUSED_RETRY_MAX: Duration = Duration::from_secs(2);
/// Shortest such delay (the retry is jittered between the two).
pub(crate) const REFUSED_RETRY_MIN: Duration = Duration::from_millis(500);
/// Extra time allowed over the long-poll wait before a feed request is abandoned.
pub(crate) const FEED_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);
/// Largest feed answer read, in bytes.
pub(crate) const MAX_FEED_BYTES: usize = 64 * 1024 * 1024;

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `&epoch=<held epoch>` when one is held: an auth-service of another epoch (restored) then
/// answers a snapshot at once rather than a delta the edge would refuse.
fn epoch_param(held: Option<&CellState>) -> String {
    match held {
        Some(s) if !s.epoch.is_empty() => format!("&epoch={}", query_escape(&s.epoch)),
        _ => String::new(),
    }
}

/// One feed request.
pub async fn fetch(edge: &Edge, since: u64, wait_ms: u64) -> Result<FeedResponse, EdgeError> {
    let held = edge.current();
    let path = format!(
        "{FEED_PATH}?since={since}&instance={}&wait_ms={wait_ms}{}{}",
        query_escape(&edge.settings().instance_id),
        epoch_param(held.as_deref()),
        crate::held::drain::busy_param(&edge.in_flight().busy_in_handoff(held.as_deref()))
    );
    let auth = edge.upstreams().feed_authorization()?;
    let req = http::Request::builder()
        .method(http::Method::GET)
        .uri(path)
        .header(header::AUTHORIZATION, auth)
        .body(bytes::Bytes::new())
        .map_err(|e| EdgeError::Upstream(e.to_string()))?;
    let timeout = Duration::from_millis(wait_ms) + FEED_TIMEOUT_MARGIN;
    let resp = edge
        .upstreams()
        .feed
        .send(req, timeout)
        .await
        .map_err(|e| match e {
            SendError::Refused => EdgeError::UpstreamRefused("feed".into()),
            e => EdgeError::Upstream(format!("feed: {e:?}")),
        })?;
    if !resp.status().is_success() {
        return Err(EdgeError::Upstream(format!(
            "feed answered {}",
            resp.status()
        )));
    }
    let body = tokio::time::timeout(
        timeout,
        axum::body::to_bytes(resp.into_body(), MAX_FEED_BYTES),
    )
    .await
    .map_err(|_| EdgeError::Upstream("feed body timed out".into()))?
    .map_err(|e| EdgeError::Upstream(format!("feed body: {e}")))?;
    serde_json::from_slice(&body).map_err(|e| {
        edge.metrics().feed_rejected();
        EdgeError::Feed(format!("not a feed document: {e}"))
    })
}

/// One immediate sync (no long-poll), e.g. after an unknown kid.
pub async fn fetch_once(edge: &Edge) -> Result<(), EdgeError> {
    let since = edge.current().map_or(0, |s| s.seq);
    let resp = fetch(edge, since, 0).await?;
    settle(edge, edge.apply_feed(since, resp)?).await;
    Ok(())
}

/// Hands carried revocations back (in the background) and persists the new view, if any.
async fn settle(edge: &Edge, applied: Applied) {
    if let Some(restored) = applied.restored {
        crate::feed::reapply::spawn(edge, restored);
    }
    let Some(next) = applied.changed else { return };
    tracing::debug!(seq = next.seq, "applied the cell state feed");
    edge.persist(next).await;
}

fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(BACKOFF_MIN)
        .with_max_delay(BACKOFF_MAX)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The delay before the next try when no replica accepted a connection: jittered, at most
/// [`REFUSED_RETRY_MAX`].
fn refused_delay() -> Duration {
    let ms = rand::random_range(
        REFUSED_RETRY_MIN.as_millis() as u64..=REFUSED_RETRY_MAX.as_millis() as u64,
    );
    Duration::from_millis(ms)
}

/// The long-poll wait actually asked for: at most half the write lease, so a healthy feed
/// renews the lease before it lapses even when nothing changes.
pub(crate) fn effective_wait_ms(wait_ms: u64, lease: Duration) -> u64 {
    if lease.is_zero() {
        return wait_ms;
    }
    wait_ms.min(lease.as_millis() as u64 / 2)
}

/// The sync loop. Never returns.
pub(crate) async fn run(edge: Edge, wait_ms: u64) {
    let wait_ms = crate::held::revocation_freshness::effective_wait_ms(
        effective_wait_ms(wait_ms, edge.settings().serving.write_lease()),
        edge.settings().serving.revocation_max_age(),
    );
    let mut delays = backoff();
    let mut want_snapshot = false;
    // The first request after a start or a failure does not wait: its answer renews the write
    // lease at once, where a long poll would hold it (and every write) until the poll's end —
    // up to half the lease after the auth-service came back (found by `cellctl gameday`'s
    // `edge-restart-offline`).
    let mut renew_now = true;
    loop {
        let since = if want_snapshot {
            0
        } else {
            edge.current().map_or(0, |s| s.seq)
        };
        let wait = if renew_now { 0 } else { wait_ms };
        // A contractor reported busy drained: report again now rather than after the poll.
        let fetched = tokio::select! {
            r = fetch(&edge, since, wait) => Some(r),
            () = edge.in_flight().drained() => None,
        };
        let Some(fetched) = fetched else { continue };
        let outcome = match fetched {
            Ok(resp) => edge.apply_feed(since, resp),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(applied) => {
                delays = backoff();
                want_snapshot = false;
                renew_now = false;
                settle(&edge, applied).await;
            }
            Err(e) => {
                renew_now = true;
                if matches!(e, EdgeError::Feed(_)) {
                    // Refused document (gap, rollback, bad key…): keep the last-known-good
                    // view and ask for a whole snapshot next time.
                    want_snapshot = true;
                }
                let delay = if matches!(e, EdgeError::UpstreamRefused(_)) {
                    refused_delay()
                } else {
                    delays.next().unwrap_or(BACKOFF_MAX)
                };
                tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "feed sync failed; serving the held state");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_escaped_in_the_query() {
        assert_eq!(query_escape("edge-1"), "edge-1");
        assert_eq!(query_escape("edge 1&since=0"), "edge%201%26since%3D0");
    }

    #[test]
    fn a_refused_feed_is_retried_within_two_seconds() {
        for _ in 0..100 {
            let d = refused_delay();
            assert!(
                (REFUSED_RETRY_MIN..=REFUSED_RETRY_MAX).contains(&d),
                "{d:?}"
            );
        }
    }

    #[test]
    fn the_long_poll_never_outlasts_half_the_lease() {
        assert_eq!(effective_wait_ms(20_000, Duration::from_secs(30)), 15_000);
        assert_eq!(effective_wait_ms(20_000, Duration::ZERO), 20_000);
        assert_eq!(effective_wait_ms(300, Duration::from_secs(2)), 300);
    }
}
