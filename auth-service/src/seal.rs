//! Seals on revocations (ATTACKS A32). Every revocation this cell records carries a seal: an
//! HMAC-SHA256, under a key derived from the cell's key-encryption key, over the cell, the feed
//! epoch it was recorded in and the record ([`protocol::revocation::Revocation::seal_message`]).
//! Edges hold the seal with the revocation and hand both back after a restore; the cell takes
//! back only what verifies, so the edges' feed credential cannot write a revocation of its own
//! making (a `cell` revocation dated 2100, a forged time or reason).
//!
//! The key outlives restores (a restore needs the same key-encryption key) and is shared by
//! every replica of the cell; it never leaves the auth-service.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::CellId;
use protocol::revocation::Revocation;
use ring::hmac;

use crate::keys::kek::Kek;

/// The label of the seal key among the keys derived from the key-encryption key.
const SEAL_KEY_LABEL: &[u8] = b"revocation-seal-v1";

/// Seals and checks the revocations of one cell.
#[derive(Clone)]
pub(crate) struct Sealer {
    key: hmac::Key,
    cell: CellId,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("cell", &self.cell)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// The sealer of `cell`, keyed from its key-encryption key.
    pub(crate) fn new(kek: &Kek, cell: &CellId) -> Sealer {
        Sealer {
            key: kek.derive_mac_key(SEAL_KEY_LABEL),
            cell: cell.clone(),
        }
    }

    /// The seal of `r` as recorded in `epoch`.
    pub(crate) fn seal(&self, epoch: &str, r: &Revocation) -> String {
        let tag = hmac::sign(&self.key, &r.seal_message(&self.cell, epoch));
        URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    /// `r` with its seal for `epoch`.
    pub(crate) fn sealed(&self, epoch: &str, mut r: Revocation) -> Revocation {
        r.seal = Some(self.seal(epoch, &r));
        r
    }

    /// Whether `r` carries this cell's seal for `epoch` (compared in constant time).
    pub(crate) fn verifies(&self, epoch: &str, r: &Revocation) -> bool {
        let Some(seal) = r.seal.as_deref() else {
            return false;
        };
        let Ok(tag) = URL_SAFE_NO_PAD.decode(seal) else {
            return false;
        };
        hmac::verify(&self.key, &r.seal_message(&self.cell, epoch), &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::revocation::RevocationKind;

    #[test]
    fn a_seal_verifies_only_for_its_cell_epoch_and_record() {
        let kek = Kek::from_bytes(&[7; 32]).unwrap();
        let cell = CellId::new("cell-01").unwrap();
        let sealer = Sealer::new(&kek, &cell);
        let r = sealer.sealed(
            "e1",
            Revocation::new(4, RevocationKind::Cell { before: 100 }, 99, "ops", "test"),
        );
        assert!(sealer.verifies("e1", &r));
        assert!(!sealer.verifies("e2", &r), "another epoch");
        let other_cell = Sealer::new(&kek, &CellId::new("cell-02").unwrap());
        assert!(!other_cell.verifies("e1", &r), "another cell");
        let other_kek = Sealer::new(&Kek::from_bytes(&[8; 32]).unwrap(), &cell);
        assert!(!other_kek.verifies("e1", &r), "another key");
        for forged in [
            Revocation {
                kind: RevocationKind::Cell {
                    before: 4_102_444_800,
                },
                ..r.clone()
            },
            Revocation {
                seq: 5,
                ..r.clone()
            },
            Revocation {
                at: 98,
                ..r.clone()
            },
            Revocation {
                reason: "other".into(),
                ..r.clone()
            },
            Revocation {
                seal: None,
                ..r.clone()
            },
            Revocation {
                seal: Some("not base64!".into()),
                ..r.clone()
            },
        ] {
            assert!(!sealer.verifies("e1", &forged), "{forged:?}");
        }
    }
}
