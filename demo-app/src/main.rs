//! `cellbind-demo-app --config PATH.toml [--check-config]`: wiring only.

use std::process::ExitCode;

fn main() -> ExitCode {
    runtime::server::main(runtime::binary!(), |config: cellbind_demo_app::Config| {
        cellbind_demo_app::server::run(config)
    })
}
