//! Cellbind control plane: the placement authority.
//!
//! - [`store`]: placements (contractor → cell, generation) in SQLite.
//! - [`publish`]: the signed placement map, published to a directory and over HTTPS, every
//!   `publish_interval_ms` and on every change.
//! - [`server`]: the control plane's HTTPS service (`router()` for tests, `run()` for the binary).
//! - [`dev`]: `cellctl dev`, a real local fleet, used by the end-to-end tests too.
//! - [`cli`]: the `cellctl` command line.
//! - [`revoke`]: `cellctl revoke …`, the per-cell revocation fan-out.

pub mod cli;
pub mod config;
pub mod dev;
pub mod error;
pub mod migrate;
pub mod publish;
pub mod revoke;
pub mod secrets;
pub mod server;
pub mod store;

pub use error::{CpError, Result};
pub use server::router;
