//! The key-encryption key that seals private keys at rest (AES-256-GCM, ring), the MAC keys
//! derived from it for other purposes, the system's secure random source, and the generation
//! of a fresh sealed signing key.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::Kid;
use protocol::time::UnixSeconds;
use protocol::token::SigningKey;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hmac;
use ring::rand::{SecureRandom as _, SystemRandom};
use runtime::IoContext as _;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::store::records::{KeyRow, KeyState};

/// Length of the key-encryption key, in bytes.
pub(crate) const KEK_BYTES: usize = 32;
/// Random bytes in a generated kid (base64url: 12 characters after the `k-` prefix).
const KID_RANDOM_BYTES: usize = 9;
/// Format version of a sealed seed: `version || nonce || ciphertext || tag`.
const SEALED_VERSION: u8 = 1;
/// Domain separation of the AEAD's associated data (the kid follows it).
const SEAL_AAD_CONTEXT: &[u8] = b"cellbind-key-seed-v1:";
/// Domain separation of the keys derived from the KEK (the purpose's label follows it).
const DERIVE_CONTEXT: &[u8] = b"cellbind-kek-derive-v1:";

/// Fills a buffer from the system's secure random source.
pub(crate) fn random<const N: usize>(rng: &SystemRandom) -> Result<Zeroizing<[u8; N]>> {
    let mut buf = Zeroizing::new([0u8; N]);
    rng.fill(buf.as_mut())
        .map_err(|_| Error::Crypto("system random source failed"))?;
    Ok(buf)
}

/// The key-encryption key. `Debug` never shows it.
pub(crate) struct Kek {
    key: LessSafeKey,
    /// The same 32 bytes as an HMAC-SHA256 key, used only to derive other keys
    /// ([`Kek::derive_mac_key`]), never to MAC data itself.
    derive: hmac::Key,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kek(<redacted>)")
    }
}

/// A key file readable by more than its owner: made 0600 when this process may change it.
/// A file it may not change (a mounted secret: Kubernetes projects a Secret read-only, owned by
/// root, group-readable by the pod's `fsGroup`) is accepted when it is owned by root and others
/// cannot read it — PostgreSQL's rule for its key file; anything else is refused.
fn restrict(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    match runtime::restrict_files(&[path]) {
        Ok(()) => {
            tracing::warn!(path = %path.display(), "key-encryption key file was readable by group or others: made 0600");
            Ok(())
        }
        Err(_) if meta.uid() == ROOT_UID && meta.mode() & runtime::secret::OTHERS_BITS == 0 => {
            tracing::info!(path = %path.display(), "key-encryption key file is a root-owned secret readable by its group (kept as it is)");
            Ok(())
        }
        Err(e) => Err(runtime::IoError::new(
            format!(
                "restrict {} (make it 0600 and owned by this service's user, or root-owned with no access for others)",
                path.display()
            ),
            e,
        )
        .into()),
    }
}

/// The owner a mounted secret may have besides this process's user.
const ROOT_UID: u32 = 0;

impl Kek {
    /// Reads the key file, or creates it (32 random bytes, mode 0600) if it does not exist.
    pub(crate) fn load_or_create(path: &Path, rng: &SystemRandom) -> Result<Kek> {
        let bytes = match std::fs::read(path) {
            Ok(b) => {
                if let Ok(meta) = std::fs::metadata(path)
                    && meta.permissions().mode() & 0o077 != 0
                {
                    restrict(path, &meta)?;
                }
                Zeroizing::new(b)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Replicas of a cell starting at once may share the file: the key is written
                // whole beside it, then published with a link that fails if another replica
                // published first — whose key is then the one read back.
                let fresh = random::<KEK_BYTES>(rng)?;
                let tmp = runtime::files::beside(path, &format!(".new-{}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)
                    .and_then(|mut f| f.write_all(fresh.as_ref()).and_then(|()| f.sync_all()));
                let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "created a new key-encryption key");
                        Zeroizing::new(fresh.to_vec())
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Zeroizing::new(
                        std::fs::read(path).with_context(|| format!("read {}", path.display()))?,
                    ),
                    Err(e) => {
                        return Err(
                            runtime::IoError::new(format!("create {}", path.display()), e).into(),
                        );
                    }
                }
            }
            Err(e) => {
                return Err(runtime::IoError::new(format!("read {}", path.display()), e).into());
            }
        };
        Self::from_bytes(&bytes)
    }

