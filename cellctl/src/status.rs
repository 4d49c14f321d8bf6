//! `cellctl status` (per cell: reachable, key ids, map version, feed sequence, state ages) and
//! `cellctl keys rotate`.

use std::path::Path;
use std::time::Duration;

use fleet_description::{FleetCell, FleetFile};
use protocol::CellId;
use protocol::admin::cell::{KidStatus, Rotation};
use protocol::admin::placement::PLACEMENT_MAP_PATH;
use protocol::feed::KeyStatus;
use serde::{Deserialize, Serialize};

use crate::admin::{AdminClient, Api};
use crate::error::{CtlError, Result};

/// What `cellctl status` reports for one cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellReport {
    pub id: CellId,
    pub reachable: bool,
    pub endpoint_ready: bool,
    pub kids: Vec<KidStatus>,
    pub map_version: Option<u64>,
    pub feed_seq: Option<u64>,
    pub users: Option<u64>,
    pub contractors: Option<u64>,
    /// Per edge instance: the feed sequence it applied and how long ago it last synced.
    pub instances: Vec<InstanceReport>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceReport {
    pub id: String,
    pub applied_seq: u64,
    pub state_age_s: u64,
}

/// What `cellctl status` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub control_plane: ControlPlaneReport,
    pub cells: Vec<CellReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlPlaneReport {
    pub url: String,
    pub reachable: bool,
    pub map_version: Option<u64>,
}

/// Probe timeout of `cellctl status`, in milliseconds.
pub const STATUS_TIMEOUT_MS: u64 = 3_000;

async fn cell_report(admin: &AdminClient, cell: &FleetCell, now: u64) -> CellReport {
    let status = match Api::auth(cell) {
        Ok(auth) => admin.status(&auth).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let ready = admin
        .http()
        .get(format!("{}/readyz", cell.endpoint))
        .timeout(Duration::from_millis(STATUS_TIMEOUT_MS))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    match status {
        Ok(s) => CellReport {
            id: cell.id.clone(),
            reachable: true,
            endpoint_ready: ready,
            kids: s.kids,
            map_version: s.map_version,
            feed_seq: Some(s.seq),
            users: Some(s.users),
            contractors: Some(s.contractors),
            instances: s
                .instances
                .into_iter()
                .map(|i| InstanceReport {
                    id: i.id,
                    applied_seq: i.applied_seq,
                    state_age_s: now.saturating_sub(i.last_seen),
                })
                .collect(),
            error: None,
        },
        Err(e) => CellReport {
            id: cell.id.clone(),
            reachable: false,
            endpoint_ready: ready,
            kids: Vec::new(),
            map_version: None,
            feed_seq: None,
            users: None,
            contractors: None,
            instances: Vec::new(),
            error: Some(e),
        },
    }
}

fn load_fleet(path: &Path) -> Result<(FleetFile, AdminClient)> {
    let f = fleet_description::inventory::load(path)?;
    let admin = AdminClient::for_fleet(&f)?;
    Ok((f, admin))
}

/// Gathers the status of every cell of a fleet.
pub async fn status(path: &Path) -> Result<StatusReport> {
    let (f, admin) = load_fleet(path)?;
    let now = protocol::time::system_clock().now();
    let cells =
        futures::future::join_all(f.cells.iter().map(|c| cell_report(&admin, c, now))).await;
    let cp_map = admin
        .http()
        .get(format!("{}{PLACEMENT_MAP_PATH}", f.control_plane.url))
        .timeout(Duration::from_millis(STATUS_TIMEOUT_MS))
        .send()
        .await;
    let (reachable, map_version) = match cp_map {
        Ok(r) => (
            true,
            r.json::<protocol::map::SignedMap>()
                .await
                .ok()
                .map(|m| m.map.version),
        ),
        Err(_) => (false, None),
    };
    Ok(StatusReport {
        control_plane: ControlPlaneReport {
            url: f.control_plane.url,
            reachable,
            map_version,
        },
        cells,
    })
}

/// `cellctl status`: prints the report; fails naming the cells that are not fully reachable.
pub async fn run_status(path: &Path, json: bool) -> Result<()> {
    let report = status(path).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| CtlError::Internal(e.to_string()))?
        );
    } else {
        let cp = &report.control_plane;
        println!(
            "control plane  {}  {}  map v{}",
            cp.url,
            if cp.reachable { "up" } else { "UNREACHABLE" },
            cp.map_version.map_or("?".into(), |v| v.to_string())
        );
        for c in &report.cells {
            if !c.reachable {
                println!(
                    "{}  auth-service UNREACHABLE ({}), edge {}",
                    c.id,
                    c.error.as_deref().unwrap_or("no answer"),
                    if c.endpoint_ready {
                        "ready"
                    } else {
                        "NOT READY"
                    }
                );
                continue;
            }
            let kids: Vec<String> = c
                .kids
                .iter()
                .map(|k| format!("{} ({})", k.kid, key_status_text(k.status)))
                .collect();
            println!(
                "{}  auth-service up, edge {}, map v{}, feed seq {}, keys: {}",
                c.id,
                if c.endpoint_ready {
                    "ready"
                } else {
                    "NOT READY"
                },
                c.map_version.map_or("?".into(), |v| v.to_string()),
                c.feed_seq.unwrap_or(0),
                kids.join(", ")
            );
            for i in &c.instances {
                println!(
                    "    instance {}: applied seq {}, state age {} s",
                    i.id, i.applied_seq, i.state_age_s
                );
            }
        }
    }
    let down: Vec<String> = report
        .cells
        .iter()
        .filter(|c| !c.reachable || !c.endpoint_ready)
        .map(|c| c.id.to_string())
        .collect();
    if down.is_empty() {
        Ok(())
    } else {
        Err(CtlError::Failed(format!(
            "{} of {} cells are not fully reachable: {}",
            down.len(),
            report.cells.len(),
            down.join(", ")
        )))
    }
}

/// Rotates one cell's keys.
pub async fn rotate(path: &Path, cell: &CellId) -> Result<Rotation> {
    let (f, admin) = load_fleet(path)?;
    let c = f.named_cell(cell, path)?;
    Ok(admin.rotate_keys(&Api::auth(c)?).await?)
}

/// `cellctl keys rotate --cell CELL`.
pub async fn run_rotate(path: &Path, cell: &CellId, json: bool) -> Result<()> {
    let r = rotate(path, cell).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "cell": cell, "current": r.current, "next": r.next, "retired": r.retired })
        );
    } else {
        println!(
            "{cell}: current key {}, next key {}, retired: {}",
            r.current,
            r.next,
            if r.retired.is_empty() {
                "none".to_string()
            } else {
                r.retired
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
    Ok(())
}

fn key_status_text(s: KeyStatus) -> &'static str {
    match s {
        KeyStatus::Next => "next",
        KeyStatus::Current => "current",
        KeyStatus::Retired => "retired",
    }
}
