//! The handback after a restore (`protocol::feed`, "Epochs"): when the auth-service was
//! restored from a backup, `Edge::apply_feed` keeps enforcing the revocations the edge held
//! that the restored state lacks; this posts them to the auth-service ([`REAPPLY_PATH`], the
//! feed's bearer token, [`Reapply`] bodies of at most [`MAX_REAPPLY_REVOCATIONS`]) so it
//! records them again and every instance, and every later snapshot, has them.
//!
//! It runs as a task of its own and never blocks serving or the feed sync. Each chunk is
//! retried with backoff ([`RETRY_MIN`] to [`RETRY_MAX`], jittered, at most [`RETRY_TIMES`]
//! times); a `4xx` answer is final (logged as a warning: the auth-service will not take them,
//! e.g. because it was not restored over that epoch). Handing the same revocations back twice
//! is harmless: the auth-service skips those already in force. It takes back only what it
//! sealed (ATTACKS A32); this instance keeps enforcing what it refuses, except a revocation
//! the auth-service says an operator withdrew, which it drops.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use http::header;
use protocol::feed::{MAX_REAPPLY_REVOCATIONS, REAPPLY_PATH, Reapplied, Reapply};
use protocol::revocation::{Revocation, RevocationKind};

use crate::edge::{Edge, Restored};
use crate::error::EdgeError;

/// First retry delay of a failed handback.
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay of a failed handback.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(30);
/// Retries of one chunk before giving up (about an hour at [`RETRY_MAX`]).
pub(crate) const RETRY_TIMES: usize = 120;
/// Largest answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Starts handing `restored` back in the background (nothing to do when it carried nothing).
pub(crate) fn spawn(edge: &Edge, restored: Restored) -> Option<tokio::task::JoinHandle<()>> {
    if restored.carried.is_empty() {
        return None;
    }
    let edge = edge.clone();
    Some(tokio::spawn(
        async move { hand_back(&edge, &restored).await },
    ))
}

/// Posts every chunk of `restored`, in order, each with retries; stops at the first chunk
/// that is refused or still fails after the retries.
pub(crate) async fn hand_back(edge: &Edge, restored: &Restored) {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(RETRY_MIN)
        .with_max_delay(RETRY_MAX)
        .with_jitter()
        .with_max_times(RETRY_TIMES);
    let instance = &edge.settings().instance_id;
    // A key revocation is never taken back (`RevocationKind::key`: an operator revokes the key
    // again): this instance keeps enforcing it and does not send it.
    let handed: Vec<Revocation> = restored
        .carried
        .iter()
        .filter(|r| r.kind.key().is_none())
        .cloned()
        .collect();
    for chunk in handed.chunks(MAX_REAPPLY_REVOCATIONS) {
        let body = Reapply {
            from_epoch: restored.from_epoch.clone(),
            instance: instance.clone(),
            revocations: chunk.to_vec(),
        };
        let body = match serde_json::to_vec(&body) {
            Ok(b) => bytes::Bytes::from(b),
            Err(e) => {
                tracing::warn!(error = %e, "could not encode the revocation handback");
                return;
            }
        };
        let result = (|| post(edge, body.clone()))
            .retry(backoff)
            .when(|e| matches!(e, EdgeError::Upstream(_)))
            .notify(|e, after| {
                tracing::info!(error = %e, retry_in_ms = after.as_millis() as u64, "revocation handback failed; retrying");
            })
            .await;
        match result {
            Ok(done) => {
                tracing::info!(
                    from_epoch = %restored.from_epoch,
                    sent = chunk.len(),
                    recorded = done.recorded,
                    skipped = done.skipped,
                    refused = done.refused,
                    "handed revocations held from before the restore back to the auth-service"
                );
                let withdrawn: Vec<RevocationKind> = chunk
                    .iter()
                    .filter(|r| done.withdrawn.contains(&r.seq))
                    .map(|r| r.kind.clone())
                    .collect();
                if let Some(view) = edge.drop_withdrawn(&withdrawn) {
                    edge.persist(view).await;
                }
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    from_epoch = %restored.from_epoch,
                    unsent = restored.carried.len(),
                    "gave up handing revocations back to the auth-service; this instance keeps enforcing them"
                );
                return;
            }
        }
    }
}

/// One `POST`. A transport failure or a `5xx` is [`EdgeError::Upstream`] (retried); a `4xx` is
/// [`EdgeError::Feed`] (final).
async fn post(edge: &Edge, body: bytes::Bytes) -> Result<Reapplied, EdgeError> {
    let up = edge.upstreams();
    let req = http::Request::builder()
        .method(http::Method::POST)
        .uri(REAPPLY_PATH)
        .header(header::AUTHORIZATION, up.feed_authorization()?)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| EdgeError::Upstream(e.to_string()))?;
    let resp = up
        .feed
        .send(req, up.auth_timeout)
        .await
        .map_err(|e| EdgeError::Upstream(format!("revocation handback: {e:?}")))?;
    let status = resp.status();
    if status.is_client_error() {
        return Err(EdgeError::Feed(format!(
            "the auth-service refused the revocation handback ({status})"
        )));
    }
    if !status.is_success() {
        return Err(EdgeError::Upstream(format!(
            "revocation handback answered {status}"
        )));
    }
    let bytes = tokio::time::timeout(
        up.auth_timeout,
        axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES),
    )
    .await
    .map_err(|_| EdgeError::Upstream("revocation handback answer timed out".into()))?
    .map_err(|e| EdgeError::Upstream(format!("revocation handback answer: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| EdgeError::Upstream(format!("revocation handback answer: {e}")))
}
