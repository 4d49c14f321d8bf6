//! The store's contract as test bodies over any [`Store`], run by both backends' tests
//! (SQLite in `sqlite_tests.rs`, PostgreSQL in `postgres_tests.rs`).

use protocol::feed::Change;
use protocol::ownership::OwnershipRecord;
use protocol::revocation::RevocationKind;
use protocol::{ClientKind, Generation};

use protocol::feed::FeedEntry;
use protocol::revocation::Revocation;
use protocol::{CellId, ContractorId, Jkt, Kid, Login, SessionId, SubjectId};

use crate::error::Error;
use crate::store::Store;
use crate::store::portable::{fresh_epoch, undump_key};
use crate::store::records::{
    BACKUP_SCHEMA, Commit, Dump, KeyRow, KeyState, MintedSession, Position, TicketBurn,
    TransferRecord, UserRecord, Write,
};

fn ctr(n: u8) -> ContractorId {
    ContractorId::new(format!("c-{n}")).unwrap()
}

fn sid(n: u8) -> SessionId {
    SessionId::from_random([n; 16])
}

/// A commit on top of the stored position setting contractor `n` active at `gen`.
pub(in crate::store) async fn ownership(store: &impl Store, n: u8, g: u64) -> Commit {
    let Position { epoch, head } = store.position().await.unwrap();
    let record = OwnershipRecord::Active {
        generation: Generation(g),
    };
    Commit {
        writes: vec![Write::Ownership {
            contractor: ctr(n),
            record: record.clone(),
        }],
        entries: vec![FeedEntry {
            seq: head + 1,
            change: Change::Ownership {
                contractor: ctr(n),
                record,
            },
        }],
        base: head,
        head: head + 1,
        epoch,
    }
}

/// The write setting contractor `n` active at `g`.
pub(in crate::store) fn ownership_write(n: u8, g: u64) -> Vec<Write> {
    vec![Write::Ownership {
        contractor: ctr(n),
        record: OwnershipRecord::Active {
            generation: Generation(g),
        },
    }]
}

/// The device key of the bound session [`fill`] records.
fn bound_key() -> Jkt {
    Jkt::from_digest([7; 32])
}

/// Puts something in every table.
pub(in crate::store) async fn fill(store: &impl Store) {
    let Position { epoch, head } = store.position().await.unwrap();
    let key = KeyRow {
        kid: Kid::new("k-1").unwrap(),
        state: KeyState::Current,
        public: [3; 32],
        sealed_seed: Some(vec![9; 61]),
        created_at: 10,
        state_at: 11,
    };
    let revocation = Revocation::new(
        head + 2,
        RevocationKind::Session {
            jti: sid(1),
            exp: 5_000,
        },
        100,
        "ops",
        "lost phone",
    );
    let record = OwnershipRecord::Handoff {
        generation: Generation(2),
    };
    let commit = Commit {
        writes: vec![
            Write::Key(key),
            Write::Ownership {
                contractor: ctr(1),
                record: record.clone(),
            },
            Write::Revocation(revocation.clone()),
        ],
        entries: vec![
            FeedEntry {
                seq: head + 1,
                change: Change::Ownership {
                    contractor: ctr(1),
                    record,
                },
            },
            FeedEntry {
                seq: head + 2,
                change: Change::Revocation(revocation),
            },
        ],
        base: head,
        head: head + 2,
        epoch,
    };
    store.commit(&commit, 100).await.unwrap();
    let user = UserRecord {
        contractor_id: ctr(1),
        login: Login::new("ann").unwrap(),
        subject: SubjectId::new("s-ann").unwrap(),
        role: protocol::admin::cell::Role::Technician,
        password_hash: protocol::PasswordHash::new("$argon2id$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA"),
        status: protocol::admin::cell::UserStatus::Active,
    };
    assert_eq!(store.upsert_users(vec![user]).await.unwrap(), 1);
    store
        .record_session(&MintedSession {
            session_id: sid(2),
            subject: SubjectId::new("s-ann").unwrap(),
            contractor: ctr(1),
            client: ClientKind::Field,
            kid: Kid::new("k-1").unwrap(),
            generation: Generation(2),
            issued_at: 100,
            expires_at: 4_000,
            auth_time: 100,
            jkt: Some(bound_key()),
        })
        .await
        .unwrap();
    // A bound session's key is stored with it and read back into its claims.
    let held = store.session(&sid(2)).await.unwrap().unwrap();
    assert_eq!(held.jkt, Some(bound_key()));
    let cell = CellId::new("cell-01").unwrap();
    assert_eq!(
        held.claims("https://cell-01.example", &cell).jkt(),
        Some(&bound_key())
    );
    let burn = TicketBurn {
        jti: sid(3),
        exp: 1_000,
        sid: sid(4),
        sexp: 4_000,
    };
    assert!(store.burn_ticket(&burn, 100).await.unwrap());
    let rec = TransferRecord {
        ticket_jti: sid(5),
        iat: 100,
        exp: 220,
    };
    assert_eq!(
        store
            .record_transfer(&sid(6), 4_000, &rec, 100)
            .await
            .unwrap(),
        rec
    );
}

