//! `auth-service-down`: every auth-service replica of one cell is down for the run. The edge
//! validates sessions with the keys and state it holds, so signed-in technicians keep
//! working; a sign-in cannot be served, and must fail fast with `503`, never `401` (a `401`
//! would make the app throw its user out).

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::gameday::load::{self, Answer, percentile};
use crate::gameday::run::Run;
use crate::gameday::scenario::{Scenario, target, victim};

/// Pause between two sign-in probes while the auth-services are down, in milliseconds.
const PROBE_EVERY_MS: u64 = 500;
/// Bound: the slowest refused sign-in, in milliseconds.
const SIGN_IN_FAIL_FAST_MS: f64 = 3_000.0;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "auth-service-down",
    proves: "with every auth-service replica of a cell down, its signed-in technicians keep working and sign-ins fail fast with 503, never 401",
    plan: |cells, _, d| {
        let c = cells.last().map(ToString::to_string).unwrap_or_default();
        vec![
            format!("{c}'s synthetic technicians sign in"),
            format!(
                "{c}/auth-service down (every replica) for {} s",
                d.as_secs()
            ),
            format!(
                "route loads and completions with the sessions held; a sign-in probe every {PROBE_EVERY_MS} ms"
            ),
            format!("{c}/auth-service up"),
        ]
    },
    targets: |cells| {
        cells
            .last()
            .and_then(|c| target(c, "auth-service").ok())
            .into_iter()
            .collect()
    },
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let cell = victim(&r.ctx.cells)?;
    let techs = r.ctx.technicians_of(&cell);
    let sessions = r.sign_in(&techs).await;
    let auth = target(&cell, "auth-service")?;
    r.down(&auth).await?;
    let load = r.load(sessions);
    let endpoint = r.ctx.cell(&cell)?.endpoint.clone();
    let (mut s503, mut s401, mut other, mut lat) = (0u64, 0u64, 0u64, Vec::new());
    let until = Instant::now() + r.ctx.duration;
    let mut i = 0usize;
    while Instant::now() < until && !techs.is_empty() {
        let t = &techs[i % techs.len()];
        i += 1;
        let started = Instant::now();
        let (a, _) = load::sign_in(&r.ctx.http, &endpoint, t, &r.ctx.pop.password).await;
        lat.push(started.elapsed().as_secs_f32() * 1000.0);
        match a {
            Answer::Status(503, _) => s503 += 1,
            Answer::Status(401, _) => s401 += 1,
            _ => other += 1,
        }
        tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS)).await;
    }
    let stats = load.stop().await;
    r.up(&auth).await?;
    lat.sort_by(f32::total_cmp);
    r.load_figures();
    r.figure("sign_in_probes", (s503 + s401 + other) as f64, "count");
    r.figure("sign_ins_503", s503 as f64, "count");
    r.figure("sign_ins_401", s401 as f64, "count");
    r.figure("sign_ins_other", other as f64, "count");
    r.figure(
        "sign_in_refusal_worst_ms",
        lat.last().copied().map_or(0.0, f64::from),
        "ms",
    );
    r.figure("sign_in_refusal_p50_ms", percentile(&lat, 0.5), "ms");
    r.figure("completions_acked", stats.acked_total() as f64, "count");
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    r.bound("sign_ins_401", "==", 0.0);
    r.bound("sign_ins_other", "==", 0.0);
    r.bound("sign_ins_503", ">=", 1.0);
    r.bound("sign_in_refusal_worst_ms", "<=", SIGN_IN_FAIL_FAST_MS);
    Ok(())
}
