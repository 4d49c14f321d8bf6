//! Session transfer after a migration (DESIGN §4, §5): `POST /v1/sessions/transfer` at the
//! source cell and `POST /v1/sessions/rebind` at the target cell.
//!
//! ```text
//!  client (session at S, gen g)          source S                       target T
//!  ── POST /v1/sessions/transfer ──▶ bearer session valid here (sig, exp, revocations)?
//!                                    (a cookie session is refused: cookie_session)
//!                                    record == released(g, T, g')?  (exactly g)
//!                                    first transfer of sid? record (sid → jti, iat, exp)
//!                                      (durable); else the recorded ticket while unexpired,
//!                                      already_transferred after
//!                                    sign ticket {typ transfer, aud T, src S, gen g,
//!                                      new_gen g', sid, sexp, auth_time, exp ≤ 5 min}
//!  ◀── 200 {ticket, target_cell, target_endpoint}
//!  ── POST /v1/sessions/rebind {ticket} ───────────────────────────▶ S's keys (peer JWKS cache,
//!                                                                    S's endpoint from the map)
//!                                                                    record == active(g')?
//!                                                                    burn ticket jti and sid
//!                                                                      (one transaction)
//!                                                                    mint session at g',
//!                                                                    exp = min(now+life, sexp)
//!  ◀── 201 as sign-in ─────────────────────────────────────────────
//! ```
//!
//! A session id is transferred at most once (ATTACKS A28): the source issues one ticket per
//! session (a repeated transfer, e.g. after an answer lost on a phone network, gets the same
//! claims, so the same ticket, until it expires), and the target burns the session id with
//! the ticket, so a second ticket for the same session is refused as `replayed`.
//!
//! Every refusal is `403 FORBIDDEN` with a message that starts with the [`TicketRefusal`]
//! name, so a client knows to fall back to sign-in; a ticket is never accepted as a session
//! (its `typ` differs) and a session never as a ticket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use protocol::api::{RebindRequest, TransferResponse};
use protocol::http::Source;
use protocol::jwks::KeySet;
use protocol::ownership::OwnershipRecord;
use protocol::token::{Expectations, LEEWAY_S, TICKET_MAX_LIFETIME_S, TICKET_TYP, TicketClaims};
use protocol::{CellId, SessionId};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::http::JsonBody;
use crate::keys::random;
use crate::state::{AppState, blocking};
use crate::store::{TicketBurn, TransferRecord, UserStatus};

/// Lifetime of a transfer ticket, in seconds (at most [`TICKET_MAX_LIFETIME_S`]).
pub const TICKET_LIFETIME_S: u64 = 120;
/// Least time between two JWKS fetches of one peer cell, in seconds (ATTACKS A4).
pub const PEER_JWKS_COOLDOWN_S: u64 = 10;
/// Timeout of one peer JWKS fetch.
pub const PEER_JWKS_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest peer JWKS read, in bytes.
pub const MAX_PEER_JWKS_BYTES: usize = 64 * 1024;
/// Largest ticket accepted, in bytes.
pub const MAX_TICKET_BYTES: usize = 4 * 1024;

/// Why a transfer or rebind was refused (each answered `403 FORBIDDEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketRefusal {
    /// The source did not release the contractor at exactly the session's generation.
    NotReleased,
    /// The ticket is not a valid ticket for this cell (signature, `typ`, audience, expiry…).
    InvalidTicket,
    /// The ticket was already used.
    Replayed,
    /// This cell is not active at the ticket's new generation.
    WrongGeneration,
    /// The ticket names a source cell this cell cannot find or reach in its map.
    UnknownSource,
    /// A browser (cookie) session is not transferred: sign in at the new cell.
    CookieSession,
    /// This session was transferred already and its ticket has expired.
    AlreadyTransferred,
}

impl TicketRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            TicketRefusal::NotReleased => "not_released",
            TicketRefusal::InvalidTicket => "invalid_ticket",
            TicketRefusal::Replayed => "replayed",
            TicketRefusal::WrongGeneration => "wrong_generation",
            TicketRefusal::UnknownSource => "unknown_source",
            TicketRefusal::CookieSession => "cookie_session",
            TicketRefusal::AlreadyTransferred => "already_transferred",
        }
    }
}

fn refuse(refusal: TicketRefusal, detail: impl Into<String>) -> Error {
    Error::Ticket {
        refusal,
        detail: detail.into(),
    }
}

