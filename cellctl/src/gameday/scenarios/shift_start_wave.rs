//! `shift-start-wave`: the seed's incident, replayed. At shift start every technician already
//! has a session; route loads and job completions peak while a migration wave moves
//! contractors between cells, and the control plane goes down in the middle of it. Cells
//! serve without asking the control plane anything, so no route load and no write may fail;
//! migrations caught at their placement step wait (read-only) for it to return, then finish.
//!
//! With `--scale seed`: the seed's numbers (2,400 contractors, 19,200 technicians, a
//! 340-contractor wave). The seed lost 1,900 of 2,700 route loads.

use std::time::Duration;

use crate::error::Result;
use crate::gameday::fault::Target;
use crate::gameday::run::{Run, WAVE_PARALLEL, Wave, wave_figures, wave_of};
use crate::gameday::scenario::Scenario;

/// Bound: the worst read-only window beyond the control plane's outage, in milliseconds.
const READ_ONLY_BEYOND_OUTAGE_MS: f64 = 5_000.0;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "shift-start-wave",
    proves: "the seed's incident replayed: a migration wave during the shift-start peak with the control plane down fails no route load, loses no write, and finishes once the control plane is back",
    plan: |cells, scale, d| {
        vec![
            "every synthetic technician signs in (before the peak)".to_owned(),
            "the peak: route loads and completions".to_owned(),
            format!(
                "a wave of {} contractors (--wave), {WAVE_PARALLEL} at a time; after {} s the control plane goes down for {} s",
                scale.wave(cells.len()),
                d.as_secs() / 4,
                d.as_secs() / 2
            ),
            "the wave finishes; writes checked at the old and new owners".to_owned(),
        ]
    },
    targets: |_| vec![Target::ControlPlane],
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.sign_in(&techs).await;
    r.figure("technicians_with_sessions", sessions.len() as f64, "count");
    let peak = r.ms();
    let load = r.load(sessions);
    let wave = Wave::start(&r.ctx, wave_of(&r.ctx).await?);
    let size = wave.size();
    r.hold(r.ctx.duration / 4).await;
    let outage: Duration = r.ctx.duration / 2;
    r.down(&Target::ControlPlane).await?;
    r.hold(outage).await;
    r.up(&Target::ControlPlane).await?;
    let (reports, failed, took) = wave.finish().await;
    r.mark(format!("{size} contractors migrated"), peak);
    r.hold(r.ctx.duration / 4).await;
    let _ = load.stop().await;
    r.load_figures();
    let route_failed = r.stats.failed_where("route");
    let route_ok = r
        .stats
        .route_loads_ok
        .load(std::sync::atomic::Ordering::Relaxed);
    r.figure("route_loads_ok", route_ok as f64, "count");
    r.figure("route_loads_failed", route_failed as f64, "count");
    wave_figures(r, &reports, &failed, took).await?;
    r.bound("migrated", ">=", size as f64);
    r.bound("migrations_failed", "==", 0.0);
    r.bound("route_loads_failed", "==", 0.0);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    r.bound("completions_lost", "==", 0.0);
    r.bound("completions_duplicated", "==", 0.0);
    r.bound("writes_at_non_owner", "==", 0.0);
    r.bound("signed_in_again", "==", 0.0);
    r.bound(
        "read_only_worst_ms",
        "<=",
        outage.as_secs_f64() * 1000.0 + READ_ONLY_BEYOND_OUTAGE_MS,
    );
    Ok(())
}
