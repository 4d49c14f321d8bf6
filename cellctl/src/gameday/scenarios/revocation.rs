//! `revocation-propagation`: under load, sessions are revoked one by one at their cells; each
//! must be refused by the cell's edges within seconds. Measured from the revocation's
//! acknowledgement to the first `401 SESSION_REVOKED` its edge answers.

use std::time::{Duration, Instant};

use protocol::SessionId;
use protocol::admin::cell::RevokeRequest;
use protocol::revocation::RevocationKind;

use crate::admin::Api;
use crate::error::{CtlError, Result};
use crate::gameday::load::{self, Answer, percentile};
use crate::gameday::run::Run;
use crate::gameday::scenario::Scenario;

/// Sessions revoked per run (at most; one per synthetic technician).
const REVOKED: usize = 40;
/// Bound: p99 from acknowledgement to refusal, in milliseconds.
const PROPAGATION_P99_MS: f64 = 5_000.0;
/// Give up on one revoked session after this long, in seconds (counted as not propagated).
const GIVE_UP_S: u64 = 30;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "revocation-propagation",
    proves: "under load, a revoked session is refused by its cell's edges within seconds (p50/p99 measured)",
    plan: |_, _, _| {
        vec![
            "every synthetic technician signs in twice: one session carries the load, the other is revoked".to_owned(),
            format!("up to {REVOKED} sessions revoked one by one at their cells; each polled until 401 SESSION_REVOKED"),
        ]
    },
    targets: crate::gameday::scenario::none,
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let techs = r.ctx.pop.technicians.clone();
    let carriers = r.sign_in(&techs).await;
    let victims = r.sign_in(&techs[..techs.len().min(REVOKED)]).await;
    let load = r.load(carriers);
    let mut took = Vec::new();
    let mut not_propagated = 0u64;
    for s in &victims {
        let cell = r.ctx.cell(&s.cell)?;
        let auth = Api::auth(cell)?;
        let jti = SessionId::new(s.session_id.clone())
            .map_err(|e| CtlError::Internal(format!("session id: {e}")))?;
        let req = RevokeRequest {
            kind: RevocationKind::Session {
                jti,
                exp: protocol::time::Clock::now(&protocol::time::SystemClock) + 31 * 86_400,
            },
            reason: "game day: revocation propagation".to_owned(),
            by: "cellctl gameday".to_owned(),
        };
        r.ctx.admin.revoke(&auth, &req).await.result?;
        let acked = Instant::now();
        let deadline = acked + Duration::from_secs(GIVE_UP_S);
        loop {
            let a = load::route_load(&r.ctx.http, s).await;
            if matches!(&a, Answer::Status(401, v) if v["error"] == "SESSION_REVOKED") {
                took.push(acked.elapsed().as_secs_f32() * 1000.0);
                break;
            }
            if Instant::now() > deadline {
                not_propagated += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = load.stop().await;
    took.sort_by(f32::total_cmp);
    r.load_figures();
    r.figure("revoked", victims.len() as f64, "count");
    r.figure("revocations_not_propagated", not_propagated as f64, "count");
    r.figure("revocation_p50_ms", percentile(&took, 0.5), "ms");
    r.figure("revocation_p99_ms", percentile(&took, 0.99), "ms");
    r.figure(
        "revocation_worst_ms",
        took.last().copied().map_or(0.0, f64::from),
        "ms",
    );
    r.bound("revoked", ">=", 1.0);
    r.bound("revocations_not_propagated", "==", 0.0);
    r.bound("revocation_p99_ms", "<=", PROPAGATION_P99_MS);
    r.bound("requests_failed_before_cell", "==", 0.0);
    r.bound("requests_failed_in_cell", "==", 0.0);
    Ok(())
}
