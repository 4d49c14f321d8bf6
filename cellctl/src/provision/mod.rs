//! `cellctl contractors …` and `cellctl users …`: provisioning, through the typed admin client,
//! at the cell that owns each contractor (the control plane's placement decides). Every
//! command is idempotent (a re-run reports `unchanged` and writes nothing) and prints text or,
//! with `--json`, one JSON document. A password is read from a file (`--password-file`, which
//! others must not be able to read) or from standard input, never from an argument.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use fleet_description::FleetFile;
use protocol::admin::cell::{ListedUser, OwnershipRecord, Role, UserChange, UserStatus};
use protocol::{CellId, ContractorId, Login, Password};
use serde::Serialize;

use crate::admin::{AdminClient, Api};
use crate::error::{CtlError, Result};
use crate::revoke::{AuditArgs, RevokeCommand, Revoker};

pub mod csv;
pub mod ops;

pub use ops::{Fleet, Outcome, Placed, UserOutcome, WantedUser};

/// `cellctl contractors …`.
#[derive(Debug, Subcommand)]
pub enum ContractorsCommand {
    /// Place a new contractor at a cell (the control plane's placement at the first
    /// generation, the cell's ownership record, the cell app's copy). A contractor already
    /// placed stays where it is.
    Add {
        contractor: ContractorId,
        #[arg(long)]
        cell: CellId,
    },
    /// The contractors each cell holds, with their ownership state and users.
    List {
        /// Only this cell.
        #[arg(long)]
        cell: Option<CellId>,
    },
    /// Disable every user of a contractor and revoke every session of it, fleet-wide.
    Disable {
        contractor: ContractorId,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

/// `cellctl users …` (technicians and dispatchers).
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a user at its contractor's cell (the password from `--password-file` or stdin).
    /// An existing user keeps its password; its role and status are set as given.
    Add {
        contractor: ContractorId,
        login: Login,
        #[arg(long, value_parser = parse_role, default_value = "technician")]
        role: Role,
        #[command(flatten)]
        password: PasswordArgs,
    },
    /// A contractor's users (never their password hashes).
    List { contractor: ContractorId },
    /// Disable a user (it can no longer sign in) and revoke every session it holds.
    Disable {
        contractor: ContractorId,
        login: Login,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Let a disabled user sign in again.
    Enable {
        contractor: ContractorId,
        login: Login,
    },
    /// Set a user's password (from `--password-file` or stdin). Its sessions stay valid:
    /// `cellctl users disable` or `cellctl revoke subject` end them.
    ResetPassword {
        contractor: ContractorId,
        login: Login,
        #[command(flatten)]
        password: PasswordArgs,
    },
    /// Create contractors and users from a CSV file (`contractor_id,login,role,password[,cell]
    /// [,status]`); a re-run changes nothing. A file holding passwords must not be readable
    /// by others.
    Import {
        file: PathBuf,
        /// Where to place contractors the fleet does not know and whose line names no cell.
        #[arg(long)]
        cell: Option<CellId>,
    },
}

/// Where a password comes from.
#[derive(Debug, Clone, Args)]
pub struct PasswordArgs {
    /// Read the password from this file's first line (a file others cannot read) instead of
    /// standard input.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
}

fn parse_role(s: &str) -> std::result::Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("`{s}`: technician or dispatcher"))
}

/// A loaded fleet description and its admin client.
struct Loaded {
    fleet: FleetFile,
    admin: AdminClient,
}

impl Loaded {
    fn load(path: &Path) -> Result<Loaded> {
        let fleet = fleet_description::inventory::load(path)?;
        let admin = AdminClient::for_fleet(&fleet)?;
        Ok(Loaded { fleet, admin })
    }

    fn ctx(&self) -> Fleet<'_> {
        Fleet {
            admin: &self.admin,
            fleet: &self.fleet,
        }
    }
}

/// Refuses an id in the range reserved for game days.
fn real(ctr: &ContractorId) -> Result<()> {
    if ctr.is_synthetic() {
        return Err(CtlError::BadRequest(format!(
            "{ctr} is in the range reserved for game days ({}…)",
            protocol::SYNTHETIC_CONTRACTOR_PREFIX
        )));
    }
    Ok(())
}

