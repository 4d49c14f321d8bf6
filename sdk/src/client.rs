//! The client: map lookup, requests to the session's cell, renewal, restore, sign-out and map
//! refresh (DESIGN §7). Its builder is in `client/builder.rs`, sign-in (at most one redirect)
//! in `client/sign_in.rs`, transfer and rebind in `client/transfer.rs`, and the offline
//! outbox's queueing and flushing in `client/flush.rs` ([`crate::outbox`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use base64::Engine as _;
use http::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use protocol::api::SignInResponse;
use protocol::jwks::PublicKey;
use protocol::map::{CellEntry, SignedMap};
use protocol::time::SharedClock;
use protocol::{CellId, ContractorId, Endpoint, SessionToken};

use crate::Error;
use crate::device::Devices;
use crate::outbox::{OutboxState, QueuedWrite};
use crate::pins;
use crate::proof::Signer;
use crate::request::{Body, Prepared, Request};
use crate::session::{EndReason, Event, Session, SessionInfo, State};
use crate::store::{self, SessionStore, StoreSlot};
use crate::transport::{Call, Response, Transport};

/// Time allowed to establish a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time allowed for one whole request attempt.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

const USER_AGENT: &str = concat!("cellbind-sdk/", env!("CARGO_PKG_VERSION"));

/// The pins of a cell in the map `client` holds (none once the client is gone).
fn pins_of(client: Weak<Inner>) -> pins::PinsOf {
    Arc::new(move |cell: &CellId| {
        let inner = client.upgrade()?;
        let map = inner.map.read().ok()?;
        map.map.cell(cell)?.tls_pins
    })
}

/// The Cellbind client. Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    transport: Transport,
    map: RwLock<Arc<SignedMap>>,
    map_key: PublicKey,
    store: Arc<dyn SessionStore>,
    clock: SharedClock,
    /// Never held across an await.
    state: Mutex<State>,
    /// One sign-in at a time.
    sign_in_lock: tokio::sync::Mutex<()>,
    /// One renewal at a time (single flight: the waiter re-checks after acquiring).
    renew_lock: tokio::sync::Mutex<()>,
    /// Requests that found their session in the renewal window (observability and tests).
    renewals_wanted: AtomicUsize,
    outbox: OutboxState,
    /// Device tokens, per account and cell ([`crate::device`]).
    devices: Devices,
    /// The app's device key, if it gave one; otherwise each sign-in makes a software key
    /// ([`crate::proof`]).
    device_key: Option<Signer>,
}

/// A map refresh that took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapUpdate {
    pub previous_version: u64,
    pub version: u64,
}

/// What a sign-out did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignOutResult {
    pub outcome: SignOut,
    /// The writes the outbox still held (now removed from it): the app decides what to do with
    /// them.
    pub undelivered: Vec<QueuedWrite>,
}

/// How a sign-out ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignOut {
    /// The cell revoked the session.
    Revoked,
    /// The local session is gone, but the cell could not be told (the session stays valid there
    /// until it expires or is revoked).
    LocalOnly { reason: String },
    /// There was no session.
    NotSignedIn,
}

/// A cell's endpoint as the signed map lists it, parsed. A map whose endpoint is not a URL
/// was signed by the control plane, but the SDK still refuses to send anything there.
fn endpoint_of(cell: &CellEntry) -> Result<Endpoint, Error> {
    Endpoint::parse(&cell.endpoint).map_err(|e| {
        Error::InvalidResponse(format!("the map lists {} at a bad endpoint: {e}", cell.id))
    })
}

/// Whether an endpoint a cell named (a redirect, an answer) is the map's endpoint of `cell`.
fn same_endpoint(named: &str, cell: &CellEntry) -> bool {
    Endpoint::parse(&cell.endpoint).is_ok_and(|listed| listed.is(named))
}

/// The JSON body of a `2xx` answer whose status is one of `ok`; `what` names the call in
/// the error.
fn answer<T: DeserializeOwned>(resp: &Response, ok: &[u16], what: &str) -> Result<T, Error> {
    if !ok.contains(&resp.status) {
        return Err(Error::InvalidResponse(format!(
            "{what} answered HTTP {}",
            resp.status
        )));
    }
    serde_json::from_slice(&resp.body)
        .map_err(|e| Error::InvalidResponse(format!("{what} answer: {e}")))
}

