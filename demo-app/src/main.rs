//! `cellbind-demo-app --config PATH.toml`: wiring only.

use std::process::ExitCode;

fn main() -> ExitCode {
    runtime::server::main(runtime::binary!(), |config| async move {
        cellbind_demo_app::server::run(cellbind_demo_app::Config::load(&config)?).await
    })
}
