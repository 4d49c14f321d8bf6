//! Synthetic contractors: the only ones a game day signs in, migrates or revokes.
//!
//! They live in the reserved range of contractor ids (`c-synthetic-…`,
//! [`protocol::SYNTHETIC_CONTRACTOR_PREFIX`]), which no real contractor may be given; the
//! edges label their requests `synthetic="true"` in metrics, and every log line names the
//! contractor, so they are told apart everywhere. [`Synthetic`] is the only handle a scenario
//! gets on a contractor, and it cannot be made for a real one.
//!
//! Provisioning ([`provision`]) goes through the admin APIs, at the owning cell, and is
//! idempotent: the ids are stable (`c-synthetic-<cell>-<n>`), so a weekly run re-uses last
//! week's contractors (wherever a migration left them) instead of adding new ones to the map.
//! Each run sets a fresh random password (hashed once, argon2id, the production parameters).
//! At the end ([`retire`]) every synthetic technician is disabled and every session of the
//! run's contractors revoked at their owning cell; the contractor records stay, in the reserved
//! range (the admin APIs delete nothing; docs/DECISIONS.md).

use std::collections::BTreeMap;

use argon2::PasswordHasher as _;
use argon2::{Algorithm, Argon2, Params, Version};
use protocol::admin::cell::{NewUser, Role, UserStatus};
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::time::{Clock as _, SystemClock};
use protocol::{CellId, ContractorId, Generation, Login, Password, PasswordHash};
use rand::Rng as _;
use zeroize::Zeroizing;

use crate::admin::Api;
use crate::error::{CtlError, Result};

/// argon2id memory cost, KiB (the production parameters, OWASP).
pub const ARGON2_M_KIB: u32 = 19_456;
/// argon2id iterations.
pub const ARGON2_T: u32 = 2;
/// argon2id parallelism.
pub const ARGON2_P: u32 = 1;
/// Random characters of a run's password.
pub const PASSWORD_CHARS: usize = 24;

/// A synthetic contractor: the only kind of contractor a game day acts on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Synthetic(ContractorId);

impl Synthetic {
    /// `id`, if it is in the reserved range; a real contractor is refused.
    pub fn new(id: ContractorId) -> Result<Synthetic> {
        if id.is_synthetic() {
            Ok(Synthetic(id))
        } else {
            Err(CtlError::BadRequest(format!(
                "{id} is a real contractor: a game day acts only on synthetic contractors ({}…)",
                protocol::SYNTHETIC_CONTRACTOR_PREFIX
            )))
        }
    }

    /// The stable id of synthetic contractor `n` of `cell`.
    pub fn of_cell(cell: &CellId, n: usize) -> Result<Synthetic> {
        let id = format!(
            "{}{}-{n:04}",
            protocol::SYNTHETIC_CONTRACTOR_PREFIX,
            cell.as_str()
        );
        let id = ContractorId::new(id).map_err(|e| CtlError::Internal(e.to_string()))?;
        Synthetic::new(id)
    }

    pub fn id(&self) -> &ContractorId {
        &self.0
    }
}