/// A random idempotency key (128 bits, base64url).
fn random_idempotency_key() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

/// What a call presents: nothing, a key's proof alone (sign-in, rebind), or a session (with
/// its key's proof when it is bound).
#[derive(Debug, Clone, Copy)]
enum Presents<'a> {
    Nothing,
    Proof(Option<&'a Signer>),
    Session(&'a Session),
}

impl<'a> Presents<'a> {
    fn token(self) -> Option<&'a SessionToken> {
        match self {
            Presents::Session(s) => Some(&s.token),
            _ => None,
        }
    }

    fn proof(self) -> Option<&'a Signer> {
        match self {
            Presents::Nothing => None,
            Presents::Proof(signer) => signer,
            Presents::Session(s) => s.proof_signer(),
        }
    }
}

impl Session {
    /// The key whose proofs a request presenting this session carries: its own, when the
    /// session is bound ([`crate::proof`]); none for an unbound session.
    fn proof_signer(&self) -> Option<&Signer> {
        self.info.key_thumbprint.as_ref().and(self.signer.as_ref())
    }
}

impl Client {
    /// One call to `path` at cell `cell` (endpoint `at`) without an idempotency key (the
    /// session API and the map; app requests go through [`Client::send`]).
    #[allow(clippy::too_many_arguments)]
    async fn call_at(
        &self,
        method: Method,
        cell: &CellId,
        at: &Endpoint,
        path: &str,
        presents: Presents<'_>,
        body: Option<Body>,
        replay_safe: bool,
    ) -> Result<Response, Error> {
        self.inner
            .transport
            .send(Call {
                cell,
                endpoint: at.as_str(),
                method,
                path,
                url: at.join(path),
                token: presents.token(),
                proof: presents.proof(),
                headers: &[],
                body,
                idempotency_key: None,
                replay_safe,
            })
            .await
    }

    /// `POST path` at cell `cell` (endpoint `at`) with a JSON body and no session, proved by
    /// `signer` when there is one (sign-in, rebind).
    #[allow(clippy::too_many_arguments)]
    async fn post_json(
        &self,
        cell: &CellId,
        at: &Endpoint,
        path: &str,
        body: &impl Serialize,
        signer: Option<&Signer>,
        replay_safe: bool,
    ) -> Result<Response, Error> {
        let body = serde_json::to_vec(body).map_err(|e| Error::InvalidInput(e.to_string()))?;
        self.call_at(
            Method::POST,
            cell,
            at,
            path,
            Presents::Proof(signer),
            Some(Body::json(body)),
            replay_safe,
        )
        .await
    }

    /// `method path` at the session's cell with its token (and its proof, when bound) and no
    /// body (renew, transfer, sign-out).
    async fn session_call(
        &self,
        method: Method,
        session: &Session,
        path: &str,
        replay_safe: bool,
    ) -> Result<Response, Error> {
        self.call_at(
            method,
            &session.info.cell_id,
            &session.info.endpoint,
            path,
            Presents::Session(session),
            None,
            replay_safe,
        )
        .await
    }

    /// Saves a session to the store.
    fn save(&self, session: &Session) -> Result<(), Error> {
        self.inner
            .store
            .save(StoreSlot::Session, &store::encode(session)?)
            .map_err(|e| Error::Store(e.to_string()))
    }

    /// Removes the session from the store (the outbox stays).
    fn clear_store(&self) -> Result<(), Error> {
        self.inner
            .store
            .clear(StoreSlot::Session)
            .map_err(|e| Error::Store(e.to_string()))
    }

