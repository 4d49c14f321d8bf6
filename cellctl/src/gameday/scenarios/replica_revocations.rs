//! `replica-killed-mid-revocations`: a burst of revocations at one cell while one of its
//! auth-service replicas is killed in the middle of it. Every revocation the cell acknowledged
//! must be in force afterwards — held by the cell and refused at its edge — however the
//! replicas came and went (with PostgreSQL, the other replicas take the rest of the burst; with
//! one SQLite replica, revocations sent while it is down are not acknowledged, and the
//! operator's tooling retries them).

use std::time::{Duration, Instant};

use protocol::SessionId;
use protocol::admin::cell::RevokeRequest;
use protocol::revocation::RevocationKind;

use crate::admin::Api;
use crate::error::{CtlError, Result};
use crate::gameday::load::{self, Answer};
use crate::gameday::run::Run;
use crate::gameday::scenario::{Scenario, target, victim};

/// Sessions revoked in the burst (at most; sessions of the cell's synthetic technicians).
const BURST: usize = 40;
/// The replica is killed after this many revocations of the burst…
const KILL_AFTER: usize = BURST / 3;
/// …and started again after this many.
const UP_AFTER: usize = 2 * BURST / 3;
/// Budget of one revocation's attempts (the admin client fails over between replicas), in
/// seconds.
const REVOKE_BUDGET_S: u64 = 1;
/// Give up on one acknowledged revocation reaching the edge after this long, in seconds.
const GIVE_UP_S: u64 = 30;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "replica-killed-mid-revocations",
    proves: "an auth-service replica killed in the middle of a revocation burst loses no acknowledged revocation",
    plan: |cells, _, _| {
        let c = cells.last().map(ToString::to_string).unwrap_or_default();
        vec![
            format!("up to {BURST} sessions of {c}'s synthetic technicians signed in"),
            format!("each revoked in turn at {c}; after {KILL_AFTER}, {c}/auth-service/0 killed; after {UP_AFTER}, started again"),
            "every acknowledged revocation checked: held by the cell and refused (401 SESSION_REVOKED) at its edge".to_owned(),
        ]
    },
    targets: |cells| {
        cells
            .last()
            .and_then(|c| target(c, "auth-service/0").ok())
            .into_iter()
            .collect()
    },
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let cell = victim(&r.ctx.cells)?;
    let mut techs = r.ctx.technicians_of(&cell);
    while !techs.is_empty() && techs.len() < BURST {
        let more = techs.clone();
        techs.extend(more);
    }
    techs.truncate(BURST);
    let victims = r.sign_in(&techs).await;
    let auth = Api::auth(r.ctx.cell(&cell)?)?;
    let replica = target(&cell, "auth-service/0")?;
    let exp = protocol::time::Clock::now(&protocol::time::SystemClock) + 31 * 86_400;
    let mut acked = Vec::new();
    let mut refused = 0u64;
    for (i, s) in victims.iter().enumerate() {
        if i == KILL_AFTER {
            r.down(&replica).await?;
        }
        if i == UP_AFTER {
            r.up(&replica).await?;
        }
        let jti = SessionId::new(s.session_id.clone())
            .map_err(|e| CtlError::Internal(format!("session id: {e}")))?;
        let req = RevokeRequest {
            kind: RevocationKind::Session {
                jti: jti.clone(),
                exp,
            },
            reason: "game day: revocations while a replica dies".to_owned(),
            by: "cellctl gameday".to_owned(),
        };
        // A short budget per revocation: with the only replica down, the burst goes on
        // (unacknowledged) instead of waiting out every retry.
        let admin = r
            .ctx
            .admin
            .until(Instant::now() + Duration::from_secs(REVOKE_BUDGET_S));
        match admin.revoke(&auth, &req).await.result {
            Ok(_) => acked.push((s.clone(), jti)),
            Err(_) => refused += 1,
        }
    }
    if victims.len() <= UP_AFTER {
        r.up(&replica).await?;
    }
    r.ctx.wait_ready(&cell).await?;
    // Every acknowledged revocation is held by the cell…
    let held = r.ctx.admin.held_revocations(&auth).await?;
    let is_held = |jti: &SessionId| {
        held.revocations
            .iter()
            .any(|h| matches!(&h.kind, RevocationKind::Session { jti: j, .. } if j == jti))
    };
    let not_held = acked.iter().filter(|(_, jti)| !is_held(jti)).count();
    // …and refused at the edge.
    let mut not_refused = 0u64;
    for (s, _) in &acked {
        let deadline = Instant::now() + Duration::from_secs(GIVE_UP_S);
        loop {
            let a = load::route_load(&r.ctx.http, s).await;
            if matches!(&a, Answer::Status(401, v) if v["error"] == "SESSION_REVOKED") {
                break;
            }
            if Instant::now() > deadline {
                not_refused += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    r.figure("revocations_sent", victims.len() as f64, "count");
    r.figure("revocations_acked", acked.len() as f64, "count");
    r.figure("revocations_not_acked", refused as f64, "count");
    r.figure("acked_not_held", not_held as f64, "count");
    r.figure("acked_not_refused_at_edge", not_refused as f64, "count");
    r.bound(
        "revocations_acked",
        ">=",
        KILL_AFTER.min(victims.len()) as f64,
    );
    r.bound("acked_not_held", "==", 0.0);
    r.bound("acked_not_refused_at_edge", "==", 0.0);
    Ok(())
}
