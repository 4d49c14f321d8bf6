//! `cellctl migrate CONTRACTOR --to CELL`: moves a contractor between cells (DESIGN §5).
//!
//! The orchestrator runs inside `cellctl` and talks to the control plane's admin API with the
//! control plane's token, and to each cell's auth-service admin API (`cells[].auth_service.url`,
//! its internal listener) with THAT cell's admin token (`cells[].admin_token`; no cell accepts
//! another's), and to each cell's app migration interface (`cells[].app_internal_url`) with
//! that app's own internal token (`cells[].app_internal_token`). Its state is a journal
//! (`migrations.db`, 0600, beside `fleet.json`) that records the next step of each migration
//! before it is taken, so a rerun of the same command resumes a migration that a crash (of
//! `cellctl`, or of the machine) interrupted. Running it here rather than in the control-plane
//! server keeps the control plane a placement store and publisher only, lets an operator
//! watch each step as it happens, and makes "crash at any step" testable by killing one
//! process; every step is idempotent, so redoing the step that was running is always safe.
//!
//! ```text
//!   copy ──▶ handoff ──▶ drain ──▶ sync ──▶ placement ──▶ activate ──▶ release ──▶ done
//!   │        │           │         │        │              │             │
//!   │        │           │         │        │              │             └ source released(g, T, g+1)
//!   │        │           │         │        │              │               + source app released;
//!   │        │           │         │        │              │               only with both the ack and
//!   │        │           │         │        │              │               the published map in hand
//!   │        │           │         │        │              └ target active(g+1) + target app
//!   │        │           │         │        │                activated; ack = the target's record
//!   │        │           │         │        │                reads back active(g+1) and its edges
//!   │        │           │         │        │                applied it
//!   │        │           │         │        └ placement (T, g+1) at the control plane; wait until
//!   │        │           │         │          the published (signed) map names T
//!   │        │           │         └ source app frozen, its data exported and imported at T;
//!   │        │           │           credentials and revocations copied again (final copy)
//!   │        │           └ every live source edge applied the handoff and has no write in flight
//!   │        └ source record handoff(g): reads served, writes refused (read-only from here)
//!   └ credentials (hashes), revocations and app data copied to T (pre-copy, source still active)
//! ```
//!
//! A crash anywhere leaves the contractor either active at the source (before `handoff`) or
//! read-only at the source (from `handoff` until `release`), never owned by two cells: the
//! target takes writes only once the control plane names it, and sessions reach it only after
//! the source released. Waits are bounded by `--step-timeout-s`; a step that times out (e.g.
//! the control plane cannot publish) stops the run before `release` with a non-zero exit, and
//! a rerun finishes it.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleet_description::FleetFile;
use protocol::admin::placement::Placement;
use protocol::jwks::PublicKey;
use protocol::ownership::OwnershipRecord;
use protocol::{CellId, ContractorId, Generation};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::admin::{AdminClient, Api, AppTransition};
use crate::error::{CtlError, Result};

pub mod journal;
pub mod step;

pub use journal::{JOURNAL_FILE, Journal, Record};
pub use step::Step;

/// Default bound of one step's waiting and retrying, in seconds.
pub const DEFAULT_STEP_TIMEOUT_S: u64 = 90;
/// Interval between two polls of a condition (drain, publication), in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 25;
/// Exit code of `--stop-after` (a deliberate crash, for tests).
pub const STOP_AFTER_EXIT_CODE: i32 = 86;

/// What to migrate and how.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    pub contractor: ContractorId,
    pub target: CellId,
    /// Bound of each step's waits and retries.
    pub step_timeout: Duration,
    /// Exit the process (code [`STOP_AFTER_EXIT_CODE`]) right after this step's effects,
    /// before the journal records it: a crash for tests.
    pub stop_after: Option<Step>,
}

impl MigrateOptions {
    pub fn new(contractor: ContractorId, target: CellId) -> Self {
        MigrateOptions {
            contractor,
            target,
            step_timeout: Duration::from_secs(DEFAULT_STEP_TIMEOUT_S),
            stop_after: None,
        }
    }
}