/// Reads a password from `--password-file` (refused when others may read it) or stdin.
fn read_password(args: &PasswordArgs) -> Result<Password> {
    let line = match &args.password_file {
        Some(path) => {
            runtime::secret::refuse_readable_by_others(path)
                .map_err(|e| CtlError::BadRequest(format!("--password-file: {e}")))?;
            let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                CtlError::BadRequest(format!("--password-file {}: {e}", path.display()))
            })?);
            crate::client::read_password(text.as_bytes())
        }
        None => crate::client::read_password(std::io::stdin().lock()),
    }
    .map_err(|e| CtlError::BadRequest(e.to_string()))?;
    Password::new(line.as_str()).map_err(|e| CtlError::BadRequest(format!("password: {e}")))
}

/// The owner of `ctr`, or a failure saying it is not placed.
async fn owner(ctx: Fleet<'_>, ctr: &ContractorId) -> Result<CellId> {
    ctx.owner(ctr).await?.map(|(cell, _)| cell).ok_or_else(|| {
        CtlError::Failed(format!(
            "{ctr} is not placed in the fleet (`cellctl contractors add {ctr} --cell CELL`)"
        ))
    })
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| CtlError::Internal(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// `cellctl contractors …`.
pub async fn run_contractors(path: &Path, command: ContractorsCommand, json: bool) -> Result<()> {
    let l = Loaded::load(path)?;
    let ctx = l.ctx();
    match command {
        ContractorsCommand::Add { contractor, cell } => {
            real(&contractor)?;
            let placed = ops::place(ctx, &[(contractor, Some(cell))]).await?;
            if json {
                return print_json(&placed);
            }
            for p in &placed {
                println!(
                    "{} {} at {} (generation {})",
                    p.contractor_id,
                    p.outcome.as_str(),
                    p.cell,
                    p.generation
                );
            }
            Ok(())
        }
        ContractorsCommand::List { cell } => {
            let listed = list_contractors(ctx, cell.as_ref()).await?;
            if json {
                return print_json(&listed);
            }
            for c in &listed {
                println!(
                    "{}  {}  {}  users {} ({} active)",
                    c.cell, c.contractor_id, c.state, c.users, c.active_users
                );
            }
            Ok(())
        }
        ContractorsCommand::Disable { contractor, audit } => {
            real(&contractor)?;
            let cell = owner(ctx, &contractor).await?;
            let auth = Api::auth(ctx.cell(&cell)?)?;
            let users = ctx.admin.contractor_users(&auth, &contractor).await?;
            let mut out = Vec::new();
            for u in &users.users {
                out.push(
                    ops::change_user(ctx, &u.subject, &status_change(UserStatus::Disabled)).await?,
                );
            }
            let report = Revoker::load(path)?
                .revoke(&RevokeCommand::Contractor {
                    ctr: contractor.clone(),
                    audit,
                })
                .await?;
            finish_disable(&out, report, json)
        }
    }
}

fn status_change(status: UserStatus) -> UserChange {
    UserChange {
        status: Some(status),
        ..UserChange::default()
    }
}

/// Prints what a `disable` did: the users, then the revocation's per-cell report; fails
/// unless every cell confirmed the revocation.
fn finish_disable(
    users: &[UserOutcome],
    report: crate::revoke::RevokeReport,
    json: bool,
) -> Result<()> {
    if json {
        print_json(&serde_json::json!({ "users": users, "revocation": report }))?;
    } else {
        for u in users {
            println!(
                "{} disabled at {}: {}",
                u.subject,
                u.cell,
                u.outcome.as_str()
            );
        }
    }
    // The revocation's own report (text or JSON), and its verdict.
    if json {
        if report.ok() {
            Ok(())
        } else {
            Err(CtlError::Failed(
                "the revocation was not confirmed by every cell".into(),
            ))
        }
    } else {
        report.print(false)
    }
}

/// One contractor as `cellctl contractors list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ListedContractor {
    pub cell: CellId,
    pub contractor_id: ContractorId,
    /// `active`, `handoff` or `released` at that cell.
    pub state: &'static str,
    pub generation: protocol::Generation,
    pub users: usize,
    pub active_users: usize,
}

async fn list_contractors(ctx: Fleet<'_>, only: Option<&CellId>) -> Result<Vec<ListedContractor>> {
    let mut out = Vec::new();
    for cell in &ctx.fleet.cells {
        if only.is_some_and(|c| *c != cell.id) {
            continue;
        }
        let auth = Api::auth(cell)?;
        let records = ctx.admin.ownership_records(&auth).await?;
        for (ctr, rec) in records.records {
            if ctr.is_synthetic() {
                continue;
            }
            let users: Vec<ListedUser> = ctx.admin.contractor_users(&auth, &ctr).await?.users;
            out.push(ListedContractor {
                cell: cell.id.clone(),
                state: match rec {
                    OwnershipRecord::Active { .. } => "active",
                    OwnershipRecord::Handoff { .. } => "handoff",
                    OwnershipRecord::Released { .. } => "released",
                },
                generation: rec.generation(),
                active_users: users
                    .iter()
                    .filter(|u| u.status == UserStatus::Active)
                    .count(),
                users: users.len(),
                contractor_id: ctr,
            });
        }
    }
    Ok(out)
}

/// `cellctl users …`.
pub async fn run_users(path: &Path, command: UsersCommand, json: bool) -> Result<()> {
    let l = Loaded::load(path)?;
    let ctx = l.ctx();
    match command {
        UsersCommand::Add {
            contractor,
            login,
            role,
            password,
        } => {
            real(&contractor)?;
            let cell = owner(ctx, &contractor).await?;
            let password = read_password(&password)?;
            let out = ops::ensure_users(
                ctx,
                &cell,
                vec![WantedUser {
                    contractor_id: contractor,
                    login,
                    role,
                    status: UserStatus::Active,
                    password: Some(password),
                    password_hash: None,
                }],
            )
            .await?;
            print_users(&out, json)
        }
        UsersCommand::List { contractor } => {
            let cell = owner(ctx, &contractor).await?;
            let auth = Api::auth(ctx.cell(&cell)?)?;
            let users = ctx.admin.contractor_users(&auth, &contractor).await?;
            if json {
                return print_json(&serde_json::json!({ "cell": cell, "users": users.users }));
            }
            for u in &users.users {
                println!(
                    "{}  {}  {}  at {cell}",
                    u.subject,
                    u.role.as_str(),
                    u.status.as_str()
                );
            }
            Ok(())
        }
        UsersCommand::Disable {
            contractor,
            login,
            audit,
        } => {
            real(&contractor)?;
            let sub = ops::subject(&contractor, &login)?;
            let out = ops::change_user(ctx, &sub, &status_change(UserStatus::Disabled)).await?;
            let report = Revoker::load(path)?
                .revoke(&RevokeCommand::Subject { sub, audit })
                .await?;
            finish_disable(&[out], report, json)
        }
        UsersCommand::Enable { contractor, login } => {
            real(&contractor)?;
            let sub = ops::subject(&contractor, &login)?;
            let out = ops::change_user(ctx, &sub, &status_change(UserStatus::Active)).await?;
            print_users(&[out], json)
        }
        UsersCommand::ResetPassword {
            contractor,
            login,
            password,
        } => {
            real(&contractor)?;
            let sub = ops::subject(&contractor, &login)?;
            let change = UserChange {
                password: Some(read_password(&password)?),
                ..UserChange::default()
            };
            let out = ops::change_user(ctx, &sub, &change).await?;
            print_users(&[out], json)
        }
        UsersCommand::Import { file, cell } => import(ctx, &file, cell.as_ref(), json).await,
    }
}

fn print_users(out: &[UserOutcome], json: bool) -> Result<()> {
    if json {
        return print_json(&out);
    }
    for u in out {
        println!("{} {} at {}", u.subject, u.outcome.as_str(), u.cell);
    }
    Ok(())
}

/// What `cellctl users import` did.
#[derive(Debug, Clone, Serialize)]
pub struct Imported {
    pub contractors: Vec<Placed>,
    pub users: Vec<UserOutcome>,
}

impl Imported {
    fn count<'a>(outcomes: impl Iterator<Item = &'a Outcome>, o: Outcome) -> usize {
        outcomes.filter(|x| **x == o).count()
    }
}

