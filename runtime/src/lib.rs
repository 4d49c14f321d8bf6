//! The server kit shared by the Cellbind server binaries and `cellctl` (kept out of `protocol`,
//! which does no I/O): the one rustls crypto provider, logging ([`logging`]), configuration
//! loading ([`config`]), a server binary's `main` ([`server`]), when a server should stop,
//! secrets and owner-only files ([`secret`]), I/O errors with their context ([`io`]), opening
//! SQLite files and checking their schema ([`sqlite`]), an edge instance's feed credential
//! ([`feed_credential`]), the HTTPS client that trusts one CA
//! ([`tls`]), the DPoP proof verifier of one instance ([`dpop`]), the single-flight refetch gate ([`refetch`]), the access log of the servers'
//! two listeners ([`access`]), the HTTP answer of an error ([`answer`]), the protections of
//! every listener (timeouts, the per-address connection cap: [`listener`]) and the management
//! listener every server runs for health, readiness and metrics ([`management`]).

pub mod access;
pub mod answer;
pub mod config;
pub mod dpop;
pub mod feed_credential;
pub mod files;
pub mod io;
pub mod listener;
pub mod logging;
pub mod management;
pub mod refetch;
pub mod secret;
pub mod server;
pub mod sqlite;
pub mod tls;

pub use answer::error_response;
pub use files::{
    PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_dir, private_file, private_sqlite, restrict_files,
};
pub use io::{IoContext, IoError};
pub use secret::Secret;
pub use sqlite::{SchemaError, check_sqlite_schema, check_sqlite_user_version};

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
