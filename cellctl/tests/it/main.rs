//! `cellctl`'s integration tests, one binary: the migration journal's files, the typed admin
//! client and `cellctl client` against a real dev fleet, and what the shipped binary links.
//!
//! The fleet test needs the fleet's binaries next to this test's target directory
//! (`cargo build --workspace --bins`); its port base can be moved with
//! `CELLBIND_CELLCTL_FLEET_PORT_BASE`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod fleet;
mod journal;
mod shipped;
