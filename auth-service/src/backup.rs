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
//!    again — so they reach every other edge and the audit log. It takes back only what it
//!    sealed itself (`crate::seal`, ATTACKS A32): the restore seals the restored revocations
//!    for the new epoch.
//!
//! Withdrawals are not lost either: a revocation an operator withdrew after the backup is
//! withdrawn again in the restored state (and its withdrawal stays on record, so an edge that
//! missed the withdrawal cannot hand it back).
//!
//! Replicas may keep running during a restore: each notices the new epoch within a second
//! (`coordination::follow`) and reloads. What is lost: users created, sessions recorded and keys
//! made after the backup (sessions signed by such a key fail; their users sign in again).

use std::collections::HashSet;
use std::path::Path;

use protocol::feed::{Change, FeedEntry};
use protocol::revocation::{Revocation, Withdrawn};
use ring::rand::SystemRandom;
use runtime::IoContext as _;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::kek::Kek;
use crate::keys::ring::KeyRing;
use crate::seal::Sealer;
use crate::server::open_store;
use crate::store::Store as _;
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
    /// Withdrawals carried over from the database being replaced (a revocation withdrawn after
    /// the backup stays withdrawn).
    pub withdrawals_carried_over: usize,
}

/// Seconds since the unix epoch.
fn now() -> u64 {
    protocol::time::system_clock().now()
}

/// Writes everything the configured store holds to `out` (0600, atomically).
pub async fn backup(config: &Config, out: &Path) -> Result<BackupSummary> {
    let (store, _) = open_store(config).await?;
    let mut dump = store.dump().await?;
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
/// key-encryption key opens every published key in it. Answers it with that key.
fn read_backup(config: &Config, from: &Path) -> Result<(Dump, Kek)> {
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
    Ok((dump, kek))
}

/// What a restore carried over from the database it replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Carried {
    revocations: usize,
    withdrawals: usize,
}

/// Appends a change to `dump`'s feed at the next sequence number; answers it.
fn push_entry(dump: &mut Dump, change: impl FnOnce(u64) -> Change) -> u64 {
    let seq = dump.head + 1;
    dump.feed.push(FeedEntry {
        seq,
        change: change(seq),
    });
    dump.head = seq;
    seq
}

