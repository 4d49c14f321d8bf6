//! Device tokens (ATTACKS A36; OWASP "Slow down online guessing attacks with device cookies"):
//! proof that a device signed in to one account of this cell before, so that failures of other
//! clients on that account cannot lock the device out (`throttle`).
//!
//! ```text
//!   d1.<base64url( lineage u64 BE ‖ issued u64 BE ‖ HMAC-SHA256 tag, 32 bytes )>
//!   tag = HMAC(device key, "cellbind-device-token-v1" ‖ cell ‖ contractor ‖ login ‖ lineage ‖ issued)
//!         (each text length-prefixed; the device key is derived from the cell's KEK, so every
//!          replica of the cell verifies what another issued)
//! ```
//!
//! - `lineage` is the `auth_time` of the password sign-in the token descends from: a sign-in
//!   issues one at its own time, a rebind at the target carries the session's `auth_time`. The
//!   throttle keys a device's bucket on it, so every token descended from one sign-in shares
//!   one bucket, and a new bucket costs a correct password.
//! - A token lives [`DEVICE_TOKEN_LIFETIME_S`] from `issued`: longer than a session's absolute
//!   lifetime, so the device whose renewals ran out still holds a valid token at its next
//!   sign-in.
//! - It is never a session and never accepted as one: it is not a JWS, it is only read from a
//!   sign-in body, and all it buys is a throttle bucket of its own. It names no account: the
//!   sign-in request it comes with does, and the tag binds the two. A token that fails any
//!   check counts as no token (the ordinary buckets apply).
//! - The tag is compared in constant time (`ring::hmac::verify`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::api::DeviceToken;
use protocol::time::UnixSeconds;
use protocol::token::LEEWAY_S;
use protocol::{CellId, ContractorId, Login};
use ring::hmac;

use crate::keys::kek::Kek;

/// How long a device token is accepted after it was issued: 180 days, in seconds (longer than
/// the 90-day absolute session lifetime, `protocol::token::DEFAULT_ABSOLUTE_LIFETIME_S`).
pub(crate) const DEVICE_TOKEN_LIFETIME_S: u64 = 180 * 24 * 3600;
/// The token's version prefix.
const PREFIX: &str = "d1.";
/// Label of the device key derived from the KEK.
const KEY_LABEL: &[u8] = b"device-token";
/// Domain separation of the tag.
const TAG_CONTEXT: &[u8] = b"cellbind-device-token-v1";
/// Bytes of the decoded token: lineage, issued, tag.
const TOKEN_BYTES: usize = 8 + 8 + 32;

/// A verified device token: which sign-in it descends from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Device {
    /// The `auth_time` of the password sign-in the token descends from.
    pub(crate) lineage: UnixSeconds,
}

/// Issues and verifies this cell's device tokens. `Debug` never shows the key.
pub(crate) struct DeviceTokens {
    key: hmac::Key,
    cell: CellId,
}

impl std::fmt::Debug for DeviceTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTokens({})", self.cell)
    }
}

fn put_text(msg: &mut Vec<u8>, text: &str) {
    msg.extend_from_slice(&(text.len() as u64).to_be_bytes());
    msg.extend_from_slice(text.as_bytes());
}

impl DeviceTokens {
    /// The device tokens of `cell`, keyed from its KEK.
    pub(crate) fn new(kek: &Kek, cell: CellId) -> DeviceTokens {
        DeviceTokens {
            key: kek.derive_mac_key(KEY_LABEL),
            cell,
        }
    }

    /// What the tag covers.
    fn message(
        &self,
        ctr: &ContractorId,
        login: &Login,
        lineage: UnixSeconds,
        issued: UnixSeconds,
    ) -> Vec<u8> {
        let mut msg = TAG_CONTEXT.to_vec();
        put_text(&mut msg, self.cell.as_str());
        put_text(&mut msg, ctr.as_str());
        put_text(&mut msg, login.as_str());
        msg.extend_from_slice(&lineage.to_be_bytes());
        msg.extend_from_slice(&issued.to_be_bytes());
        msg
    }

