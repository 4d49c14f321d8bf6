//! Device tokens (ATTACKS A36): a cell answers a field sign-in (and a rebind) with a token
//! that proves this device signed in to that account there before. Sent with the next
//! sign-in of the same account at the same cell, it puts the attempt in the device's own
//! throttle bucket, so other clients' failed guesses cannot lock this device out.
//!
//! The SDK keeps them in their own [`StoreSlot::Device`] blob, beside the session but beyond
//! it: a token is worth most exactly when the session is gone (signed out, expired, revoked)
//! and someone is guessing at the account. The blob is JSON with its own schema
//! ([`DEVICE_SCHEMA`]): `{"schema":1,"devices":[{cell_id, contractor_id, login, subject,
//! token}]}`, at most [`MAX_DEVICE_RECORDS`] accounts, the newest last. A store without
//! this slot (an app's store built before it existed) only costs the protection: every
//! failure to read or write it is logged and otherwise ignored, never an error of a sign-in.
//!
//! A token is opaque: the SDK never reads it, and a cell ignores one that is not its own for
//! that account, so sending a stale one is harmless.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use protocol::api::DeviceToken;
use protocol::{CellId, ContractorId, Login, SubjectId};

use crate::store::{SessionStore, StoreSlot};
use crate::transport::Response;

/// Schema version of the device blob (`{"schema", "devices"}`). Bump it when its shape changes.
pub const DEVICE_SCHEMA: u32 = 1;
/// Most accounts whose device tokens are kept (the oldest is dropped first).
pub const MAX_DEVICE_RECORDS: usize = 16;

/// One account's device token at one cell.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceRecord {
    cell_id: CellId,
    contractor_id: ContractorId,
    login: Login,
    subject: SubjectId,
    token: DeviceToken,
}

/// The persisted blob.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceBook {
    schema: u32,
    devices: Vec<DeviceRecord>,
}

/// The device tokens of one client: loaded from the store on first use, saved on each change.
#[derive(Default)]
pub(crate) struct Devices {
    /// `None` until loaded. Never held across an await.
    book: Mutex<Option<Vec<DeviceRecord>>>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .book
            .lock()
            .map_or(0, |b| b.as_ref().map_or(0, Vec::len));
        write!(f, "Devices({n} accounts)")
    }
}

/// The device token in a sign-in or rebind answer, if it carries one.
pub(crate) fn issued_token(resp: &Response) -> Option<DeviceToken> {
    #[derive(Deserialize)]
    struct Issued {
        #[serde(default)]
        device_token: Option<DeviceToken>,
    }
    serde_json::from_slice::<Issued>(&resp.body)
        .ok()
        .and_then(|i| i.device_token)
}

fn decode(blob: &str) -> Result<Vec<DeviceRecord>, String> {
    #[derive(Deserialize)]
    struct Version {
        schema: u32,
    }
    let v: Version = serde_json::from_str(blob).map_err(|e| e.to_string())?;
    if v.schema != DEVICE_SCHEMA {
        return Err(format!(
            "schema {}, this SDK reads {DEVICE_SCHEMA}",
            v.schema
        ));
    }
    let book: DeviceBook = serde_json::from_str(blob).map_err(|e| e.to_string())?;
    Ok(book.devices)
}