/// `POST /v1/sessions/transfer`: a ticket for the successor, only when this cell released the
/// contractor at exactly the session's generation, and only one ticket per session.
pub async fn transfer(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let (v, source) = crate::sessions::verify_presented(&state, &headers)?;
    if source == Source::Cookie {
        return Err(refuse(
            TicketRefusal::CookieSession,
            "a browser session is not transferred; sign in at the new cell",
        ));
    }
    let c = v.claims;
    let (successor, successor_gen, endpoint) = {
        let inner = state.read();
        match inner.ownership.get(&c.ctr) {
            Some(OwnershipRecord::Released {
                r#gen,
                successor,
                successor_gen,
            }) if *r#gen == c.r#gen => {
                let endpoint = inner
                    .map
                    .as_ref()
                    .and_then(|m| m.map.cell(successor))
                    .map(|e| e.endpoint.clone())
                    .ok_or(Error::NotReady("the successor is not in the placement map"))?;
                (successor.clone(), *successor_gen, endpoint)
            }
            _ => {
                return Err(refuse(
                    TicketRefusal::NotReleased,
                    format!(
                        "this cell did not release {} at generation {}",
                        c.ctr, c.r#gen
                    ),
                ));
            }
        }
    };
    let signer = state
        .read()
        .ring
        .current()
        .map(|k| k.signer.clone())
        .ok_or(Error::NotReady("no signing key"))?;
    let now = state.now();
    let proposed = TransferRecord {
        ticket_jti: SessionId::from_random(*random::<16>(&state.rng)?),
        iat: now,
        exp: now.saturating_add(TICKET_LIFETIME_S.min(TICKET_MAX_LIFETIME_S)),
    };
    let store = state.store.clone();
    let (sid, sexp) = (c.jti.clone(), c.exp);
    let held = blocking(move || store.record_transfer(&sid, sexp, &proposed, now)).await?;
    if now >= held.exp {
        return Err(refuse(
            TicketRefusal::AlreadyTransferred,
            "this session was transferred already and its ticket has expired; sign in again",
        ));
    }
    let claims = TicketClaims {
        iss: state.config.issuer.clone(),
        aud: successor.clone(),
        src: state.config.cell_id.clone(),
        sub: c.sub,
        ctr: c.ctr,
        r#gen: c.r#gen,
        new_gen: successor_gen,
        sid: c.jti,
        sexp: c.exp,
        auth_time: c.auth_time,
        cli: c.cli,
        iat: held.iat,
        nbf: held.iat,
        exp: held.exp,
        jti: held.ticket_jti,
    };
    let ticket = signer
        .mint(&claims)
        .map_err(|e| Error::Internal(e.to_string()))?;
    tracing::info!(sub = %claims.sub, ctr = %claims.ctr, target = %successor, "issued a transfer ticket");
    Ok(axum::Json(TransferResponse {
        ticket,
        target_cell: successor,
        target_endpoint: endpoint,
    })
    .into_response())
}

/// The `src` of a ticket read before verification, only to choose whose keys verify it.
#[derive(Deserialize)]
struct TicketSource {
    src: CellId,
}

fn peek_source(ticket: &str) -> Option<CellId> {
    let payload = ticket.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<TicketSource>(&bytes)
        .ok()
        .map(|s| s.src)
}

