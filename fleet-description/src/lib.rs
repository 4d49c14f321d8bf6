//! The description of a Cellbind fleet: what `cellctl` needs to talk to one, and no more.
//!
//! - [`fleet_file`]: a dev fleet's `fleet.json` ([`FleetFile`], [`FleetCell`]; DESIGN §8), the
//!   in-memory description every `cellctl` command works from, and the names of the files
//!   `cellctl` keeps beside it.
//! - [`inventory`]: a real fleet's inventory (`cells.toml`: token FILES, no pids, no demo
//!   users) and [`inventory::load`], which reads either kind into a [`FleetFile`].
//! - [`gameday`]: the inventory's `[gameday]` section (actuators, stop conditions, the edges'
//!   metrics URLs) and [`inventory::load_gameday`], which reads it from either kind of file.
//! - [`client`]: the HTTPS client that trusts only the fleet's CA.
//! - [`error`]: the crate's one error type.
//!
//! It reads and writes files and builds an HTTPS client; it starts nothing. The dev fleet that
//! writes `fleet.json` (the `devfleet` crate) and `cellctl` both use it, so the command line an
//! operator installs links neither the dev-fleet harness nor any server.

pub mod client;
pub mod error;
pub mod fleet_file;
pub mod gameday;
pub mod inventory;

pub use client::{client_trusting, client_trusting_file};
pub use error::{Error, Result};
pub use fleet_file::{
    CellManagement, Demo, DemoUser, FLEET_FILE, FLEET_SCHEMA, FleetCell, FleetFile,
    FleetManagement, JOURNAL_FILE, MAP_FILE, PostgresInfo, SESSION_FILE, Service, StoreKind,
};
pub use gameday::GamedaySection;
pub use inventory::{CONFIG_FILE_MODE, INVENTORY_FILE, Inventory, load_gameday};
