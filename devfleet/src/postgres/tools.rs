//! The PostgreSQL tools a private server runs (found in `PATH` or Debian's folders), and how:
//! to their end with their output, as the server's system user when this process is root.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use runtime::IoContext as _;

use crate::error::{FleetError, Result};
use crate::layout::mkdir;

/// The unprivileged system user the server runs as when this process is root.
pub const PG_SYSTEM_USER: &str = "postgres";
/// Where Debian's packages install the server's tools, one folder per major version.
pub const PG_LIB_DIR: &str = "/usr/lib/postgresql";
/// Prefix of the private temporary directories (root's server, or a short socket path).
pub(super) const TEMP_PREFIX: &str = "cellbind-pg-";

/// The PostgreSQL tools this module runs.
#[derive(Debug, Clone)]
pub(super) struct Tools {
    pub(super) initdb: PathBuf,
    pub(super) pg_ctl: PathBuf,
    pub(super) psql: PathBuf,
    /// The server itself (beside `pg_ctl`, which is often a link into the version's folder).
    pub(super) postgres: PathBuf,
}

impl Tools {
    pub(super) fn find() -> Result<Tools> {
        let pg_ctl = find_tool("pg_ctl")?;
        let beside = std::fs::canonicalize(&pg_ctl)
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("postgres")))
            .filter(|p| is_executable(p));
        let postgres = match beside {
            Some(p) => p,
            None => find_tool("postgres")?,
        };
        Ok(Tools {
            initdb: find_tool("initdb")?,
            pg_ctl,
            psql: find_tool("psql")?,
            postgres,
        })
    }
}

/// A tool in `PATH`, else in the highest `/usr/lib/postgresql/<version>/bin`.
pub(super) fn find_tool(name: &'static str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join(name);
            if is_executable(&p) {
                return Ok(p);
            }
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(PG_LIB_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let dir_name = e.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = dir_name.split('.').map(|s| s.parse().ok()).collect();
            version.map(|v| (v, e.path().join("bin").join(name)))
        })
        .collect();
    versions.sort();
    versions
        .into_iter()
        .rev()
        .map(|(_, p)| p)
        .find(|p| is_executable(p))
        .ok_or(FleetError::PostgresNotFound { tool: name })
}

pub(super) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process is root (then PostgreSQL must run as [`PG_SYSTEM_USER`]).
pub(super) fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh private (0700) temporary directory with a short path.
pub(super) fn private_temp_dir() -> Result<PathBuf> {
    let p = std::env::temp_dir().join(format!(
        "{TEMP_PREFIX}{}",
        runtime::secret::random_token()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(10)
            .collect::<String>()
    ));
    mkdir(&p)?;
    Ok(p)
}

/// Percent-encodes a path for a URL's query (keeps `/` and the unreserved characters).
pub(super) fn encode_path(p: &Path) -> String {
    let mut out = String::new();
    for b in p.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(char::from(*b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A database name this module creates: lower-case letters, digits and `_`, not starting with
/// a digit (so it needs no quoting in SQL or in a URL).
pub(super) fn check_db_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(FleetError::Config(format!(
            "{name:?} is not a database name (lower-case letters, digits and _)"
        )))
    }
}

/// Gives a file or folder this module made to [`PG_SYSTEM_USER`] (this process is root).
pub(super) fn give_to_system_user(path: &Path) -> Result<()> {
    let user = nix::unistd::User::from_name(PG_SYSTEM_USER)
        .ok()
        .flatten()
        .ok_or(FleetError::PostgresNoSystemUser {
            user: PG_SYSTEM_USER,
        })?;
    nix::unistd::chown(path, Some(user.uid), Some(user.gid)).map_err(|e| {
        FleetError::Io(runtime::IoError::new(
            format!("giving {} to {PG_SYSTEM_USER}", path.display()),
            std::io::Error::from(e),
        ))
    })
}

/// Runs a tool to its end; its stdout on success, else an error with its output.
pub(super) fn run(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {what} ({})", program(&cmd)))?;
    finish(out, what)
}

/// [`run`] with `input` written to the tool's stdin.
pub(super) fn run_with_input(mut cmd: Command, what: &str, input: &str) -> Result<String> {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what} ({})", program(&cmd)))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .with_context(|| format!("writing to {what}"))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {what}"))?;
    finish(out, what)
}

/// A finished tool's stdout on success, else an error with its output.
pub(super) fn finish(out: std::process::Output, what: &str) -> Result<String> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut output = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if output.is_empty() {
        output = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    }
    Err(FleetError::PostgresCommand {
        command: what.to_owned(),
        status: out.status.to_string(),
        output: output.chars().take(2_000).collect(),
    })
}

pub(super) fn program(cmd: &Command) -> String {
    Path::new(cmd.get_program())
        .file_name()
        .unwrap_or(OsStr::new("?"))
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_is_percent_encoded_in_the_url() {
        assert_eq!(encode_path(Path::new("/a b/c_d-1")), "/a%20b/c_d-1");
    }

    #[test]
    fn database_names_need_no_quoting() {
        assert!(check_db_name("cell_01").is_ok());
        for bad in ["", "Cell", "1cell", "cell-01", "a;drop"] {
            assert!(check_db_name(bad).is_err(), "{bad}");
        }
    }
}