/// `POST /v1/sessions/rebind` `{ticket}`: a session at the new generation (201 as sign-in).
pub async fn rebind(
    State(state): State<AppState>,
    body: Result<JsonBody<RebindRequest>, Error>,
) -> Result<Response> {
    let JsonBody(req) = body?;
    let ticket = req.ticket.as_str();
    let invalid =
        |e: protocol::token::TokenError| refuse(TicketRefusal::InvalidTicket, e.to_string());
    let parsed = protocol::token::parse(ticket, TICKET_TYP, MAX_TICKET_BYTES).map_err(invalid)?;
    let src = peek_source(ticket).ok_or_else(|| {
        refuse(
            TicketRefusal::InvalidTicket,
            "the ticket names no source cell",
        )
    })?;
    if src == state.config.cell_id {
        return Err(refuse(
            TicketRefusal::InvalidTicket,
            "a ticket is never for its own source",
        ));
    }
    let endpoint = state
        .read()
        .map
        .as_ref()
        .and_then(|m| m.map.cell(&src))
        .map(|c| c.endpoint.clone())
        .ok_or_else(|| {
            refuse(
                TicketRefusal::UnknownSource,
                format!("{src} is not in the map"),
            )
        })?;
    let keys = state
        .peers
        .keys_for(&state, &src, &endpoint, &parsed.kid)
        .await?;
    let key = keys
        .get(parsed.kid.as_str())
        .cloned()
        .ok_or_else(|| refuse(TicketRefusal::InvalidTicket, "unknown signing key"))?;
    let expect = Expectations {
        issuer: &endpoint,
        audience: &state.config.cell_id,
        max_lifetime_s: TICKET_MAX_LIFETIME_S,
        leeway_s: LEEWAY_S,
    };
    let now = state.now();
    let t = parsed
        .verify::<TicketClaims>(&key, &expect, now)
        .map_err(invalid)?
        .claims;
    if t.src != src {
        return Err(refuse(TicketRefusal::InvalidTicket, "source mismatch"));
    }
    if crate::revocations::ticket_revoked(&state.read(), &t) {
        return Err(Error::SessionRevoked);
    }
    match state.read().ownership.get(&t.ctr) {
        Some(OwnershipRecord::Active { r#gen }) if *r#gen == t.new_gen => {}
        _ => {
            return Err(refuse(
                TicketRefusal::WrongGeneration,
                format!("this cell is not active for {} at {}", t.ctr, t.new_gen),
            ));
        }
    }
    let store = state.store.clone();
    let sub = t.sub.clone();
    let user = blocking(move || store.user_by_subject(&sub)).await?;
    if !user.is_some_and(|u| u.status == UserStatus::Active && u.contractor_id == t.ctr) {
        return Err(Error::SessionRevoked);
    }
    let store = state.store.clone();
    let burn = TicketBurn {
        jti: t.jti.clone(),
        exp: t.exp,
        sid: t.sid.clone(),
        sexp: t.sexp,
    };
    let fresh = blocking(move || store.burn_ticket(&burn, now)).await?;
    if !fresh {
        return Err(refuse(
            TicketRefusal::Replayed,
            "this ticket or this session was already transferred here",
        ));
    }
    let exp = now
        .saturating_add(state.config.session_lifetime_s)
        .min(t.sexp);
    if exp <= now {
        return Err(Error::Session(protocol::token::TokenError::Expired));
    }
    let (token, claims) = crate::sessions::mint(
        &state,
        t.sub,
        t.ctr,
        t.new_gen,
        t.cli,
        t.auth_time,
        now,
        exp,
    )?;
    crate::revocations::record_minted(&state, &token, &claims).await?;
    tracing::info!(sub = %claims.sub, ctr = %claims.ctr, from = %src, "rebound a transferred session");
    Ok(crate::sessions::session_answer(&state, token, &claims, now))
}

/// The JWKS of peer cells, used for transfer tickets only. Fetched from
/// `{peer endpoint}/.well-known/jwks.json` over TLS (the configured CA), cached, refreshed on an
/// unknown kid at most once per [`PEER_JWKS_COOLDOWN_S`] per peer.
#[derive(Debug, Default)]
pub struct PeerKeys {
    peers: Mutex<HashMap<CellId, Peer>>,
}

#[derive(Debug, Clone)]
struct Peer {
    endpoint: String,
    keys: Option<KeySet>,
    last_fetch: Option<Instant>,
}

impl PeerKeys {
    /// Puts a peer's key set in the cache (tests, and operators pre-seeding).
    pub fn insert(&self, cell: CellId, endpoint: String, keys: KeySet) {
        self.lock().insert(
            cell,
            Peer {
                endpoint,
                keys: Some(keys),
                last_fetch: Some(Instant::now()),
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CellId, Peer>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The peer's keys, fetched when none are held for this endpoint or `kid` is unknown and
    /// the cooldown has passed.
    async fn keys_for(
        &self,
        state: &AppState,
        cell: &CellId,
        endpoint: &str,
        kid: &protocol::Kid,
    ) -> Result<KeySet> {
        let held = self.lock().get(cell).cloned();
        let (fetch, fallback) = match held {
            Some(p) if p.endpoint == endpoint => {
                let known = p.keys.as_ref().is_some_and(|k| k.contains(kid.as_str()));
                let cooling = p
                    .last_fetch
                    .is_some_and(|t| t.elapsed() < Duration::from_secs(PEER_JWKS_COOLDOWN_S));
                (!known && !cooling, p.keys)
            }
            _ => (true, None),
        };
        if !fetch {
            return fallback.ok_or_else(|| {
                refuse(
                    TicketRefusal::UnknownSource,
                    format!("no keys of {cell} yet"),
                )
            });
        }
        let fetched = fetch_jwks(state, endpoint).await;
        let mut peers = self.lock();
        let entry = peers.entry(cell.clone()).or_insert(Peer {
            endpoint: endpoint.to_owned(),
            keys: None,
            last_fetch: None,
        });
        if entry.endpoint != endpoint {
            entry.endpoint = endpoint.to_owned();
            entry.keys = None;
        }
        entry.last_fetch = Some(Instant::now());
        match fetched {
            Ok(keys) => {
                entry.keys = Some(keys.clone());
                Ok(keys)
            }
            Err(e) => {
                tracing::warn!(peer = %cell, error = %e, "peer JWKS fetch failed; keeping the held keys");
                entry.keys.clone().ok_or_else(|| {
                    refuse(
                        TicketRefusal::UnknownSource,
                        format!("keys of {cell} unavailable"),
                    )
                })
            }
        }
    }
}

async fn fetch_jwks(state: &AppState, endpoint: &str) -> Result<KeySet> {
    let client = state
        .http
        .as_ref()
        .ok_or(Error::NotReady("no TLS client for peer cells (ca_cert)"))?;
    let url = format!("{}/.well-known/jwks.json", endpoint.trim_end_matches('/'));
    let mut resp = client
        .get(&url)
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
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Error::Internal(format!("peer JWKS body: {e}")))?
    {
        if body.len() + chunk.len() > MAX_PEER_JWKS_BYTES {
            return Err(Error::Internal("peer JWKS is too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    KeySet::from_json(&body).map_err(|e| Error::Internal(format!("peer JWKS refused: {e}")))
}
