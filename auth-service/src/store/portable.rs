//! Backend-neutral plumbing of the two stores: integer conversions, JSON columns, a user row's
//! parsing, a fresh feed epoch, the backup shapes of keys and users, and the rules of a restore.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SecureRandom as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use protocol::admin::cell::{Role, UserStatus};
use protocol::{ContractorId, Login, PasswordHash, SessionId, SubjectId};

use crate::error::{Error, Result};
use crate::store::records::{BACKUP_SCHEMA, Dump, DumpKey, KeyRow, TransferRecord, UserRecord};

/// A stored integer as unsigned (a negative one, never written, reads as 0).
pub(super) fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// An unsigned value as a database integer (saturating).
pub(super) fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A count or limit as a database integer (saturating).
pub(super) fn i_usize(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A fresh feed epoch: 16 random bytes, base64url (a new database, or a restore).
pub(crate) fn fresh_epoch() -> Result<String> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto("random epoch"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// A stored key as a backup writes it.
pub(super) fn dump_key(k: &KeyRow) -> DumpKey {
    DumpKey {
        kid: k.kid.clone(),
        state: k.state,
        public: URL_SAFE_NO_PAD.encode(k.public),
        sealed_seed: k.sealed_seed.as_ref().map(|s| URL_SAFE_NO_PAD.encode(s)),
        created_at: k.created_at,
        state_at: k.state_at,
    }
}

/// A backed-up key as stored; refuses a malformed one.
pub(crate) fn undump_key(d: &DumpKey) -> Result<KeyRow> {
    let bad = || Error::BadRequest(format!("backup key {:?} is malformed", d.kid.as_str()));
    let public = URL_SAFE_NO_PAD.decode(&d.public).map_err(|_| bad())?;
    let sealed_seed = match &d.sealed_seed {
        Some(s) => Some(URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?),
        None => None,
    };
    Ok(KeyRow {
        kid: d.kid.clone(),
        state: d.state,
        public: public.as_slice().try_into().map_err(|_| bad())?,
        sealed_seed,
        created_at: d.created_at,
        state_at: d.state_at,
    })
}

/// A stored session or ticket id.
pub(super) fn stored_id(id: String) -> Result<SessionId> {
    SessionId::new(id).map_err(|_| Error::Internal("a stored session id is corrupt".into()))
}

/// The transfer record a `record_transfer` read back in its transaction (`ticket_jti`, `iat`,
/// `exp`); there is always one.
pub(super) fn transfer_record(held: Option<(String, i64, i64)>) -> Result<TransferRecord> {
    let (jti, iat, exp) =
        held.ok_or_else(|| Error::Internal("a transfer record vanished while written".into()))?;
    let corrupt = || Error::Internal("a stored transfer record is corrupt".into());
    Ok(TransferRecord {
        ticket_jti: SessionId::new(jti).map_err(|_| corrupt())?,
        iat: u64::try_from(iat).map_err(|_| corrupt())?,
        exp: u64::try_from(exp).map_err(|_| corrupt())?,
    })
}

/// A value as a JSON column.
pub(super) fn json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("encode: {e}")))
}

/// A JSON column read back; `what` names it when it is corrupt.
pub(super) fn unjson<T: DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| Error::Internal(format!("stored {what} is corrupt: {e}")))
}

/// A user row's text columns: contractor, login, subject, role, password hash, status.
pub(super) type UserColumns = (String, String, String, String, String, String);

/// A user row's text columns, parsed.
pub(super) fn user_parse(row: UserColumns) -> Result<UserRecord> {
    let (ctr, login, sub, role, hash, status) = row;
    let bad = |w: &str| Error::Internal(format!("stored user {w} is corrupt"));
    Ok(UserRecord {
        contractor_id: ContractorId::new(ctr).map_err(|_| bad("contractor"))?,
        login: Login::new(login).map_err(|_| bad("login"))?,
        subject: SubjectId::new(sub).map_err(|_| bad("subject"))?,
        role: Role::parse(&role).ok_or_else(|| bad("role"))?,
        password_hash: PasswordHash::new(hash),
        status: UserStatus::parse(&status).ok_or_else(|| bad("status"))?,
    })
}

/// The tables a restore empties and refills (`feed_head` is updated; `epochs` is kept), in
/// both backends.
pub(super) const RESTORED_TABLES: [&str; 11] = [
    "users",
    "keys",
    "ownership",
    "revocations",
    "placement_map",
    "feed",
    "revocation_audit",
    "minted_sessions",
    "burned_tickets",
    "burned_sessions",
    "transferred_sessions",
];

/// Refuses a backup this binary cannot restore, or an empty new epoch (both backends).
pub(super) fn check_restorable(dump: &Dump, epoch: &str) -> Result<()> {
    if dump.schema != BACKUP_SCHEMA {
        return Err(Error::BadRequest(format!(
            "backup schema {} is not {BACKUP_SCHEMA}",
            dump.schema
        )));
    }
    if epoch.is_empty() {
        return Err(Error::Internal("a restore needs a new epoch".into()));
    }
    Ok(())
}

/// The epochs a backup's data went through (its list, then its own), listed by a restore
/// before the new one (both backends).
pub(super) fn history(dump: &Dump) -> impl Iterator<Item = &str> {
    dump.epochs
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(dump.epoch.as_str()))
        .filter(|e| !e.is_empty())
}
