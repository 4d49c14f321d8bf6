//! `GET /internal/v1/feed?since=SEQ&instance=ID&wait_ms=MS` (bearer feed token): the cell state
//! feed, as a delta after `since` or a snapshot, with long-polling.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use protocol::feed::{FEED_SCHEMA, FeedBody, FeedResponse, Snapshot};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::http::FeedReader;
use crate::state::AppState;

/// Longest long-poll, in milliseconds.
pub const MAX_WAIT_MS: u64 = 25_000;
/// Most entries in one delta; the instance asks again for the rest.
pub const MAX_DELTA_ENTRIES: usize = 1_000;
/// Longest instance id, in bytes.
pub const MAX_INSTANCE_ID_BYTES: usize = 64;

/// Query of the feed.
#[derive(Debug, Deserialize)]
pub struct FeedQuery {
    #[serde(default)]
    pub since: u64,
    pub instance: String,
    #[serde(default)]
    pub wait_ms: u64,
    /// Comma-separated contractors in handoff with writes still in flight at the instance.
    #[serde(default)]
    pub busy: Option<String>,
}

/// The answer for an instance that has applied `since`.
pub fn response(state: &AppState, since: u64) -> FeedResponse {
    let inner = state.read();
    let head = inner.head;
    let oldest = inner.log.front().map_or(head + 1, |e| e.seq);
    let body = if since == 0 || since > head || since + 1 < oldest {
        FeedBody::Snapshot {
            snapshot: Box::new(Snapshot {
                keys: inner.ring.feed_keys(),
                ownership: inner.ownership.clone(),
                revocations: inner.revocations.clone(),
                map: inner.map.clone(),
            }),
        }
    } else {
        FeedBody::Delta {
            entries: inner
                .log
                .iter()
                .filter(|e| e.seq > since)
                .take(MAX_DELTA_ENTRIES)
                .cloned()
                .collect(),
        }
    };
    FeedResponse {
        schema: FEED_SCHEMA,
        cell: state.config.cell_id.clone(),
        head,
        issued_at: state.now(),
        body,
    }
}

/// The feed handler.
pub async fn feed(
    _: FeedReader,
    State(state): State<AppState>,
    query: Result<Query<FeedQuery>, QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(|e| Error::BadRequest(format!("feed query: {e}")))?;
    if q.instance.is_empty()
        || q.instance.len() > MAX_INSTANCE_ID_BYTES
        || !q
            .instance
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(Error::BadRequest(format!(
            "instance must be 1 to {MAX_INSTANCE_ID_BYTES} characters of [A-Za-z0-9._-]"
        )));
    }
    let busy = crate::migration::parse_busy(q.busy.as_deref())?;
    state.saw_instance(&q.instance, q.since, busy);
    let wait = Duration::from_millis(q.wait_ms.min(MAX_WAIT_MS));
    let mut rx = state.head_tx.subscribe();
    if q.since != 0 && *rx.borrow_and_update() == q.since && !wait.is_zero() {
        let _ = tokio::time::timeout(wait, rx.wait_for(|h| *h != q.since)).await;
    }
    Ok(axum::Json(response(&state, q.since)).into_response())
}
