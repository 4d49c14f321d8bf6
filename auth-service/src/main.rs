//! `cellbind-auth-service --config PATH.toml [--check-config | backup --out FILE | restore
//! --from FILE]`: wires the library together.

use std::path::PathBuf;
use std::process::ExitCode;

use cellbind_auth_service::{Config, Error};

/// What to do (no command: serve).
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Writes everything the cell's store holds to FILE (0600; holds password hashes and the
    /// sealed signing keys, not the key-encryption key). Safe while the service runs.
    Backup {
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Replaces the store's contents with the backup in FILE under a new feed epoch (edges take
    /// it without a restart); revocations the replaced database holds are carried over, and
    /// edges hand back the ones they hold. Needs the same kek_file as the backup.
    Restore {
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
}

fn main() -> ExitCode {
    runtime::server::main_with::<Command, Config, _, _, _>(
        runtime::binary!(),
        |config, command| async move {
            match command {
                None => cellbind_auth_service::run(config).await,
                Some(Command::Backup { out }) => {
                    let s = cellbind_auth_service::backup(&config, &out).await?;
                    println!(
                        "{}",
                        serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))?
                    );
                    Ok(())
                }
                Some(Command::Restore { from }) => {
                    let s = cellbind_auth_service::restore(&config, &from).await?;
                    println!(
                        "{}",
                        serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))?
                    );
                    Ok(())
                }
            }
        },
    )
}