async fn import(
    ctx: Fleet<'_>,
    file: &Path,
    default_cell: Option<&CellId>,
    json: bool,
) -> Result<()> {
    let bytes = std::fs::read(file)
        .map_err(|e| CtlError::BadRequest(format!("{}: {e}", file.display())))?;
    let rows = csv::parse(bytes.as_slice())
        .map_err(|e| CtlError::BadRequest(format!("{}: {e}", file.display())))?;
    if rows.iter().any(|r| r.password.is_some()) {
        runtime::secret::refuse_readable_by_others(file)
            .map_err(|e| CtlError::BadRequest(format!("{e} (the file holds passwords)")))?;
    }
    // Each contractor: its line's cell, else --cell (used only if the fleet does not place it).
    let mut wanted: BTreeMap<ContractorId, Option<CellId>> = BTreeMap::new();
    for r in &rows {
        let slot = wanted.entry(r.contractor_id.clone()).or_default();
        if let (Some(a), Some(b)) = (slot.as_ref(), r.cell.as_ref())
            && a != b
        {
            return Err(CtlError::BadRequest(format!(
                "line {}: {} is given two cells ({a} and {b})",
                r.line, r.contractor_id
            )));
        }
        if slot.is_none() {
            *slot = r.cell.clone();
        }
    }
    let to_place: Vec<(ContractorId, Option<CellId>)> = wanted
        .into_iter()
        .map(|(ctr, cell)| (ctr, cell.or_else(|| default_cell.cloned())))
        .collect();
    let contractors = ops::place(ctx, &to_place).await?;
    // A contractor migrating now is refused before any user is touched.
    if let Some(p) = contractors.iter().find(|p| p.migrating) {
        return Err(CtlError::Failed(format!(
            "{} is not active at {}: a migration is under way; retry once `cellctl migrate` \
             finished",
            p.contractor_id, p.cell
        )));
    }
    let owner_of: BTreeMap<&ContractorId, &CellId> = contractors
        .iter()
        .map(|p| (&p.contractor_id, &p.cell))
        .collect();
    let mut by_cell: BTreeMap<CellId, Vec<WantedUser>> = BTreeMap::new();
    for r in rows {
        let cell = owner_of
            .get(&r.contractor_id)
            .map(|c| (*c).clone())
            .ok_or_else(|| CtlError::Internal(format!("{} was not placed", r.contractor_id)))?;
        by_cell.entry(cell).or_default().push(WantedUser {
            contractor_id: r.contractor_id,
            login: r.login,
            role: r.role,
            status: r.status,
            password: r.password,
            password_hash: None,
        });
    }
    let mut users = Vec::new();
    for (cell, list) in by_cell {
        users.extend(ops::ensure_users(ctx, &cell, list).await?);
    }
    let done = Imported { contractors, users };
    if json {
        return print_json(&done);
    }
    for p in &done.contractors {
        println!(
            "contractor {} {} at {} (generation {})",
            p.contractor_id,
            p.outcome.as_str(),
            p.cell,
            p.generation
        );
    }
    for u in &done.users {
        println!("user {} {} at {}", u.subject, u.outcome.as_str(), u.cell);
    }
    let c = |o| Imported::count(done.contractors.iter().map(|p| &p.outcome), o);
    let u = |o| Imported::count(done.users.iter().map(|u| &u.outcome), o);
    println!(
        "imported: contractors {} created, {} completed, {} unchanged; users {} created, {} \
         changed, {} unchanged",
        c(Outcome::Created),
        c(Outcome::Completed),
        c(Outcome::Unchanged),
        u(Outcome::Created),
        u(Outcome::Changed),
        u(Outcome::Unchanged)
    );
    Ok(())
}
