//! Seeding a started fleet: every cell's users, ownership records, app contractors and the
//! signed map, through its internal listeners with its own tokens (the auth-service's admin
//! token, the app's internal token; typed with `protocol::admin`). Seeding is start-up, not operations: a failed call fails the start at
//! once (no retries), and the fleet is stopped again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use protocol::Generation;
use protocol::admin::app::{CONTRACTORS_PATH, SeedRequest};
use protocol::admin::cell::{
    ImportUsers, OWNERSHIP_PATH, OwnershipBulk, OwnershipRecord, PLACEMENT_MAP_PATH,
    USERS_IMPORT_PATH,
};
use protocol::admin::placement;
use protocol::map::SignedMap;
use reqwest::Method;
use runtime::Secret;
use serde::Serialize;

use crate::children::PROBE_INTERVAL_MS;
use crate::error::{FleetError, Result};
use crate::layout::CellPlan;
use crate::seed::{self, SeedPlan};

/// Users per import request.
pub const IMPORT_BATCH_USERS: usize = 1_000;

/// The control plane's signed map, asked for until it answers or the deadline passes.
pub(crate) async fn fetch_map(
    client: &reqwest::Client,
    cp_url: &str,
    deadline: Instant,
) -> Result<Vec<u8>> {
    let url = format!("{cp_url}{}", placement::PLACEMENT_MAP_PATH);
    loop {
        let r = client.get(&url).send().await?;
        if r.status().is_success() {
            return Ok(r.bytes().await?.to_vec());
        }
        if Instant::now() >= deadline {
            return Err(FleetError::Fleet(format!("{url} answered {}", r.status())));
        }
        tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
    }
}

/// Sends one seeding request (a JSON body) and refuses any answer but 2xx, naming the call.
async fn send(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    token: &Secret,
    body: Vec<u8>,
) -> Result<()> {
    let r = client
        .request(method.clone(), url)
        .bearer_auth(token.expose())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| FleetError::Http(format!("{method} {url}: {e}")))?;
    let status = r.status();
    if status.is_success() {
        return Ok(());
    }
    let bytes = r.bytes().await?;
    let detail = serde_json::from_slice::<protocol::ErrorBody>(&bytes)
        .map(|b| format!("{} {}", b.error, b.message))
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).chars().take(200).collect());
    Err(FleetError::Http(format!(
        "{method} {url} answered {status}: {detail}"
    )))
}

fn to_body<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| FleetError::Internal(e.to_string()))
}

/// Users, ownership records, the app's contractors and the signed map for one cell, through
/// its internal listeners with its own tokens.
pub(crate) async fn seed_cell(
    client: &reqwest::Client,
    cell: &CellPlan,
    plan: &SeedPlan,
    hash: &str,
    map_bytes: &[u8],
) -> Result<()> {
    let admin = &cell.admin;
    let auth = format!("{}{USERS_IMPORT_PATH}", cell.auth_url);
    let mine: Vec<_> = plan.of_cell(&cell.id).collect();
    let mut users = Vec::new();
    for c in &mine {
        users.extend(seed::users_of(c, hash)?);
    }
    for batch in users.chunks(IMPORT_BATCH_USERS) {
        let body = to_body(&ImportUsers {
            users: batch.to_vec(),
        })?;
        send(client, Method::POST, &auth, admin, body).await?;
    }
    let records: BTreeMap<_, _> = mine
        .iter()
        .map(|c| {
            let active = OwnershipRecord::Active {
                generation: Generation::FIRST,
            };
            ((*c).clone(), active)
        })
        .collect();
    let url = format!("{}{OWNERSHIP_PATH}", cell.auth_url);
    let body = to_body(&OwnershipBulk { records })?;
    send(client, Method::PUT, &url, admin, body).await?;
    let contractors: BTreeMap<_, _> = mine
        .iter()
        .map(|c| ((*c).clone(), Generation::FIRST))
        .collect();
    let url = format!("{}{CONTRACTORS_PATH}", cell.app_internal_url);
    let body = to_body(&SeedRequest { contractors })?;
    send(client, Method::PUT, &url, &cell.app_internal, body).await?;
    push_map(client, &cell.auth_url, admin, map_bytes).await
}

/// Pushes a signed map to an auth-service. Already holding that version (it polled the
/// control plane first) counts as success.
pub(crate) async fn push_map(
    client: &reqwest::Client,
    auth_url: &str,
    admin: &Secret,
    map_bytes: &[u8],
) -> Result<()> {
    let url = format!("{auth_url}{PLACEMENT_MAP_PATH}");
    let pushed = send(client, Method::PUT, &url, admin, map_bytes.to_vec()).await;
    let Err(e) = pushed else { return Ok(()) };
    let offered: SignedMap =
        serde_json::from_slice(map_bytes).map_err(|e| FleetError::Internal(e.to_string()))?;
    let held = client
        .get(format!("{auth_url}{}", placement::PLACEMENT_MAP_PATH))
        .send()
        .await?
        .json::<SignedMap>()
        .await;
    match held {
        Ok(h) if h.map.version >= offered.map.version => Ok(()),
        _ => Err(e),
    }
}
