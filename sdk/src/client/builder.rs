//! [`ClientBuilder`]: the settings of a [`Client`] and the one place a client is made.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use protocol::jwks::PublicKey;
use protocol::map::SignedMap;
use protocol::time::{SharedClock, system_clock};

use super::{Client, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, Inner, USER_AGENT, pins_of};
use crate::Error;
use crate::device::Devices;
use crate::observer::{Observer, RequestObserver};
use crate::outbox::{OutboxObserver, OutboxSettings, OutboxState};
use crate::pins;
use crate::proof::{DeviceKey, Signer};
use crate::session::State;
use crate::store::{MemoryStore, SessionStore};
use crate::transport::{RetryPolicy, Transport};

impl Client {
    /// A builder of a client that resolves first sign-ins with the map `map_bytes`, verified
    /// against `map_key`.
    pub fn builder(map_bytes: impl Into<Vec<u8>>, map_key: PublicKey) -> ClientBuilder {
        ClientBuilder::new(map_bytes, map_key)
    }
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    map_bytes: Vec<u8>,
    map_key: PublicKey,
    extra_ca_pem: Option<Vec<u8>>,
    connect_timeout: Duration,
    request_timeout: Duration,
    store: Arc<dyn SessionStore>,
    clock: SharedClock,
    retry: RetryPolicy,
    observer: Observer,
    outbox: OutboxSettings,
    device_key: Option<Arc<dyn DeviceKey>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("map_bytes", &self.map_bytes.len())
            .field("map_key", &self.map_key)
            .field("extra_ca_pem", &self.extra_ca_pem.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("store", &self.store)
            .field("retry", &self.retry)
            .field("device_key", &self.device_key.is_some())
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// `map_bytes`: the built-in signed placement map; `map_key`: the control plane's pinned
    /// map key.
    pub fn new(map_bytes: impl Into<Vec<u8>>, map_key: PublicKey) -> Self {
        Self {
            map_bytes: map_bytes.into(),
            map_key,
            extra_ca_pem: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            store: Arc::new(MemoryStore::new()),
            clock: system_clock(),
            retry: RetryPolicy::default(),
            observer: Observer::default(),
            outbox: OutboxSettings::default(),
            device_key: None,
        }
    }

    /// Trust only the CA certificates in this PEM bundle (dev fleets, pinned CAs) instead of
    /// the built-in roots.
    pub fn extra_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.extra_ca_pem = Some(pem.into());
        self
    }
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = store;
        self
    }
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
    /// Tells `observer` about every call to a cell (see [`RequestObserver`]).
    pub fn observer(mut self, observer: Arc<dyn RequestObserver>) -> Self {
        self.observer = Observer::new(Some(observer));
        self
    }
    /// Bounds of the offline outbox: most writes, most body bytes (all writes together).
    /// Defaults: [`crate::outbox::DEFAULT_OUTBOX_MAX_WRITES`],
    /// [`crate::outbox::DEFAULT_OUTBOX_MAX_BYTES`].
    pub fn outbox_limits(mut self, max_writes: usize, max_bytes: usize) -> Self {
        self.outbox.max_writes = max_writes;
        self.outbox.max_bytes = max_bytes;
        self
    }
    /// The key that proves this device to the cells (DPoP, [`crate::proof`]): every sign-in
    /// sends a proof by it, and the sessions it binds need its proof on every request. Give one
    /// kept in the platform's keystore (Android Keystore or StrongBox, the Secure Enclave), so
    /// the private key never leaves it. Without one, each sign-in makes a software P-256 key,
    /// kept with the session in the app's store. Its public key is read by
    /// [`ClientBuilder::build`] ([`Error::DeviceKey`] when it is not P-256 or Ed25519).
    pub fn device_key(mut self, key: Arc<dyn DeviceKey>) -> Self {
        self.device_key = Some(key);
        self
    }
    /// Tells `observer` what every outbox flush delivered or had refused for good.
    pub fn outbox_observer(mut self, observer: Arc<dyn OutboxObserver>) -> Self {
        self.outbox.observer = Some(observer);
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let map = SignedMap::verify_bytes(&self.map_bytes, &self.map_key)?;
        let device_key = self.device_key.map(Signer::app).transpose()?;
        // One crypto provider everywhere; an Err only means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        // The CA chain and host name check; each cell's pins are checked after it.
        let base = pins::base_verifier(self.extra_ca_pem.as_deref(), provider.clone())?;
        let settings = pins::HttpSettings {
            user_agent: USER_AGENT,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
        };
        Ok(Client {
            // The transport reads each cell's pins from the map the client holds at the time
            // of the call (so an adopted map's pins apply at once); a weak reference, so the
            // client does not own itself.
            inner: Arc::new_cyclic(|me: &Weak<Inner>| Inner {
                transport: Transport::new(
                    pins::CellClients::new(base, provider, settings, pins_of(me.clone())),
                    self.retry,
                    self.observer,
                    self.clock.clone(),
                ),
                map: RwLock::new(Arc::new(map)),
                map_key: self.map_key,
                store: self.store,
                clock: self.clock,
                state: Mutex::new(State::SignedOut),
                sign_in_lock: tokio::sync::Mutex::new(()),
                renew_lock: tokio::sync::Mutex::new(()),
                renewals_wanted: AtomicUsize::new(0),
                outbox: OutboxState::new(self.outbox),
                devices: Devices::default(),
                device_key,
            }),
        })
    }
}
