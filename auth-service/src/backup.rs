//! Backup and restore of a cell's state (`cellbind-auth-service backup|restore`), the same
//! for both stores: one JSON document ([`Dump`], schema [`BACKUP_SCHEMA`]) holding every table,
//! written 0600 (it holds password hashes and the sealed signing keys; the key-encryption key is
//! NOT in it — a restore needs the same `kek_file`).
//!
//! A restore gives the database a new feed **epoch**. Edges take the restored state as a whole
//! snapshot whatever its head (a deliberate restore), while an older head in the *same* epoch —
//! a disk rolled back by accident — is still refused as a rollback.
//!
//! Revocations acknowledged after the backup are not lost (DECISIONS "Backup and restore"):
//! 1. the restore carries over every revocation the database being replaced still holds (when
//!    it is readable) that the backup lacks and that can still match a session;
//! 2. every edge keeps enforcing the revocations it held that the restored state lacks, and
//!    hands them back to the auth-service (`POST /internal/v1/feed/reapply`), which records them
//!    again — so they reach every other edge and the audit log.
//!
//! Replicas may keep running during a restore: each notices the new epoch within a second
//! (`coordination::follow`) and reloads. What is lost: users created, sessions recorded and keys
//! made after the backup (sessions signed by such a key fail; their users sign in again).

use std::collections::HashSet;
use std::path::Path;

use protocol::feed::{Change, FeedEntry};
use protocol::revocation::Revocation;
use ring::rand::SystemRandom;
use runtime::IoContext as _;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::kek::Kek;
use crate::keys::ring::KeyRing;
use crate::server::open_store;
use crate::state::blocking;
use crate::store::portable::{fresh_epoch, undump_key};
use crate::store::records::{BACKUP_SCHEMA, Dump};

