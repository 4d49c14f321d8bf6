//! `cell-lost`: one cell is lost entirely (every component down) while every cell serves.
//! Cells share nothing on the serving path, so the blast radius is that cell: no request to
//! any other cell may fail.

use crate::error::Result;
use crate::gameday::run::Run;
use crate::gameday::scenario::{Scenario, target, victim};

pub(super) const SCENARIO: Scenario = Scenario {
    name: "cell-lost",
    proves: "with one cell lost entirely, no request to any other cell fails (the blast radius is that cell)",
    plan: |cells, _, d| {
        let c = cells.last().map(ToString::to_string).unwrap_or_default();
        vec![
            "every synthetic technician signs in; route loads and completions in every cell"
                .to_owned(),
            format!("{c} down (edge, auth-service, app) for {} s", d.as_secs()),
            format!("{c} up; the other cells' failed requests counted (must be 0)"),
        ]
    },
    targets: |cells| {
        cells
            .last()
            .and_then(|c| target(c, "").ok())
            .into_iter()
            .collect()
    },
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let cell = victim(&r.ctx.cells)?;
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.sign_in(&techs).await;
    let load = r.load(sessions);
    let whole = target(&cell, "")?;
    r.down(&whole).await?;
    r.hold(r.ctx.duration).await;
    let _ = load.stop().await;
    r.up(&whole).await?;
    r.ctx.wait_ready(&cell).await?;
    let (mut ok, mut failed) = (0u64, 0u64);
    for c in r.ctx.cells.iter().filter(|c| **c != cell) {
        let t = r.rec.cell(c);
        ok += t.ok;
        failed += t.failed();
    }
    let lost = r.rec.cell(&cell);
    r.load_figures();
    r.figure("other_cells_requests_ok", ok as f64, "count");
    r.figure("other_cells_requests_failed", failed as f64, "count");
    r.figure("lost_cell_requests_failed", lost.failed() as f64, "count");
    r.bound("other_cells_requests_failed", "==", 0.0);
    r.bound("other_cells_requests_ok", ">=", 1.0);
    Ok(())
}
