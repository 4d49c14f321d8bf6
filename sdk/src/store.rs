//! Persistence. The SDK hands the store opaque blobs (JSON, each with its own schema version),
//! one per [`StoreSlot`]: the session, the offline outbox ([`crate::outbox`]) and the device
//! tokens ([`crate::device`]). Apps keep them wherever secrets belong on their platform
//! (Keychain, Keystore-backed storage).
//! [`MemoryStore`] keeps them in memory; [`FileStore`] in files readable by their owner only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::session::Session;

/// Schema version of the persisted blob. Bump it when [`Persisted`] changes shape.
pub const PERSISTED_SCHEMA: u32 = 1;

/// A failure of a session store, with a human reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// Which blob: each slot is saved, loaded and cleared on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreSlot {
    /// The session (its token included).
    Session,
    /// The offline outbox: writes waiting for delivery ([`crate::outbox`]).
    Outbox,
    /// The device tokens: proof that this device signed in to an account before, kept when
    /// a session ends ([`crate::device`]). A store that cannot keep it only costs the
    /// protection they give; the SDK works without it.
    Device,
}

/// Where the blobs live, one per [`StoreSlot`]. Implementations must be cheap and may block
/// briefly; `save` must have made the blob durable when it returns.
pub trait SessionStore: Send + Sync + std::fmt::Debug + 'static {
    /// The blob saved in `slot`, or `None` when nothing was saved.
    fn load(&self, slot: StoreSlot) -> Result<Option<String>, StoreError>;
    /// Replaces the blob in `slot`.
    fn save(&self, slot: StoreSlot, blob: &str) -> Result<(), StoreError>;
    /// Removes the blob in `slot` (no error when there is none).
    fn clear(&self, slot: StoreSlot) -> Result<(), StoreError>;
}

/// The persisted form of a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Persisted {
    pub schema: u32,
    pub session: Session,
}

/// Encodes a session for the store.
pub(crate) fn encode(session: &Session) -> Result<String, Error> {
    serde_json::to_string(&Persisted {
        schema: PERSISTED_SCHEMA,
        session: session.clone(),
    })
    .map_err(|e| Error::Store(format!("cannot encode the session: {e}")))
}

/// Decodes a blob from the store, refusing unknown schemas.
pub(crate) fn decode(blob: &str) -> Result<Session, Error> {
    #[derive(Deserialize)]
    struct Version {
        schema: u32,
    }
    let v: Version = serde_json::from_str(blob)
        .map_err(|e| Error::Store(format!("stored session is not readable: {e}")))?;
    if v.schema != PERSISTED_SCHEMA {
        return Err(Error::Store(format!(
            "stored session has schema {}, this SDK reads {PERSISTED_SCHEMA}",
            v.schema
        )));
    }
    let p: Persisted = serde_json::from_str(blob)
        .map_err(|e| Error::Store(format!("stored session is not readable: {e}")))?;
    Ok(p.session)
}

/// A store in memory (the default; nothing survives the process).
#[derive(Debug, Default)]
pub struct MemoryStore(Mutex<HashMap<StoreSlot, String>>);

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn slots(&self) -> Result<std::sync::MutexGuard<'_, HashMap<StoreSlot, String>>, StoreError> {
        self.0
            .lock()
            .map_err(|_| StoreError("memory store poisoned".into()))
    }
}

impl SessionStore for MemoryStore {
    fn load(&self, slot: StoreSlot) -> Result<Option<String>, StoreError> {
        Ok(self.slots()?.get(&slot).cloned())
    }
    fn save(&self, slot: StoreSlot, blob: &str) -> Result<(), StoreError> {
        self.slots()?.insert(slot, blob.to_owned());
        Ok(())
    }
    fn clear(&self, slot: StoreSlot) -> Result<(), StoreError> {
        self.slots()?.remove(&slot);
        Ok(())
    }
}

/// A store in files, each written atomically (temporary file + rename) with mode 0600: the
/// session at the given path, the outbox at the same path with `.outbox` appended, the device
/// tokens with `.device` appended.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
    /// The session's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The file of `slot`.
    pub fn path_of(&self, slot: StoreSlot) -> PathBuf {
        let suffix = match slot {
            StoreSlot::Session => return self.path.clone(),
            StoreSlot::Outbox => ".outbox",
            StoreSlot::Device => ".device",
        };
        let mut p = self.path.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError(format!("{what} {}: {e}", path.display()))
}

