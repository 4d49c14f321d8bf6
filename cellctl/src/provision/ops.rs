//! The provisioning operations, through the typed admin client: place contractors (the
//! control plane's placement, the owning cell's ownership record, the cell app's copy) and
//! create or change their users at the owning cell. Each is idempotent: what already is as
//! asked is left alone and reported `unchanged`, so a re-run changes nothing. Game days
//! provision their synthetic contractors with the same functions.

use std::collections::BTreeMap;

use fleet_description::{FleetCell, FleetFile};
use protocol::admin::app::SeedRequest;
use protocol::admin::cell::{ImportUsers, NewUser, OwnershipRecord, Role, UserChange, UserStatus};
use protocol::admin::placement::Placement;
use protocol::{CellId, ContractorId, Generation, Login, Password, PasswordHash, SubjectId};
use serde::Serialize;

use crate::admin::{AdminClient, Api};
use crate::error::{CtlError, Result};

/// Users per import request.
pub const IMPORT_BATCH: usize = 500;

/// The fleet and the client every operation goes through.
#[derive(Debug, Clone, Copy)]
pub struct Fleet<'a> {
    pub admin: &'a AdminClient,
    pub fleet: &'a FleetFile,
}

impl Fleet<'_> {
    /// The cell `id` of the fleet description.
    pub fn cell(&self, id: &CellId) -> Result<&FleetCell> {
        self.fleet
            .cell(id)
            .ok_or_else(|| CtlError::Config(format!("{id} is not a cell of the fleet")))
    }

    /// The cell that owns `ctr` (the control plane's placement decides) and its generation;
    /// `None` when the control plane places it nowhere. A contractor the owning cell does not
    /// hold as active (a migration in progress) is refused: a change there could be lost.
    pub async fn owner(&self, ctr: &ContractorId) -> Result<Option<(CellId, Generation)>> {
        let cp = Api::control_plane(self.fleet)?;
        let Some(p) = self.admin.placement(&cp, ctr).await? else {
            return Ok(None);
        };
        let cell = self.cell(&p.cell)?;
        match self.admin.ownership(&Api::auth(cell)?, ctr).await? {
            Some(OwnershipRecord::Active { .. }) => Ok(Some((p.cell, p.generation))),
            Some(other) => Err(CtlError::Failed(format!(
                "{ctr} is not active at {} ({}): a migration is under way; retry once \
                 `cellctl migrate` finished",
                p.cell,
                match other {
                    OwnershipRecord::Handoff { .. } => "handoff",
                    _ => "released",
                }
            ))),
            None => Err(CtlError::Failed(format!(
                "{ctr} is placed at {} but that cell holds no record of it (`cellctl \
                 contractors add {ctr} --cell {}` completes it)",
                p.cell, p.cell
            ))),
        }
    }
}

/// Where a contractor was placed, and what [`place`] had to do for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placed {
    pub contractor_id: ContractorId,
    pub cell: CellId,
    pub generation: Generation,
    /// `created`: new to the fleet; `completed`: placed before, but the owning cell or its app
    /// lacked it (an interrupted add); `unchanged`.
    pub outcome: Outcome,
    /// The owning cell holds it but not as `active` (a migration under way): its users must
    /// not be changed now.
    #[serde(skip)]
    pub migrating: bool,
}

/// What an idempotent operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Created,
    Completed,
    Changed,
    Unchanged,
}

