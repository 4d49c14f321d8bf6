//! Game day: a wave of 60 migrations on a real fleet while synthetic technicians keep loading
//! routes and completing jobs, with one cell's map refresh stalled
//! (`FleetOptions::stalled_map_cell`: that auth-service keeps the map it started with) — the
//! product's own `migration-under-load` scenario (`cellctl gameday`, docs/GAMEDAY.md), run with
//! a wave of 60 instead of its default.
//!
//! Its bounds are the goals: every route load served, no write lost, applied twice or accepted
//! by a non-owning cell, the worst read-only window ≤ 5 s, nobody signs in again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use cellbind_tests::{Slot, TestFleet};
use cellctl::gameday::{RunArgs, Scale};

/// Contractors moved in the wave.
const MIGRATIONS: usize = 60;
/// The cell whose auth-service does not refresh its map.
const STALLED_CELL: u8 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_of_sixty_migrations_under_load() {
    let t = TestFleet::start_in(Slot::Exclusive, |mut o| {
        o.stalled_map_cell = Some(STALLED_CELL);
        o
    })
    .await;
    let out = tempfile::tempdir().unwrap();
    let args = RunArgs {
        scenarios: vec!["migration-under-load".to_owned()],
        all: false,
        cells: Vec::new(),
        duration: Duration::from_secs(4),
        // The wave provisions 12 synthetic contractors per cell and moves each into the next
        // cell (the stalled one gives and takes).
        scale: Scale::Small,
        dry_run: false,
        contractors: Vec::new(),
        wave: Some(MIGRATIONS),
        out: Some(out.path().to_path_buf()),
    };
    let report = cellctl::gameday::run(&t.fleet.fleet_file_path(), &args, false)
        .await
        .unwrap()
        .expect("a report");
    let s = &report.scenarios[0];
    println!(
        "migration game day: {:?} in {:.1} s (cell-0{STALLED_CELL}'s map refresh stalled): {}",
        s.outcome,
        s.duration_ms as f64 / 1000.0,
        s.reason
    );
    let migrated = s.figures.iter().find(|f| f.name == "migrated").unwrap();
    assert_eq!(migrated.value as usize, MIGRATIONS);
    assert!(report.passed(), "the wave meets every goal");
    t.fleet.stop().await;
}
