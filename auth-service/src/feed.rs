//! The cell state feed (DESIGN §5) as this cell serves it: who asked (instance ids and the
//! contractors they report busy), the long-poll wait for a new head, and the answer — a delta
//! after `since` or a snapshot.

use std::time::Duration;

use protocol::feed::{
    EpochRelation, FEED_SCHEMA, FeedBody, FeedResponse, Snapshot, epoch_relation,
};
use protocol::{ContractorId, InstanceId};

use crate::error::{Error, Result};
use crate::state::AppState;

/// Longest long-poll, in milliseconds.
pub(crate) const MAX_WAIT_MS: u64 = 25_000;
/// Most entries in one delta; the instance asks again for the rest.
pub(crate) const MAX_DELTA_ENTRIES: usize = 1_000;
/// Most contractors an instance may report busy in one feed request.
pub(crate) const MAX_BUSY_REPORTED: usize = 256;

/// One feed request, as read from its query.
#[derive(Debug)]
pub(crate) struct FeedAsk<'a> {
    pub(crate) since: u64,
    /// The instance asking, as its credential names it.
    pub(crate) instance: &'a InstanceId,
    pub(crate) wait_ms: u64,
    /// Comma-separated contractors in handoff with writes still in flight at the instance.
    pub(crate) busy: Option<&'a str>,
    /// The epoch the instance holds (absent from older edges): when it is not this feed's,
    /// the answer is a snapshot at once, without waiting.
    pub(crate) epoch: Option<&'a str>,
}

/// Parses the feed's `busy` parameter: comma-separated contractor ids.
fn parse_busy(s: Option<&str>) -> Result<Vec<ContractorId>> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let list = s
        .split(',')
        .map(|c| ContractorId::new(c).map_err(|e| Error::BadRequest(format!("busy: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    if list.len() > MAX_BUSY_REPORTED {
        return Err(Error::BadRequest(format!(
            "busy lists more than {MAX_BUSY_REPORTED} contractors"
        )));
    }
    Ok(list)
}

/// Serves one feed request: records the instance, waits (at most [`MAX_WAIT_MS`]) while
/// nothing is newer than `since`, then answers.
pub(crate) async fn serve(state: &AppState, ask: FeedAsk<'_>) -> Result<FeedResponse> {
    let id = ask.instance.as_str();
    let busy = parse_busy(ask.busy)?;
    let seen = state.instances.saw(id, ask.since, busy, state.now());
    if let Some(shared) = state.coordination.shared()
        && let Err(e) = shared.saw_instance(&seen).await
    {
        // The drain then waits for this instance's next request: safe, only slower.
        tracing::warn!(error = %e, instance = id, "could not record a feed request");
    }
    if restored_since(ask.epoch, &state.read().epoch) {
        return Ok(response(state, 0, None));
    }
    let wait = Duration::from_millis(ask.wait_ms.min(MAX_WAIT_MS));
    let mut rx = state.head_tx.subscribe();
    if ask.since != 0 && *rx.borrow_and_update() == ask.since && !wait.is_zero() {
        let _ = tokio::time::timeout(wait, rx.wait_for(|h| *h != ask.since)).await;
    }
    Ok(response(state, ask.since, ask.epoch))
}

/// Whether an instance holding epoch `held_by_instance` (if it said) must start over from a
/// snapshot of this feed's `epoch` (the edges' own rule, `protocol::feed::epoch_relation`).
fn restored_since(held_by_instance: Option<&str>, epoch: &str) -> bool {
    held_by_instance.is_some_and(|held| epoch_relation(held, epoch) == EpochRelation::Restored)
}

/// The answer for an instance that has applied `since` in `epoch` (a snapshot when the epoch
/// is not this feed's: a restore happened while it waited).
fn response(state: &AppState, since: u64, epoch: Option<&str>) -> FeedResponse {
    let inner = state.read();
    let head = inner.head;
    let oldest = inner.log.front().map_or(head + 1, |e| e.seq);
    let restored = restored_since(epoch, &inner.epoch);
    let body = if restored || since == 0 || since > head || since + 1 < oldest {
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
        epoch: inner.epoch.clone(),
        body,
    }
}
