//! The scenarios, one file each; [`ALL`] lists them (docs/GAMEDAY.md describes each with the
//! seed's exercise it rehearses).

use super::scenario::Scenario;

mod auth_down;
mod cell_lost;
mod edge_restart;
mod key_rotation;
mod migration;
mod replica_revocations;
mod revocation;
mod shift_start_wave;
mod stale_map;
mod storm;

/// Every scenario, in the order `--all` runs them (the ones that only fault a component
/// first; the ones that move contractors last).
pub const ALL: &[Scenario] = &[
    storm::SCENARIO,
    auth_down::SCENARIO,
    cell_lost::SCENARIO,
    revocation::SCENARIO,
    replica_revocations::SCENARIO,
    edge_restart::SCENARIO,
    key_rotation::SCENARIO,
    stale_map::SCENARIO,
    migration::SCENARIO,
    shift_start_wave::SCENARIO,
];
