//! Loading a server's configuration: one TOML file, then `CELLBIND_<FIELD>` environment
//! overrides (figment), the same way for every Cellbind server.

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format as _, Toml};
use serde::de::DeserializeOwned;

/// Prefix of the environment variables that override configuration fields.
pub const ENV_PREFIX: &str = "CELLBIND_";

/// Reads `path` (TOML; a missing file is an error), then `CELLBIND_*` overrides, into `T`.
/// `CELLBIND_EXIT_ON_STDIN_EOF` is process plumbing ([`crate::EXIT_ON_STDIN_EOF_ENV`]), not
/// a field, and is skipped.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    Figment::new()
        .merge(Toml::file_exact(path))
        .merge(Env::prefixed(ENV_PREFIX).ignore(&["exit_on_stdin_eof"]))
        .extract()
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))
}

/// A configuration file that could not be read or does not describe a valid configuration;
/// the message names the file and the field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Serde default of a `u64` field: `#[serde(default = "runtime::config::default_u64::<N>")]`.
pub const fn default_u64<const N: u64>() -> u64 {
    N
}

/// Serde default of a `u32` field: `#[serde(default = "runtime::config::default_u32::<N>")]`.
pub const fn default_u32<const N: u32>() -> u32 {
    N
}

/// Serde default of a `usize` field: `#[serde(default = "runtime::config::default_usize::<N>")]`.
pub const fn default_usize<const N: usize>() -> usize {
    N
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Sample {
        listen: String,
        #[serde(default)]
        poll_ms: u64,
    }

    #[test]
    fn reads_the_file_and_names_it_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "listen = \"127.0.0.1:1\"\npoll_ms = 5\n").unwrap();
        let s: Sample = load(&p).unwrap();
        assert_eq!((s.listen.as_str(), s.poll_ms), ("127.0.0.1:1", 5));

        let missing = dir.path().join("missing.toml");
        let e = load::<Sample>(&missing).unwrap_err();
        assert!(e.0.contains("missing.toml"), "{e}");

        std::fs::write(&p, "poll_ms = 5\n").unwrap();
        let e = load::<Sample>(&p).unwrap_err();
        assert!(e.0.contains("listen"), "{e}");
    }
}
