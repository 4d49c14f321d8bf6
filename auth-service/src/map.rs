//! The placement map: accepted from the control plane (polled) or pushed by an admin, only
//! when its signature verifies with the pinned key and it is newer than the one held.

use std::time::Duration;

use protocol::admin::cell::MapAccepted;
use protocol::admin::placement::PLACEMENT_MAP_PATH;
use protocol::map::{MAX_MAP_BYTES, MapError, SignedMap};

use crate::error::{Error, Result};
use crate::state::AppState;
use crate::tls::{ReadError, read_capped};

/// Timeout of one map fetch.
pub(crate) const MAP_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a map was not taken.
#[derive(Debug)]
enum Refusal {
    /// Same version as the one held: nothing to do.
    Unchanged,
    Refused(MapError),
}

fn reason(e: &MapError) -> &'static str {
    match e {
        MapError::BadSignature => "bad_signature",
        MapError::NotNewer { .. } => "not_newer",
        MapError::TooLarge => "too_large",
        MapError::Malformed(_) => "malformed",
        MapError::Invalid(_) => "invalid",
        _ => "other",
    }
}

/// Counts and logs a refused map.
fn refused(state: &AppState, e: MapError) -> Refusal {
    state.metrics.map_refused(reason(&e));
    tracing::warn!(error = %e, "refused a placement map");
    Refusal::Refused(e)
}

/// Verifies and, if newer, persists a map and puts it in the feed. Answers
/// `(version, feed seq)`; a refusal is counted and answered as `400 INVALID_REQUEST`.
pub(crate) async fn accept(state: &AppState, bytes: &[u8]) -> Result<MapAccepted> {
    match try_accept(state, bytes).await? {
        Ok((version, seq)) => Ok(MapAccepted { version, seq }),
        Err(Refusal::Unchanged) => Err(Error::BadRequest(
            "placement map refused: not newer than the held one".into(),
        )),
        Err(Refusal::Refused(e)) => Err(Error::BadRequest(format!("placement map refused: {e}"))),
    }
}

async fn try_accept(state: &AppState, bytes: &[u8]) -> Result<Result<(u64, u64), Refusal>> {
    let Some(key) = &state.map_key else {
        return Err(Error::NotReady("no map_public_key is configured"));
    };
    let signed = match SignedMap::verify_bytes(bytes, key) {
        Ok(m) => m,
        Err(e) => return Ok(Err(refused(state, e))),
    };
    let version = signed.map.version;
    let (seq, outcome) = state
        .commit_with(|inner, batch| {
            if let Some(held) = &inner.map
                && held.map.version == version
            {
                return Ok(Err(Refusal::Unchanged));
            }
            if let Err(e) = signed.newer_than(inner.map.as_ref()) {
                return Ok(Err(Refusal::Refused(e)));
            }
            batch.map(signed.clone());
            Ok(Ok(()))
        })
        .await?;
    match outcome {
        Ok(()) => {
            tracing::info!(version, seq, "accepted a placement map");
            Ok(Ok((version, seq)))
        }
        Err(Refusal::Refused(e)) => Ok(Err(refused(state, e))),
        Err(Refusal::Unchanged) => Ok(Err(Refusal::Unchanged)),
    }
}

/// One poll of the control plane.
pub async fn poll_once(state: &AppState) -> Result<()> {
    let (Some(base), Some(client)) = (&state.config.control_plane_url, &state.http) else {
        return Ok(());
    };
    let url = base.join(PLACEMENT_MAP_PATH);
    let resp = client
        .get(&url)
        .timeout(MAP_FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|e| Error::Internal(format!("fetching the placement map: {e}")))?;
    if !resp.status().is_success() {
        return Err(Error::Internal(format!(
            "fetching the placement map: HTTP {}",
            resp.status()
        )));
    }
    let body = match read_capped(resp, MAX_MAP_BYTES).await {
        Ok(body) => body,
        Err(ReadError::Read(e)) => {
            return Err(Error::Internal(format!("reading the placement map: {e}")));
        }
        Err(ReadError::TooLarge) => {
            state.metrics.map_refused("too_large");
            return Err(Error::Internal("the placement map is too large".into()));
        }
    };
    match try_accept(state, &body).await? {
        Ok(_) | Err(Refusal::Unchanged) => Ok(()),
        Err(Refusal::Refused(e)) => Err(Error::Internal(format!("placement map refused: {e}"))),
    }
}

/// Polls the control plane forever, every `map_poll_interval_ms`.
pub(crate) async fn poll_forever(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_millis(state.config.map_poll_interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = poll_once(&state).await {
            tracing::warn!(error = %e, "placement map poll failed");
        }
    }
}
