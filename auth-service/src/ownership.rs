//! This cell's ownership records (DESIGN §5) as the auth-service uses them: setting them
//! (admin, one transaction, only the transitions `protocol::ownership::check_transition`
//! allows) and deciding whether a sign-in or a renewal may be served here, through the one
//! decision table (`protocol::ownership::decide`) and the one WRONG_CELL lookup
//! (`protocol::ownership::wrong_cell_target`) the edge uses too.

use std::collections::BTreeMap;

use protocol::ownership::{
    Access, Decision, OwnershipRecord, check_transition, decide, decide_unbound, wrong_cell_target,
};
use protocol::{ContractorId, Generation};

use crate::error::{Error, Result};
use crate::state::{AppState, Inner};

/// `Retry-After` for a sign-in or renewal during a handoff, in seconds.
pub(crate) const HANDOFF_RETRY_AFTER_S: u64 = 1;

/// The error a refusing decision answers.
fn refusal(state: &AppState, inner: &Inner, decision: &Decision, ctr: &ContractorId) -> Error {
    match decision {
        Decision::HandoffInProgress => Error::HandoffInProgress {
            retry_after_s: HANDOFF_RETRY_AFTER_S,
        },
        Decision::StaleSessionHere => Error::WrongCell {
            owner: state.config.cell_id.clone(),
            endpoint: Some(state.config.issuer.to_string()),
        },
        Decision::WrongCell { .. } | Decision::NoRecord => {
            let map = inner.map.as_ref().map(|m| &m.map);
            match wrong_cell_target(decision, ctr, &state.config.cell_id, map) {
                Some(t) => Error::WrongCell {
                    owner: t.owner,
                    endpoint: t.endpoint,
                },
                None => Error::UnknownContractor,
            }
        }
        Decision::ViewBehind | Decision::Serve => Error::UnknownContractor,
    }
}

/// The ownership part of the sign-in order: the generation to mint at, or why not.
pub(crate) fn sign_in_generation(state: &AppState, ctr: &ContractorId) -> Result<Generation> {
    let inner = state.read();
    let record = inner.ownership.get(ctr);
    match (decide_unbound(record), record) {
        (Decision::Serve, Some(r)) => Ok(r.generation()),
        (decision, _) => Err(refusal(state, &inner, &decision, ctr)),
    }
}

/// Whether a session for `ctr` at `generation` may be renewed here (as a write).
pub(crate) fn check_renewal(
    state: &AppState,
    ctr: &ContractorId,
    generation: Generation,
) -> Result<()> {
    let inner = state.read();
    match decide(inner.ownership.get(ctr), generation, Access::Write) {
        Decision::Serve => Ok(()),
        decision => Err(refusal(state, &inner, &decision, ctr)),
    }
}

/// Sets ownership records in one commit; a refused transition changes nothing. Answers the
/// feed head.
pub(crate) async fn set(
    state: &AppState,
    records: BTreeMap<ContractorId, OwnershipRecord>,
) -> Result<u64> {
    let (seq, changed) = state
        .commit_with(|inner, batch| {
            let mut changed = 0usize;
            for (ctr, record) in &records {
                let held = inner.ownership.get(ctr);
                check_transition(held, record)
                    .map_err(|e| Error::BadRequest(format!("ownership of {ctr} refused: {e}")))?;
                if held != Some(record) {
                    batch.ownership(ctr.clone(), record.clone());
                    changed += 1;
                }
            }
            Ok(changed)
        })
        .await?;
    tracing::info!(changed, seq, "ownership records set");
    Ok(seq)
}

/// The record held for `ctr`, or `NotFound`.
pub(crate) fn get(state: &AppState, ctr: &ContractorId) -> Result<OwnershipRecord> {
    state
        .read()
        .ownership
        .get(ctr)
        .cloned()
        .ok_or_else(|| Error::NotFound(format!("ownership record of {ctr}")))
}
