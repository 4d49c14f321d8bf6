//! What a scenario runs with: the run's shared [`Ctx`] (fleet, clients, faults, the synthetic
//! population), one scenario's [`Run`] (its faults, figures, bounds and load), the [`Scale`],
//! and the checks several scenarios share (writes at the apps, migrations).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::ValueEnum;
use fleet_description::{FleetCell, FleetFile};
use protocol::{CellId, ContractorId};

use super::fault::{Faults, Target};
use super::load::{self, Load, Recorder, Session};
use super::model::{BoundCheck, FaultWindow, Figure, Outcome, ScenarioReport};
use super::synthetic::{Population, Synthetic, Technician};
use crate::admin::AdminClient;
use crate::error::{CtlError, Result};

/// Sign-ins made at once when a scenario signs its technicians in.
pub const SIGN_IN_CONCURRENCY: usize = 16;
/// Sign-ins a second per cell a run's synthetic clients make at most (below an
/// auth-service's per-client throttle, `signin_ip_per_minute` 1,200 = 20/s).
pub const SIGN_INS_PER_CELL_PER_S: u32 = 15;
/// Attempts of one sign-in (a `429`/`503` is tried again after its `Retry-After`).
pub const SIGN_IN_ATTEMPTS: u32 = 5;
/// Bound of waiting for a cell's edge to be ready again after a fault is undone, in seconds.
pub const READY_AGAIN_S: u64 = 60;

/// How big the synthetic population and its load are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scale {
    /// 2 synthetic contractors per cell, 2 technicians each: a weekly run on a live fleet.
    Small,
    /// The seed's numbers: 2,400 contractors, 19,000 technicians, a 340-contractor wave.
    Seed,
}

