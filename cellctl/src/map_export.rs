//! `cellctl map export --out DIR`: what an app ships for the SDK's first sign-in — the signed
//! placement map (its bytes exactly as a cell serves them, verified against the fleet's map
//! key) and the map key itself, to pin in the app (`CellbindConfig.map` and
//! `CellbindConfig.map_public_key`). With `--with-ca`, also the fleet's CA certificate, for an
//! app that talks to a dev fleet or a fleet on a private PKI (`CellbindConfig.extra_ca_pem`).

use std::path::{Path, PathBuf};

use clap::Args;
use protocol::map::SignedMap;
use serde::Serialize;

use crate::error::{CtlError, Result};

/// The signed map's file name in the export directory.
pub const MAP_FILE: &str = "placement-map.json";
/// The map key's file name (one line, base64url Ed25519).
pub const KEY_FILE: &str = "map-public-key.txt";
/// The CA certificate's file name (`--with-ca`).
pub const CA_FILE: &str = "ca.pem";

/// `cellctl map export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// The directory to write the files into (created if missing; existing files replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the fleet's CA certificate (dev fleets, private PKI).
    #[arg(long)]
    pub with_ca: bool,
}

/// What was exported.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    pub map_file: PathBuf,
    pub map_version: u64,
    pub map_issued_at: u64,
    pub key_file: PathBuf,
    pub map_public_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// Fetches the fleet's signed map from its cells (the first that serves one that verifies),
/// and writes it, the key and optionally the CA into `args.out`.
pub async fn export(path: &Path, args: &ExportArgs) -> Result<Exported> {
    let fleet = fleet_description::inventory::load(path)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let ca_path = dir.join(&fleet.ca_cert);
    let ca_pem = std::fs::read(&ca_path)
        .map_err(|e| CtlError::Config(format!("{}: {e}", ca_path.display())))?;
    let key = protocol::map_key::parse(&fleet.map_public_key)
        .map_err(|e| CtlError::Config(format!("map_public_key: {e}")))?;
    let bytes = crate::client::fetch_map(&fleet, &ca_pem, &key)
        .await
        .map_err(|e| CtlError::Failed(format!("no cell served a map that verifies: {e}")))?;
    let signed = SignedMap::verify_bytes(&bytes, &key)?;
    let io = |p: &Path, e: std::io::Error| CtlError::Failed(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(&args.out).map_err(|e| io(&args.out, e))?;
    let map_file = args.out.join(MAP_FILE);
    std::fs::write(&map_file, &bytes).map_err(|e| io(&map_file, e))?;
    let key_file = args.out.join(KEY_FILE);
    std::fs::write(&key_file, format!("{}\n", fleet.map_public_key))
        .map_err(|e| io(&key_file, e))?;
    let ca_file = if args.with_ca {
        let f = args.out.join(CA_FILE);
        std::fs::write(&f, &ca_pem).map_err(|e| io(&f, e))?;
        Some(f)
    } else {
        None
    };
    Ok(Exported {
        map_file,
        map_version: signed.map.version,
        map_issued_at: signed.map.issued_at,
        key_file,
        map_public_key: fleet.map_public_key.clone(),
        ca_file,
    })
}

/// `cellctl map export`: prints what it wrote.
pub async fn run(path: &Path, args: &ExportArgs, json: bool) -> Result<()> {
    let e = export(path, args).await?;
    if json {
        let text =
            serde_json::to_string_pretty(&e).map_err(|e| CtlError::Internal(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    println!(
        "{}: the signed placement map, version {} (ship it as CellbindConfig.map)",
        e.map_file.display(),
        e.map_version
    );
    println!(
        "{}: the map key {} (pin it as CellbindConfig.map_public_key)",
        e.key_file.display(),
        e.map_public_key
    );
    if let Some(ca) = &e.ca_file {
        println!(
            "{}: the fleet's CA certificate (CellbindConfig.extra_ca_pem; dev fleets and private PKI only)",
            ca.display()
        );
    }
    Ok(())
}