/// Largest backup file read, in bytes.
pub const MAX_BACKUP_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackupSummary {
    pub epoch: String,
    pub head: u64,
    pub users: usize,
    pub revocations: usize,
    pub bytes: usize,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RestoreSummary {
    /// The epoch of the backup, and the new one.
    pub from_epoch: String,
    pub epoch: String,
    pub head: u64,
    pub users: usize,
    /// Revocations in the backup.
    pub revocations: usize,
    /// Revocations carried over from the database being replaced.
    pub carried_over: usize,
}

/// Seconds since the unix epoch.
fn now() -> u64 {
    protocol::time::system_clock().now()
}

/// Writes everything the configured store holds to `out` (0600, atomically).
pub async fn backup(config: &Config, out: &Path) -> Result<BackupSummary> {
    let (store, _) = open_store(config).await?;
    let mut dump = blocking(move || store.dump()).await?;
    dump.schema = BACKUP_SCHEMA;
    dump.cell = Some(config.cell_id.clone());
    dump.taken_at = now();
    let bytes = serde_json::to_vec(&dump).map_err(|e| Error::Internal(format!("encode: {e}")))?;
    runtime::secret::write_private(out, &bytes)?;
    Ok(BackupSummary {
        epoch: dump.epoch,
        head: dump.head,
        users: dump.users.len(),
        revocations: dump.revocations.len(),
        bytes: bytes.len(),
    })
}

/// Reads and checks a backup file: its schema and cell, and that the configured
/// key-encryption key opens every published key in it.
fn read_backup(config: &Config, from: &Path) -> Result<Dump> {
    let meta = std::fs::metadata(from).with_context(|| format!("read {}", from.display()))?;
    if meta.len() > MAX_BACKUP_BYTES {
        return Err(Error::BadRequest(format!(
            "{} is larger than {MAX_BACKUP_BYTES} bytes",
            from.display()
        )));
    }
    let bytes = std::fs::read(from).with_context(|| format!("read {}", from.display()))?;
    let dump: Dump = serde_json::from_slice(&bytes)
        .map_err(|e| Error::BadRequest(format!("{} is not a backup: {e}", from.display())))?;
    if dump.schema != BACKUP_SCHEMA {
        return Err(Error::BadRequest(format!(
            "backup schema {} is not supported (this binary reads {BACKUP_SCHEMA})",
            dump.schema
        )));
    }
    if dump.cell.as_ref() != Some(&config.cell_id) {
        return Err(Error::BadRequest(format!(
            "the backup is of {}, this configuration is {}",
            dump.cell
                .as_ref()
                .map_or_else(|| "no cell".to_owned(), ToString::to_string),
            config.cell_id
        )));
    }
    if !config.kek_file.exists() {
        return Err(Error::Config(format!(
            "{} is missing: a restore needs the key-encryption key the backup was taken with",
            config.kek_file.display()
        )));
    }
    let kek = Kek::load_or_create(&config.kek_file, &SystemRandom::new())?;
    let rows = dump
        .keys
        .iter()
        .map(undump_key)
        .collect::<Result<Vec<_>>>()?;
    KeyRing::from_rows(&rows, &kek).map_err(|e| {
        Error::Config(format!(
            "the backup's signing keys do not open with {}: {e}",
            config.kek_file.display()
        ))
    })?;
    Ok(dump)
}

/// Adds to `dump` the revocations `live` holds that it lacks and that can still match a
/// session, each as a new feed entry after the dump's head. Answers how many.
fn carry_over(dump: &mut Dump, live: &[Revocation], lifetime_s: u64, now: u64) -> usize {
    let held: HashSet<_> = dump.revocations.iter().map(|r| r.kind.clone()).collect();
    let mut carried = 0;
    for r in live {
        if held.contains(&r.kind) || !r.can_match(lifetime_s, now) {
            continue;
        }
        let seq = dump.head + 1;
        let r = Revocation {
            seq,
            by: format!("carried-over:{}", r.by).chars().take(128).collect(),
            ..r.clone()
        };
        dump.feed.push(FeedEntry {
            seq,
            change: Change::Revocation(r.clone()),
        });
        dump.revocation_audit.push(r.clone());
        dump.revocations.push(r);
        dump.head = seq;
        carried += 1;
    }
    carried
}

/// Replaces the configured store's contents with the backup at `from`, under a new epoch,
/// carrying over the revocations the replaced database holds that the backup lacks.
pub async fn restore(config: &Config, from: &Path) -> Result<RestoreSummary> {
    restore_with_clock(config, from, &protocol::time::system_clock()).await
}

/// [`restore`] with a given clock (which revocations can still match is decided by it).
pub async fn restore_with_clock(
    config: &Config,
    from: &Path,
    clock: &protocol::time::SharedClock,
) -> Result<RestoreSummary> {
    let mut dump = read_backup(config, from)?;
    let from_epoch = dump.epoch.clone();
    let (store, _) = open_store(config).await?;
    let live = {
        let store = store.clone();
        match blocking(move || store.load(0)).await {
            Ok(l) => l.revocations,
            Err(e) => {
                tracing::warn!(error = %e, "the database being replaced is unreadable: its revocations come back from the edges");
                Vec::new()
            }
        }
    };
    let carried_over = carry_over(&mut dump, &live, config.session_lifetime_s, clock.now());
    let epoch = fresh_epoch()?;
    let summary = RestoreSummary {
        from_epoch,
        epoch: epoch.clone(),
        head: dump.head,
        users: dump.users.len(),
        revocations: dump.revocations.len() - carried_over,
        carried_over,
    };
    blocking(move || store.restore(&dump, &epoch)).await?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use protocol::revocation::RevocationKind;
    use protocol::{SessionId, SubjectId};

    fn revocation(seq: u64, kind: RevocationKind) -> Revocation {
        Revocation {
            seq,
            kind,
            at: 1_000,
            by: "ops".into(),
            reason: "test".into(),
        }
    }

    #[test]
    fn revocations_the_backup_lacks_are_carried_over_once_and_only_while_they_can_match() {
        let sub = |s: &str| RevocationKind::Subject {
            sub: SubjectId::new(s).unwrap(),
            before: 1_000,
        };
        let mut dump = Dump {
            head: 7,
            revocations: vec![revocation(5, sub("t-1"))],
            ..Dump::default()
        };
        let expired = RevocationKind::Session {
            jti: SessionId::from_random([1; 16]),
            exp: 10,
        };
        let live = vec![
            revocation(5, sub("t-1")),
            revocation(9, sub("t-2")),
            revocation(10, expired),
        ];
        assert_eq!(carry_over(&mut dump, &live, 3_600, 2_000), 1);
        assert_eq!(dump.head, 8);
        assert_eq!(dump.revocations.len(), 2);
        assert_eq!(dump.revocations[1].seq, 8);
        assert_eq!(dump.revocations[1].kind, sub("t-2"));
        assert_eq!(dump.feed.last().map(|e| e.seq), Some(8));
        assert!(dump.revocations[1].by.starts_with("carried-over:"));
    }
}