impl Scale {
    /// Synthetic contractors per cell (out of `cells`).
    pub fn contractors_per_cell(self, cells: usize) -> usize {
        match self {
            Scale::Small => 2,
            Scale::Seed => 2_400usize.div_ceil(cells.max(1)),
        }
    }
    /// Technicians per contractor.
    pub fn technicians(self) -> usize {
        match self {
            Scale::Small => 2,
            Scale::Seed => 8,
        }
    }
    /// Load workers (requests in flight at once).
    pub fn workers(self) -> usize {
        match self {
            Scale::Small => 8,
            Scale::Seed => 48,
        }
    }
    /// Requests a second of the whole synthetic load (it comes from one address: below an
    /// edge's per-address limit, `rate_per_ip_per_s`, 200 by default).
    pub fn rate_per_s(self) -> u32 {
        match self {
            Scale::Small => 100,
            Scale::Seed => 150,
        }
    }
    /// Contractors a migration wave moves.
    pub fn wave(self, cells: usize) -> usize {
        match self {
            Scale::Small => cells.max(2),
            Scale::Seed => 340,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Small => "small",
            Scale::Seed => "seed",
        }
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What every scenario of a run shares.
#[derive(Debug)]
pub struct Ctx {
    pub fleet_path: PathBuf,
    pub fleet: FleetFile,
    pub admin: AdminClient,
    /// The synthetic clients' HTTPS client (trusts the fleet's CA only).
    pub http: reqwest::Client,
    /// The cells the game day runs in.
    pub cells: Vec<CellId>,
    pub scale: Scale,
    pub duration: Duration,
    pub faults: Faults,
    /// The synthetic population (provisioned before the first scenario).
    pub pop: Population,
    /// Names this run's idempotency keys.
    pub run_id: String,
    /// Contractors a migration wave moves (`--wave`; default: the scale's).
    pub wave: Option<usize>,
}

impl Ctx {
    /// A cell of the fleet.
    pub fn cell(&self, id: &CellId) -> Result<&FleetCell> {
        Ok(self.fleet.named_cell(id, &self.fleet_path)?)
    }

    /// The admin client and the fleet, for provisioning.
    pub fn fleet_view(&self) -> super::synthetic::Fleet<'_> {
        super::synthetic::Fleet {
            admin: &self.admin,
            fleet: &self.fleet,
        }
    }

    /// The synthetic technicians whose contractor `cell` owns.
    pub fn technicians_of(&self, cell: &CellId) -> Vec<Technician> {
        self.pop.technicians_of(cell).into_iter().cloned().collect()
    }

    /// Signs `techs` in at their owning cells, [`SIGN_IN_CONCURRENCY`] at a time and at most
    /// [`SIGN_INS_PER_CELL_PER_S`] a second per cell; records each sign-in in `rec` (and a
    /// failure's answer in `stats`) and answers the sessions (a failed sign-in has none).
    ///
    /// Paced and retried like an app: every synthetic client comes from one address, which each
    /// auth-service throttles (`signin_ip_per_minute`, 1,200 by default); a `429` or `503` is
    /// tried again after its `Retry-After`, at most [`SIGN_IN_ATTEMPTS`] times.
    pub async fn sign_in_all(
        &self,
        techs: &[Technician],
        rec: &Recorder,
        stats: &load::LoadStats,
    ) -> Vec<Session> {
        use futures::StreamExt as _;
        let per_s = u32::try_from(self.cells.len().max(1))
            .unwrap_or(u32::MAX)
            .saturating_mul(SIGN_INS_PER_CELL_PER_S);
        let pace = governor::RateLimiter::direct(governor::Quota::per_second(
            std::num::NonZeroU32::new(per_s).unwrap_or(std::num::NonZeroU32::MIN),
        ));
        // Interleaved by cell, so the pace spreads over every cell's throttle at once.
        let mut by_cell: BTreeMap<Option<CellId>, VecDeque<Technician>> = BTreeMap::new();
        for t in techs {
            by_cell
                .entry(self.pop.owner(&t.contractor))
                .or_default()
                .push_back(t.clone());
        }
        let mut order = Vec::with_capacity(techs.len());
        while order.len() < techs.len() {
            for q in by_cell.values_mut() {
                order.extend(q.pop_front());
            }
        }
        futures::stream::iter(order)
            .map(|t| {
                let pace = &pace;
                async move {
                    pace.until_ready().await;
                    self.sign_in_one(t, rec, stats).await
                }
            })
            .buffer_unordered(SIGN_IN_CONCURRENCY)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    async fn sign_in_one(
        &self,
        t: Technician,
        rec: &Recorder,
        stats: &load::LoadStats,
    ) -> Option<Session> {
        let mut cell = self.pop.owner(&t.contractor)?;
        let mut endpoint = self.cell(&cell).ok()?.endpoint.clone();
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (a, s) = load::sign_in(&self.http, &endpoint, &t, &self.pop.password).await;
            let retry_after = match &a {
                // Throttled, busy, or the contractor read-only while it moves: an app tries
                // again after the answer's `Retry-After`.
                load::Answer::Status(429 | 503, v) if attempt < SIGN_IN_ATTEMPTS => {
                    Some(v["retry_after_s"].as_u64().unwrap_or(1).clamp(1, 30))
                }
                load::Answer::Status(409, v)
                    if v["error"] == "HANDOFF_IN_PROGRESS" && attempt < SIGN_IN_ATTEMPTS =>
                {
                    Some(v["retry_after_s"].as_u64().unwrap_or(1).clamp(1, 30))
                }
                _ => None,
            };
            if let Some(wait_s) = retry_after {
                tokio::time::sleep(Duration::from_secs(wait_s)).await;
                continue;
            }
            // A contractor a migration moved: the old cell names its owner (one hop, as an
            // app with a stale map would take).
            if let load::Answer::Status(409, v) = &a
                && v["error"] == "WRONG_CELL"
                && let Some(owner) = v["owner_endpoint"].as_str()
                && let Some(owner_cell) = v["owner_cell"].as_str().and_then(|c| CellId::new(c).ok())
                && attempt < SIGN_IN_ATTEMPTS
            {
                endpoint = owner.to_owned();
                self.pop.moved(&t.contractor, owner_cell.clone());
                cell = owner_cell;
                continue;
            }
            let class = classify(&a, 201);
            rec.record(&cell, class, started.elapsed());
            if class != load::Class::Ok {
                stats.failed(&format!("sign-in {}", a.describe()));
            }
            return s;
        }
    }

    /// Waits until `cell` serves again after a fault on it is undone: its edge answers
    /// `/readyz` with 200 and its auth-service its admin status (an edge with saved state is
    /// ready before a restarted auth-service, whose sign-ins it would refuse with `503`).
    pub async fn wait_ready(&self, cell: &CellId) -> Result<()> {
        let url = format!("{}/readyz", self.cell(cell)?.endpoint);
        let auth = crate::admin::Api::auth(self.cell(cell)?)?;
        let deadline = Instant::now() + Duration::from_secs(READY_AGAIN_S);
        loop {
            let edge_ready = matches!(
                self.http.get(&url).send().await,
                Ok(r) if r.status().as_u16() == 200
            );
            if edge_ready
                && self
                    .admin
                    .until(Instant::now() + Duration::from_secs(1))
                    .status(&auth)
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CtlError::Failed(format!(
                    "{cell}'s edge not ready {READY_AGAIN_S} s after its fault was undone"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `a` as a request that expected `want`.
pub fn classify(a: &load::Answer, want: u16) -> load::Class {
    match a {
        load::Answer::NoAnswer(_) => load::Class::BeforeCell,
        load::Answer::Status(s, _) if *s == want => load::Class::Ok,
        load::Answer::Status(..) => load::Class::InCell,
    }
}

/// One scenario's run in progress: its faults, figures and bounds.
#[derive(Debug)]
pub struct Run {
    pub ctx: Arc<Ctx>,
    pub started: Instant,
    pub rec: Arc<Recorder>,
    /// Counters of every load the scenario started.
    pub stats: Arc<load::LoadStats>,
    faults: Vec<(String, FaultWindow)>,
    figures: Vec<Figure>,
    bounds: Vec<BoundCheck>,
}

impl Run {
    pub(crate) fn new(ctx: Arc<Ctx>) -> Run {
        let started = Instant::now();
        Run {
            ctx,
            started,
            rec: Arc::new(Recorder::new(started)),
            stats: Arc::default(),
            faults: Vec::new(),
            figures: Vec::new(),
            bounds: Vec::new(),
        }
    }

    /// Milliseconds since the scenario started.
    pub fn ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Applies a fault (the undo log records it first).
    pub async fn down(&mut self, target: &Target) -> Result<()> {
        let start_ms = self.ms();
        let what = self.ctx.faults.down(target).await?;
        self.faults.push((
            target.to_string(),
            FaultWindow {
                what,
                start_ms,
                end_ms: None,
            },
        ));
        Ok(())
    }

    /// Undoes a fault.
    pub async fn up(&mut self, target: &Target) -> Result<()> {
        self.ctx.faults.up(target).await?;
        let end = self.ms();
        self.close(&target.to_string(), end);
        Ok(())
    }

    /// A restart (down then up) as one fault window.
    pub async fn restart(&mut self, target: &Target) -> Result<()> {
        let start_ms = self.ms();
        let what = self.ctx.faults.restart(target).await?;
        let end_ms = Some(self.ms());
        self.faults.push((
            target.to_string(),
            FaultWindow {
                what,
                start_ms,
                end_ms,
            },
        ));
        Ok(())
    }

    /// Records an action that is a fault but is not undone (a key rotation, a migration).
    pub fn mark(&mut self, what: String, start_ms: u64) {
        let end_ms = Some(self.ms());
        self.faults.push((
            String::new(),
            FaultWindow {
                what,
                start_ms,
                end_ms,
            },
        ));
    }

    /// Closes every fault window still open (the engine undid them at `end`).
    pub(crate) fn close_all(&mut self, end: u64) {
        for (_, w) in &mut self.faults {
            if w.end_ms.is_none() {
                w.end_ms = Some(end);
            }
        }
    }

    fn close(&mut self, target: &str, end: u64) {
        for (t, w) in &mut self.faults {
            if t == target && w.end_ms.is_none() {
                w.end_ms = Some(end);
            }
        }
    }

    /// A measured figure.
    pub fn figure(&mut self, name: &str, value: f64, unit: &str) {
        self.figures.push(Figure {
            name: name.to_owned(),
            value,
            unit: unit.to_owned(),
        });
    }

    /// A bound on a figure already measured (a missing figure fails the bound, read as 0).
    pub fn bound(&mut self, figure: &str, op: &str, limit: f64) {
        let found = self.figures.iter().find(|f| f.name == figure);
        let mut b = BoundCheck::check(figure, op, limit, found.map_or(0.0, |f| f.value));
        b.met &= found.is_some();
        self.bounds.push(b);
    }

    /// Signs `techs` in at their owning cells (see [`Ctx::sign_in_all`]), counted in this run.
    pub async fn sign_in(&self, techs: &[Technician]) -> Vec<Session> {
        self.ctx.sign_in_all(techs, &self.rec, &self.stats).await
    }

    /// Starts the synthetic load over `sessions`.
    pub fn load(&self, sessions: Vec<Session>) -> Load {
        Load::start(
            self.ctx.http.clone(),
            sessions,
            self.rec.clone(),
            self.stats.clone(),
            self.ctx.scale.workers(),
            self.ctx.scale.rate_per_s(),
            &format!("{}-{}", self.ctx.run_id, self.ms()),
        )
    }

    /// Lets the load run for `d` (the scenario's measured window; not a synchronisation).
    pub async fn hold(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// Records the load's totals as figures (`requests_ok`, `requests_failed_before_cell`,
    /// `requests_failed_in_cell`, `latency_p50_ms`, `latency_p99_ms`).
    pub fn load_figures(&mut self) {
        let t = self.rec.total();
        let lat = self.rec.latencies();
        self.figure("requests_ok", t.ok as f64, "count");
        self.figure("requests_failed_before_cell", t.before_cell as f64, "count");
        self.figure("requests_failed_in_cell", t.in_cell as f64, "count");
        self.figure("latency_p50_ms", load::percentile(&lat, 0.50), "ms");
        self.figure("latency_p99_ms", load::percentile(&lat, 0.99), "ms");
        // The failures by what they got, as `failed_<status>_<code>` (`failed_no_answer`).
        for (what, n) in self.stats.failures() {
            let name = format!(
                "failed_{}",
                what.to_lowercase().replace([' ', '(', ')'], "_")
            );
            self.figure(name.trim_end_matches('_'), n as f64, "count");
        }
    }

    /// The report of scenario `name` (which `proves`) that ended with `outcome`.
    pub(crate) fn finish(
        mut self,
        (name, proves): (&str, &str),
        outcome: Outcome,
        reason: String,
        started_unix_ms: u64,
        stopped_ms: Option<u64>,
    ) -> ScenarioReport {
        let end = self.ms();
        self.close_all(end);
        let outcome = match outcome {
            Outcome::Passed if self.bounds.iter().any(|b| !b.met) => Outcome::Failed,
            o => o,
        };
        ScenarioReport {
            name: name.to_owned(),
            proves: proves.to_owned(),
            outcome,
            reason,
            started_unix_ms,
            duration_ms: end,
            stopped_ms,
            faults: self.faults.into_iter().map(|(_, w)| w).collect(),
            figures: self.figures,
            bounds: self.bounds,
            timeline: self.rec.timeline(),
        }
    }
}

/// The cell a synthetic contractor is placed in now (the control plane's placement).
pub async fn placed_in(ctx: &Ctx, s: &Synthetic) -> Result<CellId> {
    let cp = crate::admin::Api::control_plane(&ctx.fleet)?;
    match ctx.admin.placement(&cp, s.id()).await? {
        Some(p) => Ok(p.cell),
        None => Err(CtlError::Failed(format!("the control plane places no {s}"))),
    }
}

/// The cell after `from` among the game day's cells (a migration's target).
pub fn next_cell(ctx: &Ctx, from: &CellId) -> Result<CellId> {
    let i = ctx.cells.iter().position(|c| c == from).unwrap_or(0);
    let to = ctx.cells[(i + 1) % ctx.cells.len().max(1)].clone();
    if &to == from {
        return Err(CtlError::BadRequest(
            "a migration needs at least two cells in the game day".to_owned(),
        ));
    }
    Ok(to)
}

/// Migrates a synthetic contractor to `to` with the product's orchestrator; answers its
/// report. (Its steps wait, within their timeout, for a control plane that is down.)
pub async fn migrate_to(
    ctx: &Ctx,
    s: &Synthetic,
    to: CellId,
) -> Result<crate::migrate::MigrationReport> {
    let opts = crate::migrate::MigrateOptions::new(s.id().clone(), to);
    let report = crate::migrate::migrate(&ctx.fleet_path, &opts, |_| {}).await?;
    ctx.pop.moved(s, report.target.clone());
    Ok(report)
}

/// Migrates a synthetic contractor to the cell after its current one (the control plane's
/// placement) among the game day's cells; answers its report.
pub async fn migrate_report(ctx: &Ctx, s: &Synthetic) -> Result<crate::migrate::MigrationReport> {
    let from = placed_in(ctx, s).await?;
    let to = next_cell(ctx, &from)?;
    migrate_to(ctx, s, to).await
}

/// [`migrate_report`], answering (from, to).
pub async fn migrate_synthetic(ctx: &Ctx, s: &Synthetic) -> Result<(CellId, CellId)> {
    let r = migrate_report(ctx, s).await?;
    Ok((r.source, r.target))
}

/// Checks acknowledged completions against the apps: answers (lost, duplicated). A write is
/// lost when its owning cell's app does not hold its key, duplicated when it holds it twice.
pub async fn verify_writes(
    ctx: &Ctx,
    acked: &std::collections::BTreeMap<ContractorId, Vec<String>>,
) -> Result<(usize, usize)> {
    let (mut lost, mut duplicated) = (0, 0);
    for (c, keys) in acked {
        let s = Synthetic::new(c.clone())?;
        let cell = placed_in(ctx, &s).await?;
        let app = crate::admin::Api::app(ctx.cell(&cell)?)?;
        let held = ctx.admin.app_completions(&app, c).await?;
        let held: Vec<String> = held
            .map(|h| {
                h.completions
                    .into_iter()
                    .filter_map(|x| x.idempotency_key)
                    .collect()
            })
            .unwrap_or_default();
        let unique: std::collections::BTreeSet<&String> = held.iter().collect();
        duplicated += held.len() - unique.len();
        lost += keys.iter().filter(|k| !unique.contains(k)).count();
    }
    Ok((lost, duplicated))
}

/// Migrations a wave runs at once.
pub const WAVE_PARALLEL: usize = 3;

/// A migration wave in progress: `WAVE_PARALLEL` at a time, each contractor to the cell after
/// its current one, with the product's orchestrator.
#[derive(Debug)]
pub struct Wave {
    started: Instant,
    size: usize,
    workers:
        tokio::task::JoinSet<Vec<std::result::Result<crate::migrate::MigrationReport, String>>>,
}

impl Wave {
    /// Starts moving each of `moves` to its cell.
    pub fn start(ctx: &Arc<Ctx>, moves: Vec<(Synthetic, CellId)>) -> Wave {
        let size = moves.len();
        let contractors = moves;
        let queue = Arc::new(std::sync::Mutex::new(contractors));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..WAVE_PARALLEL {
            let (queue, ctx) = (queue.clone(), ctx.clone());
            workers.spawn(async move {
                let mut done = Vec::new();
                loop {
                    let next = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .pop();
                    let Some((s, to)) = next else {
                        return done;
                    };
                    // A migration that fails is reported; the wave goes on with the others.
                    done.push(
                        migrate_to(&ctx, &s, to)
                            .await
                            .map_err(|e| format!("{s}: {e}")),
                    );
                }
            });
        }
        Wave {
            started: Instant::now(),
            size,
            workers,
        }
    }

    /// Waits for the wave's end (every migration finished or failed): the reports, the
    /// failures (`contractor: reason`) and how long it took.
    pub async fn finish(mut self) -> (Vec<crate::migrate::MigrationReport>, Vec<String>, Duration) {
        let (mut reports, mut failed) = (Vec::new(), Vec::new());
        while let Some(done) = self.workers.join_next().await {
            match done {
                Ok(list) => {
                    for r in list {
                        match r {
                            Ok(r) => reports.push(r),
                            Err(e) => failed.push(e),
                        }
                    }
                }
                Err(e) => failed.push(format!("migration worker: {e}")),
            }
        }
        (reports, failed, self.started.elapsed())
    }

    /// How many contractors it moves.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// The moves of a wave (`--wave`, or the scale's number of contractors), each to the cell
/// after the one the control plane places it in now: decided before the wave starts, so a
/// control plane that goes down during it only delays it.
pub async fn wave_of(ctx: &Ctx) -> Result<Vec<(Synthetic, CellId)>> {
    let n = ctx.wave.unwrap_or_else(|| ctx.scale.wave(ctx.cells.len()));
    let mut moves = Vec::new();
    for s in ctx.pop.contractors().into_iter().take(n) {
        let from = placed_in(ctx, &s).await?;
        let to = next_cell(ctx, &from)?;
        moves.push((s, to));
    }
    Ok(moves)
}

/// Records a wave's figures and what the apps hold after it: `migrated`, `wave_s`, the
/// read-only windows (`read_only_worst_ms`, `read_only_p99_ms`), completions acknowledged, lost,
/// duplicated, accepted by a non-owning cell (a source app holding a key its contractor's
/// owner does not), `wrong_cell_hops`, `signed_in_again`.
pub async fn wave_figures(
    r: &mut Run,
    reports: &[crate::migrate::MigrationReport],
    failed: &[String],
    took: Duration,
) -> Result<()> {
    for f in failed {
        tracing::warn!(migration = %f, "a migration of the wave failed");
    }
    let mut windows: Vec<f32> = reports
        .iter()
        .map(|m| m.read_only_ms.unwrap_or(0) as f32)
        .collect();
    windows.sort_by(f32::total_cmp);
    let acked = r.stats.acked();
    let (lost, duplicated) = verify_writes(&r.ctx, &acked).await?;
    let mut non_owner = 0usize;
    for m in reports {
        let src = crate::admin::Api::app(r.ctx.cell(&m.source)?)?;
        let dst = crate::admin::Api::app(r.ctx.cell(&m.target)?)?;
        let keys = |h: Option<protocol::admin::app::CompletionsResponse>| -> std::collections::BTreeSet<String> {
            h.map(|h| h.completions.into_iter().filter_map(|c| c.idempotency_key).collect())
                .unwrap_or_default()
        };
        let at_source = keys(r.ctx.admin.app_completions(&src, &m.contractor_id).await?);
        let at_target = keys(r.ctx.admin.app_completions(&dst, &m.contractor_id).await?);
        non_owner += at_source.difference(&at_target).count();
    }
    let hops = r.stats.hops.load(std::sync::atomic::Ordering::Relaxed);
    let again = r
        .stats
        .sign_in_again
        .load(std::sync::atomic::Ordering::Relaxed);
    let acked_total = r.stats.acked_total();
    r.figure("migrated", reports.len() as f64, "count");
    r.figure("migrations_failed", failed.len() as f64, "count");
    r.figure("wave_s", took.as_secs_f64(), "s");
    r.figure(
        "read_only_worst_ms",
        windows.last().copied().map_or(0.0, f64::from),
        "ms",
    );
    r.figure("read_only_p99_ms", load::percentile(&windows, 0.99), "ms");
    r.figure("completions_acked", acked_total as f64, "count");
    r.figure("completions_lost", lost as f64, "count");
    r.figure("completions_duplicated", duplicated as f64, "count");
    r.figure("writes_at_non_owner", non_owner as f64, "count");
    r.figure("wrong_cell_hops", hops as f64, "count");
    r.figure("signed_in_again", again as f64, "count");
    Ok(())
}

/// Finishes every migration of a synthetic contractor that the journal holds unfinished (a
/// wave cut short: an aborted scenario, a killed `cellctl`): until then its contractor stays
/// read-only at the source. Each is resumed where it stopped (`cellctl migrate` does the same).
/// Answers one line per migration finished; an unfinished migration of a real contractor is
/// left to its operator (named in the answer).
pub async fn finish_migrations(fleet_path: &std::path::Path) -> Result<Vec<String>> {
    let journal = crate::migrate::Journal::open(&crate::migrate::journal_path(fleet_path))?;
    let mut done = Vec::new();
    for (c, to) in journal.unfinished()? {
        if !c.is_synthetic() {
            done.push(format!(
                "the migration of {c} to {to} is unfinished (a real contractor: `cellctl migrate {c} --to {to}` finishes it)"
            ));
            continue;
        }
        let opts = crate::migrate::MigrateOptions::new(c.clone(), to.clone());
        let r = crate::migrate::migrate(fleet_path, &opts, |_| {}).await?;
        done.push(format!(
            "finished the interrupted migration of {c} to {} (read-only {} ms)",
            r.target,
            r.read_only_ms.unwrap_or(0)
        ));
    }
    Ok(done)
}
