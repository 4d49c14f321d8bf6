//! Secrets held by the servers and the operator tools: bearer tokens read from 0600 files,
//! compared in constant time, zeroized on drop and never printed; and the check that refuses a
//! secret file others may read ([`refuse_readable_by_others`], run on every file a server's
//! configuration names when it starts and by `--check-config`).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng as _;
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

/// Random bytes in a generated token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// A secret token held in memory: zeroized when the last clone drops, `Debug` redacted,
/// compared in constant time. Cloning shares one allocation.
#[derive(Clone)]
pub struct Secret(Arc<Zeroizing<String>>);

impl Secret {
    /// Wraps a token already in memory.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(Arc::new(Zeroizing::new(s.into())))
    }

    /// Reads a token file (surrounding whitespace ignored); refuses an empty one.
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|source| SecretError::Read {
                    path: path.to_owned(),
                    source,
                })?,
            );
        let t = text.trim();
        if t.is_empty() {
            return Err(SecretError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(Secret::new(t))
    }

    /// Constant-time comparison with a presented value.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented))
    }

    /// `true` when `headers` carry exactly one `Authorization: Bearer <token>` header (read by
    /// the one strict extractor, [`protocol::http::Presented`]) whose token is this secret. The
    /// admin and internal APIs of every server check their bearer token with it.
    pub fn authorizes(&self, headers: &axum::http::HeaderMap) -> bool {
        matches!(
            protocol::http::Presented::from_headers(headers).authorization,
            Some(Ok(t)) if self.matches(t.as_bytes())
        )
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

/// Why a secret file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is readable by others (mode {mode:04o}): a secret file grants no permission to others \
         (chmod 0600, or 0640/0440 to share it with a group)",
        path.display()
    )]
    ReadableByOthers { path: PathBuf, mode: u32 },
}

/// The permission bits of "others" (neither the owner nor the group).
pub const OTHERS_BITS: u32 = 0o007;

/// Refuses a secret file (a token, a key, a database URL) whose mode grants any permission to
/// others (ATTACKS A30). The owner's and the group's bits are free: Kubernetes mounts secrets
/// 0440 with an `fsGroup`. Follows symbolic links (a mounted secret is one). `Ok(false)` when
/// there is no such file (a start reports that when it reads it, or creates the file 0600).
pub fn refuse_readable_by_others(path: &Path) -> Result<bool, SecretError> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & OTHERS_BITS != 0 {
                return Err(SecretError::ReadableByOthers {
                    path: path.to_owned(),
                    mode,
                });
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SecretError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes `bytes` to `path` with mode 0600, replacing any previous file atomically (a
/// temporary file beside it, synced, then renamed).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SecretError> {
    write_atomic(path, bytes, crate::files::PRIVATE_FILE_MODE)
}

/// Writes `bytes` to `path` with `mode`, through a temporary file and a rename. The temporary
/// file is `path`'s name plus `.tmp`, so two files that differ only in their extension
/// (`x.pem`, `x.key`) never share one.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SecretError> {
    let tmp = crate::files::beside(path, ".tmp");
    let failed = |p: &Path| {
        let p = p.to_owned();
        move |source| SecretError::Write { path: p, source }
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(failed(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(failed(&tmp))?;
    // The umask may have narrowed `mode`; set it exactly.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(failed(&tmp))?;
    std::fs::rename(&tmp, path).map_err(failed(path))
}

/// A fresh random token (base64url, [`TOKEN_BYTES`] random bytes).
pub fn random_token() -> Zeroizing<String> {
    let mut b = Zeroizing::new([0u8; TOKEN_BYTES]);
    rand::rng().fill_bytes(b.as_mut());
    Zeroizing::new(URL_SAFE_NO_PAD.encode(b.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token_and_matching_is_exact() {
        let s = Secret::new("tok-123");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert!(s.matches(b"tok-123"));
        assert!(!s.matches(b"tok-12"));
        assert!(!s.matches(b"tok-1234"));
    }

    #[test]
    fn authorizes_exactly_one_bearer_header_with_the_token() {
        use axum::http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
        let s = Secret::new("tok-123");
        let with = |values: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(AUTHORIZATION, HeaderValue::from_static(v));
            }
            h
        };
        assert!(s.authorizes(&with(&["Bearer tok-123"])));
        assert!(!s.authorizes(&with(&[])));
        assert!(!s.authorizes(&with(&["Bearer tok-12"])));
        assert!(!s.authorizes(&with(&["bearer tok-123"])));
        assert!(!s.authorizes(&with(&["Basic tok-123"])));
        assert!(!s.authorizes(&with(&["Bearer tok-123", "Bearer tok-123"])));
    }

    #[test]
    fn files_are_written_owner_only_and_read_back_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("admin.token");
        write_private(&p, b"abc\n").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Secret::from_file(&p).unwrap().expose(), "abc");
        write_private(&p, b"  \n").unwrap();
        assert!(matches!(
            Secret::from_file(&p),
            Err(SecretError::Empty { .. })
        ));
        assert!(matches!(
            Secret::from_file(&dir.path().join("missing")),
            Err(SecretError::Read { .. })
        ));
    }

    #[test]
    fn a_secret_file_others_may_read_is_refused_and_a_group_readable_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("feed.token");
        write_private(&p, b"t").unwrap();
        assert!(refuse_readable_by_others(&p).unwrap());
        for mode in [0o640, 0o440, 0o400, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(refuse_readable_by_others(&p).is_ok(), "{mode:o}");
        }
        for mode in [0o644, 0o604, 0o602, 0o601, 0o777] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = refuse_readable_by_others(&p).unwrap_err().to_string();
            assert!(
                e.contains(&p.display().to_string()) && e.contains(&format!("{mode:04o}")),
                "{e}"
            );
        }
        // Through a symbolic link (how Kubernetes mounts a secret): the target's mode.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(refuse_readable_by_others(&link).is_err());
        assert!(!refuse_readable_by_others(&dir.path().join("missing")).unwrap());
    }

    #[test]
    fn random_tokens_differ_and_are_url_safe() {
        let a = random_token();
        let b = random_token();
        assert_ne!(*a, *b);
        assert_eq!(a.len(), 43);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }
}