impl std::fmt::Display for Synthetic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The fleet and its admin client (provisioning's).
pub use crate::provision::Fleet;

/// One synthetic technician.
#[derive(Debug, Clone)]
pub struct Technician {
    pub contractor: Synthetic,
    pub login: Login,
}

/// The synthetic contractors of a run, where each is owned, and their technicians.
#[derive(Debug)]
pub struct Population {
    /// This run's password of every synthetic technician.
    pub password: Password,
    /// Contractor → its owning cell, as provisioned and as migrations and sign-ins since
    /// learnt ([`Population::owner`], [`Population::moved`]).
    owners: std::sync::RwLock<BTreeMap<Synthetic, CellId>>,
    pub technicians: Vec<Technician>,
}

impl Population {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Synthetic, CellId>> {
        // A panic while writing leaves a map that is still a map.
        self.owners
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The technicians of contractors owned by `cell`.
    pub fn technicians_of(&self, cell: &CellId) -> Vec<&Technician> {
        let owners = self.read();
        self.technicians
            .iter()
            .filter(|t| owners.get(&t.contractor) == Some(cell))
            .collect()
    }

    /// The cell that owns `s`, as last learnt.
    pub fn owner(&self, s: &Synthetic) -> Option<CellId> {
        self.read().get(s).cloned()
    }

    /// `s` is owned by `cell` now (a migration finished, a sign-in was sent on).
    pub fn moved(&self, s: &Synthetic, cell: CellId) {
        self.owners
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(s.clone(), cell);
    }

    /// The synthetic contractors, in id order.
    pub fn contractors(&self) -> Vec<Synthetic> {
        self.read().keys().cloned().collect()
    }
}

/// A random password.
fn password() -> Result<Password> {
    const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    let mut s = Zeroizing::new(String::from("synthetic-"));
    for _ in 0..PASSWORD_CHARS {
        let i = (rng.next_u32() as usize) % ALPHABET.len();
        s.push(char::from(ALPHABET[i]));
    }
    Password::new(s.as_str().to_owned()).map_err(|e| CtlError::Internal(e.to_string()))
}

/// argon2id PHC string of `password`.
fn hash(password: &Password) -> Result<PasswordHash> {
    let params = Params::new(ARGON2_M_KIB, ARGON2_T, ARGON2_P, None)
        .map_err(|e| CtlError::Internal(format!("argon2 params: {e}")))?;
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    argon
        .hash_password_with_salt(password.expose().as_bytes(), &salt)
        .map(|h| PasswordHash::new(h.to_string()))
        .map_err(|e| CtlError::Internal(format!("argon2: {e}")))
}

/// Provisions `wanted` synthetic contractors (each new one in its cell), each with
/// `technicians` technicians (`tech-1`…), and returns them. Idempotent: a contractor the
/// control plane already places keeps its placement (a migration may have moved it); one the
/// owning cell already holds keeps its record.
pub async fn provision(
    ctx: Fleet<'_>,
    wanted: &[(Synthetic, CellId)],
    technicians: usize,
) -> Result<Population> {
    let password = password()?;
    let password_hash = hash(&password)?;
    // Placement, ownership record and the app's copy: the operator's provisioning code.
    let ids: Vec<(ContractorId, Option<CellId>)> = wanted
        .iter()
        .map(|(s, cell)| (s.id().clone(), Some(cell.clone())))
        .collect();
    let placed = crate::provision::ops::place(ctx, &ids).await?;
    let mut owners = BTreeMap::new();
    for p in placed {
        owners.insert(Synthetic::new(p.contractor_id)?, (p.cell, p.generation));
    }
    // At each owning cell, the users.
    let mut by_cell: BTreeMap<CellId, Vec<(&Synthetic, Generation)>> = BTreeMap::new();
    for (s, (cell, generation)) in &owners {
        by_cell
            .entry(cell.clone())
            .or_default()
            .push((s, *generation));
    }
    let mut all = Vec::new();
    for (cell_id, list) in &by_cell {
        let cell = ctx.cell(cell_id)?;
        let auth = Api::auth(cell)?;
        let mut users = Vec::new();
        for (s, _) in list {
            for t in 1..=technicians {
                let login = Login::new(format!("tech-{t}"))
                    .map_err(|e| CtlError::Internal(e.to_string()))?;
                users.push(NewUser {
                    contractor_id: s.id().clone(),
                    login: login.clone(),
                    role: Role::Technician,
                    password: None,
                    password_hash: Some(password_hash.clone()),
                    status: UserStatus::Active,
                });
                all.push(Technician {
                    contractor: (*s).clone(),
                    login,
                });
            }
        }
        crate::provision::ops::import(ctx, &auth, &users).await?;
    }
    Ok(Population {
        password,
        owners: std::sync::RwLock::new(
            owners.into_iter().map(|(s, (cell, _))| (s, cell)).collect(),
        ),
        technicians: all,
    })
}

/// Retires a run's synthetic users: each technician disabled and every session of each
/// contractor revoked, at the cell that owns it now (the control plane's placement).
pub async fn retire(ctx: Fleet<'_>, pop: &Population) -> Result<()> {
    let cp = Api::control_plane(ctx.fleet)?;
    // A disabled user still carries a password hash: one of a password nobody knows.
    let unknown = hash(&password()?)?;
    let now = SystemClock.now() + 1;
    let mut by_cell: BTreeMap<CellId, Vec<&Technician>> = BTreeMap::new();
    for t in &pop.technicians {
        let cell = match ctx.admin.placement(&cp, t.contractor.id()).await? {
            Some(p) => p.cell,
            None => continue,
        };
        by_cell.entry(cell).or_default().push(t);
    }
    for (cell_id, list) in &by_cell {
        let Ok(cell) = ctx.cell(cell_id) else {
            continue;
        };
        let auth = Api::auth(cell)?;
        let users: Vec<NewUser> = list
            .iter()
            .map(|t| NewUser {
                contractor_id: t.contractor.id().clone(),
                login: t.login.clone(),
                role: Role::Technician,
                password: None,
                password_hash: Some(unknown.clone()),
                status: UserStatus::Disabled,
            })
            .collect();
        crate::provision::ops::import(ctx, &auth, &users).await?;
        let mut done = std::collections::BTreeSet::new();
        for t in list {
            if done.insert(t.contractor.id().clone()) {
                revoke_contractor(ctx, &auth, &t.contractor, now).await?;
            }
        }
    }
    Ok(())
}

/// Revokes every session of a synthetic contractor issued before `before`, at `auth`.
pub async fn revoke_contractor(
    ctx: Fleet<'_>,
    auth: &Api,
    s: &Synthetic,
    before: UnixSeconds,
) -> Result<()> {
    let req = protocol::admin::cell::RevokeRequest {
        kind: RevocationKind::Contractor {
            ctr: s.id().clone(),
            before,
        },
        reason: "game day: synthetic contractor retired".to_owned(),
        by: "cellctl gameday".to_owned(),
    };
    ctx.admin.revoke(auth, &req).await.result?;
    Ok(())
}

impl Population {
    /// No contractors yet (before provisioning).
    pub fn empty() -> Result<Population> {
        Ok(Population {
            password: password()?,
            owners: std::sync::RwLock::default(),
            technicians: Vec::new(),
        })
    }
}

/// The stable synthetic contractors of a run: `per_cell` in each of `cells`, or the ones an
/// operator named (`--contractors`; placed in turn in `cells` when new).
pub fn wanted(
    cells: &[CellId],
    per_cell: usize,
    named: &[Synthetic],
) -> Result<Vec<(Synthetic, CellId)>> {
    if !named.is_empty() {
        return Ok(named
            .iter()
            .zip(cells.iter().cycle())
            .map(|(s, c)| (s.clone(), c.clone()))
            .collect());
    }
    let mut v = Vec::new();
    for cell in cells {
        for n in 1..=per_cell {
            v.push((Synthetic::of_cell(cell, n)?, cell.clone()));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_the_reserved_range_is_acted_on() {
        let real = Synthetic::new(ContractorId::new("c-40711").unwrap()).unwrap_err();
        assert!(
            real.to_string().contains("c-40711 is a real contractor"),
            "{real}"
        );
        let cell = CellId::new("cell-03").unwrap();
        let s = Synthetic::of_cell(&cell, 7).unwrap();
        assert_eq!(s.to_string(), "c-synthetic-cell-03-0007");
        let cells = [cell.clone(), CellId::new("cell-04").unwrap()];
        let w = wanted(&cells, 2, &[]).unwrap();
        assert_eq!(w.len(), 4);
        assert!(w.iter().all(|(s, _)| s.id().is_synthetic()));
        assert_eq!(w[3].1, cells[1]);
    }
}