/// One completed step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepReport {
    pub step: Step,
    pub duration_ms: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationReport {
    pub contractor_id: ContractorId,
    pub source: CellId,
    pub target: CellId,
    pub from_generation: Generation,
    pub to_generation: Generation,
    /// Whether this run resumed an interrupted migration.
    pub resumed: bool,
    /// Whether the contractor was already at the target (nothing to do).
    pub already_there: bool,
    pub steps: Vec<StepReport>,
    /// From the source's handoff to its release, when this run saw both (milliseconds).
    pub read_only_ms: Option<u64>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The journal beside a fleet file.
pub fn journal_path(fleet: &Path) -> std::path::PathBuf {
    fleet
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join(JOURNAL_FILE)
}

/// Everything a run talks to.
struct Ctx {
    fleet: FleetFile,
    admin: AdminClient,
    /// The control plane's admin API (its own token).
    control_plane: Api,
    map_key: PublicKey,
    step_timeout: Duration,
}

/// What a copy step moves.
#[derive(Debug, Clone, Copy)]
enum Data {
    /// Users (password hashes) and the revocations that concern the contractor (auth-service).
    Credentials,
    /// The app's data (its migration interface).
    AppData,
}

/// A cell's internal services, each with its own token.
struct CellApis {
    /// The auth-service's internal listener (admin API).
    auth: Api,
    /// The app's internal listener (migration interface).
    app: Api,
}

impl Ctx {
    fn cell(&self, id: &CellId) -> Result<CellApis> {
        let c = self
            .fleet
            .cell(id)
            .ok_or_else(|| CtlError::BadRequest(format!("{id} is not a cell of this fleet")))?;
        Ok(CellApis {
            auth: Api::auth(c)?,
            app: Api::app(c)?,
        })
    }

    /// The admin client, retrying until `deadline`.
    fn until(&self, deadline: Instant) -> AdminClient {
        self.admin.until(deadline)
    }

    async fn ownership(
        &self,
        deadline: Instant,
        cell: &CellId,
        c: &ContractorId,
    ) -> Result<Option<OwnershipRecord>> {
        let at = self.cell(cell)?;
        Ok(self.until(deadline).ownership(&at.auth, c).await?)
    }

    async fn set_ownership(
        &self,
        deadline: Instant,
        cell: &CellId,
        c: &ContractorId,
        rec: &OwnershipRecord,
    ) -> Result<u64> {
        let at = self.cell(cell)?;
        Ok(self
            .until(deadline)
            .set_ownership(&at.auth, c, rec)
            .await?
            .seq)
    }

    /// Polls `GET /admin/v1/drain/{c}?seq=S` at a cell until it reports drained.
    async fn wait_drained(
        &self,
        deadline: Instant,
        cell: &CellId,
        c: &ContractorId,
        seq: u64,
    ) -> Result<()> {
        let at = self.cell(cell)?;
        loop {
            let d = self.until(deadline).drain(&at.auth, c, seq).await?;
            if d.drained {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let busy: Vec<&str> = d
                    .instances
                    .iter()
                    .filter(|i| i.live && (i.busy || i.applied_seq < seq))
                    .map(|i| i.id.as_str())
                    .collect();
                return Err(CtlError::Failed(format!(
                    "{cell} did not drain {c} at seq {seq} in time (instances not drained: {})",
                    busy.join(", ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
        }
    }

    /// Whether the control plane's published, signed map places `c` at `target`.
    async fn published_at(
        &self,
        deadline: Instant,
        c: &ContractorId,
        target: &CellId,
    ) -> Result<bool> {
        let signed = self
            .until(deadline)
            .placement_map(&self.control_plane)
            .await?;
        signed.verify(&self.map_key)?;
        Ok(signed.map.cell_for(c).is_some_and(|e| &e.id == target))
    }

    /// Copies `what` of `c` from one cell to another (export at the source, import at the
    /// target; an import of the same document again changes nothing).
    async fn copy(
        &self,
        deadline: Instant,
        what: Data,
        from: &CellId,
        to: &CellId,
        c: &ContractorId,
    ) -> Result<()> {
        let (from, to) = (self.cell(from)?, self.cell(to)?);
        let admin = self.until(deadline);
        match what {
            Data::Credentials => {
                let doc = admin.export_contractor(&from.auth, c).await?;
                admin.import_contractor(&to.auth, c, &doc).await?;
            }
            Data::AppData => {
                let doc = admin.app_export(&from.app, c).await?;
                admin.app_import(&to.app, c, &doc).await?;
            }
        }
        Ok(())
    }

    /// Runs one step's effects (each is idempotent). The one match of the state machine.
    async fn run_step(&self, rec: &mut Record) -> Result<Step> {
        let deadline = Instant::now() + self.step_timeout;
        let (c, src, dst) = (&rec.contractor, &rec.source, &rec.target);
        let g = rec.generation;
        let new_gen = g.next();
        match rec.step {
            Step::Copy => {
                self.copy(deadline, Data::Credentials, src, dst, c).await?;
                self.copy(deadline, Data::AppData, src, dst, c).await?;
                Ok(Step::Handoff)
            }
            Step::Handoff => {
                let seq = self
                    .set_ownership(
                        deadline,
                        src,
                        c,
                        &OwnershipRecord::Handoff { generation: g },
                    )
                    .await?;
                rec.handoff_seq = Some(seq);
                rec.handoff_at_ms = Some(now_ms());
                Ok(Step::Drain)
            }
            Step::Drain => {
                let seq = match rec.handoff_seq {
                    Some(s) => s,
                    None => {
                        self.set_ownership(
                            deadline,
                            src,
                            c,
                            &OwnershipRecord::Handoff { generation: g },
                        )
                        .await?
                    }
                };
                self.wait_drained(deadline, src, c, seq).await?;
                Ok(Step::Sync)
            }
            Step::Sync => {
                let at = self.cell(src)?;
                self.until(deadline)
                    .app_transition(&at.app, c, AppTransition::Freeze)
                    .await?;
                self.copy(deadline, Data::AppData, src, dst, c).await?;
                self.copy(deadline, Data::Credentials, src, dst, c).await?;
                Ok(Step::Placement)
            }
            Step::Placement => {
                let placement = Placement {
                    cell: dst.clone(),
                    generation: new_gen,
                };
                self.until(deadline)
                    .set_placement(&self.control_plane, c, &placement)
                    .await?;
                loop {
                    if self.published_at(deadline, c, dst).await? {
                        break;
                    }
                    if Instant::now() >= deadline {
                        return Err(CtlError::Failed(format!(
                            "the published map does not place {c} at {dst} yet"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
                }
                Ok(Step::Activate)
            }
            Step::Activate => {
                let active = OwnershipRecord::Active {
                    generation: new_gen,
                };
                let seq = self.set_ownership(deadline, dst, c, &active).await?;
                let at = self.cell(dst)?;
                self.until(deadline)
                    .app_transition(&at.app, c, AppTransition::Activate(new_gen))
                    .await?;
                if self.ownership(deadline, dst, c).await?.as_ref() != Some(&active) {
                    return Err(CtlError::Failed(format!(
                        "{dst} does not acknowledge active({new_gen}) for {c}"
                    )));
                }
                self.wait_drained(deadline, dst, c, seq).await?;
                Ok(Step::Release)
            }
            Step::Release => {
                // Both proofs, read again now: the target's durable acknowledgement and the
                // published map. Never on a timer alone.
                let active = OwnershipRecord::Active {
                    generation: new_gen,
                };
                let acked = self.ownership(deadline, dst, c).await?.as_ref() == Some(&active);
                let published = self.published_at(deadline, c, dst).await?;
                if !(acked && published) {
                    return Err(CtlError::Failed(format!(
                        "not releasing {c}: target acknowledged = {acked}, map published = {published}"
                    )));
                }
                let released = OwnershipRecord::Released {
                    generation: g,
                    successor: dst.clone(),
                    successor_gen: new_gen,
                };
                self.set_ownership(deadline, src, c, &released).await?;
                let at = self.cell(src)?;
                self.until(deadline)
                    .app_transition(&at.app, c, AppTransition::Release)
                    .await?;
                Ok(Step::Done)
            }
            Step::Done => Ok(Step::Done),
        }
    }
}

/// Finds or starts the migration of `opts.contractor` to `opts.target`.
async fn start(ctx: &Ctx, journal: &Journal, opts: &MigrateOptions) -> Result<(Record, bool)> {
    let c = &opts.contractor;
    if let Some(rec) = journal.open_migration(c)? {
        if rec.target != opts.target {
            return Err(CtlError::BadRequest(format!(
                "{c} is being migrated to {}; finish that first (cellctl migrate {c} --to {})",
                rec.target, rec.target
            )));
        }
        return Ok((rec, true));
    }
    ctx.cell(&opts.target)?;
    let deadline = Instant::now() + ctx.step_timeout;
    let placement = ctx
        .until(deadline)
        .placement(&ctx.control_plane, c)
        .await?
        .ok_or_else(|| CtlError::Failed(format!("the control plane has no placement of {c}")))?;
    let source = placement.cell;
    let g = placement.generation;
    if source == opts.target {
        let rec = Record {
            id: 0,
            contractor: c.clone(),
            source: source.clone(),
            target: source,
            generation: g,
            step: Step::Done,
            handoff_seq: None,
            handoff_at_ms: None,
        };
        return Ok((rec, false));
    }
    match ctx.ownership(deadline, &source, c).await? {
        Some(OwnershipRecord::Active { generation } | OwnershipRecord::Handoff { generation })
            if generation == g => {}
        other => {
            return Err(CtlError::Failed(format!(
                "{source} does not own {c} at generation {g} (its record: {other:?})"
            )));
        }
    }
    let rec = journal.begin(c, &source, &opts.target, g, now_ms())?;
    Ok((rec, false))
}

/// Runs (or resumes) a migration; `on_step` sees each step as it completes.
pub async fn migrate(
    fleet_path: &Path,
    opts: &MigrateOptions,
    mut on_step: impl FnMut(&StepReport),
) -> Result<MigrationReport> {
    let fleet = fleet_description::inventory::load(fleet_path)?;
    let admin = AdminClient::for_fleet(&fleet)?;
    let control_plane = Api::control_plane(&fleet)?;
    let map_key = protocol::map_key::parse(&fleet.map_public_key)
        .map_err(|e| CtlError::Config(format!("map_public_key: {e}")))?;
    let ctx = Ctx {
        fleet,
        admin,
        control_plane,
        map_key,
        step_timeout: opts.step_timeout,
    };
    let journal = Journal::open(&journal_path(fleet_path))?;
    let (mut rec, resumed) = start(&ctx, &journal, opts).await?;
    let already_there = rec.step == Step::Done && rec.id == 0;
    let mut steps = Vec::new();
    let mut read_only_ms = None;
    while rec.step != Step::Done {
        let t0 = Instant::now();
        let step = rec.step;
        let next = ctx.run_step(&mut rec).await.map_err(|e| {
            CtlError::Failed(format!(
                "migration of {} stopped at step {step} (rerun to finish): {e}",
                rec.contractor
            ))
        })?;
        if opts.stop_after == Some(step) {
            eprintln!("stopping after {step} as asked (--stop-after)");
            std::process::exit(STOP_AFTER_EXIT_CODE);
        }
        rec.step = next;
        journal.save(&rec, now_ms())?;
        if next == Step::Done {
            read_only_ms = rec.handoff_at_ms.map(|at| now_ms().saturating_sub(at));
        }
        let report = StepReport {
            step,
            duration_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        on_step(&report);
        steps.push(report);
    }
    Ok(MigrationReport {
        contractor_id: rec.contractor,
        source: rec.source,
        target: rec.target,
        from_generation: rec.generation,
        to_generation: if already_there {
            rec.generation
        } else {
            rec.generation.next()
        },
        resumed,
        already_there,
        steps,
        read_only_ms,
    })
}

/// `cellctl migrate CONTRACTOR --to CELL`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The contractor to move.
    pub contractor: ContractorId,
    /// The cell to move it to.
    #[arg(long = "to")]
    pub to: CellId,
    /// Bound of each step's waits and retries, in seconds.
    #[arg(long, default_value_t = DEFAULT_STEP_TIMEOUT_S)]
    pub step_timeout_s: u64,
    /// Tests only: exit abruptly right after this step's effects, before recording it.
    #[arg(long, hide = true)]
    pub stop_after: Option<Step>,
}

/// Runs `cellctl migrate`, printing each step with its duration (JSON lines with `--json`).
pub async fn run_cli(fleet: &Path, args: MigrateArgs, json: bool) -> Result<()> {
    let opts = MigrateOptions {
        contractor: args.contractor,
        target: args.to,
        step_timeout: Duration::from_secs(args.step_timeout_s.max(1)),
        stop_after: args.stop_after,
    };
    let report = migrate(fleet, &opts, |s| {
        if json {
            println!(
                "{}",
                json!({ "step": s.step, "duration_ms": s.duration_ms })
            );
        } else {
            println!("{:<10} {:>6} ms", s.step.as_str(), s.duration_ms);
        }
    })
    .await?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| CtlError::Internal(e.to_string()))?
        );
    } else if report.already_there {
        println!(
            "{} is already at {} (generation {})",
            report.contractor_id, report.target, report.from_generation
        );
    } else {
        let ro = report
            .read_only_ms
            .map_or_else(String::new, |ms| format!(", read-only for {ms} ms"));
        println!(
            "migrated {} from {} (generation {}) to {} (generation {}){}{ro}",
            report.contractor_id,
            report.source,
            report.from_generation,
            report.target,
            report.to_generation,
            if report.resumed { ", resumed" } else { "" },
        );
    }
    Ok(())
}