impl Devices {
    /// Runs `f` on the loaded book (loading it from `store` first if needed).
    fn with_book<T>(
        &self,
        store: &dyn SessionStore,
        f: impl FnOnce(&mut Vec<DeviceRecord>) -> T,
    ) -> Option<T> {
        let mut held = self.book.lock().ok()?;
        if held.is_none() {
            let loaded = match store.load(StoreSlot::Device) {
                Ok(None) => Vec::new(),
                Ok(Some(blob)) => decode(&blob).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "stored device tokens are not readable; starting without them");
                    Vec::new()
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "device tokens cannot be loaded; signing in without them");
                    Vec::new()
                }
            };
            *held = Some(loaded);
        }
        held.as_mut().map(f)
    }

    /// The token this device holds for `login` of `contractor` at `cell`.
    pub(crate) fn token_for(
        &self,
        store: &dyn SessionStore,
        cell: &CellId,
        contractor: &ContractorId,
        login: &Login,
    ) -> Option<DeviceToken> {
        self.with_book(store, |book| {
            book.iter()
                .find(|r| &r.cell_id == cell && &r.contractor_id == contractor && &r.login == login)
                .map(|r| r.token.clone())
        })
        .flatten()
    }

    /// Keeps the token a sign-in of `login` at `cell` answered (replacing that account's
    /// token there) and saves the book.
    pub(crate) fn signed_in(
        &self,
        store: &dyn SessionStore,
        cell: &CellId,
        contractor: &ContractorId,
        login: &Login,
        subject: &SubjectId,
        token: DeviceToken,
    ) {
        self.keep(
            store,
            DeviceRecord {
                cell_id: cell.clone(),
                contractor_id: contractor.clone(),
                login: login.clone(),
                subject: subject.clone(),
                token,
            },
        );
    }

    /// Keeps the token a rebind at `cell` answered for `subject`: the account is the one a
    /// token is already kept for under that subject (at the old cell); without one, the login
    /// is not known and nothing is kept.
    pub(crate) fn rebound(
        &self,
        store: &dyn SessionStore,
        cell: &CellId,
        subject: &SubjectId,
        token: DeviceToken,
    ) {
        let known = self
            .with_book(store, |book| {
                book.iter()
                    .rev()
                    .find(|r| &r.subject == subject)
                    .map(|r| (r.contractor_id.clone(), r.login.clone()))
            })
            .flatten();
        if let Some((contractor, login)) = known {
            self.signed_in(store, cell, &contractor, &login, subject, token);
        }
    }

    fn keep(&self, store: &dyn SessionStore, record: DeviceRecord) {
        let blob = self.with_book(store, |book| {
            book.retain(|r| {
                !(r.cell_id == record.cell_id
                    && r.contractor_id == record.contractor_id
                    && r.login == record.login)
            });
            book.push(record);
            let excess = book.len().saturating_sub(MAX_DEVICE_RECORDS);
            book.drain(..excess);
            serde_json::to_string(&DeviceBook {
                schema: DEVICE_SCHEMA,
                devices: book.clone(),
            })
        });
        match blob {
            Some(Ok(blob)) => {
                if let Err(e) = store.save(StoreSlot::Device, &blob) {
                    tracing::warn!(error = %e, "the device token could not be saved; kept for this process only");
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "the device tokens could not be encoded"),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, StoreError};

    fn ids(cell: &str, ctr: &str, login: &str) -> (CellId, ContractorId, Login, SubjectId) {
        (
            CellId::new(cell).unwrap(),
            ContractorId::new(ctr).unwrap(),
            Login::new(login).unwrap(),
            SubjectId::new(format!("{ctr}.{login}")).unwrap(),
        )
    }

    fn token(s: &str) -> DeviceToken {
        DeviceToken::new(s).unwrap()
    }

    #[test]
    fn tokens_are_kept_per_account_and_cell_and_survive_a_new_client() {
        let store = MemoryStore::new();
        let d = Devices::default();
        let (c1, ctr, ana, sub) = ids("cell-01", "c-1", "ana");
        assert_eq!(d.token_for(&store, &c1, &ctr, &ana), None);
        d.signed_in(&store, &c1, &ctr, &ana, &sub, token("d1.one"));
        d.signed_in(&store, &c1, &ctr, &ana, &sub, token("d1.two"));
        let (_, _, bo, bo_sub) = ids("cell-01", "c-1", "bo");
        d.signed_in(&store, &c1, &ctr, &bo, &bo_sub, token("d1.bos"));
        // A rebind to cell-02 keeps a token there for the same account.
        let c2 = CellId::new("cell-02").unwrap();
        d.rebound(&store, &c2, &sub, token("d1.moved"));
        // An unknown subject's rebind keeps nothing (its login is not known).
        let (_, _, _, stranger) = ids("cell-01", "c-9", "zed");
        d.rebound(&store, &c2, &stranger, token("d1.lost"));

        let fresh = Devices::default();
        let got = |cell: &CellId, login: &Login| {
            fresh
                .token_for(&store, cell, &ctr, login)
                .map(|t| t.expose().to_owned())
        };
        assert_eq!(got(&c1, &ana).as_deref(), Some("d1.two"));
        assert_eq!(got(&c1, &bo).as_deref(), Some("d1.bos"));
        assert_eq!(got(&c2, &ana).as_deref(), Some("d1.moved"));
        assert_eq!(got(&c2, &bo), None);
        let blob = store.load(StoreSlot::Device).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&blob).unwrap();
        assert_eq!(v["schema"], DEVICE_SCHEMA);
        assert_eq!(v["devices"].as_array().unwrap().len(), 3);
        assert!(!format!("{d:?}").contains("d1."), "{d:?}");
    }

    #[test]
    fn the_book_is_bounded_and_the_oldest_goes_first() {
        let store = MemoryStore::new();
        let d = Devices::default();
        for n in 0..MAX_DEVICE_RECORDS + 3 {
            let (c, ctr, l, s) = ids("cell-01", "c-1", &format!("u{n}"));
            d.signed_in(&store, &c, &ctr, &l, &s, token(&format!("d1.t{n}")));
        }
        let (c, ctr, first, _) = ids("cell-01", "c-1", "u0");
        let (_, _, last, _) = ids("cell-01", "c-1", &format!("u{}", MAX_DEVICE_RECORDS + 2));
        assert_eq!(d.token_for(&store, &c, &ctr, &first), None);
        assert!(d.token_for(&store, &c, &ctr, &last).is_some());
    }

    #[test]
    fn an_unreadable_blob_or_a_store_without_the_slot_costs_only_the_tokens() {
        let (c, ctr, ana, sub) = ids("cell-01", "c-1", "ana");
        for blob in [
            "not json",
            r#"{"schema":99,"devices":[]}"#,
            r#"{"schema":1}"#,
        ] {
            let store = MemoryStore::new();
            store.save(StoreSlot::Device, blob).unwrap();
            let d = Devices::default();
            assert_eq!(d.token_for(&store, &c, &ctr, &ana), None, "{blob}");
            d.signed_in(&store, &c, &ctr, &ana, &sub, token("d1.new"));
            assert_eq!(
                d.token_for(&store, &c, &ctr, &ana)
                    .map(|t| t.expose().to_owned()),
                Some("d1.new".to_owned())
            );
        }
        #[derive(Debug)]
        struct NoDeviceSlot;
        impl SessionStore for NoDeviceSlot {
            fn load(&self, _: StoreSlot) -> Result<Option<String>, StoreError> {
                Err(StoreError("no such slot".into()))
            }
            fn save(&self, _: StoreSlot, _: &str) -> Result<(), StoreError> {
                Err(StoreError("no such slot".into()))
            }
            fn clear(&self, _: StoreSlot) -> Result<(), StoreError> {
                Ok(())
            }
        }
        let d = Devices::default();
        assert_eq!(d.token_for(&NoDeviceSlot, &c, &ctr, &ana), None);
        d.signed_in(&NoDeviceSlot, &c, &ctr, &ana, &sub, token("d1.mem"));
        assert!(
            d.token_for(&NoDeviceSlot, &c, &ctr, &ana).is_some(),
            "kept in memory"
        );
    }
}
