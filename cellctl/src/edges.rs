//! What `cellctl revoke … --wait-edges` and `cellctl revoke withdraw --wait-edges` wait for: every
//! edge instance a cell heard from lately reporting a feed sequence at or past a change; and
//! who an audited command records when `--by` is not given.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::admin::{AdminClient, Api};

/// Longest `--wait-edges` waits per cell, in milliseconds.
pub const EDGE_WAIT_MS: u64 = 10_000;
/// Interval between two looks at a cell's instances, in milliseconds.
pub const EDGE_POLL_MS: u64 = 20;
/// An instance heard from within this many seconds counts as live.
pub const EDGE_LIVE_S: u64 = 60;
/// Who is recorded when `--by` is not given and `USER` is unset.
pub const DEFAULT_BY: &str = "cellctl";

/// Who is recorded: `by`, else `$USER`, else [`DEFAULT_BY`].
pub(crate) fn operator(by: Option<&String>) -> String {
    by.cloned()
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.trim().is_empty()))
        .unwrap_or_else(|| DEFAULT_BY.to_owned())
}

/// How far a confirmed revocation got among a cell's edge instances.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgesApplied {
    /// Instances heard from within [`EDGE_LIVE_S`].
    pub live: usize,
    /// Of those, how many reported a feed sequence at or past the revocation's.
    pub applied: usize,
    /// From the cell's confirmation to the last of them (or to giving up).
    pub waited_ms: u64,
}

impl EdgesApplied {
    pub fn complete(&self) -> bool {
        self.applied == self.live
    }
}

/// Waits until every live edge instance of `cell` reports a feed sequence ≥ `seq`.
pub(crate) async fn wait_edges(admin: &AdminClient, auth: &Api, seq: u64) -> EdgesApplied {
    let t0 = std::time::Instant::now();
    let waited = || u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut last = EdgesApplied {
        live: 0,
        applied: 0,
        waited_ms: 0,
    };
    loop {
        if let Ok(status) = admin.status(auth).await {
            let now = protocol::time::system_clock().now();
            let live: Vec<_> = status
                .instances
                .iter()
                .filter(|i| i.last_seen + EDGE_LIVE_S >= now)
                .collect();
            let applied = live.iter().filter(|i| i.applied_seq >= seq).count();
            last = EdgesApplied {
                live: live.len(),
                applied,
                waited_ms: waited(),
            };
            if last.complete() {
                return last;
            }
        }
        if t0.elapsed() >= Duration::from_millis(EDGE_WAIT_MS) {
            last.waited_ms = waited();
            return last;
        }
        tokio::time::sleep(Duration::from_millis(EDGE_POLL_MS)).await;
    }
}
