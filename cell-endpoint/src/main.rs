//! `cellbind-cell-endpoint --config PATH.toml [--check-config]`: wiring only.

use std::process::ExitCode;

use cellbind_cell_endpoint::{Config, run};
use runtime::server::Binary;

/// See the workspace manifest's note on `mimalloc` (allocation is a tenth of the edge's
/// request path under glibc's malloc).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let binary = Binary {
        about: "The cell's public HTTPS edge",
        ..runtime::binary!()
    };
    runtime::server::main(binary, |config: Config| {
        run(config, runtime::shutdown_signal())
    })
}
