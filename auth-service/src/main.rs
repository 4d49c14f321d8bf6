//! `cellbind-auth-service --config PATH.toml`: wires the library together.

use std::process::ExitCode;

fn main() -> ExitCode {
    runtime::server::main(runtime::binary!(), |config| async move {
        cellbind_auth_service::run(cellbind_auth_service::Config::load(&config)?).await
    })
}
