//! Owner-only folders and files for data and secrets (ATTACKS A30).

/// Mode of a folder that holds a process's data or secrets: owner only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Mode of a data or secret file: owner read/write only.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) if needed, then makes it owner-only (0700), also when it
/// already existed with a wider mode (ATTACKS A30: databases and keys live in 0700 folders).
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
}

/// Makes every existing file among `files` owner-only (0600); absent files are skipped. For a
/// SQLite database pass the `-wal` and `-shm` companions too (SQLite creates them with the
/// database file's mode, so a 0600 database keeps them 0600 from then on).
pub fn restrict_files<P: AsRef<std::path::Path>>(files: &[P]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for f in files {
        match std::fs::set_permissions(f, std::fs::Permissions::from_mode(PRIVATE_FILE_MODE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates an empty owner-only (0600) file at `path` unless one exists, then makes it 0600.
/// Call it before SQLite opens a new database, so the database is never world-readable, not
/// even between its creation and a later `chmod`.
pub fn private_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => restrict_files(&[path]),
        Err(e) => Err(e),
    }
}

/// [`private_file`] for a SQLite database and [`restrict_files`] for its `-wal`/`-shm`.
pub fn private_sqlite(db: &std::path::Path) -> std::io::Result<()> {
    private_file(db)?;
    restrict_files(&[beside(db, "-wal"), beside(db, "-shm")])
}

/// The file beside `path` whose name is `path`'s followed by `suffix` (`x.db` → `x.db-wal`).
pub fn beside(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_dirs_and_databases_are_owner_only() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/b");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        super::private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("x.db");
        super::private_sqlite(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let wal = dir.join("x.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        super::private_sqlite(&db).unwrap();
        assert_eq!(mode(&wal), 0o600);
    }
}
