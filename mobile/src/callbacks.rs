//! The adapters of the app's callback traits ([`SessionStore`], [`OutboxObserver`],
//! [`RequestObserver`], [`DeviceKey`]) to the SDK's traits.

use std::sync::Arc;

use crate::records::{event, rejection};
use crate::{
    CellbindError, DeviceKey, OutboxObserver, QueuedWrite, RequestObserver, SessionStore, StoreSlot,
};

impl dyn DeviceKey {
    /// The app's device key as the SDK's.
    pub(crate) fn into_sdk(self: Arc<Self>) -> Arc<dyn sdk::DeviceKey> {
        Arc::new(ForeignDeviceKey(self))
    }
}

/// Adapts the foreign device key to the SDK's: its JWK read by the SDK, its errors as text.
struct ForeignDeviceKey(Arc<dyn DeviceKey>);

/// A foreign key's failure as text. An exception the interface does not declare arrives as
/// `Store` (the one conversion of undeclared callback errors): its text alone.
fn key_error(e: CellbindError) -> sdk::DeviceKeyError {
    sdk::DeviceKeyError(match e {
        CellbindError::Store { detail } => detail,
        other => other.to_string(),
    })
}

impl sdk::DeviceKey for ForeignDeviceKey {
    fn public_key(&self) -> Result<sdk::ProofKey, sdk::DeviceKeyError> {
        sdk::public_key_from_jwk(&self.0.public_key_jwk().map_err(key_error)?)
    }
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, sdk::DeviceKeyError> {
        self.0.sign(message.to_vec()).map_err(key_error)
    }
}

impl dyn SessionStore {
    /// The app's store as the SDK's.
    pub(crate) fn into_sdk(self: Arc<Self>) -> Arc<dyn sdk::SessionStore> {
        Arc::new(ForeignStore(self))
    }
}

impl dyn OutboxObserver {
    /// The app's outbox observer as the SDK's.
    pub(crate) fn into_sdk(self: Arc<Self>) -> Arc<dyn sdk::OutboxObserver> {
        Arc::new(ForeignOutboxObserver(self))
    }
}

impl dyn RequestObserver {
    /// The app's request observer as the SDK's.
    pub(crate) fn into_sdk(self: Arc<Self>) -> Arc<dyn sdk::RequestObserver> {
        Arc::new(ForeignObserver(self))
    }
}

/// Adapts the foreign store to the SDK's store trait.
struct ForeignStore(Arc<dyn SessionStore>);

impl std::fmt::Debug for ForeignStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForeignStore")
    }
}

pub(crate) fn slot(s: sdk::StoreSlot) -> Result<StoreSlot, sdk::StoreError> {
    match s {
        sdk::StoreSlot::Session => Ok(StoreSlot::Session),
        sdk::StoreSlot::Outbox => Ok(StoreSlot::Outbox),
        sdk::StoreSlot::Device => Ok(StoreSlot::Device),
        // a slot the SDK gained after this table was written: never into another slot's blob
        other => Err(sdk::StoreError(format!(
            "{other:?} has no foreign store slot in this library"
        ))),
    }
}

