//! `cellctl gameday`: the seed's exercises (and the faults every part must survive) as
//! something an operator runs weekly against any fleet — a dev fleet's `fleet.json` or a real
//! fleet's inventory (`cells.toml` with a `[gameday]` section). docs/GAMEDAY.md is the guide.
//!
//! A run:
//!
//! ```text
//!   finish the undo log ─▶ provision synthetic ─▶ for each scenario:            ─▶ retire synthetic
//!   (faults a crashed      contractors + techs      guard ┬─ run (fault, load,     users; report
//!    run left)             at their owning cells          │   figures, bounds)     (JSON + HTML)
//!                                                         └─ trips (real traffic
//!                                                            burns its SLO) ─▶ abort
//!                                                         undo every fault still in force
//! ```
//!
//! - [`scenarios`]: what each scenario does, measures and must meet ([`scenarios::ALL`]).
//! - [`synthetic`]: the synthetic contractors, the only ones a game day acts on.
//! - [`load`]: the synthetic load and its recorder (the timeline).
//! - [`fault`]: faults through the inventory's actuators, with an undo log.
//! - [`guard`]: the stop conditions, read from the edges' management `/metrics`.
//! - [`model`], [`report`]: the report (JSON, schema'd) and its HTML page.

pub mod fault;
pub mod guard;
pub mod load;
pub mod model;
pub mod report;
pub mod run;
pub mod scenario;
pub mod scenarios;
pub mod synthetic;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use protocol::{CellId, ContractorId};

use crate::admin::AdminClient;
use crate::error::{CtlError, Result};
use fault::Faults;
use model::{Outcome, REPORT_SCHEMA, Report, ScenarioReport};
use run::unix_ms;
pub use run::{Ctx, Run, Scale};
use scenario::Scenario;
use synthetic::{Population, Synthetic};

/// Default `--duration`: how long each scenario holds its fault under load, in seconds.
pub const DEFAULT_DURATION_S: u64 = 20;

/// `cellctl gameday …`.
#[derive(Debug, Args)]
pub struct GamedayArgs {
    #[command(subcommand)]
    pub command: GamedayCommand,
}

/// The game day commands.
#[derive(Debug, Subcommand)]
pub enum GamedayCommand {
    /// The scenarios and what each proves.
    List,
    /// Runs scenarios on synthetic contractors; writes a report (JSON + HTML).
    Run(RunArgs),
    /// Renders a report's HTML page again and prints its summary.
    Report {
        /// The JSON report.
        file: PathBuf,
    },
    /// Undoes every fault an interrupted run left (every other command does this first).
    Undo,
}

/// `cellctl gameday run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenarios to run, in this order (`cellctl gameday list`).
    pub scenarios: Vec<String>,
    /// Run every scenario.
    #[arg(long)]
    pub all: bool,
    /// Cells to run in (comma-separated; default: every cell of the fleet).
    #[arg(long, value_delimiter = ',')]
    pub cells: Vec<CellId>,
    /// How long each scenario holds its fault under load (`20s`, `2m`).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long, value_enum, default_value = "small")]
    pub scale: Scale,
    /// Print the plan (faults, actuators, load, bounds) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Synthetic contractors to use instead of provisioning (a real contractor is refused).
    #[arg(long, value_delimiter = ',')]
    pub contractors: Vec<ContractorId>,
    /// Contractors a migration wave moves (default: `small` one per cell, `seed` 340).
    #[arg(long)]
    pub wave: Option<usize>,
    /// Where to write the report (default: the game day's state directory, `reports/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `20s`, `2m`, `1h` or plain seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (20s, 2m)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{s:?}: the unit is s, m or h")),
    };
    if secs == 0 {
        return Err("the duration must be at least 1s".to_owned());
    }
    Ok(Duration::from_secs(secs))
}