    fn transition(&self, event: Event) -> Result<(), Error> {
        let mut st = self.inner.state.lock().map_err(|_| Error::InvalidState {
            state: "poisoned",
            event: "any",
        })?;
        let next = std::mem::take(&mut *st).next(event);
        match next {
            Ok(n) => {
                *st = n;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn current(&self) -> Option<Session> {
        self.inner
            .state
            .lock()
            .ok()
            .and_then(|s| s.session().cloned())
    }

    /// The current state's name (for diagnostics).
    pub fn state_name(&self) -> &'static str {
        self.inner.state.lock().map_or("poisoned", |s| s.name())
    }

    /// The current session, if any (no network).
    pub fn session(&self) -> Option<SessionInfo> {
        self.current().map(|s| s.info())
    }

    /// The placement map in use.
    pub fn map(&self) -> Arc<SignedMap> {
        self.inner
            .map
            .read()
            .map_or_else(|p| p.into_inner().clone(), |m| m.clone())
    }

    /// The cell the map names for a contractor (override, else bucket).
    pub fn cell_for(&self, contractor: &ContractorId) -> Option<CellEntry> {
        self.map().map.cell_for(contractor).cloned()
    }

    /// How many requests found their session inside the renewal window.
    pub fn renewals_wanted(&self) -> usize {
        self.inner.renewals_wanted.load(Ordering::SeqCst)
    }

    /// Loads the session from the store. No network in the call. `Ok(None)` when the store
    /// holds no session. Called inside a tokio runtime with a session, it starts a flush of
    /// the outbox in the background ([`crate::outbox`]).
    pub fn restore(&self) -> Result<Option<SessionInfo>, Error> {
        if let Some(s) = self.current() {
            self.flush_in_background();
            return Ok(Some(s.info()));
        }
        let blob = self
            .inner
            .store
            .load(StoreSlot::Session)
            .map_err(|e| Error::Store(e.to_string()))?;
        let Some(blob) = blob else {
            return Ok(None);
        };
        let Some(session) = self.with_its_key(store::decode(&blob)?) else {
            return Ok(None);
        };
        let info = session.info();
        self.transition(Event::Restored(session))?;
        self.flush_in_background();
        Ok(Some(info))
    }

    /// A stored session with the key that proves it: the stored software key or the app's,
    /// whichever it is bound to. `None` (the session is left in the store, for the next sign-in
    /// to replace) when it is bound to a key this device no longer holds: the app's key changed
    /// or was lost, and every request would be refused. An unbound session keeps the stored key,
    /// else the app's, for a rebind to bind its successor to.
    fn with_its_key(&self, mut session: Session) -> Option<Session> {
        let app = self.inner.device_key.as_ref();
        match &session.info.key_thumbprint {
            Some(bound) if session.signer.as_ref().is_some_and(|s| s.jkt() == bound) => {}
            Some(bound) if app.is_some_and(|s| s.jkt() == bound) => session.signer = app.cloned(),
            Some(_) => {
                tracing::warn!(
                    "the stored session is bound to a device key this device does not hold; sign in again"
                );
                return None;
            }
            None if session.signer.is_some() => {}
            None => session.signer = app.cloned(),
        }
        Some(session)
    }

    /// Sends a request to the session's cell (never anywhere else): `method path` with a JSON
    /// body when there is one. A thin form of [`Client::send`].
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response, Error> {
        let r = Request::new(method, path);
        self.send(match body {
            Some(b) => r.json(b),
            None => r,
        })
        .await
    }

    /// Sends an app request to the session's cell (never anywhere else). The request is checked
    /// first ([`Request`] lists what is refused). A write (any method that is not GET, HEAD,
    /// OPTIONS or TRACE) carries the caller's idempotency key or else a random one, the same on
    /// every retry and after a transfer to the contractor's new cell. After a success, a flush
    /// of the outbox starts in the background if writes are queued and none runs.
    pub async fn send(&self, request: Request) -> Result<Response, Error> {
        let result = self.send_now(request).await;
        if result.is_ok() {
            self.flush_in_background();
        }
        result
    }

    /// [`Client::send`] without the outbox trigger (the outbox's own path).
    async fn send_now(&self, request: Request) -> Result<Response, Error> {
        let mut request = request.prepare()?;
        self.renew_if_due().await?;
        let session = self.current().ok_or(Error::NotSignedIn)?;
        if request.idempotency_key.is_none() && !request.method.is_safe() {
            request.idempotency_key = Some(random_idempotency_key());
        }
        // The same request (and idempotency key) for the session and, after a transfer, for
        // its successor.
        fn call<'a>(s: &'a Session, r: &'a Prepared) -> Call<'a> {
            Call {
                cell: &s.info.cell_id,
                endpoint: s.info.endpoint.as_str(),
                method: r.method.clone(),
                path: &r.path,
                url: s.info.endpoint.join(&r.target),
                token: Some(&s.token),
                proof: s.proof_signer(),
                headers: &r.headers,
                body: r.body.clone(),
                idempotency_key: r.idempotency_key.clone(),
                replay_safe: false,
            }
        }
        let transport = &self.inner.transport;
        let result = transport.send(call(&session, &request)).await;
        match result {
            Err(e) if e.ends_session() => {
                self.end(&session, &e)?;
                Err(e)
            }
            Err(Error::WrongCell {
                owner_cell,
                owner_endpoint,
            }) => {
                // DESIGN §7: transfer + rebind (see `transfer`), then retry the request once,
                // at the new session's cell, with the same idempotency key. The first cell
                // saw the request (and refused it), so a network error now says it reached.
                let fresh = self.transfer(&session, owner_cell, owner_endpoint).await?;
                let retried = transport
                    .send(call(&fresh, &request))
                    .await
                    .map_err(|e| e.reached_earlier(true));
                match retried {
                    Err(e) if e.ends_session() => {
                        self.end(&fresh, &e)?;
                        Err(e)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Clears the stored session after the cell ended it.
    fn end(&self, session: &Session, why: &Error) -> Result<(), Error> {
        let reason = match why {
            Error::SessionExpired => EndReason::Expired,
            Error::SessionRevoked => EndReason::Revoked,
            _ => EndReason::Invalid,
        };
        tracing::info!(?reason, "session ended by the cell; clearing it");
        let still_ours = self
            .current()
            .is_some_and(|s| s.info.session_id == session.info.session_id);
        self.transition(Event::Ended(session.info.session_id.clone(), reason))?;
        if still_ours {
            self.clear_store()?;
        }
        Ok(())
    }

    /// Renews the session if it is inside the renewal window. Single flight: concurrent callers
    /// wait for the one renewal and re-check. A transient failure keeps the current session.
    async fn renew_if_due(&self) -> Result<(), Error> {
        let now = self.inner.clock.now();
        if !self.current().is_some_and(|s| s.wants_renewal(now)) {
            return Ok(());
        }
        self.inner.renewals_wanted.fetch_add(1, Ordering::SeqCst);
        let _one = self.inner.renew_lock.lock().await;
        let now = self.inner.clock.now();
        let Some(session) = self.current().filter(|s| s.wants_renewal(now)) else {
            return Ok(()); // renewed (or ended) while we waited
        };
        self.transition(Event::RenewStarted)?;
        let result = self.renew_at(&session).await;
        match result {
            Ok(renewed) => {
                let saved = self.save(&renewed);
                self.transition(Event::Renewed(renewed))?;
                tracing::info!("session renewed");
                saved
            }
            Err(e) if e.ends_session() => {
                self.transition(Event::RenewFailed)?;
                self.end(&session, &e)?;
                Err(e)
            }
            Err(e) => {
                tracing::warn!(error = %e, "renewal failed; keeping the current session");
                self.transition(Event::RenewFailed)
            }
        }
    }

    async fn renew_at(&self, session: &Session) -> Result<Session, Error> {
        let resp = self
            .session_call(Method::POST, session, "/v1/sessions/renew", true)
            .await?;
        let info = &session.info;
        // the renewed session keeps the key (a bound session's successor is bound to it)
        session_from(
            &resp,
            &info.cell_id,
            info.endpoint.clone(),
            &info.contractor_id,
        )?
        .with_signer(session.signer.clone())
    }

    /// Signs out: asks the cell to revoke the session, then forgets it locally in any case.
    /// The writes still in the outbox are handed back (and the outbox emptied), never dropped:
    /// if the outbox cannot be read ([`Error::Store`]) nothing changes, and if it cannot be
    /// emptied after the session ended the writes stay for [`Client::take_undelivered`].
    pub async fn sign_out(&self) -> Result<SignOutResult, Error> {
        self.outbox()?;
        let outcome = self.sign_out_session().await?;
        let undelivered = self.take_undelivered()?;
        Ok(SignOutResult {
            outcome,
            undelivered,
        })
    }

    async fn sign_out_session(&self) -> Result<SignOut, Error> {
        let Some(session) = self.current() else {
            self.clear_store()?;
            return Ok(SignOut::NotSignedIn);
        };
        let remote = self
            .session_call(Method::DELETE, &session, "/v1/sessions/current", false)
            .await;
        self.transition(Event::Ended(
            session.info.session_id.clone(),
            EndReason::SignedOut,
        ))?;
        self.clear_store()?;
        Ok(match remote {
            Ok(_) => SignOut::Revoked,
            // already gone at the cell: as good as revoked (not so a session this device can
            // no longer prove: it stays valid at the cell)
            Err(e) if e.ends_session() && !e.is_proof_refusal() => SignOut::Revoked,
            Err(e) => SignOut::LocalOnly {
                reason: e.to_string(),
            },
        })
    }

    /// Fetches the placement map from the session's cell and adopts it only if its signature
    /// verifies with the pinned key and its version is higher. Otherwise the map held is kept
    /// and the error says why ([`Error::MapRefused`]).
    pub async fn refresh_map(&self) -> Result<MapUpdate, Error> {
        let session = self.current().ok_or(Error::NotSignedIn)?;
        let resp = self
            .call_at(
                Method::GET,
                &session.info.cell_id,
                &session.info.endpoint,
                "/v1/placement-map",
                Presents::Nothing,
                None,
                false,
            )
            .await?;
        if resp.status != 200 {
            return Err(Error::InvalidResponse(format!(
                "placement map answered HTTP {}",
                resp.status
            )));
        }
        self.adopt_map(&resp.body)
    }

    /// Adopts a signed map (signature against the pinned key, strictly higher version).
    pub fn adopt_map(&self, bytes: &[u8]) -> Result<MapUpdate, Error> {
        let offered = SignedMap::verify_bytes(bytes, &self.inner.map_key)?;
        let mut held = self.inner.map.write().map_err(|_| Error::InvalidState {
            state: "poisoned",
            event: "adopt_map",
        })?;
        offered.newer_than(Some(&held))?;
        let update = MapUpdate {
            previous_version: held.map.version,
            version: offered.map.version,
        };
        *held = Arc::new(offered);
        tracing::info!(
            from = update.previous_version,
            to = update.version,
            "placement map updated"
        );
        Ok(update)
    }
}

/// The session in a sign-in, rebind or renewal answer of `cell`, whose endpoint (as the map
/// lists it) is `endpoint`.
fn session_from(
    resp: &Response,
    cell: &CellId,
    endpoint: Endpoint,
    contractor: &ContractorId,
) -> Result<Session, Error> {
    let SignInResponse {
        session, issued, ..
    } = answer(resp, &[200, 201], "session")?;
    if &issued.cell_id != cell {
        return Err(Error::InvalidResponse(format!(
            "asked {cell} but the session is for {}",
            issued.cell_id
        )));
    }
    if !endpoint.is(&issued.endpoint) {
        tracing::warn!(map = %endpoint, answered = %issued.endpoint, "cell names another endpoint than the map; using the map's");
    }
    Ok(Session::new(
        session,
        SessionInfo {
            session_id: issued.session_id,
            contractor_id: contractor.clone(),
            subject: issued.subject,
            cell_id: issued.cell_id,
            endpoint,
            generation: issued.generation,
            expires_at: issued.expires_at,
            key_thumbprint: None,
        },
    ))
}

pub(crate) mod builder;
mod flush;
mod sign_in;
mod transfer;

#[cfg(test)]
mod proof_tests;
#[cfg(test)]
mod tests;
