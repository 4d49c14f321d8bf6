//! The servers' and `cellctl`'s log output: to stderr, plain text unless a person is watching
//! (log files are read by tools and tests), filtered by `RUST_LOG` or the binary's default.

/// Installs the global tracing subscriber. `default_filter` applies when `RUST_LOG` is unset
/// or invalid (e.g. `"info"` for servers, `"warn"` for the CLI). Later calls are no-ops.
pub fn init(default_filter: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init();
}