/// Carries into `dump` (under the new `epoch`) what the replaced database knew and the backup
/// lacks:
/// 1. each withdrawal (`withdrawals`: the replaced database's audit entries of withdrawn
///    revocations) whose kind that database does not hold again and that could still matter:
///    the backup's revocation of that kind, if any, leaves the held set, and the withdrawal is
///    recorded again (feed and audit, so an edge that missed it cannot hand it back);
/// 2. each revocation `live` holds that the dump lacks and that can still match a session.
///
/// Then every held revocation (and the feed's copies) is sealed for the new epoch: a restore
/// records the backup's revocations in it.
fn carry_over(
    dump: &mut Dump,
    live: &[Revocation],
    withdrawals: &[Revocation],
    sealer: &Sealer,
    epoch: &str,
    lifetime_s: u64,
    now: u64,
) -> Carried {
    let mut carried = Carried::default();
    let live_kinds: HashSet<_> = live.iter().map(|r| r.kind.clone()).collect();
    let audited: HashSet<_> = dump
        .revocation_audit
        .iter()
        .filter_map(|r| r.withdrawn.as_ref().map(|w| (r.kind.clone(), w.at)))
        .collect();
    for w in withdrawals {
        let Some(mark) = &w.withdrawn else { continue };
        if live_kinds.contains(&w.kind)
            || !w.can_match(lifetime_s, now)
            || audited.contains(&(w.kind.clone(), mark.at))
        {
            continue;
        }
        dump.revocations.retain(|r| r.kind != w.kind);
        let mut record = w.clone();
        let seq = push_entry(dump, |seq| {
            record.withdrawn = Some(Withdrawn {
                seq,
                ..mark.clone()
            });
            Change::RevocationWithdrawn(record.clone())
        });
        tracing::debug!(seq, kind = ?record.kind, "carried a withdrawal over the restore");
        dump.revocation_audit.push(record);
        carried.withdrawals += 1;
    }
    let held: HashSet<_> = dump.revocations.iter().map(|r| r.kind.clone()).collect();
    for r in live {
        if held.contains(&r.kind) || !r.can_match(lifetime_s, now) {
            continue;
        }
        let mut record = Revocation {
            by: format!("carried-over:{}", r.by).chars().take(128).collect(),
            withdrawn: None,
            ..r.clone()
        };
        push_entry(dump, |seq| {
            record.seq = seq;
            record = sealer.sealed(epoch, record.clone());
            Change::Revocation(record.clone())
        });
        dump.revocation_audit.push(record.clone());
        dump.revocations.push(record);
        carried.revocations += 1;
    }
    for r in &mut dump.revocations {
        r.seal = Some(sealer.seal(epoch, r));
    }
    for e in &mut dump.feed {
        if let Change::Revocation(r) = &mut e.change {
            r.seal = Some(sealer.seal(epoch, r));
        }
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
    let (mut dump, kek) = read_backup(config, from)?;
    let from_epoch = dump.epoch.clone();
    let (store, _) = open_store(config).await?;
    let (live, withdrawals) = {
        let read = async {
            let live = store.load(0).await?.revocations;
            Ok::<_, Error>((live, crate::store::withdrawals(&store).await?))
        };
        match read.await {
            Ok(both) => both,
            Err(e) => {
                tracing::warn!(error = %e, "the database being replaced is unreadable: its revocations come back from the edges");
                (Vec::new(), Vec::new())
            }
        }
    };
    let epoch = fresh_epoch()?;
    let sealer = Sealer::new(&kek, &config.cell_id);
    let revocations = dump.revocations.len();
    let carried = carry_over(
        &mut dump,
        &live,
        &withdrawals,
        &sealer,
        &epoch,
        config.session_lifetime_s,
        clock.now(),
    );
    let summary = RestoreSummary {
        from_epoch,
        epoch: epoch.clone(),
        head: dump.head,
        users: dump.users.len(),
        revocations,
        carried_over: carried.revocations,
        withdrawals_carried_over: carried.withdrawals,
    };
    store.restore(dump, &epoch).await?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::keys::kek::Kek;
    use protocol::revocation::RevocationKind;
    use protocol::{CellId, SessionId, SubjectId};

    fn revocation(seq: u64, kind: RevocationKind) -> Revocation {
        Revocation::new(seq, kind, 1_000, "ops", "test")
    }

    fn sub(s: &str) -> RevocationKind {
        RevocationKind::Subject {
            sub: SubjectId::new(s).unwrap(),
            before: 1_000,
        }
    }

    fn sealer() -> Sealer {
        Sealer::new(
            &Kek::from_bytes(&[5; 32]).unwrap(),
            &CellId::new("cell-01").unwrap(),
        )
    }

    #[test]
    fn revocations_the_backup_lacks_are_carried_over_once_and_only_while_they_can_match() {
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
        let sealer = sealer();
        let carried = carry_over(&mut dump, &live, &[], &sealer, "e-new", 3_600, 2_000);
        assert_eq!(
            carried,
            Carried {
                revocations: 1,
                withdrawals: 0
            }
        );
        assert_eq!(dump.head, 8);
        assert_eq!(dump.revocations.len(), 2);
        assert_eq!(dump.revocations[1].seq, 8);
        assert_eq!(dump.revocations[1].kind, sub("t-2"));
        assert_eq!(dump.feed.last().map(|e| e.seq), Some(8));
        assert!(dump.revocations[1].by.starts_with("carried-over:"));
        // Every held revocation, the backup's own included, is sealed for the new epoch.
        for r in &dump.revocations {
            assert!(sealer.verifies("e-new", r), "{r:?}");
        }
    }

    #[test]
    fn a_revocation_withdrawn_after_the_backup_stays_withdrawn() {
        let sealer = sealer();
        let planted = sealer.sealed("e-old", revocation(5, sub("t-planted")));
        let mut dump = Dump {
            head: 7,
            revocations: vec![planted.clone(), revocation(6, sub("t-kept"))],
            ..Dump::default()
        };
        let withdrawn = Revocation {
            withdrawn: Some(Withdrawn {
                seq: 12,
                at: 1_500,
                by: "ops".into(),
                reason: "planted".into(),
            }),
            ..planted.clone()
        };
        let carried = carry_over(
            &mut dump,
            &[],
            std::slice::from_ref(&withdrawn),
            &sealer,
            "e-new",
            3_600,
            2_000,
        );
        assert_eq!(carried.withdrawals, 1);
        assert_eq!(
            dump.revocations
                .iter()
                .map(|r| r.kind.clone())
                .collect::<Vec<_>>(),
            vec![sub("t-kept")]
        );
        // The withdrawal is in the feed and the audit log at a new position: a handback of it
        // is recognised as withdrawn.
        let audited = dump.revocation_audit.last().unwrap();
        assert_eq!(audited.withdrawn.as_ref().unwrap().seq, 8);
        assert_eq!(audited.seal, planted.seal);
        assert!(matches!(
            &dump.feed.last().unwrap().change,
            Change::RevocationWithdrawn(r) if r.kind == sub("t-planted")
        ));
        // Restoring the same way again does not record it twice; nor does a kind that the
        // replaced database holds again.
        let again = carry_over(
            &mut dump,
            &[],
            std::slice::from_ref(&withdrawn),
            &sealer,
            "e-new",
            3_600,
            2_000,
        );
        assert_eq!(again.withdrawals, 0);
        let mut other = Dump {
            head: 7,
            revocations: vec![planted.clone()],
            ..Dump::default()
        };
        let held_again = carry_over(
            &mut other,
            std::slice::from_ref(&planted),
            std::slice::from_ref(&withdrawn),
            &sealer,
            "e-new",
            3_600,
            2_000,
        );
        assert_eq!(held_again.withdrawals, 0);
        assert_eq!(other.revocations.len(), 1);
    }
}
