//! The placement store's files.

use std::os::unix::fs::PermissionsExt as _;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_placement_store_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let store = control_plane::store::Store::open(&data).unwrap();
    assert_eq!(mode(&data), 0o700, "an existing 0755 folder is made 0700");
    let mut files = 0;
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        files += 1;
    }
    assert!(files >= 1, "placements.db exists");
    drop(store);
}
