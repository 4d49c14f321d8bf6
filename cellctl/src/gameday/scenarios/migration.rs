//! `migration-under-load` (the seed's Exercise 2): a wave of synthetic contractors moves to
//! other cells while their technicians keep working. Measured: the read-only window of each
//! (the orchestrator's handoff → release), writes lost or applied twice (from the apps'
//! completion listings; must be 0), sessions that followed their contractor without signing in
//! again, and the wave's duration.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::gameday::load::percentile;
use crate::gameday::run::{Run, migrate_synthetic, verify_writes};
use crate::gameday::scenario::Scenario;

/// Migrations run at once.
const PARALLEL: usize = 3;
/// Bound: the worst read-only window, in milliseconds (DESIGN §5).
const READ_ONLY_WORST_MS: f64 = 5_000.0;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "migration-under-load",
    proves: "a wave of live migrations under load loses and duplicates no write, keeps each contractor read-only ≤ 5 s, and no technician signs in again",
    plan: |cells, scale, _| {
        vec![
            "every synthetic technician signs in; route loads and completions".to_owned(),
            format!(
                "a wave of {} synthetic contractors, each to the next of {} cells, {PARALLEL} at a time",
                scale.wave(cells.len()),
                cells.len()
            ),
            "sessions follow their contractor (WRONG_CELL → transfer → rebind); writes checked at the new owners".to_owned(),
        ]
    },
    targets: crate::gameday::scenario::none,
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.ctx.sign_in_all(&techs, &r.rec).await;
    let load = r.load(sessions);
    let wave: Vec<_> = r
        .ctx
        .pop
        .owners
        .keys()
        .take(r.ctx.scale.wave(r.ctx.cells.len()))
        .cloned()
        .collect();
    let queue = Arc::new(Mutex::new(wave.clone()));
    let start = r.ms();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..PARALLEL {
        let (queue, ctx) = (queue.clone(), r.ctx.clone());
        workers.spawn(async move {
            let mut windows = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop();
                let Some(s) = next else {
                    return Ok::<_, crate::error::CtlError>(windows);
                };
                let report = crate::gameday::run::migrate_report(&ctx, &s).await?;
                windows.push(report.read_only_ms.unwrap_or(0) as f32);
            }
        });
    }
    let mut windows = Vec::new();
    while let Some(done) = workers.join_next().await {
        match done {
            Ok(w) => windows.extend(w?),
            Err(e) => {
                return Err(crate::error::CtlError::Internal(format!(
                    "migration worker: {e}"
                )));
            }
        }
    }
    let wave_ms = r.ms() - start;
    r.mark(format!("{} contractors migrated", wave.len()), start);
    // Let the sessions meet their contractors' new cells before the load stops.
    r.hold(r.ctx.duration / 4).await;
    let stats = load.stop().await;
    let (lost, duplicated) = verify_writes(&r.ctx, &stats.acked()).await?;
    windows.sort_by(f32::total_cmp);
    r.load_figures();
    r.figure("migrated", windows.len() as f64, "count");
    r.figure("wave_s", wave_ms as f64 / 1000.0, "s");
    r.figure(
        "read_only_worst_ms",
        windows.last().copied().map_or(0.0, f64::from),
        "ms",
    );
    r.figure("read_only_p99_ms", percentile(&windows, 0.99), "ms");
    r.figure("completions_acked", stats.acked_total() as f64, "count");
    r.figure("completions_lost", lost as f64, "count");
    r.figure("completions_duplicated", duplicated as f64, "count");
    r.figure(
        "wrong_cell_hops",
        stats.hops.load(std::sync::atomic::Ordering::Relaxed) as f64,
        "count",
    );
    r.figure(
        "signed_in_again",
        stats
            .sign_in_again
            .load(std::sync::atomic::Ordering::Relaxed) as f64,
        "count",
    );
    let _ = migrate_synthetic;
    r.bound("migrated", ">=", wave.len() as f64);
    r.bound("read_only_worst_ms", "<=", READ_ONLY_WORST_MS);
    r.bound("completions_lost", "==", 0.0);
    r.bound("completions_duplicated", "==", 0.0);
    r.bound("signed_in_again", "==", 0.0);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    Ok(())
}
