//! `cellctl edge-credential --cell C --instance I --feed-secret-file F --out FILE`: mints the
//! feed credential of one edge instance (`runtime::feed_credential`) from the cell's feed
//! secret, offline, into a new 0600 file. The instance's configuration names that file as its
//! `feed_token_file`; the feed secret itself stays with the auth-service and the operator.

use std::path::PathBuf;

use protocol::{CellId, InstanceId};
use runtime::{Secret, feed_credential};

use crate::error::{CtlError, Result};

/// `cellctl edge-credential`.
#[derive(Debug, clap::Args)]
pub struct EdgeCredentialArgs {
    /// The edge's cell.
    #[arg(long)]
    pub cell: CellId,
    /// The instance (its `instance_id`).
    #[arg(long)]
    pub instance: InstanceId,
    /// The cell's feed secret (the auth-service's `feed_token_file`).
    #[arg(long)]
    pub feed_secret_file: PathBuf,
    /// Where to write the credential (created 0600; an existing file is replaced).
    #[arg(long)]
    pub out: PathBuf,
}

/// Mints the credential into `args.out`.
pub fn mint(args: &EdgeCredentialArgs) -> Result<()> {
    let secret = Secret::from_file(&args.feed_secret_file)
        .map_err(|e| CtlError::Config(format!("{}: {e}", args.feed_secret_file.display())))?;
    let credential = feed_credential::derive(&secret, &args.cell, &args.instance);
    runtime::secret::write_private(&args.out, credential.expose().as_bytes())
        .map_err(|e| CtlError::Config(format!("{}: {e}", args.out.display())))?;
    Ok(())
}

/// Runs `cellctl edge-credential` and says where the credential went (never the credential).
pub fn run(args: &EdgeCredentialArgs, json_out: bool) -> Result<()> {
    mint(args)?;
    if json_out {
        println!(
            "{}",
            serde_json::json!({"cell": args.cell, "instance": args.instance, "out": args.out})
        );
    } else {
        println!(
            "wrote the feed credential of {} ({}) to {} (0600)",
            args.instance,
            args.cell,
            args.out.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_minted_credential_is_the_instances_own_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let secret_file = dir.path().join("feed.token");
        std::fs::write(&secret_file, "cell-feed-secret\n").unwrap();
        let args = EdgeCredentialArgs {
            cell: CellId::new("cell-02").unwrap(),
            instance: InstanceId::new("edge-b").unwrap(),
            feed_secret_file: secret_file,
            out: dir.path().join("edge-b.feed"),
        };
        mint(&args).unwrap();
        let text = std::fs::read_to_string(&args.out).unwrap();
        assert_eq!(
            feed_credential::verify(&Secret::new("cell-feed-secret"), &args.cell, &text),
            Ok(args.instance.clone())
        );
        let mode = std::fs::metadata(&args.out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
