//! The Cellbind demo cell app: what a real cell's app looks like behind a cell-endpoint.
//!
//! - `GET /api/routes/today`: the caller's contractor's route for today.
//! - `POST /api/jobs/{id}/complete`: completes a job (created on first completion), applied once
//!   per `Idempotency-Key`, behind the generation fence (`X-Cellbind-Generation`).
//! - `/internal/v1/…` (bearer internal token, the app's own): seeding and the migration interface
//!   (export, import, freeze, activate, release) plus the list of applied completions; the
//!   bodies are `protocol::admin::app`.
//!
//! Two listeners: the public one ([`public_router`], what the edge forwards to) serves only
//! `/api/*` and `/healthz`; the internal one ([`internal_router`]) only `/internal/v1/*` and
//! `/healthz`, so no path sent through the edge can reach the migration interface (ATTACKS A23).
//! `/api/*` is only served with the edge key (`X-Cellbind-Edge-Key`), compared in constant time.
//! Every request is logged on the `access` target with its listener, method, path and status.
//!
//! A third listener, the management one (`management_listen`, loopback by default), serves
//! `/healthz`, `/readyz` (the database is open) and `/metrics` (requests by route and status
//! class, [`metrics`]); see `runtime::management`.
//!
//! Layout: [`error`], [`config`], [`routes`] (the day route), [`store`] (SQLite) and
//! [`metrics`] at the bottom; [`state`] ([`AppState`]) and [`http`] (extractors, `/healthz`)
//! above them; the two listeners [`public`] and [`internal`]; [`server`] runs all three.

pub mod config;
pub mod error;
pub mod http;
pub mod internal;
pub mod metrics;
pub mod public;
pub mod routes;
pub mod server;
pub mod state;
pub mod store;

pub use config::Config;
pub use error::{AppError, Result};
pub use internal::internal_router;
pub use public::{Job, RouteToday, public_router};
pub use runtime::access::{ACCESS_LOG_TARGET, Listener};
pub use state::AppState;
