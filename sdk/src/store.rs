//! Persistence. The SDK hands the store opaque blobs (JSON, each with its own schema version),
//! one per [`StoreSlot`]: the session, the offline outbox ([`crate::outbox`]) and the device
//! tokens ([`crate::device`]). Apps keep them wherever secrets belong on their platform
//! (Keychain, Keystore-backed storage).
//! [`MemoryStore`] keeps them in memory; [`FileStore`] in files readable by their owner only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::proof::Signer;
use crate::session::Session;

/// Schema version of the persisted blob. Bump it when [`Persisted`] changes shape. Version 2
/// added the SDK's own device key (`device_key`); a version-1 blob (written before device-bound
/// sessions) is still read, as a session without a key.
pub const PERSISTED_SCHEMA: u32 = 2;

/// A failure of a session store, with a human reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// Which blob: each slot is saved, loaded and cleared on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreSlot {
    /// The session (its token included) and the SDK's own device key, if it made one.
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

/// The persisted form of a session: `{"schema":2,"session":{…},"device_key"?:…}`.
/// `device_key` is the PKCS#8 document (base64url) of the software key the SDK made for this
/// session (`crate::proof`): as secret as the token beside it. It is absent for a session whose
/// key is the app's ([`crate::ClientBuilder::device_key`]) and in version 1.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Persisted {
    pub schema: u32,
    pub session: Session,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_key: Option<String>,
}

/// Encodes a session (and the SDK's own key of it) for the store.
pub(crate) fn encode(session: &Session) -> Result<String, Error> {
    let device_key = session
        .signer
        .as_ref()
        .and_then(|s| s.pkcs8())
        .map(|k| URL_SAFE_NO_PAD.encode(k));
    serde_json::to_string(&Persisted {
        schema: PERSISTED_SCHEMA,
        session: session.clone(),
        device_key,
    })
    .map_err(|e| Error::Store(format!("cannot encode the session: {e}")))
}

/// Decodes a blob from the store, refusing unknown schemas: the session, with the SDK's own
/// key when the blob holds one (version 1 never does), and what its token says about its
/// binding.
pub(crate) fn decode(blob: &str) -> Result<Session, Error> {
    #[derive(Deserialize)]
    struct Version {
        schema: u32,
    }
    let unreadable =
        |e: &dyn std::fmt::Display| Error::Store(format!("stored session is not readable: {e}"));
    let v: Version = serde_json::from_str(blob).map_err(|e| unreadable(&e))?;
    if v.schema != PERSISTED_SCHEMA && v.schema != 1 {
        return Err(Error::Store(format!(
            "stored session has schema {}, this SDK reads 1 and {PERSISTED_SCHEMA}",
            v.schema
        )));
    }
    let p: Persisted = serde_json::from_str(blob).map_err(|e| unreadable(&e))?;
    if p.schema == 1 && p.device_key.is_some() {
        return Err(unreadable(&"a version-1 blob has no device key"));
    }
    let signer = match p.device_key {
        None => None,
        Some(k) => {
            let pkcs8 = URL_SAFE_NO_PAD
                .decode(k)
                .map_err(|_| unreadable(&"the device key is not base64url"))?;
            Some(Signer::from_pkcs8(&pkcs8).map_err(|e| unreadable(&e))?)
        }
    };
    let Session { token, info, .. } = p.session;
    let mut session = Session::new(token, info);
    // whether it is the key the session is bound to is for `restore` to judge
    session.signer = signer;
    Ok(session)
}

/// A store in memory (the default; nothing survives the process). `Debug` shows which slots
/// hold a blob, never a blob (the session's holds its token and key).
#[derive(Default)]
pub struct MemoryStore(Mutex<HashMap<StoreSlot, String>>);

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().ok();
        let slots = [StoreSlot::Session, StoreSlot::Outbox, StoreSlot::Device]
            .into_iter()
            .filter(|s| held.as_ref().is_some_and(|m| m.contains_key(s)));
        f.debug_struct("MemoryStore")
            .field("slots", &slots.collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

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
        assert!(v.get("device_key").is_none(), "no key, no member: {blob}");
        let extra = blob.replacen("\"token\":", "\"extra\":1,\"token\":", 1);
        assert!(matches!(decode(&extra), Err(Error::Store(m)) if m.contains("extra")));
        let future = blob.replacen("\"schema\":2", "\"schema\":99", 1);
        assert!(matches!(decode(&future), Err(Error::Store(m)) if m.contains("schema 99")));
        assert!(matches!(decode("not json"), Err(Error::Store(_))));
    }

    #[test]
    fn the_sdks_own_key_is_kept_beside_the_session_and_version_1_reads_as_keyless() {
        let signer = Signer::generate().unwrap();
        let mut s = sample_session();
        s.signer = Some(signer.clone());
        let blob = encode(&s).unwrap();
        let v: serde_json::Value = serde_json::from_str(&blob).unwrap();
        let stored = URL_SAFE_NO_PAD
            .decode(v["device_key"].as_str().unwrap())
            .unwrap();
        assert_eq!(Some(&stored[..]), signer.pkcs8());
        let back = decode(&blob).unwrap();
        assert_eq!(back.signer.as_ref(), Some(&signer));
        assert_eq!(back, s);
        // the key never shows in Debug
        let shown = format!("{back:?}");
        assert!(
            !shown.contains(&v["device_key"].as_str().unwrap()[..20]),
            "{shown}"
        );
        // a blob written before device-bound sessions: the same session, no key
        let v1 = encode(&sample_session())
            .unwrap()
            .replacen("\"schema\":2", "\"schema\":1", 1);
        let old = decode(&v1).unwrap();
        assert_eq!(old, sample_session());
        assert!(old.signer.is_none() && old.info.key_thumbprint.is_none());
        let v1_with_key = blob.replacen("\"schema\":2", "\"schema\":1", 1);
        assert!(matches!(decode(&v1_with_key), Err(Error::Store(_))));
        let broken = blob.replacen("\"device_key\":\"", "\"device_key\":\"AAAA", 1);
        assert!(matches!(decode(&broken), Err(Error::Store(_))));
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
        store.save(StoreSlot::Session, "s-secret").unwrap();
        assert_eq!(format!("{store:?}"), "MemoryStore { slots: [Session], .. }");
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
