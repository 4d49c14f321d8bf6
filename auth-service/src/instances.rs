//! The edge instances of this cell as the feed last saw them: which sequence each has applied
//! and which contractors in handoff it still has writes in flight for. The status page lists
//! them; the migration drain decides from them. With several replicas an instance may ask any
//! of them, so the list the drain reads is the database's (`AppState::instances_seen`).
//!
//! Who an instance is comes from its credential ([`FeedCaller`], `runtime::feed_credential`):
//! an instance is recorded only under the name its own credential carries, so no one can add
//! a made-up instance to the list a migration's drain waits on (ATTACKS A37).

use std::collections::HashMap;
use std::sync::Mutex;

use protocol::admin::cell::InstanceSeen;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, InstanceId};

use crate::error::{Error, Result};

/// Who called the feed or the revocation handback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FeedCaller {
    /// An edge instance, named by its own credential.
    Instance(InstanceId),
    /// A holder of the cell's shared feed secret (accepted only with
    /// `accept_shared_feed_token`, while edges are moved to credentials of their own): it may
    /// name any instance.
    Shared,
}

impl FeedCaller {
    /// The instance a request that names `named` acts as: the credential's own instance, which
    /// `named` must be. `403 FORBIDDEN` for another name, `400` for a name that is not an id.
    pub(crate) fn instance_named(&self, named: &str) -> Result<InstanceId> {
        let named =
            InstanceId::new(named).map_err(|e| Error::BadRequest(format!("instance: {e}")))?;
        match self {
            FeedCaller::Instance(own) if *own == named => Ok(named),
            FeedCaller::Instance(_) => Err(Error::Unauthorized(
                "the feed credential is another instance's",
            )),
            FeedCaller::Shared => Ok(named),
        }
    }
}

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
