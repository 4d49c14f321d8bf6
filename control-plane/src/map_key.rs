//! The map signing key: a 32-byte Ed25519 seed in a 0600 file, made on first use.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::Kid;
use protocol::jwks::PublicKey;
use protocol::token::SigningKey;
use rand::Rng as _;
use zeroize::Zeroizing;

use runtime::secret::write_private;
use runtime::{IoContext as _, IoError};

use crate::error::{CpError, Result};

/// Key id of the control plane's map signing key.
pub const MAP_KEY_KID: &str = "control-plane";

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
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            write_private(path, s.as_ref())?;
            s
        }
        Err(e) => return Err(IoError::new(format!("reading {}", path.display()), e).into()),
    };
    SigningKey::from_seed(kid, &seed).map_err(|e| CpError::Key(e.to_string()))
}

/// The base64url form of a public key (as in `fleet.json` and `/v1/map-public-key`).
pub fn public_key_b64(key: &PublicKey) -> String {
    URL_SAFE_NO_PAD.encode(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

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
}
