//! The edge instances of this cell as the feed last saw them: which sequence each has applied
//! and which contractors in handoff it still has writes in flight for. The status page lists
//! them; the migration drain decides from them. With several replicas an instance may ask any
//! of them, so the list the drain reads is the database's (`AppState::instances_seen`).

use std::collections::HashMap;
use std::sync::Mutex;

use protocol::ContractorId;
use protocol::admin::cell::InstanceSeen;
use protocol::time::UnixSeconds;

/// Most instances remembered for the status page.
pub(crate) const MAX_TRACKED_INSTANCES: usize = 4_096;

/// The instances seen, by id (at most [`MAX_TRACKED_INSTANCES`]; the longest unseen is
/// forgotten first).
#[derive(Debug, Default)]
pub(crate) struct Instances(Mutex<HashMap<String, InstanceSeen>>);

impl Instances {
    /// Records that instance `id` asked for the feed with `since` at `now`, reporting writes
    /// in flight for the contractors in `busy`; answers the record.
    pub(crate) fn saw(
        &self,
        id: &str,
        since: u64,
        busy: Vec<ContractorId>,
        now: UnixSeconds,
    ) -> InstanceSeen {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED_INSTANCES
            && !map.contains_key(id)
            && let Some(oldest) = map
                .values()
                .min_by_key(|i| i.last_seen)
                .map(|i| i.id.clone())
        {
            map.remove(&oldest);
        }
        let seen = InstanceSeen {
            id: id.to_owned(),
            applied_seq: since,
            last_seen: now,
            busy,
        };
        map.insert(id.to_owned(), seen.clone());
        seen
    }

    /// Every instance seen, sorted by id.
    pub(crate) fn sorted(&self) -> Vec<InstanceSeen> {
        let mut all: Vec<InstanceSeen> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}
