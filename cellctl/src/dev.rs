//! `cellctl dev`: the local dev fleet, which is not part of `cellctl` itself. It is the
//! `cellctl-dev` binary of the `devfleet` crate, which `cargo build --workspace --bins` builds
//! beside `cellctl`; `cellctl dev ARGS` replaces this process with `cellctl-dev ARGS` (same pid,
//! so a signal to it reaches the fleet's supervisor). An installed `cellctl` (the release
//! package, the image) ships without it and says so.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

use crate::error::{CtlError, Result};

/// The dev fleet's binary, looked for in the directory of this `cellctl` only.
pub const DEV_BINARY: &str = "cellctl-dev";

/// `cellctl dev`: every argument goes to `cellctl-dev` as it is (`cellctl dev --help` prints
/// its options).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct DevArgs {
    /// `cellctl-dev`'s arguments: --dir DIR, --port-base B, --store sqlite|postgres,
    /// --auth-replicas N, --json.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// Where `cellctl-dev` would be: beside the running `cellctl`.
pub fn dev_binary() -> Result<PathBuf> {
    let exe =
        std::env::current_exe().map_err(|e| CtlError::Config(format!("locating cellctl: {e}")))?;
    let dir = exe
        .parent()
        .ok_or_else(|| CtlError::Config("cellctl has no parent directory".into()))?;
    Ok(dir.join(DEV_BINARY))
}

/// Replaces this process with `cellctl-dev` (`--json` first when it was given to `cellctl`).
/// Returns only when that cannot be done.
pub fn run_dev(args: DevArgs, json: bool) -> Result<()> {
    let dev = dev_binary()?;
    if !dev.is_file() {
        return Err(CtlError::Failed(format!(
            "`cellctl dev` runs {}, which is not there: the dev fleet comes with a development \
             build (cargo build --workspace --bins), not with an installed cellctl",
            dev.display()
        )));
    }
    let mut cmd = std::process::Command::new(&dev);
    if json {
        cmd.arg("--json");
    }
    cmd.args(&args.args);
    let e = cmd.exec();
    Err(CtlError::Failed(format!("running {}: {e}", dev.display())))
}