    /// A token for `login` of `ctr`, descending from the sign-in at `lineage`, issued `now`.
    pub(crate) fn issue(
        &self,
        ctr: &ContractorId,
        login: &Login,
        lineage: UnixSeconds,
        now: UnixSeconds,
    ) -> Option<DeviceToken> {
        let tag = hmac::sign(&self.key, &self.message(ctr, login, lineage, now));
        let mut raw = Vec::with_capacity(TOKEN_BYTES);
        raw.extend_from_slice(&lineage.to_be_bytes());
        raw.extend_from_slice(&now.to_be_bytes());
        raw.extend_from_slice(tag.as_ref());
        // Always `d1.` and 64 base64url characters: within DeviceToken's rules.
        DeviceToken::new(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw))).ok()
    }

    /// The device a token proves for `login` of `ctr` at `now`, or `None` when it proves
    /// nothing (malformed, another account or cell, a wrong tag, issued in the future, expired).
    pub(crate) fn verify(
        &self,
        token: &DeviceToken,
        ctr: &ContractorId,
        login: &Login,
        now: UnixSeconds,
    ) -> Option<Device> {
        let body = token.expose().strip_prefix(PREFIX)?;
        let raw = URL_SAFE_NO_PAD.decode(body).ok()?;
        if raw.len() != TOKEN_BYTES {
            return None;
        }
        let (lineage, rest) = raw.split_at(8);
        let (issued, tag) = rest.split_at(8);
        let lineage = u64::from_be_bytes(lineage.try_into().ok()?);
        let issued = u64::from_be_bytes(issued.try_into().ok()?);
        // Constant time: `hmac::verify` compares the tags without an early exit.
        hmac::verify(&self.key, &self.message(ctr, login, lineage, issued), tag).ok()?;
        let fresh = lineage <= issued
            && issued <= now.saturating_add(LEEWAY_S)
            && now < issued.saturating_add(DEVICE_TOKEN_LIFETIME_S);
        fresh.then_some(Device { lineage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn tokens(kek: u8, cell: &str) -> DeviceTokens {
        DeviceTokens::new(
            &Kek::from_bytes(&[kek; 32]).unwrap(),
            CellId::new(cell).unwrap(),
        )
    }

    fn ctr(s: &str) -> ContractorId {
        ContractorId::new(s).unwrap()
    }

    fn login(s: &str) -> Login {
        Login::new(s).unwrap()
    }

    #[test]
    fn a_token_proves_its_account_at_its_cell_for_its_lifetime_only() {
        let d = tokens(1, "cell-01");
        let t = d.issue(&ctr("c-1"), &login("ana"), NOW - 50, NOW).unwrap();
        assert!(t.expose().starts_with("d1.") && t.expose().len() == 3 + 64);
        let ok =
            |tok: &DeviceToken, c: &str, l: &str, now: u64| d.verify(tok, &ctr(c), &login(l), now);
        assert_eq!(
            ok(&t, "c-1", "ana", NOW + 10),
            Some(Device { lineage: NOW - 50 })
        );
        // Another replica of the cell (same KEK) agrees.
        assert!(
            tokens(1, "cell-01")
                .verify(&t, &ctr("c-1"), &login("ana"), NOW)
                .is_some()
        );
        // Another account, contractor, cell or KEK: nothing.
        assert_eq!(ok(&t, "c-1", "bo", NOW), None);
        assert_eq!(ok(&t, "c-2", "ana", NOW), None);
        assert!(
            tokens(1, "cell-02")
                .verify(&t, &ctr("c-1"), &login("ana"), NOW)
                .is_none()
        );
        assert!(
            tokens(2, "cell-01")
                .verify(&t, &ctr("c-1"), &login("ana"), NOW)
                .is_none()
        );
        // Lifetime: accepted until just before `issued + lifetime`.
        assert!(ok(&t, "c-1", "ana", NOW + DEVICE_TOKEN_LIFETIME_S - 1).is_some());
        assert_eq!(ok(&t, "c-1", "ana", NOW + DEVICE_TOKEN_LIFETIME_S), None);
        // Issued in the future (beyond the leeway): nothing.
        assert_eq!(ok(&t, "c-1", "ana", NOW - LEEWAY_S - 1), None);
    }

    #[test]
    fn a_changed_or_malformed_token_proves_nothing() {
        let d = tokens(1, "cell-01");
        let t = d.issue(&ctr("c-1"), &login("ana"), NOW, NOW).unwrap();
        let raw = URL_SAFE_NO_PAD
            .decode(t.expose().strip_prefix(PREFIX).unwrap())
            .unwrap();
        let check = |bytes: &[u8], prefix: &str| {
            let tok = DeviceToken::new(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)));
            tok.ok()
                .and_then(|tok| d.verify(&tok, &ctr("c-1"), &login("ana"), NOW))
        };
        assert!(check(&raw, PREFIX).is_some());
        for i in 0..raw.len() {
            let mut flipped = raw.clone();
            flipped[i] ^= 0x01;
            assert_eq!(check(&flipped, PREFIX), None, "byte {i} flipped");
        }
        assert_eq!(check(&raw, "d2."), None);
        assert_eq!(check(&raw, ""), None);
        assert_eq!(check(&raw[..raw.len() - 1], PREFIX), None);
        let mut longer = raw.clone();
        longer.push(0);
        assert_eq!(check(&longer, PREFIX), None);
        // A lineage after the issue time is never issued: refused although the tag is right.
        let later = d.issue(&ctr("c-1"), &login("ana"), NOW + 5, NOW).unwrap();
        assert_eq!(d.verify(&later, &ctr("c-1"), &login("ana"), NOW), None);
        for junk in ["d1.", "d1.!!", "d1.AAAA", "x"] {
            if let Ok(tok) = DeviceToken::new(junk) {
                assert_eq!(d.verify(&tok, &ctr("c-1"), &login("ana"), NOW), None);
            }
        }
    }
}