impl SessionStore for FileStore {
    fn load(&self, slot: StoreSlot) -> Result<Option<String>, StoreError> {
        let path = self.path_of(slot);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read", &path, e)),
        }
    }

    fn save(&self, slot: StoreSlot, blob: &str) -> Result<(), StoreError> {
        use std::io::Write as _;
        let path = self.path_of(slot);
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
        // tempfile creates the file with mode 0600 on unix.
        let mut tmp = tempfile::NamedTempFile::new_in(&dir)
            .map_err(|e| io_err("cannot write in", &dir, e))?;
        tmp.write_all(blob.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| io_err("cannot write", tmp.path(), e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io_err("cannot restrict", tmp.path(), e))?;
        }
        tmp.persist(&path)
            .map_err(|e| io_err("cannot replace", &path, e.error))?;
        Ok(())
    }

    fn clear(&self, slot: StoreSlot) -> Result<(), StoreError> {
        let path = self.path_of(slot);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("cannot remove", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::tests::sample_session;

    #[test]
    fn blob_round_trips_and_carries_its_schema() {
        let s = sample_session();
        let blob = encode(&s).unwrap();
        let v: serde_json::Value = serde_json::from_str(&blob).unwrap();
        assert_eq!(v["schema"], PERSISTED_SCHEMA);
        let mut members: Vec<&str> = v["session"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        members.sort_unstable();
        assert_eq!(
            members,
            [
                "cell_id",
                "contractor_id",
                "endpoint",
                "expires_at",
                "generation",
                "session_id",
                "subject",
                "token"
            ]
        );
        assert_eq!(decode(&blob).unwrap(), s);
        let extra = blob.replacen("\"token\":", "\"extra\":1,\"token\":", 1);
        assert!(matches!(decode(&extra), Err(Error::Store(m)) if m.contains("extra")));
        let future = blob.replacen("\"schema\":1", "\"schema\":99", 1);
        assert!(matches!(decode(&future), Err(Error::Store(m)) if m.contains("schema 99")));
        assert!(matches!(decode("not json"), Err(Error::Store(_))));
    }

    #[cfg(unix)]
    #[test]
    fn file_store_keeps_each_slot_in_its_own_private_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join("sub/session.json"));
        let outbox = dir.path().join("sub/session.json.outbox");
        assert_eq!(store.path_of(StoreSlot::Outbox), outbox);
        assert_eq!(
            store.path_of(StoreSlot::Device),
            dir.path().join("sub/session.json.device")
        );
        for slot in [StoreSlot::Session, StoreSlot::Outbox] {
            assert_eq!(store.load(slot).unwrap(), None);
        }
        store.save(StoreSlot::Session, "{\"a\":1}").unwrap();
        store.save(StoreSlot::Outbox, "{\"o\":1}").unwrap();
        for path in [store.path().to_path_buf(), outbox.clone()] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        assert_eq!(std::fs::read_to_string(&outbox).unwrap(), "{\"o\":1}");
        assert_eq!(
            store.load(StoreSlot::Session).unwrap().as_deref(),
            Some("{\"a\":1}")
        );
        store.save(StoreSlot::Session, "{\"a\":2}").unwrap();
        assert_eq!(
            store.load(StoreSlot::Session).unwrap().as_deref(),
            Some("{\"a\":2}")
        );
        // clearing one slot leaves the other
        store.clear(StoreSlot::Session).unwrap();
        store.clear(StoreSlot::Session).unwrap();
        assert_eq!(store.load(StoreSlot::Session).unwrap(), None);
        assert_eq!(
            store.load(StoreSlot::Outbox).unwrap().as_deref(),
            Some("{\"o\":1}")
        );
        store.clear(StoreSlot::Outbox).unwrap();
        assert!(!outbox.exists());
    }

    #[test]
    fn memory_store_keeps_one_blob_per_slot() {
        let store = MemoryStore::new();
        store.save(StoreSlot::Session, "s").unwrap();
        store.save(StoreSlot::Outbox, "o").unwrap();
        assert_eq!(
            store.load(StoreSlot::Session).unwrap().as_deref(),
            Some("s")
        );
        store.clear(StoreSlot::Outbox).unwrap();
        assert_eq!(store.load(StoreSlot::Outbox).unwrap(), None);
        assert_eq!(
            store.load(StoreSlot::Session).unwrap().as_deref(),
            Some("s")
        );
    }
}
