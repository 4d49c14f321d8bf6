//! The servers' and `cellctl`'s log output: to stderr, plain text unless a person is watching
//! (log files are read by tools and tests) or JSON lines when the configuration asks for them
//! (`log_format = "json"`, for log shippers), filtered by `RUST_LOG` or the binary's default.

use serde::{Deserialize, Serialize};

/// How log lines are written (`log_format` in every server's configuration).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (with `message`), `target`.
    Json,
}

/// Installs the global tracing subscriber, plain text. `default_filter` applies when
/// `RUST_LOG` is unset or invalid (e.g. `"info"` for servers, `"warn"` for the CLI). Later
/// calls are no-ops.
pub fn init(default_filter: &str) {
    init_with(default_filter, LogFormat::Text);
}

/// [`init`] in the given format.
pub fn init_with(default_filter: &str, format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}
