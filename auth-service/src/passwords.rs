//! Password hashing: argon2id at the OWASP parameters (m = 19456 KiB, t = 2, p = 1).

use argon2::{Algorithm, Argon2, Params, Version};
use argon2::{PasswordHash, PasswordHasher as _, PasswordVerifier as _};
use protocol::Password;
use ring::rand::SystemRandom;

use crate::error::{Error, Result};
use crate::keys::kek::random;

/// Memory cost in KiB (OWASP password storage cheat sheet, argon2id option 2).
pub const ARGON2_MEMORY_KIB: u32 = 19_456;
/// Iterations.
pub const ARGON2_ITERATIONS: u32 = 2;
/// Lanes.
pub const ARGON2_LANES: u32 = 1;
/// Salt length in bytes.
const SALT_BYTES: usize = 16;
/// Longest PHC string accepted on import, in bytes.
pub const MAX_PHC_BYTES: usize = 256;

fn argon2() -> Result<Argon2<'static>> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_ITERATIONS, ARGON2_LANES, None)
        .map_err(|_| Error::Crypto("argon2 parameters"))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// Hashes a password into a PHC string. Slow by design: run it on the blocking pool.
pub fn hash(password: &Password, rng: &SystemRandom) -> Result<String> {
    let salt = random::<SALT_BYTES>(rng)?;
    argon2()?
        .hash_password_with_salt(password.expose().as_bytes(), &salt[..])
        .map(|h| h.to_string())
        .map_err(|_| Error::Crypto("argon2 hashing failed"))
}

/// Checks that an imported PHC string is argon2id, version 0x13, at least as strong as ours.
pub fn check_phc(phc: &str) -> Result<()> {
    let bad = |why: &str| Error::BadRequest(format!("password_hash: {why}"));
    if phc.len() > MAX_PHC_BYTES {
        return Err(bad("too long"));
    }
    let parsed = PasswordHash::new(phc).map_err(|_| bad("not a PHC string"))?;
    if parsed.algorithm != argon2::ARGON2ID_IDENT {
        return Err(bad("not argon2id"));
    }
    if parsed.version != Some(Version::V0x13.into()) {
        return Err(bad("not argon2 version 19"));
    }
    let params = Params::try_from(&parsed).map_err(|_| bad("bad parameters"))?;
    if params.m_cost() < ARGON2_MEMORY_KIB
        || params.t_cost() < ARGON2_ITERATIONS
        || params.p_cost() < ARGON2_LANES
    {
        return Err(bad("parameters weaker than m=19456,t=2,p=1"));
    }
    if parsed.hash.is_none() || parsed.salt.is_none() {
        return Err(bad("no salt or hash"));
    }
    Ok(())
}

/// Verifies a password against a PHC string (with the parameters the string names).
/// A malformed stored string verifies nothing. Slow by design: run it on the blocking pool.
pub fn verify(phc: &str, password: &Password) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    Argon2::default()
        .verify_password(password.expose().as_bytes(), &parsed)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_verify_and_phc_checks() {
        let rng = SystemRandom::new();
        let pw = Password::new("correct horse").unwrap();
        let phc = hash(&pw, &rng).unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify(&phc, &pw));
        assert!(!verify(&phc, &Password::new("wrong horse").unwrap()));
        assert!(check_phc(&phc).is_ok());
        let weak = phc.replace("m=19456", "m=8");
        assert!(check_phc(&weak).is_err());
        assert!(check_phc(&phc.replace("argon2id", "argon2i")).is_err());
        assert!(check_phc("plaintext").is_err());
        assert!(!verify("garbage", &pw));
    }

    /// A PHC string made by the reference implementation (libargon2, through argon2-cffi) at
    /// our parameters: stored hashes stay verifiable across argon2 crate upgrades.
    #[test]
    fn a_reference_implementation_hash_verifies() {
        const REFERENCE: &str = "$argon2id$v=19$m=19456,t=2,p=1$viCEhr++wcqPJgVDwKkY9Q$dvYtxcjx3LyutiR8mU93Q2DGidI1iVxlXq3tDU/b/ms";
        assert!(check_phc(REFERENCE).is_ok());
        assert!(verify(
            REFERENCE,
            &Password::new("correct horse battery staple").unwrap()
        ));
        assert!(!verify(
            REFERENCE,
            &Password::new("correct horse battery stapler").unwrap()
        ));
    }
}