/// Runs a parsed `cellctl gameday` command.
pub async fn run_cli(fleet_path: &Path, args: GamedayArgs, json: bool) -> Result<()> {
    match args.command {
        GamedayCommand::List => {
            list(json);
            Ok(())
        }
        GamedayCommand::Report { file } => report::run_report(&file, json),
        GamedayCommand::Undo => {
            let faults = Faults::open(fleet_path)?;
            let mut undone = faults.finish_pending().await?;
            undone.extend(run::finish_migrations(fleet_path).await?);
            print_undone(&undone, json);
            Ok(())
        }
        GamedayCommand::Run(a) => {
            let Some(report) = run(fleet_path, &a, json).await? else {
                return Ok(());
            };
            if report.passed() {
                Ok(())
            } else {
                let bad: Vec<String> = report
                    .scenarios
                    .iter()
                    .filter(|s| s.outcome != Outcome::Passed)
                    .map(|s| format!("{} {:?}", s.name, s.outcome).to_lowercase())
                    .collect();
                Err(CtlError::Failed(format!("game day: {}", bad.join(", "))))
            }
        }
    }
}

fn print_undone(undone: &[String], json: bool) {
    if json {
        println!("{}", serde_json::json!({ "undone": undone }));
    } else if undone.is_empty() {
        println!("nothing to undo");
    } else {
        for u in undone {
            println!("undone: {u}");
        }
    }
}

fn list(json: bool) {
    if json {
        let v: Vec<_> = scenarios::ALL
            .iter()
            .map(|s| serde_json::json!({ "name": s.name, "proves": s.proves }))
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return;
    }
    for s in scenarios::ALL {
        println!("{:<24} {}", s.name, s.proves);
    }
}

/// The scenarios `args` names, in order.
fn chosen(args: &RunArgs) -> Result<Vec<&'static Scenario>> {
    if args.all {
        return Ok(scenarios::ALL.iter().collect());
    }
    if args.scenarios.is_empty() {
        return Err(CtlError::BadRequest(
            "name the scenarios to run, or --all (cellctl gameday list)".to_owned(),
        ));
    }
    args.scenarios
        .iter()
        .map(|n| {
            scenarios::ALL.iter().find(|s| s.name == n).ok_or_else(|| {
                CtlError::BadRequest(format!("no scenario {n:?} (cellctl gameday list)"))
            })
        })
        .collect()
}

