//! `cellbind-control-plane --config PATH.toml`: the placement store and signed map publication.

use std::process::ExitCode;

fn main() -> ExitCode {
    runtime::server::main(runtime::binary!(), |config| async move {
        control_plane::server::run(control_plane::config::Config::load(&config)?).await
    })
}
