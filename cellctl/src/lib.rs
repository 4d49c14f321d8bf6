//! `cellctl`, the operator's command line (DESIGN §8), as a library (the binary is
//! `src/main.rs`; the end-to-end tests call the orchestrators directly).
//!
//! - [`cli`]: the command line (clap) and its dispatch.
//! - [`admin`]: the ONE typed admin client (auth-services, apps, control plane) with the one
//!   retry policy; every admin call goes through it.
//! - the fleet a command acts on (`--inventory cells.toml` or a dev fleet's `fleet.json`) is
//!   read by the `fleet_description` crate.
//! - [`dev`]: `cellctl dev`, which runs the dev fleet's own binary (`cellctl-dev`, the
//!   `devfleet` crate): `cellctl` links neither the dev-fleet harness nor any server.
//! - [`status`]: `cellctl status`, `cellctl keys rotate`.
//! - [`client`]: `cellctl client …` (the SDK from the command line).
//! - [`migrate`]: `cellctl migrate`, the migration orchestrator and its journal.
//! - [`revoke`]: `cellctl revoke …`, the per-cell revocation fan-out; [`withdraw`]: what is in
//!   force at a cell and withdrawing one revocation.
//! - [`edge_credential`]: `cellctl edge-credential`, an edge instance's own feed credential.
//! - [`error`]: the crate's one error type.

pub mod admin;
pub mod cli;
pub mod client;
pub mod dev;
pub mod edge_credential;
pub mod edges;
pub mod error;
pub mod gameday;
pub mod map_export;
pub mod migrate;
pub mod provision;
pub mod revoke;
pub mod status;
pub mod withdraw;

pub use error::{CtlError, Result};
