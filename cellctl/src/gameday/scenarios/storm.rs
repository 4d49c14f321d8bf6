//! `shift-start-storm` (the seed's Exercise 1): the control plane is down at shift start;
//! every synthetic technician signs in at once and works. Nothing on the serving path asks
//! the control plane anything, so nothing may fail.

use crate::error::Result;
use crate::gameday::fault::Target;
use crate::gameday::run::{Run, verify_writes};
use crate::gameday::scenario::Scenario;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "shift-start-storm",
    proves: "with the control plane down, every technician signs in and loads routes and completes jobs (no request fails)",
    plan: |_, scale, d| {
        vec![
            "control plane down".to_owned(),
            format!(
                "every synthetic technician signs in at once ({} per contractor)",
                scale.technicians()
            ),
            format!(
                "route loads and job completions for {} s, {} in flight",
                d.as_secs(),
                scale.workers()
            ),
            "control plane up; each acknowledged completion looked up at its owning cell's app"
                .to_owned(),
        ]
    },
    targets: |_| vec![Target::ControlPlane],
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    r.down(&Target::ControlPlane).await?;
    let techs = r.ctx.pop.technicians.clone();
    let sessions = r.sign_in(&techs).await;
    r.figure("sign_ins", techs.len() as f64, "count");
    r.figure("sign_ins_ok", sessions.len() as f64, "count");
    let load = r.load(sessions);
    r.hold(r.ctx.duration).await;
    let stats = load.stop().await;
    r.up(&Target::ControlPlane).await?;
    r.load_figures();
    let (lost, duplicated) = verify_writes(&r.ctx, &stats.acked()).await?;
    r.figure("completions_acked", stats.acked_total() as f64, "count");
    r.figure("completions_lost", lost as f64, "count");
    r.figure("completions_duplicated", duplicated as f64, "count");
    r.bound("sign_ins_ok", ">=", techs.len() as f64);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    r.bound("completions_lost", "==", 0.0);
    r.bound("completions_duplicated", "==", 0.0);
    Ok(())
}
