//! Cellbind control plane: the placement authority (never on the serving path).
//!
//! - [`store`]: placements (contractor → cell, generation) in SQLite.
//! - [`publish`]: the signed placement map, published to a directory and over HTTPS, every
//!   `publish_interval_ms` and on every change.
//! - [`server`]: the control plane's HTTPS service (`router()` for tests, `run()` for the binary);
//!   its admin API's types are `protocol::admin::placement`.
//! - [`map_key`]: the map signing key file.
//! - [`metrics`]: publications, the version published and placement changes, served on the
//!   management listener (`runtime::management`) with `/healthz` and `/readyz`.
//! - [`config`], [`error`]: the configuration file and the crate's one error type.
//!
//! The operator's CLI is the `cellctl` crate and the local dev fleet the `devfleet` crate.

pub mod config;
pub mod error;
pub mod map_key;
pub mod metrics;
pub mod publish;
pub mod server;
pub mod store;

pub use error::{CpError, Result};
pub use server::router;
