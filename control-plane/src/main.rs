//! `cellbind-control-plane --config PATH.toml [--check-config]`: the placement store and signed map publication.

use std::process::ExitCode;

fn main() -> ExitCode {
    runtime::server::main(
        runtime::binary!(),
        |config: control_plane::config::Config| control_plane::server::run(config),
    )
}
