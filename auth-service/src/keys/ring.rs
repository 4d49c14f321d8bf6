//! The signing-key ring in memory: the published keys (next, current, retired) with their
//! signers, the verification set built from them and their feed form. Which state a key is
//! in, and how it changes, is the state machine of `keys::lifecycle`.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::Kid;
use protocol::feed::{FeedKey, KeyStatus};
use protocol::jwks::{Jwks, KeySet};
use protocol::token::SigningKey;

use crate::error::{Error, Result};
use crate::keys::kek::Kek;
use crate::store::records::{KeyRow, KeyState};

/// One published key in memory.
#[derive(Debug, Clone)]
pub(crate) struct RingKey {
    pub(crate) row: KeyRow,
    pub(crate) signer: Arc<SigningKey>,
}

/// The published keys (next, current, retired) with their signers.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyRing {
    keys: BTreeMap<Kid, RingKey>,
    set: KeySet,
}

fn status_of(s: KeyState) -> Option<KeyStatus> {
    match s {
        KeyState::Next => Some(KeyStatus::Next),
        KeyState::Current => Some(KeyStatus::Current),
        KeyState::Retired => Some(KeyStatus::Retired),
        KeyState::Revoked | KeyState::Expired => None,
    }
}

impl KeyRing {
    /// Rebuilds the ring from stored rows, opening every published key's seed.
    pub(crate) fn from_rows(rows: &[KeyRow], kek: &Kek) -> Result<KeyRing> {
        let mut ring = KeyRing::default();
        for row in rows.iter().filter(|r| r.state.published()) {
            let sealed = row.sealed_seed.as_deref().ok_or_else(|| {
                Error::Internal(format!("published key {} has no stored seed", row.kid))
            })?;
            let seed = kek.open(&row.kid, sealed)?;
            let signer = SigningKey::from_seed(row.kid.clone(), &seed)
                .map_err(|e| Error::Internal(e.to_string()))?;
            if signer.public_bytes() != row.public {
                return Err(Error::Internal(format!(
                    "stored key {} does not match its public key",
                    row.kid
                )));
            }
            ring.keys.insert(
                row.kid.clone(),
                RingKey {
                    row: row.clone(),
                    signer: Arc::new(signer),
                },
            );
        }
        ring.rebuild();
        Ok(ring)
    }

    fn rebuild(&mut self) {
        self.set = KeySet::new(
            self.keys
                .iter()
                .map(|(kid, k)| (kid.clone(), k.signer.public_key()))
                .collect(),
        );
    }

    /// Applies a stored row: a published key is added or updated (its signer must be given
    /// when it is new), any other state removes it.
    pub(crate) fn apply(&mut self, row: &KeyRow, signer: Option<Arc<SigningKey>>) {
        if row.state.published() {
            let signer = match (signer, self.keys.get(&row.kid)) {
                (Some(s), _) => s,
                (None, Some(k)) => k.signer.clone(),
                (None, None) => return,
            };
            self.keys.insert(
                row.kid.clone(),
                RingKey {
                    row: KeyRow {
                        sealed_seed: None,
                        ..row.clone()
                    },
                    signer,
                },
            );
        } else {
            self.keys.remove(&row.kid);
        }
        self.rebuild();
    }

    pub(crate) fn get(&self, kid: &Kid) -> Option<&RingKey> {
        self.keys.get(kid)
    }

    fn with_state(&self, state: KeyState) -> impl Iterator<Item = &RingKey> {
        self.keys.values().filter(move |k| k.row.state == state)
    }

    /// Keys in a given state, oldest first (by creation, then kid: the map is in kid order
    /// and the sort is stable).
    pub(crate) fn in_state(&self, state: KeyState) -> Vec<&RingKey> {
        let mut v: Vec<&RingKey> = self.with_state(state).collect();
        v.sort_by_key(|k| k.row.created_at);
        v
    }

    /// The newest key in `state` (the last of [`KeyRing::in_state`]), without collecting.
    fn newest(&self, state: KeyState) -> Option<&RingKey> {
        self.with_state(state).max_by_key(|k| k.row.created_at)
    }

    /// The signing key.
    pub(crate) fn current(&self) -> Option<&RingKey> {
        self.newest(KeyState::Current)
    }

    pub(crate) fn next(&self) -> Option<&RingKey> {
        self.newest(KeyState::Next)
    }

    /// The verification set (next + current + retired).
    pub(crate) fn key_set(&self) -> &KeySet {
        &self.set
    }

    pub(crate) fn jwks(&self) -> Jwks {
        self.set.to_jwks()
    }

    pub(crate) fn feed_key(row: &KeyRow) -> Option<FeedKey> {
        Some(FeedKey {
            kid: row.kid.clone(),
            x: URL_SAFE_NO_PAD.encode(row.public),
            status: status_of(row.state)?,
            created_at: row.created_at,
        })
    }

    /// Every published key as the feed lists it.
    pub(crate) fn feed_keys(&self) -> Vec<FeedKey> {
        self.keys
            .values()
            .filter_map(|k| Self::feed_key(&k.row))
            .collect()
    }
}
