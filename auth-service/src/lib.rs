//! Cellbind auth-service: one per cell. Signs technicians and dispatchers in, holds the cell's
//! Ed25519 signing-key ring (with rotation and revocation), serves the JWKS, keeps the
//! ownership records and revocations, and hands all of it to the cell's edge instances through
//! the cell state feed.
//!
//! Layers, each using only the ones below it (no file imports one that imports it back):
//!
//! ```text
//!   server.rs                      opening, background tasks, serving (wiring)
//!   routes/                        HTTP in and out only: extractors, handlers, the routers
//!   sessions, transfer, binding, migration, users, feed, map, ownership, revocations,
//!   keys/lifecycle                 the domain: what each request means
//!   state.rs, batch.rs             the in-memory mirror and the one commit path
//!   keys/{ring,kek}, peers, instances, throttle, devices, passwords, metrics, tls
//!   store/ (trait, any, records) → store/sqlite*, store/postgres*    durable storage
//!   config.rs, error.rs
//! ```
//!
//! Embedding and tests:
//! - [`Config`]: the TOML configuration ([`Config::load`]).
//! - [`open`]: opens the store, keys and secrets named by a config → [`AppState`].
//! - [`public_router`] and [`internal_router`]: the HTTP routes of the two listeners over an
//!   [`AppState`] (drive them with `tower::ServiceExt::oneshot`). The public listener serves
//!   the client routes only; the internal one serves those plus the feed and the admin API.
//!   Both write one `access` log line per request. [`management_router`]: the management
//!   listener's `/healthz`, `/readyz` and `/metrics` (`runtime::management`).
//! - [`serve`] / [`serve_until`]: serve the three routers over TLS on their listeners;
//!   [`spawn_background`] starts key rotation, the placement-map poller and throttle
//!   housekeeping; [`run`] does all of it until a shutdown signal.

#![warn(unreachable_pub)]

mod backup;
mod batch;
mod binding;
pub mod config;
mod coordination;
mod devices;
pub mod error;
mod feed;
mod instances;
mod keys;
mod map;
mod metrics;
mod migration;
mod ownership;
pub mod passwords;
mod peers;
mod revocations;
mod routes;
pub use routes::{AdminApi, SessionsApi};
mod seal;
mod server;
mod sessions;
mod state;
mod store;
mod throttle;
mod tls;
mod transfer;
mod users;

pub use backup::{
    BackupSummary, MAX_BACKUP_BYTES, RestoreSummary, backup, restore, restore_with_clock,
};
pub use config::Config;
pub use error::{Error, Result, TicketRefusal};
pub use keys::lifecycle::tick_keys;
pub use map::poll_once;
pub use revocations::{prune_minted, prune_revocations};
pub use routes::{internal_router, management_router, public_router};
pub use runtime::access::{ACCESS_LOG_TARGET, Listener};
pub use server::{open, open_with_clock, run, serve, serve_until, spawn_background};
pub use state::{AppState, Shared};
pub use tls::client_trusting;
