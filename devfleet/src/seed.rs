//! The dev fleet's seed data: contractors c-10001…, their placement (bucket, plus a few
//! overrides), their users, and the one demo password hashed once with argon2id.

use argon2::PasswordHasher as _;
use argon2::{Algorithm, Argon2, Params, Version};
use protocol::admin::cell::{NewUser, Role, UserStatus};
use protocol::map::bucket_of;
use protocol::{CellId, ContractorId, Login, PasswordHash};
use rand::Rng as _;
use zeroize::Zeroizing;

use crate::error::{FleetError, Result};
use control_plane::publish::round_robin_buckets;

/// Number of the first seeded contractor (`c-10001`).
pub const FIRST_CONTRACTOR: u32 = 10_001;
/// Contractors seeded by default.
pub const DEFAULT_CONTRACTORS: u32 = 2_400;
/// Every this many contractors, one is placed away from its bucket's cell (an override).
pub const OVERRIDE_EVERY: u32 = 240;
/// Technician logins of every contractor.
pub const TECHNICIANS: [&str; 2] = ["tech-1", "tech-2"];
/// Dispatcher logins of every contractor.
pub const DISPATCHERS: [&str; 1] = ["dispatch-1"];
/// argon2id memory cost, KiB (OWASP).
pub const ARGON2_M_KIB: u32 = 19_456;
/// argon2id iterations (OWASP).
pub const ARGON2_T: u32 = 2;
/// argon2id parallelism (OWASP).
pub const ARGON2_P: u32 = 1;
/// Random characters of the demo password.
pub const DEMO_PASSWORD_CHARS: usize = 16;

/// Where each seeded contractor lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedPlan {
    /// (contractor, its cell, whether that differs from its bucket's cell).
    pub contractors: Vec<(ContractorId, CellId, bool)>,
}

impl SeedPlan {
    /// `count` contractors from [`FIRST_CONTRACTOR`], placed by the round-robin bucket map of
    /// `bucket_count` buckets over `cells`, except every [`OVERRIDE_EVERY`]th, placed on the
    /// next cell.
    pub fn new(cells: &[CellId], count: u32, bucket_count: usize) -> Result<SeedPlan> {
        if cells.is_empty() {
            return Err(FleetError::Config("a fleet needs at least one cell".into()));
        }
        let buckets = round_robin_buckets(bucket_count, cells.len());
        let mut contractors = Vec::with_capacity(count as usize);
        for i in 0..count {
            let c = ContractorId::new(format!("c-{}", FIRST_CONTRACTOR + i))
                .map_err(|e| FleetError::Internal(e.to_string()))?;
            let idx = usize::from(
                buckets
                    .get(bucket_of(&c, buckets.len()))
                    .copied()
                    .unwrap_or(0),
            );
            let moved = cells.len() > 1 && i % OVERRIDE_EVERY == OVERRIDE_EVERY / 2;
            let idx = if moved { (idx + 1) % cells.len() } else { idx };
            let cell = cells
                .get(idx)
                .cloned()
                .ok_or_else(|| FleetError::Internal("cell index".into()))?;
            contractors.push((c, cell, moved));
        }
        Ok(SeedPlan { contractors })
    }

    /// The contractors of one cell.
    pub fn of_cell<'a>(&'a self, cell: &'a CellId) -> impl Iterator<Item = &'a ContractorId> + 'a {
        self.contractors
            .iter()
            .filter(move |(_, c, _)| c == cell)
            .map(|(ctr, _, _)| ctr)
    }
}

/// The users of a contractor (technicians, then dispatchers), for
/// `POST /admin/v1/users/import`, all with the one demo password's `hash`.
pub fn users_of(c: &ContractorId, hash: &str) -> Result<Vec<NewUser>> {
    let tech = TECHNICIANS.iter().map(|l| (*l, Role::Technician));
    let disp = DISPATCHERS.iter().map(|l| (*l, Role::Dispatcher));
    tech.chain(disp)
        .map(|(login, role)| {
            Ok(NewUser {
                contractor_id: c.clone(),
                login: Login::new(login).map_err(|e| FleetError::Internal(e.to_string()))?,
                role,
                password: None,
                password_hash: Some(PasswordHash::new(hash)),
                status: UserStatus::Active,
            })
        })
        .collect()
}

/// A random demo password (`demo-` + 16 alphanumerics).
pub fn demo_password() -> Zeroizing<String> {
    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    let mut s = Zeroizing::new(String::from("demo-"));
    for _ in 0..DEMO_PASSWORD_CHARS {
        let i = (rng.next_u32() as usize) % ALPHABET.len();
        s.push(char::from(ALPHABET[i]));
    }
    s
}

/// argon2id (m=19456 KiB, t=2, p=1) PHC string of `password`.
pub fn hash_password(password: &str) -> Result<String> {
    let params = Params::new(ARGON2_M_KIB, ARGON2_T, ARGON2_P, None)
        .map_err(|e| FleetError::Internal(format!("argon2 params: {e}")))?;
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    argon
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| FleetError::Internal(format!("argon2: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::PasswordVerifier as _;

    fn cells() -> Vec<CellId> {
        (1..=5)
            .map(|n| CellId::new(format!("cell-0{n}")).unwrap())
            .collect()
    }

    #[test]
    fn plan_spreads_contractors_and_has_a_few_overrides() {
        let cells = cells();
        let plan = SeedPlan::new(&cells, DEFAULT_CONTRACTORS, 1024).unwrap();
        assert_eq!(plan.contractors.len(), 2400);
        assert_eq!(plan.contractors[0].0.as_str(), "c-10001");
        assert_eq!(plan.contractors[2399].0.as_str(), "c-12400");
        let overrides = plan.contractors.iter().filter(|(_, _, m)| *m).count();
        assert_eq!(overrides, 10);
        for cell in &cells {
            let n = plan.of_cell(cell).count();
            assert!(n > 350, "{cell} has only {n}");
        }
        // Non-overridden contractors sit on their bucket's cell.
        let buckets = round_robin_buckets(1024, 5);
        for (c, cell, moved) in &plan.contractors {
            let bucket_cell = &cells[usize::from(buckets[bucket_of(c, 1024)])];
            assert_eq!(bucket_cell == cell, !moved, "{c}");
        }
    }

    #[test]
    fn password_hash_is_argon2id_at_owasp_parameters() {
        let pw = demo_password();
        assert!(pw.starts_with("demo-") && pw.len() == 5 + DEMO_PASSWORD_CHARS);
        let h = hash_password(&pw).unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        let parsed = argon2::PasswordHash::new(&h).unwrap();
        assert!(
            Argon2::default()
                .verify_password(pw.as_bytes(), &parsed)
                .is_ok()
        );
        assert!(
            Argon2::default()
                .verify_password(b"wrong", &parsed)
                .is_err()
        );
    }
}