impl Outcome {
    /// The word the text output prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Completed => "completed",
            Outcome::Changed => "changed",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// Places each `(contractor, cell)`: a contractor the control plane already places keeps its
/// placement (a migration may have moved it; the cell asked for is then ignored, and may be
/// `None`); a new one is placed at its cell at the first generation (refused without one).
/// Then, at each owning cell, the ownership record (`active`) and the app's copy, for a
/// contractor the cell does not hold yet.
pub async fn place(
    ctx: Fleet<'_>,
    wanted: &[(ContractorId, Option<CellId>)],
) -> Result<Vec<Placed>> {
    let cp = Api::control_plane(ctx.fleet)?;
    // Every placement read, and every new contractor's cell checked, before anything is
    // written: a bad line changes nothing.
    let mut placed = Vec::with_capacity(wanted.len());
    let mut new = Vec::new();
    for (ctr, cell) in wanted {
        match ctx.admin.placement(&cp, ctr).await? {
            Some(p) if ctx.fleet.cell(&p.cell).is_some() => placed.push(Placed {
                contractor_id: ctr.clone(),
                cell: p.cell,
                generation: p.generation,
                outcome: Outcome::Unchanged,
                migrating: false,
            }),
            _ => {
                let cell = cell.as_ref().ok_or_else(|| {
                    CtlError::BadRequest(format!(
                        "{ctr} is new to the fleet and no cell is given for it (a `cell` \
                         column or --cell)"
                    ))
                })?;
                ctx.cell(cell)?;
                new.push((ctr, cell));
            }
        }
    }
    for (ctr, cell) in new {
        let p = Placement {
            cell: cell.clone(),
            generation: Generation::FIRST,
        };
        ctx.admin.set_placement(&cp, ctr, &p).await?;
        placed.push(Placed {
            contractor_id: ctr.clone(),
            cell: p.cell,
            generation: p.generation,
            outcome: Outcome::Created,
            migrating: false,
        });
    }
    let mut by_cell: BTreeMap<CellId, Vec<usize>> = BTreeMap::new();
    for (i, p) in placed.iter().enumerate() {
        by_cell.entry(p.cell.clone()).or_default().push(i);
    }
    for (cell_id, list) in &by_cell {
        let cell = ctx.cell(cell_id)?;
        let auth = Api::auth(cell)?;
        // Only contractors the cell holds no record of: the app's copy first, then the record,
        // so that a record implies the app's copy (an add interrupted between the two is
        // completed by a re-run) and a contractor the cell holds (perhaps frozen by a
        // migration) is never seeded again.
        let mut missing = Vec::new();
        for &i in list {
            let p = &placed[i];
            if ctx
                .admin
                .ownership(&auth, &p.contractor_id)
                .await?
                .is_none()
            {
                missing.push(i);
            }
        }
        if missing.is_empty() {
            continue;
        }
        let seed = missing
            .iter()
            .map(|&i| (placed[i].contractor_id.clone(), placed[i].generation))
            .collect();
        ctx.admin
            .app_seed(&Api::app(cell)?, &SeedRequest { contractors: seed })
            .await?;
        for i in missing {
            let p = &mut placed[i];
            let rec = OwnershipRecord::Active {
                generation: p.generation,
            };
            ctx.admin
                .set_ownership(&auth, &p.contractor_id, &rec)
                .await?;
            if p.outcome == Outcome::Unchanged {
                p.outcome = Outcome::Completed;
            }
        }
    }
    Ok(placed)
}

/// A user as provisioning wants it. `password` is used only to create a missing user (an
/// existing user's password is changed by [`reset_password`] alone); `password_hash` instead
/// of it when the caller hashed it (game days hash once for thousands of users).
#[derive(Debug, Clone)]
pub struct WantedUser {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub role: Role,
    pub status: UserStatus,
    pub password: Option<Password>,
    pub password_hash: Option<PasswordHash>,
}

/// What [`ensure_users`] did for one user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserOutcome {
    pub subject: SubjectId,
    pub cell: CellId,
    pub outcome: Outcome,
}

/// The subject id of a login.
pub fn subject(ctr: &ContractorId, login: &Login) -> Result<SubjectId> {
    SubjectId::new(format!("{ctr}.{login}"))
        .map_err(|e| CtlError::BadRequest(format!("{ctr}.{login}: {e}")))
}

