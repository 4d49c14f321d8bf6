//! The auth-service's part of a contractor migration (DESIGN §5), reached through the admin
//! API only:
//!
//! - export: the contractor's users (password hashes only, never a password) and the
//!   revocations that concern it (its subjects' and its own; one-session, key and cell
//!   revocations belong to this cell's keys and sessions, which never leave it).
//! - import of that document: users are upserted in one transaction; each revocation not
//!   already held here is recorded again (same kind and `before`, audit `by` naming the
//!   source), so importing twice changes nothing.
//! - the drain: whether every edge instance with a current lease has applied feed sequence `S`
//!   and reports no write in flight for the contractor (instances report both on each feed
//!   request, see `feed.rs`). An instance counts until its write lease must have lapsed:
//!   `edge_write_lease_ms` plus the longest long-poll after its last request (it refuses
//!   writes by itself after that).

use protocol::ContractorId;
use protocol::admin::cell::{
    ContractorExport, DrainInstance, DrainStatus, EXPORT_SCHEMA, ImportAnswer,
};
use protocol::revocation::RevocationKind;

use crate::error::{Error, Result};
use crate::feed::MAX_WAIT_MS;
use crate::metrics::MigrationStep;
use crate::revocations::MAX_AUDIT_TEXT_BYTES;
use crate::state::AppState;
use crate::store::Store as _;
use crate::users::{exported, imported, store_records};

/// Runs one migration step and counts it, by result, with its duration
/// (`cellbind_auth_migration_steps_total`, `cellbind_auth_migration_step_duration_seconds`).
pub(crate) async fn counted<T>(
    state: &AppState,
    step: MigrationStep,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let started = std::time::Instant::now();
    let result = work.await;
    state
        .metrics
        .migration_step(step, result.is_ok(), started.elapsed());
    result
}

/// Slack added to an instance's live window, in seconds (clock granularity, transmission).
pub(crate) const LIVE_SLACK_S: u64 = 2;

/// Whether a revocation concerns the contractor (and so travels with it).
fn concerns(kind: &RevocationKind, ctr: &ContractorId) -> bool {
    match kind {
        RevocationKind::Contractor { ctr: c, .. } => c == ctr,
        RevocationKind::Subject { sub, .. } => sub
            .as_str()
            .strip_prefix(ctr.as_str())
            .is_some_and(|rest| rest.starts_with('.')),
        RevocationKind::Session { .. }
        | RevocationKind::Key { .. }
        | RevocationKind::Cell { .. } => false,
    }
}

/// The contractor's export document.
pub(crate) async fn export(state: &AppState, ctr: ContractorId) -> Result<ContractorExport> {
    let users = state.store.users_of(&ctr).await?;
    let revocations = state
        .read()
        .revocations
        .iter()
        .filter(|r| concerns(&r.kind, &ctr))
        .cloned()
        .collect();
    Ok(ContractorExport {
        schema: EXPORT_SCHEMA,
        contractor_id: ctr,
        users: users.into_iter().map(exported).collect(),
        revocations,
    })
}

/// Imports an export document for `ctr`.
pub(crate) async fn import(
    state: &AppState,
    ctr: ContractorId,
    doc: ContractorExport,
) -> Result<ImportAnswer> {
    if doc.schema != EXPORT_SCHEMA {
        return Err(Error::BadRequest(format!(
            "export schema {} is not {EXPORT_SCHEMA}",
            doc.schema
        )));
    }
    if doc.contractor_id != ctr {
        return Err(Error::BadRequest(
            "the document is for another contractor".into(),
        ));
    }
    if let Some(r) = doc.revocations.iter().find(|r| !concerns(&r.kind, &ctr)) {
        return Err(Error::BadRequest(format!(
            "revocation {} does not concern {ctr}",
            r.seq
        )));
    }
    let records = doc
        .users
        .into_iter()
        .map(|u| imported(&ctr, u))
        .collect::<Result<Vec<_>>>()?;
    let users = records.len() as u64;
    store_records(state, records).await?;
    let (_, added) = state
        .commit_with(|inner, batch| {
            let mut added = 0u64;
            for r in &doc.revocations {
                if inner.revocations.iter().any(|held| held.kind == r.kind) {
                    continue;
                }
                let by = format!("migration:{}", r.by)
                    .chars()
                    .take(MAX_AUDIT_TEXT_BYTES / 4)
                    .collect();
                batch.revocation(r.kind.clone(), r.at, by, r.reason.clone());
                added += 1;
            }
            Ok(added)
        })
        .await?;
    tracing::info!(%ctr, users, revocations = added, "imported a contractor's credentials");
    Ok(ImportAnswer {
        users,
        revocations: added,
    })
}

/// The drain verdict from what the feed recorded.
pub(crate) async fn drain_status(
    state: &AppState,
    ctr: &ContractorId,
    seq: u64,
) -> Result<DrainStatus> {
    let now = state.now();
    // An instance records `last_seen` when its feed request starts; the answer (which renews
    // its lease) may come up to the longest long-poll later, and the lease runs from there.
    let live_s = (state.config.edge_write_lease_ms + MAX_WAIT_MS).div_ceil(1000) + LIVE_SLACK_S;
    let instances: Vec<DrainInstance> = state
        .instances_seen()
        .await?
        .into_iter()
        .map(|i| DrainInstance {
            live: now.saturating_sub(i.last_seen) <= live_s,
            busy: i.busy.contains(ctr),
            id: i.id,
            applied_seq: i.applied_seq,
            last_seen: i.last_seen,
        })
        .collect();
    let drained = instances
        .iter()
        .filter(|i| i.live)
        .all(|i| i.applied_seq >= seq && !i.busy);
    Ok(DrainStatus {
        contractor_id: ctr.clone(),
        seq,
        drained,
        instances,
    })
}
