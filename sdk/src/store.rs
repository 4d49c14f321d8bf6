//! Session persistence. The SDK hands the store an opaque blob (JSON with a schema version);
//! apps keep it wherever secrets belong on their platform (Keychain, Keystore-backed storage).
//! [`MemoryStore`] keeps it in memory; [`FileStore`] in a file readable by its owner only.

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

/// Where the session blob lives. Implementations must be cheap and may block briefly.
pub trait SessionStore: Send + Sync + std::fmt::Debug + 'static {
    /// The saved blob, or `None` when nothing was saved.
    fn load(&self) -> Result<Option<String>, StoreError>;
    /// Replaces the saved blob.
    fn save(&self, blob: &str) -> Result<(), StoreError>;
    /// Removes the saved blob (no error when there is none).
    fn clear(&self) -> Result<(), StoreError>;
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

/// A store in memory (the default; sessions do not survive the process).
#[derive(Debug, Default)]
pub struct MemoryStore(Mutex<Option<String>>);

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl SessionStore for MemoryStore {
    fn load(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .0
            .lock()
            .map_err(|_| StoreError("memory store poisoned".into()))?
            .clone())
    }
    fn save(&self, blob: &str) -> Result<(), StoreError> {
        *self
            .0
            .lock()
            .map_err(|_| StoreError("memory store poisoned".into()))? = Some(blob.to_owned());
        Ok(())
    }
    fn clear(&self) -> Result<(), StoreError> {
        *self
            .0
            .lock()
            .map_err(|_| StoreError("memory store poisoned".into()))? = None;
        Ok(())
    }
}

/// A store in one file, written atomically (temporary file + rename) with mode 0600.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError(format!("{what} {}: {e}", path.display()))
}

impl SessionStore for FileStore {
    fn load(&self) -> Result<Option<String>, StoreError> {
        match std::fs::read_to_string(&self.path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read", &self.path, e)),
        }
    }

    fn save(&self, blob: &str) -> Result<(), StoreError> {
        use std::io::Write as _;
        let dir = match self.path.parent() {
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
        tmp.persist(&self.path)
            .map_err(|e| io_err("cannot replace", &self.path, e.error))?;
        Ok(())
    }

    fn clear(&self) -> Result<(), StoreError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("cannot remove", &self.path, e)),
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
    fn file_store_is_private_and_clears() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path().join("sub/session.json"));
        assert_eq!(store.load().unwrap(), None);
        store.save("{\"a\":1}").unwrap();
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(store.load().unwrap().as_deref(), Some("{\"a\":1}"));
        store.save("{\"a\":2}").unwrap();
        assert_eq!(store.load().unwrap().as_deref(), Some("{\"a\":2}"));
        store.clear().unwrap();
        store.clear().unwrap();
        assert_eq!(store.load().unwrap(), None);
    }
}
