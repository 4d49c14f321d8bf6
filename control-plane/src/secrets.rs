//! Secret files: tokens and the map signing seed, written 0600, read back without logging.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::Kid;
use protocol::token::SigningKey;
use rand::RngCore as _;
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::error::{CpError, Result};

/// Random bytes in a generated token.
pub const TOKEN_BYTES: usize = 32;
/// Key id of the control plane's map signing key.
pub const MAP_KEY_KID: &str = "control-plane";

/// Writes `bytes` to `path` with mode 0600 (replacing any previous file atomically).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, bytes, 0o600)
}

/// Writes `bytes` to `path` with `mode`, through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| CpError::io(format!("creating {}", tmp.display()), e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| CpError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .map_err(|e| CpError::io(format!("chmod {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| CpError::io(format!("renaming to {}", path.display()), e))
}

/// A fresh random token (base64url, 256 bits).
pub fn random_token() -> Zeroizing<String> {
    let mut b = Zeroizing::new([0u8; TOKEN_BYTES]);
    rand::rng().fill_bytes(b.as_mut());
    Zeroizing::new(URL_SAFE_NO_PAD.encode(b.as_ref()))
}

/// A secret token held in memory (zeroized on drop, never printed).
#[derive(Clone)]
pub struct Secret(Arc<Zeroizing<String>>);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(Arc::new(Zeroizing::new(s.into())))
    }
    /// Reads a token file (surrounding whitespace ignored); refuses an empty one.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| CpError::io(format!("reading {}", path.display()), e))?,
        );
        let t = text.trim();
        if t.is_empty() {
            return Err(CpError::Config(format!("{} is empty", path.display())));
        }
        Ok(Secret::new(t))
    }
    /// Constant-time comparison with a presented value.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented))
    }
    /// The token text, to send it. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Loads the map signing key from its 32-byte seed file, creating the file (0600) with a
/// fresh random seed if it does not exist.
pub fn load_or_create_map_key(path: &Path) -> Result<SigningKey> {
    let kid = Kid::new(MAP_KEY_KID).map_err(|e| CpError::Key(e.to_string()))?;
    let seed: Zeroizing<[u8; 32]> = match std::fs::read(path) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let arr: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                CpError::Key(format!(
                    "{} must hold exactly 32 bytes (an Ed25519 seed)",
                    path.display()
                ))
            })?;
            Zeroizing::new(arr)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut s = Zeroizing::new([0u8; 32]);
            rand::rng().fill_bytes(s.as_mut());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| CpError::io(format!("creating {}", parent.display()), e))?;
            }
            write_private(path, s.as_ref())?;
            s
        }
        Err(e) => return Err(CpError::io(format!("reading {}", path.display()), e)),
    };
    SigningKey::from_seed(kid, &seed).map_err(|e| CpError::Key(e.to_string()))
}

/// The base64url form of a public key (as in `fleet.json` and `/v1/map-public-key`).
pub fn public_key_b64(key: &SigningKey) -> String {
    URL_SAFE_NO_PAD.encode(key.public_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_key_is_created_private_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys").join("map-key");
        let a = load_or_create_map_key(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = load_or_create_map_key(&p).unwrap();
        assert_eq!(a.public_bytes(), b.public_bytes());
        std::fs::write(&p, b"short").unwrap();
        assert!(load_or_create_map_key(&p).is_err());
    }

    #[test]
    fn secrets_compare_and_never_print() {
        let s = Secret::new("tok-123");
        assert!(s.matches(b"tok-123"));
        assert!(!s.matches(b"tok-12"));
        assert!(!s.matches(b"tok-1234"));
        assert!(!format!("{s:?}").contains("tok"));
        assert_ne!(*random_token(), *random_token());
    }
}
