//! Cellbind client SDK (DESIGN §7).
//!
//! A [`Client`] is built from the signed placement map shipped with the app and the control
//! plane's pinned map key. It signs in at the contractor's cell (the map's cell; one redirect at
//! most, only to a cell the signed map lists), keeps the session in a pluggable
//! [`SessionStore`], sends every request to the session's cell only, retries within bounds,
//! renews in the renewal window and reports every failure as a typed [`Error`].
//!
//! ```no_run
//! # async fn demo(map: Vec<u8>, key: protocol::jwks::PublicKey) -> Result<(), cellbind_sdk::Error> {
//! use cellbind_sdk::Client;
//! use protocol::{ContractorId, Login, Password};
//! let client = Client::builder(map, key).build()?;
//! if client.restore()?.is_none() {
//!     client.sign_in(&ContractorId::new("c-40711")?, &Login::new("ana")?, &Password::new("pw")?).await?;
//! }
//! let route = client.request(http::Method::GET, "/api/routes/today", None).await?;
//! // headers, query parameters, a body of any type, the caller's own idempotency key:
//! let done = client
//!     .send(
//!         cellbind_sdk::Request::post("/api/jobs/j-1/complete")
//!             .query("source", "app")
//!             .header("X-Request-Id", "r-17")
//!             .json(b"{}".to_vec())
//!             .idempotency_key("complete-j-1"),
//!     )
//!     .await?;
//! # let _ = (route, done); Ok(()) }
//! ```
//!
//! Sessions are bound to the device (DPoP, RFC 9449, [`proof`]): every sign-in carries a proof
//! by a device key (the app's [`DeviceKey`] in the platform keystore, or a software key the SDK
//! keeps with the session), and every request of a bound session carries a fresh proof, so a
//! copied token is worthless without the key.
//!
//! A network failure says whether the request may have reached the cell
//! ([`Error::Network`], [`NetworkErrorKind`]); an error code from a newer server is
//! [`Error::UnknownErrorCode`]; a [`RequestObserver`] sees every call to a cell with its outcome.
//!
//! Writes made without signal go to the offline [`outbox`]: [`Client::enqueue`] saves them
//! through the app's store before returning, [`Client::flush`] (also started by itself at
//! [`Client::restore`] and after a successful request) delivers them in order, each exactly
//! once, at the contractor's cell of the moment:
//!
//! ```no_run
//! # async fn demo(client: cellbind_sdk::Client) -> Result<(), cellbind_sdk::Error> {
//! let queued = client.enqueue(
//!     cellbind_sdk::Request::post("/api/jobs/j-1/complete").json(b"{}".to_vec()),
//! )?;
//! let report = client.flush().await?;
//! for rejected in &report.rejected {
//!     eprintln!("write {} refused for good: {}", rejected.write.id, rejected.refusal.detail());
//! }
//! # let _ = queued; Ok(()) }
//! ```

mod client;
pub mod device;
mod error;
pub mod observer;
pub mod outbox;
mod pins;
pub mod proof;
pub mod request;
pub mod session;
pub mod store;
pub mod transport;

#[cfg(test)]
pub(crate) mod testing;

pub use client::builder::ClientBuilder;
pub use client::{
    Client, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, MapUpdate, SignOut, SignOutResult,
};
pub use error::{Error, NetworkErrorKind};
pub use observer::{RequestEvent, RequestObserver, RequestOutcome};
pub use outbox::{
    Delivered, FlushReport, OUTBOX_SCHEMA, OutboxObserver, QueuedWrite, Refusal, WriteRejection,
};
pub use proof::{DeviceKey, DeviceKeyError, ProofKey, public_key_from_jwk};
pub use request::Request;
pub use session::{RENEWAL_WINDOW_S, SessionInfo, State};
pub use store::{FileStore, MemoryStore, SessionStore, StoreError, StoreSlot};
pub use transport::{Response, RetryPolicy};
