//! Publication of the signed placement map: built from the cells, the round-robin bucket
//! table and the placements that differ from their bucket's cell (the overrides); signed with
//! the control plane's key; written to the publish directory and served over HTTPS.
//! A new version is minted only when the content changes; the same version is re-written on
//! every periodic publication.
//!
//! The cells' TLS pins are computed from their certificate files (`tls_cert_file`,
//! `tls_next_cert_file`) at every publication, so installing a next certificate (or swapping it
//! in) and publishing yields a new map version without a client release. A file that cannot be
//! read or holds no certificate fails the publication, naming the file; the map held stays
//! published.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use protocol::map::{CellEntry, MAP_SCHEMA, PlacementMap, SignedMap, SpkiPin, TlsPins, bucket_of};
use protocol::time::SharedClock;
use protocol::token::SigningKey;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use runtime::IoContext as _;
use runtime::secret::write_atomic;

use crate::config::CellConfig;
use crate::error::{CpError, Result};
use crate::metrics::{Metrics, Publication};
use crate::store::Store;

/// Mode of the published map file (public content).
pub const MAP_FILE_MODE: u32 = 0o644;

/// File name of the published map in the publish directory.
pub const MAP_FILE: &str = "placement-map.json";

/// The bucket table: bucket `i` belongs to cell `i % cells`.
pub fn round_robin_buckets(bucket_count: usize, cells: usize) -> Vec<u16> {
    (0..bucket_count)
        .map(|i| u16::try_from(i % cells.max(1)).unwrap_or(0))
        .collect()
}

/// Publishes the map; shared by the HTTP handlers and the periodic task.
#[derive(Debug, Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cells: Vec<CellConfig>,
    buckets: Vec<u16>,
    key: SigningKey,
    store: Arc<Mutex<Store>>,
    publish_dir: PathBuf,
    current: RwLock<Option<SignedMap>>,
    clock: SharedClock,
    /// Serializes publications.
    gate: tokio::sync::Mutex<()>,
    /// Counts publications and shows the version published.
    metrics: Arc<Metrics>,
}

impl Publisher {
    pub fn new(
        cells: Vec<CellConfig>,
        bucket_count: usize,
        key: SigningKey,
        store: Arc<Mutex<Store>>,
        publish_dir: PathBuf,
        clock: SharedClock,
        metrics: Arc<Metrics>,
    ) -> Result<Publisher> {
        let held = store
            .lock()
            .map_err(|_| CpError::Internal("store lock poisoned".into()))?
            .published()?;
        // A stored map signed by another key (the key file was replaced) is not served.
        let held = held.filter(|m| m.verify(&key.public_key()).is_ok());
        let buckets = round_robin_buckets(bucket_count, cells.len());
        if let Some(m) = &held {
            metrics.set_map_version(m.map.version);
        }
        Ok(Publisher {
            inner: Arc::new(Inner {
                cells,
                buckets,
                key,
                store,
                publish_dir,
                current: RwLock::new(held),
                clock,
                gate: tokio::sync::Mutex::new(()),
                metrics,
            }),
        })
    }

    /// The map currently served.
    pub fn current(&self) -> Option<SignedMap> {
        self.inner.current.read().ok().and_then(|g| g.clone())
    }

    pub fn public_key(&self) -> protocol::jwks::PublicKey {
        self.inner.key.public_key()
    }

    pub fn has_cell(&self, id: &protocol::CellId) -> bool {
        self.inner.cells.iter().any(|c| &c.id == id)
    }

    /// The metrics publications are counted in.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Builds the content from the store, signs a new version if it changed, writes the file.
    /// Counted by how it ended.
    pub async fn publish(&self) -> Result<SignedMap> {
        let _gate = self.inner.gate.lock().await;
        let inner = self.inner.clone();
        let published = tokio::task::spawn_blocking(move || inner.publish_blocking())
            .await
            .map_err(|e| CpError::Internal(format!("publish task: {e}")))
            .and_then(|r| r);
        let metrics = &self.inner.metrics;
        match published {
            Ok((signed, how)) => {
                metrics.published(how);
                metrics.set_map_version(signed.map.version);
                Ok(signed)
            }
            Err(e) => {
                metrics.published(Publication::Failed);
                Err(e)
            }
        }
    }
}

/// The pin of the end-entity certificate (the first one) of a PEM chain file.
pub fn pin_of_cert_file(path: &Path) -> Result<SpkiPin> {
    let named = |why: String| CpError::Config(format!("TLS certificate {}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| named(e.to_string()))?;
    let leaf = CertificateDer::pem_slice_iter(&pem)
        .next()
        .ok_or_else(|| named("holds no PEM certificate".into()))?
        .map_err(|e| named(e.to_string()))?;
    SpkiPin::of_certificate_der(&leaf).map_err(|e| named(e.to_string()))
}

impl Inner {
    /// The map's cells, with pins read from their certificate files now.
    fn cell_entries(&self) -> Result<Vec<CellEntry>> {
        self.cells
            .iter()
            .map(|c| {
                let current = pin_of_cert_file(&c.tls_cert_file)?;
                let next = c
                    .tls_next_cert_file
                    .as_deref()
                    .map(pin_of_cert_file)
                    .transpose()?
                    // a next file that holds the served certificate: no rotation under way
                    .filter(|next| *next != current);
                Ok(CellEntry {
                    id: c.id.clone(),
                    endpoint: c.endpoint.clone(),
                    tls_pins: Some(TlsPins { current, next }),
                })
            })
            .collect()
    }

    fn overrides(
        &self,
        store: &Store,
    ) -> Result<BTreeMap<protocol::ContractorId, protocol::CellId>> {
        let mut out = BTreeMap::new();
        for (c, p) in store.all()? {
            let idx = self
                .buckets
                .get(bucket_of(&c, self.buckets.len()))
                .copied()
                .unwrap_or(0);
            let bucket_cell = self.cells.get(usize::from(idx)).map(|e| &e.id);
            if bucket_cell != Some(&p.cell) {
                out.insert(c, p.cell);
            }
        }
        Ok(out)
    }

    fn publish_blocking(&self) -> Result<(SignedMap, Publication)> {
        let store = self
            .store
            .lock()
            .map_err(|_| CpError::Internal("store lock poisoned".into()))?;
        let cells = self.cell_entries()?;
        let overrides = self.overrides(&store)?;
        let held = self.current.read().ok().and_then(|g| g.clone());
        let same = held.as_ref().is_some_and(|h| {
            h.map.cells == cells && h.map.buckets == self.buckets && h.map.overrides == overrides
        });
        let (signed, how) = match held {
            Some(h) if same => (h, Publication::Unchanged),
            held => {
                let version = held.map(|h| h.map.version).unwrap_or(0) + 1;
                let map = PlacementMap {
                    schema: MAP_SCHEMA,
                    version,
                    issued_at: self.clock.now(),
                    cells,
                    buckets: self.buckets.clone(),
                    overrides,
                };
                let signed = map.sign(&self.key)?;
                store.set_published(&signed)?;
                tracing::info!(version, "placement map signed");
                (signed, Publication::NewVersion)
            }
        };
        drop(store);
        std::fs::create_dir_all(&self.publish_dir)
            .with_context(|| format!("creating {}", self.publish_dir.display()))?;
        write_atomic(
            &self.publish_dir.join(MAP_FILE),
            &signed.to_json()?,
            MAP_FILE_MODE,
        )?;
        if let Ok(mut g) = self.current.write() {
            *g = Some(signed.clone());
        }
        Ok((signed, how))
    }
}
