//! The feed credential of one edge instance (ATTACKS A32, A37): what an edge presents to its
//! cell's auth-service as `Authorization: Bearer …` on the feed and the revocation handback.
//!
//! ```text
//!   cbi1.<instance id>.<base64url(HMAC-SHA256(cell feed secret, "cellbind-feed-instance-v1" 0 cell 0 instance))>
//! ```
//!
//! The cell's feed secret (the auth-service's `feed_token_file`) never leaves the auth-service
//! and the operator's tooling: each edge instance holds only its own credential, which names
//! it. So the auth-service knows which instance asks (the instance list, the migration drain
//! and a handback's audit trust only that name), a made-up instance cannot ask at all, and one
//! instance's leaked credential is that instance's alone. Deriving, not registering: the
//! auth-service keeps no list of credentials, and an operator mints one for a new instance
//! with `cellctl edge-credential` (or `cellctl dev` for its fleet) from the feed secret.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use protocol::{CellId, InstanceId};
use ring::hmac;
use subtle::ConstantTimeEq as _;

use crate::Secret;

/// The version prefix of an instance credential.
pub const PREFIX: &str = "cbi1.";
/// Domain separation of the MAC's input.
const CONTEXT: &[u8] = b"cellbind-feed-instance-v1";
/// Characters of the MAC part (32 bytes in base64url without padding).
const MAC_CHARS: usize = 43;

/// Why a presented feed credential is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// Not of the `cbi1.<instance>.<mac>` shape, or the instance id is not one.
    #[error("not an instance feed credential")]
    Malformed,
    /// Well formed, but not made with this cell's feed secret for that instance.
    #[error("the instance feed credential does not verify")]
    Mismatch,
}

fn mac(feed_secret: &Secret, cell: &CellId, instance: &InstanceId) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA256, feed_secret.expose().as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(CONTEXT);
    ctx.update(&[0]);
    ctx.update(cell.as_str().as_bytes());
    ctx.update(&[0]);
    ctx.update(instance.as_str().as_bytes());
    ctx.sign()
}

/// The credential of `instance` of `cell`, made with the cell's feed secret.
pub fn derive(feed_secret: &Secret, cell: &CellId, instance: &InstanceId) -> Secret {
    let tag = mac(feed_secret, cell, instance);
    Secret::new(format!(
        "{PREFIX}{instance}.{}",
        URL_SAFE_NO_PAD.encode(tag.as_ref())
    ))
}

/// The instance a credential names, read without verifying it (an edge checks at start that
/// its credential is its own). `None` for anything that is not of the credential's shape.
pub fn instance_of(credential: &str) -> Option<InstanceId> {
    let rest = credential.strip_prefix(PREFIX)?;
    let (instance, mac) = rest.rsplit_once('.')?;
    if mac.len() != MAC_CHARS {
        return None;
    }
    InstanceId::new(instance).ok()
}

/// Whether `presented` looks like an instance credential (rather than another token).
pub fn is_instance_credential(presented: &str) -> bool {
    presented.starts_with(PREFIX)
}

/// Verifies a presented credential against the cell's feed secret; answers the instance it
/// names. The MAC is compared in constant time.
pub fn verify(
    feed_secret: &Secret,
    cell: &CellId,
    presented: &str,
) -> Result<InstanceId, CredentialError> {
    let instance = instance_of(presented).ok_or(CredentialError::Malformed)?;
    let expected = derive(feed_secret, cell, &instance);
    if bool::from(expected.expose().as_bytes().ct_eq(presented.as_bytes())) {
        Ok(instance)
    } else {
        Err(CredentialError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cell(s: &str) -> CellId {
        CellId::new(s).unwrap()
    }

    fn inst(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    #[test]
    fn a_credential_names_its_instance_and_verifies_only_for_it() {
        let secret = Secret::new("the-cell-feed-secret");
        let c = derive(&secret, &cell("cell-01"), &inst("edge-a"));
        assert!(c.expose().starts_with("cbi1.edge-a."));
        assert_eq!(instance_of(c.expose()), Some(inst("edge-a")));
        assert_eq!(
            verify(&secret, &cell("cell-01"), c.expose()),
            Ok(inst("edge-a"))
        );
        // Another instance's name on this MAC, another cell, another secret: refused.
        let renamed = c.expose().replacen("edge-a", "edge-b", 1);
        assert_eq!(
            verify(&secret, &cell("cell-01"), &renamed),
            Err(CredentialError::Mismatch)
        );
        assert_eq!(
            verify(&secret, &cell("cell-02"), c.expose()),
            Err(CredentialError::Mismatch)
        );
        assert_eq!(
            verify(&Secret::new("another"), &cell("cell-01"), c.expose()),
            Err(CredentialError::Mismatch)
        );
    }

    #[test]
    fn the_feed_secret_itself_and_malformed_credentials_are_not_credentials() {
        let secret = Secret::new("the-cell-feed-secret");
        for presented in [
            "the-cell-feed-secret",
            "cbi1.",
            "cbi1.edge-a",
            "cbi1.edge-a.short",
            "cbi1.edge a.0123456789012345678901234567890123456789012",
            "cbi2.edge-a.0123456789012345678901234567890123456789012",
        ] {
            assert_eq!(
                verify(&secret, &cell("cell-01"), presented),
                Err(CredentialError::Malformed),
                "{presented}"
            );
        }
    }
}