pub(in crate::store) async fn a_stale_commit_writes_nothing(store: &impl Store) {
    let start = store.position().await.unwrap();
    assert_eq!(start.head, 0);
    assert!(!start.epoch.is_empty());
    let first = ownership(store, 1, 1).await;
    store.commit(&first, 100).await.unwrap();
    // Built on head 0 again (another replica committed first): refused.
    let stale = Commit {
        writes: vec![Write::Ownership {
            contractor: ctr(1),
            record: OwnershipRecord::Active {
                generation: Generation(7),
            },
        }],
        ..first.clone()
    };
    assert!(matches!(
        store.commit(&stale, 100).await,
        Err(Error::Stale { stored: 1, base: 0 })
    ));
    // Built in another epoch (the database was restored): refused.
    let other_epoch = Commit {
        epoch: "another-epoch".into(),
        ..ownership(store, 2, 1).await
    };
    assert!(matches!(
        store.commit(&other_epoch, 100).await,
        Err(Error::Stale { stored: 1, base: 1 })
    ));
    assert_eq!(store.position().await.unwrap().head, 1);
    assert_eq!(store.entries_after(0, 10).await.unwrap(), first.entries);
    let loaded = store.load(100).await.unwrap();
    assert_eq!(loaded.head, 1);
    assert_eq!(loaded.epoch, start.epoch);
    assert_eq!(loaded.ownership.len(), 1);
    assert_eq!(
        loaded.ownership[&ctr(1)],
        OwnershipRecord::Active {
            generation: Generation(1)
        }
    );
    // Entries page, oldest first, and drop out of the retained window.
    for g in 2..=4 {
        store
            .commit(&ownership(store, 1, g).await, 2)
            .await
            .unwrap();
    }
    let seqs = |v: Vec<FeedEntry>| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(store.entries_after(0, 10).await.unwrap()), vec![3, 4]);
    assert_eq!(seqs(store.entries_after(2, 1).await.unwrap()), vec![3]);
    assert!(store.entries_after(4, 10).await.unwrap().is_empty());
}

pub(in crate::store) async fn a_dump_restores_everything_under_a_new_epoch(store: &impl Store) {
    let first_epoch = store.position().await.unwrap().epoch;
    fill(store).await;
    let dump = store.dump().await.unwrap();
    assert_eq!(dump.schema, BACKUP_SCHEMA);
    assert_eq!((dump.head, dump.feed.len()), (2, 2));
    assert_eq!(dump.epochs, vec![first_epoch.clone()]);
    assert_eq!(dump.epoch, first_epoch);
    assert_eq!(dump.keys.len(), 1);
    assert_eq!(dump.keys[0].sealed_seed.as_deref().map(str::len), Some(82));
    assert_eq!((dump.users.len(), dump.ownership.len()), (1, 1));
    assert_eq!(
        (dump.revocations.len(), dump.revocation_audit.len()),
        (1, 1)
    );
    assert_eq!(dump.minted_sessions.len(), 1);
    assert_eq!(dump.minted_sessions[0].jkt, Some(bound_key()));
    assert_eq!(
        (dump.burned_tickets.len(), dump.burned_sessions.len()),
        (1, 1)
    );
    assert_eq!(dump.transferred_sessions.len(), 1);
    assert_eq!(
        store.keys().await.unwrap(),
        vec![undump_key(&dump.keys[0]).unwrap()]
    );
    // Life goes on after the backup ...
    store
        .commit(&ownership(store, 2, 1).await, 100)
        .await
        .unwrap();
    store.delete_revocations(&[2]).await.unwrap();
    // ... and the backup is restored.
    let epoch = fresh_epoch().unwrap();
    store.restore(dump.clone(), &epoch).await.unwrap();
    let again = store.dump().await.unwrap();
    assert_eq!(
        again,
        Dump {
            epoch: epoch.clone(),
            epochs: vec![first_epoch.clone(), epoch.clone()],
            ..dump.clone()
        }
    );
    assert_eq!(
        store.epochs().await.unwrap(),
        vec![first_epoch.clone(), epoch.clone()]
    );
    assert_eq!(
        store.position().await.unwrap(),
        Position {
            epoch: epoch.clone(),
            head: 2
        }
    );
    let loaded = store.load(100).await.unwrap();
    assert_eq!((loaded.epoch.as_str(), loaded.head), (epoch.as_str(), 2));
    assert_eq!(loaded.log, dump.feed);
    // A commit built before the restore is refused; one built after it is taken.
    let before = Commit {
        epoch: first_epoch,
        ..ownership(store, 3, 1).await
    };
    assert!(matches!(
        store.commit(&before, 100).await,
        Err(Error::Stale { .. })
    ));
    store
        .commit(&ownership(store, 3, 1).await, 100)
        .await
        .unwrap();
    // The single-use records came back: a burned ticket stays burned.
    let burn = TicketBurn {
        jti: sid(3),
        exp: 1_000,
        sid: sid(9),
        sexp: 4_000,
    };
    assert!(!store.burn_ticket(&burn, 100).await.unwrap());
    // A backup of another schema is refused, and nothing changes.
    let newer = Dump {
        schema: BACKUP_SCHEMA + 1,
        ..dump
    };
    assert!(store.restore(newer, "e-3").await.is_err());
    assert_eq!(store.position().await.unwrap().head, 3);
}

