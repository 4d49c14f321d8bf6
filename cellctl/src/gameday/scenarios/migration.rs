//! `migration-under-load` (the seed's Exercise 2): a wave of synthetic contractors moves to
//! other cells while their technicians keep working. Measured: the read-only window of each
//! (the orchestrator's handoff → release), writes lost, applied twice or accepted by a
//! non-owning cell (from the apps' completion listings; all must be 0), sessions that followed
//! their contractor without signing in again, and the wave's duration.

use crate::error::Result;
use crate::gameday::run::{Run, WAVE_PARALLEL, Wave, wave_figures, wave_of};
use crate::gameday::scenario::Scenario;

/// Bound: the worst read-only window, in milliseconds (DESIGN §5).
const READ_ONLY_WORST_MS: f64 = 5_000.0;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "migration-under-load",
    proves: "a wave of live migrations under load loses, duplicates and misplaces no write, keeps each contractor read-only ≤ 5 s, and no technician signs in again",
    plan: |cells, scale, _| {
        vec![
            "every synthetic technician signs in; route loads and completions".to_owned(),
            format!(
                "a wave of {} synthetic contractors (--wave), each to the next of {} cells, {WAVE_PARALLEL} at a time",
                scale.wave(cells.len()),
                cells.len()
            ),
            "sessions follow their contractor (WRONG_CELL → transfer → rebind); writes checked at the old and new owners".to_owned(),
        ]
    },
    targets: crate::gameday::scenario::none,
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.sign_in(&techs).await;
    let load = r.load(sessions);
    let start = r.ms();
    let wave = Wave::start(&r.ctx, wave_of(&r.ctx).await?);
    let size = wave.size();
    let (reports, failed, took) = wave.finish().await;
    r.mark(format!("{size} contractors migrated"), start);
    // Let the sessions meet their contractors' new cells before the load stops.
    r.hold(r.ctx.duration / 4).await;
    let _ = load.stop().await;
    r.load_figures();
    wave_figures(r, &reports, &failed, took).await?;
    r.bound("migrated", ">=", size as f64);
    r.bound("migrations_failed", "==", 0.0);
    r.bound("read_only_worst_ms", "<=", READ_ONLY_WORST_MS);
    r.bound("completions_lost", "==", 0.0);
    r.bound("completions_duplicated", "==", 0.0);
    r.bound("writes_at_non_owner", "==", 0.0);
    r.bound("signed_in_again", "==", 0.0);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    Ok(())
}
