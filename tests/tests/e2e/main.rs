//! The end-to-end tests and game days against a real local fleet, as one test binary (one
//! link instead of one per file); the modules that start a fleet share the machine through
//! `cellbind_tests::FleetSlot`.
//!
//! The fleet's binaries must be built first: `cargo build --workspace --bins`. Run one
//! module with a filter, e.g. `cargo test -p cellbind-tests layering`.

mod browser;
mod cellctl_cli;
mod configuration;
mod credentials;
mod desk_browser;
mod dpop;
mod feed_credentials;
mod fleet_basics;
mod gameday;
mod gameday_report;
mod hostile_client;
mod layering;
mod map_pins;
mod map_safety;
mod metrics;
mod migration_crash;
mod migration_game_day;
mod package;
mod per_cell_secrets;
mod production_rehearsal;
mod provisioning;
mod replica_game_day;
mod restore_game_day;
mod revocation_crash;
mod revocation_migration;
mod revocation_propagation;
mod revocation_support;
mod sign_in_logs;
mod stalled_connections;
mod transfer_sign_out;
mod walkthrough;