/// `cellctl gameday run`: the whole run; answers the report (also written as JSON + HTML), or
/// `None` for a dry run.
pub async fn run(fleet_path: &Path, args: &RunArgs, json: bool) -> Result<Option<Report>> {
    let chosen = chosen(args)?;
    // A real contractor named on the command line is refused before anything is done.
    let named: Vec<Synthetic> = args
        .contractors
        .iter()
        .cloned()
        .map(Synthetic::new)
        .collect::<Result<_>>()?;
    let fleet = fleet_description::inventory::load(fleet_path)?;
    let cells = if args.cells.is_empty() {
        fleet.cells.iter().map(|c| c.id.clone()).collect()
    } else {
        for c in &args.cells {
            fleet.named_cell(c, fleet_path)?;
        }
        args.cells.clone()
    };
    let faults = Faults::open(fleet_path)?;
    let section = fleet_description::load_gameday(fleet_path)?;
    if args.dry_run {
        for s in &chosen {
            println!("{}: {}", s.name, s.proves);
            for line in (s.plan)(&cells, args.scale, args.duration) {
                println!("  - {line}");
            }
            for t in (s.targets)(&cells) {
                match faults.describe(&t) {
                    Ok(d) => println!("  - fault: {d}"),
                    Err(e) => println!("  - fault {t}: cannot be applied here: {e}"),
                }
            }
        }
        println!(
            "stop conditions: real traffic's error ratio > {} or p99 > {} ms over {} s at the edges ({} metrics URLs)",
            section.stop.max_error_ratio,
            section.stop.max_p99_ms,
            section.stop.window_s,
            section
                .edges
                .iter()
                .map(|e| e.metrics_urls.len())
                .sum::<usize>()
        );
        println!("dry run: nothing changed");
        return Ok(None);
    }
    let started_unix_ms = unix_ms();
    let mut undone_first = faults.finish_pending().await?;
    undone_first.extend(run::finish_migrations(fleet_path).await?);
    for u in &undone_first {
        eprintln!("gameday: undone first (left by an interrupted run): {u}");
    }
    let admin = AdminClient::for_fleet(&fleet)?;
    let http = fleet_description::client_trusting_file(&fleet.ca_cert)?;
    let interrupt = Interrupt::watch();
    // The stop conditions need eyes: a game day whose guard reads no edge does not start.
    let metrics_urls: Vec<String> = section
        .edges
        .iter()
        .filter(|e| cells.contains(&e.cell))
        .flat_map(|e| e.metrics_urls.clone())
        .collect();
    if metrics_urls.is_empty() {
        return Err(CtlError::Config(
            "no edge metrics for the game day's cells ([[gameday.edges]] metrics_urls): its stop conditions would see nothing".to_owned(),
        ));
    }
    let guard = guard::Guard::spawn(http.clone(), metrics_urls.clone(), section.stop.clone());
    let deadline = Instant::now() + Duration::from_millis(GUARD_FIRST_READ_MS);
    while guard.latest().edges_read == 0 {
        if Instant::now() > deadline {
            return Err(CtlError::Failed(format!(
                "the stop conditions could read none of the {} edge metrics URLs ({}); a game day does not run blind",
                metrics_urls.len(),
                metrics_urls.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ctx = Ctx {
        fleet_path: fleet_path.to_path_buf(),
        fleet,
        admin,
        http: http.clone(),
        cells: cells.clone(),
        scale: args.scale,
        duration: args.duration,
        faults,
        pop: Population::empty()?,
        run_id: format!("{started_unix_ms:x}"),
        wave: args.wave,
    };
    eprintln!(
        "gameday: provisioning synthetic contractors ({} scale) in {} cells…",
        args.scale.as_str(),
        cells.len()
    );
    // A `--wave` bigger than the scale's population provisions enough contractors for it.
    let per_cell = args
        .scale
        .contractors_per_cell(cells.len())
        .max(args.wave.unwrap_or(0).div_ceil(cells.len().max(1)));
    let wanted = synthetic::wanted(&cells, per_cell, &named)?;
    ctx.pop = synthetic::provision(ctx.fleet_view(), &wanted, args.scale.technicians()).await?;
    let ctx = Arc::new(ctx);
    let mut reports = Vec::new();
    let mut interrupted = false;
    for sc in &chosen {
        if interrupt.is_set() {
            interrupted = true;
            break;
        }
        eprintln!("gameday: {} …", sc.name);
        let r = run_one(&ctx, sc, &guard, &interrupt).await;
        interrupted = r.reason.starts_with(INTERRUPTED);
        if !json {
            eprintln!("gameday: {} {:?}", sc.name, r.outcome);
        }
        let tripped = r.outcome == Outcome::Aborted && !interrupted;
        reports.push(r);
        if interrupted {
            break;
        }
        if tripped {
            // The guard judges a sliding window: let the aborted scenario's errors leave it,
            // so the next scenario is judged on traffic of its own time.
            tokio::time::sleep(Duration::from_secs(section.stop.window_s + 1)).await;
        }
    }
    drop(guard);
    if let Err(e) = synthetic::retire(ctx.fleet_view(), &ctx.pop).await {
        eprintln!("gameday: retiring the synthetic users failed: {e}");
    }
    let report = Report {
        schema: REPORT_SCHEMA,
        cellctl_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_unix_ms,
        finished_unix_ms: unix_ms(),
        cells: cells.iter().map(ToString::to_string).collect(),
        scale: args.scale.as_str().to_owned(),
        undone_first,
        scenarios: reports,
    };
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| section.state_dir.join("reports"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CtlError::Config(format!("{}: {e}", dir.display())))?;
    let (json_path, html_path) =
        report::write(&report, &dir, &format!("gameday-{started_unix_ms}"))?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| CtlError::Internal(e.to_string()))?
        );
    } else {
        print!("{}", report::summary_text(&report));
        println!("report: {} ({})", json_path.display(), html_path.display());
    }
    if interrupted {
        return Err(CtlError::Failed(
            "game day interrupted; every fault undone".to_owned(),
        ));
    }
    Ok(Some(report))
}

/// How long the guard may take to read an edge's metrics before a run starts, in milliseconds.
pub const GUARD_FIRST_READ_MS: u64 = 5_000;

/// SIGINT (Ctrl-C) or SIGTERM (systemd, Kubernetes), latched: once received, the scenario in
/// progress stops (its faults undone) and no other starts.
#[derive(Debug, Clone)]
struct Interrupt(tokio::sync::watch::Receiver<bool>);

impl Interrupt {
    fn watch() -> Interrupt {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let term = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    // No SIGTERM handler: only Ctrl-C interrupts.
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = term => {}
            }
            let _ = tx.send(true);
        });
        Interrupt(rx)
    }

    fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once a signal was received (at once if one was).
    async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the watcher is gone without a signal: never resolve.
        if rx.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Prefix of the reason of a scenario stopped by a signal.
