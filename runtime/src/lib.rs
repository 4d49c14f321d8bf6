//! The server kit shared by the Cellbind server binaries and `cellctl` (kept out of `protocol`,
//! which does no I/O): the one rustls crypto provider, logging ([`logging`]), configuration
//! loading ([`config`]), when a server should stop, secrets and owner-only files ([`secret`]),
//! the SQLite schema check, the single-flight refetch gate ([`refetch`]) and the access log of
//! the servers' two listeners ([`access`]).

pub mod access;
pub mod config;
pub mod files;
pub mod logging;
pub mod refetch;
pub mod secret;

pub use files::{
    PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_dir, private_file, private_sqlite, restrict_files,
};
pub use secret::Secret;

/// Environment variable: when `1`, a server stops as soon as its stdin reaches end of file.
/// `cellctl dev` holds the other end of each child's stdin pipe, so children never outlive it,
/// even when it is SIGKILLed.
pub const EXIT_ON_STDIN_EOF_ENV: &str = "CELLBIND_EXIT_ON_STDIN_EOF";

/// Installs ring as the rustls crypto provider (once per process; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Resolves when the process should stop: SIGINT, SIGTERM, or (with
/// `CELLBIND_EXIT_ON_STDIN_EOF=1`) the end of stdin.
pub async fn shutdown_signal() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if std::env::var(EXIT_ON_STDIN_EOF_ENV).is_ok_and(|v| v == "1") {
        // A plain thread: a blocking stdin read must not hold up the runtime's shutdown.
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            loop {
                match stdin.read(&mut sink) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
    } else {
        std::mem::forget(tx);
    }
    let stdin_eof = async {
        let _ = rx.await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
        _ = stdin_eof => {},
    }
}

/// Records or checks the schema version of a SQLite file that keeps it in a
/// `meta (key TEXT PRIMARY KEY, value TEXT)` table under the key `schema`. A new file gets
/// `expected`; a file written by another schema is refused with the version it holds.
pub fn check_sqlite_schema(conn: &rusqlite::Connection, expected: u32) -> Result<(), SchemaError> {
    use rusqlite::OptionalExtension as _;
    let held: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()?;
    match held {
        None => {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                [expected.to_string()],
            )?;
            Ok(())
        }
        Some(v) if v == expected.to_string() => Ok(()),
        Some(held) => Err(SchemaError::Mismatch { held, expected }),
    }
}

/// Checks the schema version of a SQLite file that keeps it in `PRAGMA user_version` (0 for
/// a new file) and answers it. A version above `supported` (or a negative one) was written by
/// a newer build and is refused; an older one is the caller's to migrate.
pub fn check_sqlite_user_version(
    conn: &rusqlite::Connection,
    supported: u32,
) -> Result<u32, SchemaError> {
    let held: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match u32::try_from(held) {
        Ok(v) if v <= supported => Ok(v),
        _ => Err(SchemaError::TooNew { held, supported }),
    }
}

/// Why a SQLite file's schema version was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    #[error("schema {held}, this build reads {expected}")]
    Mismatch { held: String, expected: u32 },
    #[error("database schema version {held} is not one this build reads (0..={supported})")]
    TooNew { held: i64, supported: u32 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}