/// Creates the missing users of `users` at `cell` (one transaction per [`IMPORT_BATCH`]) and
/// changes the role or status of those that differ; leaves the rest alone. A missing user
/// without a password is refused before anything is written.
pub async fn ensure_users(
    ctx: Fleet<'_>,
    cell_id: &CellId,
    users: Vec<WantedUser>,
) -> Result<Vec<UserOutcome>> {
    let cell = ctx.cell(cell_id)?;
    let auth = Api::auth(cell)?;
    let mut held: BTreeMap<ContractorId, BTreeMap<Login, (Role, UserStatus)>> = BTreeMap::new();
    for u in &users {
        if !held.contains_key(&u.contractor_id) {
            let list = ctx.admin.contractor_users(&auth, &u.contractor_id).await?;
            held.insert(
                u.contractor_id.clone(),
                list.users
                    .into_iter()
                    .map(|l| (l.login, (l.role, l.status)))
                    .collect(),
            );
        }
    }
    let mut create = Vec::new();
    let mut change = Vec::new();
    let mut out = Vec::with_capacity(users.len());
    for u in users {
        let sub = subject(&u.contractor_id, &u.login)?;
        let existing = held
            .get(&u.contractor_id)
            .and_then(|m| m.get(&u.login))
            .copied();
        let outcome = match existing {
            None => {
                if u.password.is_none() && u.password_hash.is_none() {
                    return Err(CtlError::BadRequest(format!(
                        "{sub} does not exist yet: it needs a password"
                    )));
                }
                create.push(NewUser {
                    contractor_id: u.contractor_id,
                    login: u.login,
                    role: u.role,
                    password: u.password,
                    password_hash: u.password_hash,
                    status: u.status,
                });
                Outcome::Created
            }
            Some((role, status)) if role == u.role && status == u.status => Outcome::Unchanged,
            Some(_) => {
                change.push((
                    sub.clone(),
                    UserChange {
                        role: Some(u.role),
                        status: Some(u.status),
                        password: None,
                    },
                ));
                Outcome::Changed
            }
        };
        out.push(UserOutcome {
            subject: sub,
            cell: cell_id.clone(),
            outcome,
        });
    }
    import(ctx, &auth, &create).await?;
    for (sub, c) in &change {
        if ctx.admin.change_user(&auth, sub, c).await?.is_none() {
            return Err(CtlError::Failed(format!(
                "{sub} disappeared from {cell_id}"
            )));
        }
    }
    Ok(out)
}

/// Creates or replaces `users` at the auth-service `auth`, [`IMPORT_BATCH`] per request (one
/// transaction each).
pub async fn import(ctx: Fleet<'_>, auth: &Api, users: &[NewUser]) -> Result<()> {
    for batch in users.chunks(IMPORT_BATCH) {
        ctx.admin
            .import_users(
                auth,
                &ImportUsers {
                    users: batch.to_vec(),
                },
            )
            .await?;
    }
    Ok(())
}

/// Changes one existing user at the cell that owns its contractor; `Failed` naming it when
/// there is no such user.
pub async fn change_user(
    ctx: Fleet<'_>,
    sub: &SubjectId,
    change: &UserChange,
) -> Result<UserOutcome> {
    let ctr = crate::revoke::contractor_of(sub)?;
    let (cell_id, _) = ctx
        .owner(&ctr)
        .await?
        .ok_or_else(|| CtlError::Failed(format!("{ctr} is not placed in the fleet")))?;
    let auth = Api::auth(ctx.cell(&cell_id)?)?;
    match ctx.admin.change_user(&auth, sub, change).await? {
        Some(c) => Ok(UserOutcome {
            subject: c.subject,
            cell: cell_id,
            outcome: if c.changed {
                Outcome::Changed
            } else {
                Outcome::Unchanged
            },
        }),
        None => Err(CtlError::Failed(format!("{cell_id} holds no user {sub}"))),
    }
}