const INTERRUPTED: &str = "interrupted";

enum Ending {
    Done(Result<()>),
    Tripped(String, Instant),
    Interrupted,
}

async fn run_one(
    ctx: &Arc<Ctx>,
    sc: &Scenario,
    guard: &guard::Guard,
    interrupt: &Interrupt,
) -> ScenarioReport {
    let started_unix_ms = unix_ms();
    let mut run = Run::new(ctx.clone());
    let ending = {
        let body = (sc.run)(&mut run);
        tokio::select! {
            r = body => Ending::Done(r),
            reason = guard.tripped() => Ending::Tripped(reason, Instant::now()),
            () = interrupt.wait() => Ending::Interrupted,
        }
    };
    // The scenario's future (and its load) is dropped here; undo whatever it left in force.
    let undone = ctx.faults.undo_all().await;
    // A wave cut short leaves contractors read-only until their migrations finish.
    let undone = match undone {
        Ok(mut list) => match run::finish_migrations(&ctx.fleet_path).await {
            Ok(more) => {
                list.extend(more);
                Ok(list)
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let undone_ms = run.ms();
    run.close_all(undone_ms);
    let undo_note = match &undone {
        Ok(list) if list.is_empty() => String::new(),
        Ok(list) => format!("; undone: {}", list.join(", ")),
        Err(e) => format!("; UNDO FAILED: {e} (run `cellctl gameday undo`)"),
    };
    for cell in &ctx.cells {
        if let Err(e) = ctx.wait_ready(cell).await {
            eprintln!("gameday: {e}");
        }
    }
    let (outcome, reason, stopped_ms) = match ending {
        Ending::Done(Ok(())) if undone.is_ok() => (
            Outcome::Passed,
            undo_note.trim_start_matches("; ").to_owned(),
            None,
        ),
        Ending::Done(Ok(())) => (
            Outcome::Error,
            undo_note.trim_start_matches("; ").to_owned(),
            None,
        ),
        Ending::Done(Err(e)) => (Outcome::Error, format!("{e}{undo_note}"), None),
        Ending::Tripped(reason, at) => {
            let stopped_ms =
                u64::try_from(at.saturating_duration_since(run.started).as_millis()).unwrap_or(0);
            (
                Outcome::Aborted,
                format!(
                    "stop condition: {reason}; stopped at {:.1} s, its faults undone {} ms later{undo_note}",
                    stopped_ms as f64 / 1000.0,
                    undone_ms.saturating_sub(stopped_ms)
                ),
                Some(stopped_ms),
            )
        }
        Ending::Interrupted => (
            Outcome::Aborted,
            format!("{INTERRUPTED} (SIGINT or SIGTERM){undo_note}"),
            None,
        ),
    };
    run.finish(
        (sc.name, sc.proves),
        outcome,
        reason,
        started_unix_ms,
        stopped_ms,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_and_scenario_names_parse() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        for bad in ["", "0s", "5d", "s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let mut names: Vec<&str> = scenarios::ALL.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            scenarios::ALL.len(),
            "scenario names are unique"
        );
    }
}
