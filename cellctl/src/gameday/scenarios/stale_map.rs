//! `stale-map-sign-in`: a first sign-in from an app whose shipped map is stale (it names the
//! cell a contractor left). The old cell answers `409 WRONG_CELL` naming the owner; the
//! sign-in there succeeds: one hop, never a session from the wrong cell.

use protocol::CellId;

use crate::error::{CtlError, Result};
use crate::gameday::load::{self, Answer};
use crate::gameday::run::{Run, migrate_synthetic};
use crate::gameday::scenario::Scenario;

pub(super) const SCENARIO: Scenario = Scenario {
    name: "stale-map-sign-in",
    proves: "a first sign-in from a stale shipped map costs one WRONG_CELL hop, then the owner signs it in",
    plan: |_, _, _| {
        vec![
            "one synthetic contractor is migrated to the next cell (the shipped map now names the old one)".to_owned(),
            "its technician signs in at the old cell: 409 WRONG_CELL naming the owner; then at the owner: 201".to_owned(),
        ]
    },
    targets: crate::gameday::scenario::none,
    run: |r| Box::pin(run(r)),
};

async fn run(r: &mut Run) -> Result<()> {
    let tech = r
        .ctx
        .pop
        .technicians
        .first()
        .cloned()
        .ok_or_else(|| CtlError::Failed("no synthetic technician".to_owned()))?;
    let start = r.ms();
    let (from, to) = migrate_synthetic(&r.ctx, &tech.contractor).await?;
    r.mark(format!("{} migrated {from} → {to}", tech.contractor), start);
    let stale = r.ctx.cell(&from)?.endpoint.clone();
    let (a, _) = load::sign_in(&r.ctx.http, &stale, &tech, &r.ctx.pop.password).await;
    let (hops, owner) = match &a {
        Answer::Status(409, v) if v["error"] == "WRONG_CELL" => {
            (1.0, v["owner_endpoint"].as_str().map(str::to_owned))
        }
        _ => (0.0, None),
    };
    let owner_cell = match &a {
        Answer::Status(_, v) => v["owner_cell"].as_str().and_then(|c| CellId::new(c).ok()),
        Answer::NoAnswer(_) => None,
    };
    let signed_in = match &owner {
        Some(endpoint) => {
            let (_, s) = load::sign_in(&r.ctx.http, endpoint, &tech, &r.ctx.pop.password).await;
            s.filter(|s| s.cell == to)
        }
        None => None,
    };
    r.figure("wrong_cell_hops", hops, "count");
    r.figure(
        "owner_named_correctly",
        if owner_cell.as_ref() == Some(&to) {
            1.0
        } else {
            0.0
        },
        "count",
    );
    r.figure(
        "signed_in_at_owner",
        if signed_in.is_some() { 1.0 } else { 0.0 },
        "count",
    );
    r.bound("wrong_cell_hops", "==", 1.0);
    r.bound("owner_named_correctly", "==", 1.0);
    r.bound("signed_in_at_owner", "==", 1.0);
    Ok(())
}
