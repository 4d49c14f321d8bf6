//! What a cell asks its peer cells, for transfer tickets only, over TLS (the configured CA)
//! through each peer's public endpoint as the signed map names it:
//!
//! - their JWKS, `{peer endpoint}/.well-known/jwks.json`, cached per peer and refetched on an
//!   unknown kid through a `runtime::refetch::RefetchGate` per peer: one fetch at a time, at
//!   most once per [`PEER_JWKS_COOLDOWN_S`] (ATTACKS A4);
//! - a ticket's status at its source, `POST {source endpoint}/v1/sessions/transfer/status`,
//!   asked at every rebind and never cached (ATTACKS A38): the source's answer, or
//!   `NOT_READY` when it gives none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use protocol::api::{
    TRANSFER_STATUS_PATH, TransferStatusRequest, TransferStatusResponse, TransferredSession,
};
use protocol::jwks::KeySet;
use protocol::{CellId, Endpoint, ErrorBody, ErrorCode, Kid};
use runtime::refetch::RefetchGate;

use crate::error::{Error, Result, TicketRefusal};
use crate::tls::{ReadError, read_capped};

/// Least time between two JWKS fetches of one peer cell, in seconds (ATTACKS A4).
pub(crate) const PEER_JWKS_COOLDOWN_S: u64 = 10;
/// Timeout of one peer JWKS fetch.
pub(crate) const PEER_JWKS_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest peer JWKS read, in bytes.
pub(crate) const MAX_PEER_JWKS_BYTES: usize = 64 * 1024;
/// Path of a cell's JWKS.
pub(crate) const JWKS_PATH: &str = "/.well-known/jwks.json";
/// Timeout of one transfer status request to a ticket's source cell.
pub(crate) const PEER_STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest transfer status answer read, in bytes.
pub(crate) const MAX_PEER_STATUS_BYTES: usize = 4 * 1024;

/// The peer key cache.
#[derive(Debug, Default)]
pub(crate) struct PeerKeys {
    peers: Mutex<HashMap<CellId, Peer>>,
}

#[derive(Debug, Clone)]
struct Peer {
    endpoint: Endpoint,
    keys: Option<KeySet>,
    gate: Arc<RefetchGate>,
}

impl Peer {
    fn new(endpoint: Endpoint) -> Peer {
        Peer {
            endpoint,
            keys: None,
            gate: Arc::new(RefetchGate::new(Duration::from_secs(PEER_JWKS_COOLDOWN_S))),
        }
    }
}

