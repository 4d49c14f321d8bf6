//! What the handlers of both listeners share ([`AppState`]): the cell id, the store (used off
//! the async threads), the edge key and the internal token, the clock, the request metrics.

use std::sync::{Arc, Mutex};

use protocol::CellId;
use protocol::time::SharedClock;
use runtime::Secret;

use crate::config::Config;
use crate::error::{AppError, Result};
use crate::metrics::Metrics;
use crate::store::Store;

/// Shared state of the handlers.
#[derive(Clone, Debug)]
pub struct AppState {
    pub cell_id: CellId,
    store: Arc<Mutex<Store>>,
    edge_key: Secret,
    internal_token: Secret,
    clock: SharedClock,
    metrics: Arc<Metrics>,
}

impl AppState {
    pub fn new(
        cell_id: CellId,
        store: Store,
        edge_key: Secret,
        internal_token: Secret,
        clock: SharedClock,
    ) -> Self {
        AppState {
            metrics: Arc::new(Metrics::new(&cell_id)),
            cell_id,
            store: Arc::new(Mutex::new(store)),
            edge_key,
            internal_token,
            clock,
        }
    }

    /// Builds the state from a configuration (opens the store, reads the token files).
    pub fn from_config(config: &Config) -> Result<Self> {
        Ok(AppState::new(
            config.cell_id.clone(),
            Store::open(&config.data_dir)?,
            Secret::from_file(&config.app_token_file)?,
            Secret::from_file(&config.internal_token_file)?,
            protocol::time::system_clock(),
        ))
    }

    /// The request metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether the database is open and usable: its lock is not poisoned by a failed
    /// operation (busy counts as open).
    pub fn store_open(&self) -> bool {
        match self.store.try_lock() {
            Ok(_) | Err(std::sync::TryLockError::WouldBlock) => true,
            Err(std::sync::TryLockError::Poisoned(_)) => false,
        }
    }

    /// The edge key `/api/*` requests must present.
    pub(crate) fn edge_key(&self) -> &Secret {
        &self.edge_key
    }

    /// The bearer token of `/internal/*` (the app's own).
    pub(crate) fn internal_token(&self) -> &Secret {
        &self.internal_token
    }

    /// Now, by the app's clock.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Runs `f` on the store off the async threads.
    pub(crate) async fn with_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = store
                .lock()
                .map_err(|_| AppError::Internal("store lock poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| AppError::Internal(format!("store task: {e}")))?
    }
}