pub(in crate::store) async fn a_session_id_is_burned_once(store: &impl Store) {
    let burn = |jti: u8, sid_n: u8| TicketBurn {
        jti: sid(jti),
        exp: 1_000,
        sid: sid(sid_n),
        sexp: 5_000,
    };
    assert!(store.burn_ticket(&burn(1, 9), 900).await.unwrap());
    assert!(
        !store.burn_ticket(&burn(1, 9), 900).await.unwrap(),
        "same ticket"
    );
    assert!(
        !store.burn_ticket(&burn(2, 9), 900).await.unwrap(),
        "same session"
    );
    // The refused ticket was not burned: with another session it would pass.
    assert!(store.burn_ticket(&burn(2, 8), 900).await.unwrap());
    // The session id is kept past the ticket's expiry, until the session's.
    assert!(!store.burn_ticket(&burn(3, 9), 4_000).await.unwrap());
    let after = 5_000 + protocol::token::LEEWAY_S + 1;
    assert!(store.burn_ticket(&burn(3, 9), after).await.unwrap());
}

pub(in crate::store) async fn a_session_keeps_its_first_transfer_record(store: &impl Store) {
    let rec = |jti: u8, iat: u64| TransferRecord {
        ticket_jti: sid(jti),
        iat,
        exp: iat + 120,
    };
    let sexp = 10_000;
    let first = store
        .record_transfer(&sid(7), sexp, &rec(1, 100), 100)
        .await
        .unwrap();
    assert_eq!(first, rec(1, 100));
    let again = store
        .record_transfer(&sid(7), sexp, &rec(2, 500), 500)
        .await
        .unwrap();
    assert_eq!(again, rec(1, 100), "the first ticket is answered again");
    let other = store
        .record_transfer(&sid(8), sexp, &rec(3, 500), 500)
        .await
        .unwrap();
    assert_eq!(other, rec(3, 500));
    let later = sexp + protocol::token::LEEWAY_S + 1;
    let forgotten = store
        .record_transfer(&sid(7), sexp, &rec(4, later), later)
        .await
        .unwrap();
    assert_eq!(
        forgotten,
        rec(4, later),
        "forgotten after the session's expiry"
    );
}

pub(in crate::store) async fn a_withdrawal_leaves_the_held_set_and_is_audited_at_its_own_position(
    store: &impl Store,
) {
    fill(store).await;
    let Position { epoch, head } = store.position().await.unwrap();
    let held = store.load(100).await.unwrap().revocations;
    assert_eq!(held.len(), 1);
    let withdrawn = Revocation {
        withdrawn: Some(protocol::revocation::Withdrawn {
            seq: head + 1,
            at: 200,
            by: "ops".into(),
            reason: "mistake".into(),
        }),
        ..held[0].clone()
    };
    let commit = Commit {
        writes: vec![Write::Withdrawal(withdrawn.clone())],
        entries: vec![FeedEntry {
            seq: head + 1,
            change: Change::RevocationWithdrawn(withdrawn.clone()),
        }],
        base: head,
        head: head + 1,
        epoch,
    };
    store.commit(&commit, 100).await.unwrap();
    let loaded = store.load(100).await.unwrap();
    assert!(loaded.revocations.is_empty(), "no longer held");
    assert_eq!(loaded.log.last(), commit.entries.last());
    // The audit log keeps the revocation and adds its withdrawal, at the withdrawal's position.
    let audit = store.revocation_audit(0, 10).await.unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0], held[0]);
    assert_eq!(audit[1], withdrawn);
    assert_eq!(
        crate::store::withdrawals(store).await.unwrap(),
        vec![withdrawn]
    );
}