    /// From 32 raw bytes.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Kek> {
        if bytes.len() != KEK_BYTES {
            return Err(Error::Config(format!(
                "key-encryption key must be exactly {KEK_BYTES} bytes"
            )));
        }
        let unbound = UnboundKey::new(&AES_256_GCM, bytes)
            .map_err(|_| Error::Crypto("bad key-encryption key"))?;
        Ok(Kek {
            key: LessSafeKey::new(unbound),
            derive: hmac::Key::new(hmac::HMAC_SHA256, bytes),
        })
    }

    /// An HMAC-SHA256 key for one purpose, named by `label` (distinct labels give independent
    /// keys): `HMAC-SHA256(kek, "cellbind-kek-derive-v1:" || label)`, the one-block HKDF
    /// expansion of a key that is already uniformly random. Every replica of a cell derives
    /// the same key (they share the KEK); the KEK itself never leaves this type.
    pub(crate) fn derive_mac_key(&self, label: &[u8]) -> hmac::Key {
        let mut ctx = hmac::Context::with_key(&self.derive);
        ctx.update(DERIVE_CONTEXT);
        ctx.update(label);
        hmac::Key::new(hmac::HMAC_SHA256, ctx.sign().as_ref())
    }

    fn aad(kid: &Kid) -> Vec<u8> {
        let mut aad = SEAL_AAD_CONTEXT.to_vec();
        aad.extend_from_slice(kid.as_str().as_bytes());
        aad
    }

    /// Seals a seed, bound to its kid.
    pub(crate) fn seal(&self, rng: &SystemRandom, kid: &Kid, seed: &[u8; 32]) -> Result<Vec<u8>> {
        let nonce_bytes = random::<NONCE_LEN>(rng)?;
        let nonce = Nonce::assume_unique_for_key(*nonce_bytes);
        let mut in_out = seed.to_vec();
        self.key
            .seal_in_place_append_tag(nonce, Aad::from(Self::aad(kid)), &mut in_out)
            .map_err(|_| Error::Crypto("sealing a key failed"))?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + in_out.len());
        out.push(SEALED_VERSION);
        out.extend_from_slice(nonce_bytes.as_ref());
        out.extend_from_slice(&in_out);
        Ok(out)
    }

    /// Opens a sealed seed; fails if the kid, the key or any byte differs.
    pub(crate) fn open(&self, kid: &Kid, sealed: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        let bad =
            || Error::Crypto("a stored private key does not open with this key-encryption key");
        let (&version, rest) = sealed.split_first().ok_or_else(bad)?;
        if version != SEALED_VERSION || rest.len() < NONCE_LEN {
            return Err(bad());
        }
        let (nonce, ct) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| bad())?;
        let mut buf = Zeroizing::new(ct.to_vec());
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(Self::aad(kid)), &mut buf)
            .map_err(|_| bad())?;
        let seed: [u8; 32] = (&*plain).try_into().map_err(|_| bad())?;
        Ok(Zeroizing::new(seed))
    }
}

/// A freshly generated key: its signer and its sealed row.
pub(crate) fn generate(
    rng: &SystemRandom,
    kek: &Kek,
    state: KeyState,
    now: UnixSeconds,
) -> Result<(Arc<SigningKey>, KeyRow)> {
    let id = random::<KID_RANDOM_BYTES>(rng)?;
    let kid = Kid::new(format!("k-{}", URL_SAFE_NO_PAD.encode(id.as_ref())))
        .map_err(|e| Error::Internal(e.to_string()))?;
    let seed = random::<32>(rng)?;
    let signer =
        SigningKey::from_seed(kid.clone(), &seed).map_err(|e| Error::Internal(e.to_string()))?;
    let sealed = kek.seal(rng, &kid, &seed)?;
    let row = KeyRow {
        kid,
        state,
        public: signer.public_bytes(),
        sealed_seed: Some(sealed),
        created_at: now,
        state_at: now,
    };
    Ok((Arc::new(signer), row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_mac_keys_depend_on_the_kek_and_the_label_only() {
        let tag = |kek: &Kek, label: &[u8]| {
            hmac::sign(&kek.derive_mac_key(label), b"message")
                .as_ref()
                .to_vec()
        };
        let a = Kek::from_bytes(&[3; 32]).unwrap();
        let same = Kek::from_bytes(&[3; 32]).unwrap();
        let other = Kek::from_bytes(&[4; 32]).unwrap();
        assert_eq!(tag(&a, b"one"), tag(&same, b"one"), "replicas agree");
        assert_ne!(tag(&a, b"one"), tag(&a, b"two"));
        assert_ne!(tag(&a, b"one"), tag(&other, b"one"));
        // Never the KEK itself used as the MAC key.
        let raw = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &[3; 32]), b"message");
        assert_ne!(tag(&a, b"one"), raw.as_ref());
    }

    #[test]
    fn sealed_seeds_open_only_under_their_kid_and_key() {
        let rng = SystemRandom::new();
        let kek = Kek::from_bytes(&[3; 32]).unwrap();
        let (signer, row) = generate(&rng, &kek, KeyState::Current, 1).unwrap();
        let sealed = row.sealed_seed.clone().unwrap();
        assert!(!sealed.windows(32).any(|w| w == signer.seed().as_slice()));
        assert_eq!(*kek.open(&row.kid, &sealed).unwrap(), *signer.seed());
        let other_kid = Kid::new("k-other").unwrap();
        assert!(kek.open(&other_kid, &sealed).is_err());
        assert!(
            Kek::from_bytes(&[4; 32])
                .unwrap()
                .open(&row.kid, &sealed)
                .is_err()
        );
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(kek.open(&row.kid, &flipped).is_err());
        let ring = crate::keys::ring::KeyRing::from_rows(std::slice::from_ref(&row), &kek).unwrap();
        assert_eq!(ring.current().unwrap().row.kid, row.kid);
        assert!(
            crate::keys::ring::KeyRing::from_rows(&[row], &Kek::from_bytes(&[4; 32]).unwrap())
                .is_err()
        );
    }

    #[test]
    fn kek_file_is_created_0600_reused_and_kept_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kek");
        let rng = SystemRandom::new();
        let a = Kek::load_or_create(&path, &rng).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEK_BYTES);
        let (_, row) = generate(&rng, &a, KeyState::Next, 1).unwrap();
        // A key file someone widened is made 0600 again when loaded.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let b = Kek::load_or_create(&path, &rng).unwrap();
        assert!(
            b.open(&row.kid, row.sealed_seed.as_deref().unwrap())
                .is_ok()
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, [1u8; 5]).unwrap();
        assert!(Kek::load_or_create(&path, &rng).is_err());
    }
}
