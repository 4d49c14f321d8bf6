//! `edge-restart-offline`: a cell's edge restarts while its auth-service and the control plane
//! are down. It has nobody to ask: it must come back serving the sessions it knew from the
//! state it keeps on disk (keys, revocations, ownership), and fail none of their reads. Writes
//! are refused with `503 CELL_STATE_STALE` until the auth-service renews the edge's write lease
//! (DESIGN §5: a partitioned instance never accepts a write for a contractor handed off
//! meanwhile); the clients keep them and send them again, and none may be lost.

use std::time::{Duration, Instant};

use crate::error::{CtlError, Result};
use crate::gameday::fault::Target;
use crate::gameday::load::{self, Answer};
use crate::gameday::run::{Run, verify_writes};
use crate::gameday::scenario::{Scenario, target, victim};

/// Bound: from the restart to the first route load served, in milliseconds.
const BACK_WITHIN_MS: f64 = 15_000.0;
/// Bound: from the auth-service's `up` to the first write accepted, in milliseconds (the edge
/// renews its write lease with its first feed answer).
const WRITES_BACK_MS: f64 = 5_000.0;
/// Give up waiting for the restarted edge after this long, in seconds.
const GIVE_UP_S: u64 = 60;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "edge-restart-offline",
    proves: "an edge restarted with its auth-service and the control plane down serves its signed-in technicians from the state on its disk",
    plan: |cells, _, d| {
        let c = cells.last().map(ToString::to_string).unwrap_or_default();
        vec![
            format!("{c}'s synthetic technicians sign in"),
            format!("control plane down, {c}/auth-service down"),
            format!("{c}/edge restarted (killed, started again)"),
            format!(
                "route loads and completions for {} s from the edge's first answer",
                d.as_secs()
            ),
            format!(
                "{c}/auth-service up, control plane up; the load goes on for {} s more",
                d.as_secs() / 2
            ),
            "every write acknowledged looked up at its cell's app".to_owned(),
        ]
    },
    targets: |cells| {
        let mut v = vec![Target::ControlPlane];
        if let Some(c) = cells.last() {
            v.extend(target(c, "auth-service").ok());
            v.extend(target(c, "edge").ok());
        }
        v
    },
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let cell = victim(&r.ctx.cells)?;
    let techs = r.ctx.technicians_of(&cell);
    let sessions = r.sign_in(&techs).await;
    let probe = sessions
        .first()
        .cloned()
        .ok_or_else(|| CtlError::Failed(format!("no synthetic session at {cell}")))?;
    let auth = target(&cell, "auth-service")?;
    let edge = target(&cell, "edge")?;
    r.down(&Target::ControlPlane).await?;
    r.down(&auth).await?;
    let restarted = Instant::now();
    r.restart(&edge).await?;
    let deadline = restarted + Duration::from_secs(GIVE_UP_S);
    let back_ms = loop {
        if let Answer::Status(200, _) = load::route_load(&r.ctx.http, &probe).await {
            break restarted.elapsed().as_secs_f64() * 1000.0;
        }
        if Instant::now() > deadline {
            break f64::from(u32::try_from(GIVE_UP_S * 1000).unwrap_or(u32::MAX));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let load = r.load(sessions);
    r.hold(r.ctx.duration).await;
    let offline_acked = r.stats.acked_total();
    // Writes resume once the edge's feed renews its lease: from the auth-service's `up` to the
    // first write accepted.
    let up_at = Instant::now();
    r.up(&auth).await?;
    r.up(&Target::ControlPlane).await?;
    let writes_back_ms = loop {
        if r.stats.acked_total() > offline_acked {
            break up_at.elapsed().as_secs_f64() * 1000.0;
        }
        if up_at.elapsed() > Duration::from_secs(GIVE_UP_S) {
            break f64::from(u32::try_from(GIVE_UP_S * 1000).unwrap_or(u32::MAX));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    r.hold(r.ctx.duration / 2).await;
    let stats = load.stop().await;
    let (lost, duplicated) = verify_writes(&r.ctx, &stats.acked()).await?;
    let stale_writes = stats.failed_where("write 503 CELL_STATE_STALE");
    let total_failed = stats.failures().values().sum::<u64>();
    r.load_figures();
    r.figure("edge_back_ms", back_ms, "ms");
    r.figure("writes_back_after_up_ms", writes_back_ms, "ms");
    r.figure(
        "route_loads_failed",
        stats.failed_where("route") as f64,
        "count",
    );
    r.figure("writes_refused_stale", stale_writes as f64, "count");
    r.figure(
        "other_failures",
        (total_failed - stale_writes) as f64,
        "count",
    );
    r.figure("completions_acked_offline", offline_acked as f64, "count");
    r.figure("completions_acked", stats.acked_total() as f64, "count");
    r.figure("completions_lost", lost as f64, "count");
    r.figure("completions_duplicated", duplicated as f64, "count");
    r.bound("edge_back_ms", "<=", BACK_WITHIN_MS);
    r.bound("writes_back_after_up_ms", "<=", WRITES_BACK_MS);
    r.bound("route_loads_failed", "==", 0.0);
    r.bound("other_failures", "==", 0.0);
    r.bound("completions_acked", ">=", 1.0);
    r.bound("completions_lost", "==", 0.0);
    r.bound("completions_duplicated", "==", 0.0);
    Ok(())
}
