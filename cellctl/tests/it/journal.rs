//! The migration journal's files.

use std::os::unix::fs::PermissionsExt as _;

use cellctl::migrate::{JOURNAL_FILE, Journal};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_migration_journal_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join(JOURNAL_FILE);
    let j = Journal::open(&journal).unwrap();
    let c = protocol::ContractorId::new("c-1").unwrap();
    let (a, b) = (
        protocol::CellId::new("cell-01").unwrap(),
        protocol::CellId::new("cell-02").unwrap(),
    );
    j.begin(&c, &a, &b, protocol::Generation(1), 1).unwrap();
    assert_eq!(mode(&journal), 0o600);
    // A journal left 0644 by an earlier version is made private on the next use.
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(j.open_migration(&c).unwrap().is_some());
    assert_eq!(mode(&journal), 0o600);
    // Reopened (another process), the schema is checked, not rewritten.
    drop(j);
    let j = Journal::open(&journal).unwrap();
    assert!(j.open_migration(&c).unwrap().is_some());
}
