//! Users (technicians and dispatchers) as the admin API and a migration's import create them:
//! validation, the subject id `{contractor}.{login}`, password hashing or an imported hash
//! checked for strength, then one store transaction.

use std::sync::atomic::Ordering;

use protocol::admin::cell::{ExportedUser, ListedUser, NewUser, UserChange};
use protocol::{ContractorId, PasswordHash, SubjectId};

use crate::error::{Error, Result};
use crate::passwords::{check_phc, hash};
use crate::state::{AppState, blocking};
use crate::store::Store as _;
use crate::store::records::UserRecord;

/// The subject id of a login of a contractor.
fn subject_of(ctr: &ContractorId, login: &protocol::Login) -> Result<SubjectId> {
    SubjectId::new(format!("{ctr}.{login}")).map_err(|e| Error::BadRequest(format!("subject: {e}")))
}

/// Validates a user and produces its record. Passwords are hashed here (slow).
fn to_record(u: NewUser, rng: &ring::rand::SystemRandom) -> Result<UserRecord> {
    let subject = subject_of(&u.contractor_id, &u.login)?;
    let password_hash = match (u.password, u.password_hash) {
        (Some(p), None) => PasswordHash::new(hash(&p, rng)?),
        (None, Some(h)) => {
            check_phc(h.expose())?;
            h
        }
        _ => {
            return Err(Error::BadRequest(
                "give exactly one of password and password_hash".into(),
            ));
        }
    };
    Ok(UserRecord {
        contractor_id: u.contractor_id,
        login: u.login,
        subject,
        role: u.role,
        password_hash,
        status: u.status,
    })
}

/// The record of an exported user, imported for `ctr`.
pub(crate) fn imported(ctr: &ContractorId, u: ExportedUser) -> Result<UserRecord> {
    check_phc(u.password_hash.expose())?;
    Ok(UserRecord {
        subject: subject_of(ctr, &u.login)?,
        contractor_id: ctr.clone(),
        login: u.login,
        role: u.role,
        password_hash: u.password_hash,
        status: u.status,
    })
}

/// The exported form of a stored user (its hash, never a password).
pub(crate) fn exported(u: UserRecord) -> ExportedUser {
    ExportedUser {
        login: u.login,
        role: u.role,
        password_hash: u.password_hash,
        status: u.status,
    }
}

/// Stores records in one transaction and updates the user count.
pub(crate) async fn store_records(state: &AppState, records: Vec<UserRecord>) -> Result<()> {
    let total = state.store.upsert_users(records).await?;
    state.users.store(total, Ordering::Relaxed);
    Ok(())
}

/// Validates, hashes and stores new users in one transaction; answers their subjects.
pub(crate) async fn create(state: &AppState, users: Vec<NewUser>) -> Result<Vec<SubjectId>> {
    let rng = state.rng.clone();
    let records: Vec<UserRecord> =
        blocking(move || users.into_iter().map(|u| to_record(u, &rng)).collect()).await?;
    let subjects = records.iter().map(|r| r.subject.clone()).collect();
    store_records(state, records).await?;
    Ok(subjects)
}

/// A contractor's users as the admin API lists them (no password hashes), by login.
pub(crate) async fn list(state: &AppState, ctr: &ContractorId) -> Result<Vec<ListedUser>> {
    let mut users: Vec<ListedUser> = state
        .store
        .users_of(ctr)
        .await?
        .into_iter()
        .map(|u| ListedUser {
            login: u.login,
            subject: u.subject,
            role: u.role,
            status: u.status,
        })
        .collect();
    users.sort_by(|a, b| a.login.as_str().cmp(b.login.as_str()));
    Ok(users)
}

/// Changes one user's role, status or password; `Ok(None)` when there is no such user,
/// `Ok(Some(false))` when it already was as asked (nothing is written then).
pub(crate) async fn change(
    state: &AppState,
    subject: &SubjectId,
    change: UserChange,
) -> Result<Option<bool>> {
    if change.is_empty() {
        return Err(Error::BadRequest(
            "give at least one of role, status and password".into(),
        ));
    }
    let Some(mut user) = state.store.user_by_subject(subject).await? else {
        return Ok(None);
    };
    let mut changed = false;
    if let Some(role) = change.role {
        changed |= user.role != role;
        user.role = role;
    }
    if let Some(status) = change.status {
        changed |= user.status != status;
        user.status = status;
    }
    if let Some(password) = change.password {
        let rng = state.rng.clone();
        user.password_hash = PasswordHash::new(blocking(move || hash(&password, &rng)).await?);
        changed = true;
    }
    if changed {
        store_records(state, vec![user]).await?;
    }
    Ok(Some(changed))
}