impl sdk::SessionStore for ForeignStore {
    fn load(&self, s: sdk::StoreSlot) -> Result<Option<String>, sdk::StoreError> {
        self.0
            .load(slot(s)?)
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn save(&self, s: sdk::StoreSlot, blob: &str) -> Result<(), sdk::StoreError> {
        self.0
            .save(slot(s)?, blob.to_owned())
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn clear(&self, s: sdk::StoreSlot) -> Result<(), sdk::StoreError> {
        self.0
            .clear(slot(s)?)
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
}

/// Adapts the foreign outbox observer to the SDK's.
struct ForeignOutboxObserver(Arc<dyn OutboxObserver>);

impl sdk::OutboxObserver for ForeignOutboxObserver {
    fn on_delivered(&self, d: &sdk::Delivered) {
        // An observer's failure never fails the flush.
        let _ = self
            .0
            .on_delivered(QueuedWrite::from(&d.write), d.response.status);
    }
    fn on_rejected(&self, r: &sdk::WriteRejection) {
        let _ = self.0.on_rejected(rejection(r));
    }
}

/// Adapts the foreign observer to the SDK's observer trait.
struct ForeignObserver(Arc<dyn RequestObserver>);

impl sdk::RequestObserver for ForeignObserver {
    fn on_request(&self, e: &sdk::RequestEvent) {
        // An observer's failure never fails the request.
        let _ = self.0.on_request(event(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A foreign device key: a fixed JWK (or a refusal) and an echoing signer.
    struct Key(Result<String, String>);

    impl DeviceKey for Key {
        fn public_key_jwk(&self) -> Result<String, CellbindError> {
            self.0
                .clone()
                .map_err(|detail| CellbindError::Store { detail })
        }
        fn sign(&self, data: Vec<u8>) -> Result<Vec<u8>, CellbindError> {
            if data.is_empty() {
                return Err(CellbindError::InvalidInput {
                    detail: "locked".into(),
                });
            }
            Ok(data.iter().rev().copied().collect())
        }
    }

    #[test]
    fn the_foreign_device_key_is_converted_and_forwarded() {
        let jwk =
            r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;
        let foreign: Arc<dyn DeviceKey> = Arc::new(Key(Ok(jwk.into())));
        let key = foreign.into_sdk();
        let public = key.public_key().unwrap();
        assert_eq!(public, sdk::public_key_from_jwk(jwk).unwrap());
        assert_eq!(key.sign(b"abc").unwrap(), b"cba");
        let e = key.sign(b"").unwrap_err();
        assert!(e.0.contains("locked"), "{e}");
        for bad in [
            Err("no keystore".to_owned()),
            Ok("{\"kty\":\"RSA\"}".to_owned()),
        ] {
            let foreign: Arc<dyn DeviceKey> = Arc::new(Key(bad));
            let key = foreign.into_sdk();
            assert!(key.public_key().is_err());
        }
    }

    #[test]
    fn every_slot_keeps_its_name() {
        assert_eq!(slot(sdk::StoreSlot::Session).unwrap(), StoreSlot::Session);
        assert_eq!(slot(sdk::StoreSlot::Outbox).unwrap(), StoreSlot::Outbox);
    }

    /// A foreign store that records which slot each call was for.
    #[derive(Default)]
    struct Slots(std::sync::Mutex<Vec<(StoreSlot, String)>>);

    impl SessionStore for Slots {
        fn load(&self, slot: StoreSlot) -> Result<Option<String>, CellbindError> {
            self.0.lock().unwrap().push((slot, "load".into()));
            Ok(Some(format!("{slot:?}")))
        }
        fn save(&self, slot: StoreSlot, blob: String) -> Result<(), CellbindError> {
            self.0.lock().unwrap().push((slot, blob));
            Ok(())
        }
        fn clear(&self, slot: StoreSlot) -> Result<(), CellbindError> {
            self.0.lock().unwrap().push((slot, "clear".into()));
            Ok(())
        }
    }

    #[test]
    fn the_foreign_store_gets_each_call_for_its_own_slot() {
        use sdk::SessionStore as _;
        let slots = Arc::new(Slots::default());
        let store = ForeignStore(slots.clone());
        assert_eq!(
            store.load(sdk::StoreSlot::Outbox).unwrap().as_deref(),
            Some("Outbox")
        );
        store.save(sdk::StoreSlot::Session, "s").unwrap();
        store.clear(sdk::StoreSlot::Outbox).unwrap();
        assert_eq!(
            *slots.0.lock().unwrap(),
            vec![
                (StoreSlot::Outbox, "load".to_owned()),
                (StoreSlot::Session, "s".to_owned()),
                (StoreSlot::Outbox, "clear".to_owned()),
            ]
        );
    }
}