impl PeerKeys {
    /// Puts a peer's key set in the cache (tests, and operators pre-seeding).
    pub(crate) fn insert(&self, cell: CellId, endpoint: Endpoint, keys: KeySet) {
        let mut peer = Peer::new(endpoint);
        peer.keys = Some(keys);
        self.lock().insert(cell, peer);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CellId, Peer>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The held keys of `cell` at `endpoint` when they know `kid`.
    fn knowing(&self, cell: &CellId, endpoint: &Endpoint, kid: &Kid) -> Option<KeySet> {
        self.lock()
            .get(cell)
            .filter(|p| &p.endpoint == endpoint)
            .and_then(|p| p.keys.clone())
            .filter(|k| k.contains(kid.as_str()))
    }

    /// The peer's keys: the held ones when they know `kid`, else a refetch (single flight,
    /// cooldown per peer), else whatever is held. A changed endpoint forgets the held keys.
    pub(crate) async fn keys_for(
        &self,
        client: Option<&reqwest::Client>,
        cell: &CellId,
        endpoint: &Endpoint,
        kid: &Kid,
    ) -> Result<KeySet> {
        if let Some(keys) = self.knowing(cell, endpoint, kid) {
            return Ok(keys);
        }
        let gate = {
            let mut peers = self.lock();
            let peer = peers
                .entry(cell.clone())
                .or_insert_with(|| Peer::new(endpoint.clone()));
            if &peer.endpoint != endpoint {
                *peer = Peer::new(endpoint.clone());
            }
            peer.gate.clone()
        };
        let fetch = async {
            let fetched = fetch_jwks(client, endpoint).await;
            let mut peers = self.lock();
            let Some(peer) = peers.get_mut(cell).filter(|p| &p.endpoint == endpoint) else {
                return;
            };
            match fetched {
                Ok(keys) => peer.keys = Some(keys),
                Err(e) => {
                    tracing::warn!(peer = %cell, error = %e, "peer JWKS fetch failed; keeping the held keys");
                }
            }
        };
        if let Some(keys) = gate
            .refetch(|| self.knowing(cell, endpoint, kid), fetch)
            .await
        {
            return Ok(keys);
        }
        let held = self
            .lock()
            .get(cell)
            .filter(|p| &p.endpoint == endpoint)
            .and_then(|p| p.keys.clone());
        held.ok_or_else(|| TicketRefusal::UnknownSource.with(format!("no keys of {cell} yet")))
    }

    /// Asks `source` (at `endpoint`) about `ticket`: `Active` or `Revoked` as it answers; a
    /// `403` (the source does not vouch for the ticket) is `invalid_ticket`; no answer, or any
    /// other one, is `NOT_READY` (retryable: nothing was decided).
    pub(crate) async fn transfer_status(
        &self,
        client: Option<&reqwest::Client>,
        source: &CellId,
        endpoint: &Endpoint,
        ticket: &str,
    ) -> Result<TransferredSession> {
        match ask_status(client, endpoint, ticket).await {
            Ok(Asked::Answered(s)) => Ok(s),
            Ok(Asked::Refused(message)) => {
                tracing::warn!(peer = %source, %message, "the ticket's source refused it");
                Err(TicketRefusal::InvalidTicket
                    .with("the ticket's source cell does not vouch for it"))
            }
            Err(why) => {
                tracing::warn!(peer = %source, error = %why, "the ticket's source cell did not confirm it");
                Err(Error::NotReady(
                    "the ticket's source cell could not confirm it; retry",
                ))
            }
        }
    }
}

/// What a ticket's source said.
enum Asked {
    Answered(TransferredSession),
    /// `403 FORBIDDEN`, with the source's message.
    Refused(String),
}

async fn ask_status(
    client: Option<&reqwest::Client>,
    endpoint: &Endpoint,
    ticket: &str,
) -> std::result::Result<Asked, String> {
    let client = client.ok_or("no TLS client for peer cells (ca_cert)")?;
    let body = TransferStatusRequest {
        ticket: ticket.to_owned(),
    };
    let resp = client
        .post(endpoint.join(TRANSFER_STATUS_PATH))
        .json(&body)
        .timeout(PEER_STATUS_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status();
    let body = read_capped(resp, MAX_PEER_STATUS_BYTES)
        .await
        .map_err(|e| match e {
            ReadError::Read(e) => format!("answer: {e}"),
            ReadError::TooLarge => "the answer is too large".to_owned(),
        })?;
    match status {
        StatusCode::OK => serde_json::from_slice::<TransferStatusResponse>(&body)
            .map(|a| Asked::Answered(a.session))
            .map_err(|e| format!("answer is not a transfer status: {e}")),
        StatusCode::FORBIDDEN => match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(b) if b.error == ErrorCode::Forbidden => Ok(Asked::Refused(b.message)),
            _ => Err("HTTP 403 without a FORBIDDEN body".to_owned()),
        },
        other => Err(format!("HTTP {other}")),
    }
}

async fn fetch_jwks(client: Option<&reqwest::Client>, endpoint: &Endpoint) -> Result<KeySet> {
    let client = client.ok_or(Error::NotReady("no TLS client for peer cells (ca_cert)"))?;
    let resp = client
        .get(endpoint.join(JWKS_PATH))
        .timeout(PEER_JWKS_TIMEOUT)
        .send()
        .await
        .map_err(|e| Error::Internal(format!("peer JWKS: {e}")))?;
    if resp.status() != StatusCode::OK {
        return Err(Error::Internal(format!(
            "peer JWKS: HTTP {}",
            resp.status()
        )));
    }
    let body = read_capped(resp, MAX_PEER_JWKS_BYTES)
        .await
        .map_err(|e| match e {
            ReadError::Read(e) => Error::Internal(format!("peer JWKS body: {e}")),
            ReadError::TooLarge => Error::Internal("peer JWKS is too large".into()),
        })?;
    KeySet::from_json(&body).map_err(|e| Error::Internal(format!("peer JWKS refused: {e}")))
}
