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
//!                                                                    not revoked here?
//!                                                                    record == active(g')?
//!                                    ◀── POST /v1/sessions/transfer/status {ticket} ──
//!                                    its own valid ticket? session
//!                                    revoked here (sign-out…)?
//!                                    ── 200 {session: active|revoked} ──▶ revoked: 401
//!                                                                    SESSION_REVOKED; no answer:
//!                                                                    503 NOT_READY (retry)
//!                                                                    burn ticket jti and sid
//!                                                                      (one transaction)
//!                                                                    mint session at g',
//!                                                                    exp = min(now+life, sexp)
//!  ◀── 201 as sign-in ─────────────────────────────────────────────
//! ```
//!
//! The source is asked at every rebind (ATTACKS A38), through its public endpoint (the edge
//! forwards `transfer/status` like the other session routes), so a sign-out at the source —
//! or any revocation recorded there — after the ticket was issued still stops the rebind,
//! although only an operator's `cellctl revoke` fans a revocation out to other cells. A
//! source that does not answer stops the rebind too, with a retryable `503 NOT_READY` and
//! nothing burned: a correctness check that cannot be made is an availability error, never a
//! silent pass. What remains is the round trip itself: a sign-out the source records after
//! it answered `active` cannot reach the session just minted at the target.
//!
//! A session id is transferred at most once (ATTACKS A28): the source issues one ticket per
//! session (a repeated transfer, e.g. after an answer lost on a phone network, gets the same
//! claims, so the same ticket, until it expires), and the target burns the session id with
//! the ticket, so a second ticket for the same session is refused as `replayed`.
//!
//! Every refusal is `403 FORBIDDEN` with a message that starts with the `TicketRefusal`
//! name, so a client knows to fall back to sign-in; a ticket is never accepted as a session
//! (its `typ` differs) and a session never as a ticket.

use base64::Engine as _;
use protocol::admin::cell::UserStatus;
use protocol::api::{TransferResponse, TransferStatusResponse, TransferredSession};
use protocol::http::Source;
use protocol::ownership::OwnershipRecord;
use protocol::token::{
    Expectations, LEEWAY_S, SessionClaims, TICKET_MAX_LIFETIME_S, TICKET_TYP, TicketClaims,
};
use protocol::{CellId, ClientKind, Endpoint, SessionId};
use serde::Deserialize;

use crate::binding::{DeviceProof, bind};
use crate::error::{Error, Result, TicketRefusal};
use crate::keys::kek::random;
use crate::revocations::ticket_revoked;
use crate::sessions::{Grant, Minted, mint};
use crate::state::AppState;
use crate::store::Store as _;
use crate::store::records::{TicketBurn, TransferRecord};

/// Lifetime of a transfer ticket, in seconds (at most [`TICKET_MAX_LIFETIME_S`]).
pub(crate) const TICKET_LIFETIME_S: u64 = 120;
/// Largest ticket accepted, in bytes.
pub(crate) const MAX_TICKET_BYTES: usize = 4 * 1024;

/// At the source: a ticket for the successor, only when this cell released the contractor at
/// exactly the session's generation, and only one ticket per session.
pub(crate) async fn transfer(
    state: &AppState,
    c: SessionClaims,
    source: Source,
) -> Result<TransferResponse> {
    if source == Source::Cookie {
        return Err(TicketRefusal::CookieSession
            .with("a browser session is not transferred; sign in at the new cell"));
    }
    let (successor, successor_gen) = match state.read().ownership.get(&c.ctr) {
        Some(OwnershipRecord::Released {
            generation,
            successor,
            successor_gen,
        }) if *generation == c.generation => (successor.clone(), *successor_gen),
        _ => {
            return Err(TicketRefusal::NotReleased.with(format!(
                "this cell did not release {} at generation {}",
                c.ctr, c.generation
            )));
        }
    };
    let endpoint = state
        .map_endpoint_of(&successor)
        .ok_or(Error::NotReady("the successor is not in the placement map"))?;
    let signer = state
        .current_signer()
        .ok_or(Error::NotReady("no signing key"))?;
    let now = state.now();
    let proposed = TransferRecord {
        ticket_jti: SessionId::from_random(*random::<16>(&state.rng)?),
        iat: now,
        exp: now.saturating_add(TICKET_LIFETIME_S.min(TICKET_MAX_LIFETIME_S)),
    };
    let held = state
        .store
        .record_transfer(&c.jti, c.exp, &proposed, now)
        .await?;
    if now >= held.exp {
        return Err(TicketRefusal::AlreadyTransferred.with(
            "this session was transferred already and its ticket has expired; sign in again",
        ));
    }
    let claims = TicketClaims {
        iss: state.config.issuer.to_string(),
        aud: successor.clone(),
        src: state.config.cell_id.clone(),
        sub: c.sub,
        ctr: c.ctr,
        generation: c.generation,
        new_gen: successor_gen,
        sid: c.jti,
        sexp: c.exp,
        auth_time: c.auth_time,
        cli: c.cli,
        iat: held.iat,
        nbf: held.iat,
        exp: held.exp,
        jti: held.ticket_jti,
        // The device key travels with the session: the target rebinds only with its proof.
        jkt: c.cnf.map(|cnf| cnf.jkt),
    };
    let ticket = signer
        .mint(&claims)
        .map_err(|e| Error::Internal(e.to_string()))?;
    tracing::info!(sub = %claims.sub, ctr = %claims.ctr, target = %successor, "issued a transfer ticket");
    Ok(TransferResponse {
        ticket,
        target_cell: successor,
        target_endpoint: endpoint,
    })
}

/// The `src` and `aud` of a ticket read before verification, only to choose whose keys
/// verify it (at the target) and which audience to expect (at the source).
#[derive(Deserialize)]
struct TicketRoute {
    src: CellId,
    aud: CellId,
}

fn peek_route(ticket: &str) -> Option<TicketRoute> {
    let payload = ticket.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<TicketRoute>(&bytes).ok()
}

/// At the source, asked by a ticket's target before it rebinds: whether `ticket` is a valid
/// ticket this cell signed, and whether the session it carries is still in force here. Every
/// revocation kind counts (the session's own, its subject's, contractor's or cell's, and a
/// revoked key that signed the session); a ticket that is not this cell's valid ticket is
/// refused as `invalid_ticket` (its key revoked since included).
pub(crate) async fn status(state: &AppState, ticket: &str) -> Result<TransferStatusResponse> {
    let invalid = |e: protocol::token::TokenError| TicketRefusal::InvalidTicket.with(e.to_string());
    let route = peek_route(ticket)
        .ok_or_else(|| TicketRefusal::InvalidTicket.with("the ticket names no cells"))?;
    if route.src != state.config.cell_id {
        return Err(TicketRefusal::InvalidTicket.with("not a ticket of this cell"));
    }
    let expect = Expectations {
        issuer: state.config.issuer.as_str(),
        audience: &route.aud,
        max_lifetime_s: TICKET_MAX_LIFETIME_S,
        leeway_s: LEEWAY_S,
    };
    let now = state.now();
    let verified = {
        let inner = state.read();
        protocol::token::verify::<TicketClaims>(
            ticket,
            inner.ring.key_set(),
            &expect,
            now,
            MAX_TICKET_BYTES,
        )
    };
    let t = verified.map_err(invalid)?.claims;
    // Another replica may have recorded the sign-out: read the store's latest first.
    state.catch_up().await?;
    let recorded = state.store.session(&t.sid).await?;
    let revoked = {
        let inner = state.read();
        ticket_revoked(&inner, &t)
            || recorded.is_some_and(|m| {
                let claims = m.claims(state.config.issuer.as_str(), &state.config.cell_id);
                inner.revoked.is_revoked(&claims, &m.kid)
            })
    };
    let session = if revoked {
        TransferredSession::Revoked
    } else {
        TransferredSession::Active
    };
    tracing::info!(ctr = %t.ctr, target = %t.aud, ?session, "answered a transfer status");
    Ok(TransferStatusResponse { session })
}

/// At the target: a session at the new generation for a valid, unused ticket whose session
/// is not revoked here, for a user still active here. A ticket of a bound session (`jkt`)
/// rebinds only with a proof by that key, and the new session is bound to it; an unbound one
/// is bound as a sign-in of its kind would be (`binding::bind`). The proof is checked before
/// anything is asked or burned: a refused proof leaves the ticket usable.
pub(crate) async fn rebind(state: &AppState, ticket: &str, proof: &DeviceProof) -> Result<Minted> {
    let invalid = |e: protocol::token::TokenError| TicketRefusal::InvalidTicket.with(e.to_string());
    let parsed = protocol::token::parse(ticket, TICKET_TYP, MAX_TICKET_BYTES).map_err(invalid)?;
    let src = peek_route(ticket)
        .map(|r| r.src)
        .ok_or_else(|| TicketRefusal::InvalidTicket.with("the ticket names no source cell"))?;
    if src == state.config.cell_id {
        return Err(TicketRefusal::InvalidTicket.with("a ticket is never for its own source"));
    }
    let endpoint = state
        .map_endpoint_of(&src)
        .and_then(|e| Endpoint::parse(&e).ok())
        .ok_or_else(|| TicketRefusal::UnknownSource.with(format!("{src} is not in the map")))?;
    let keys = state
        .peers
        .keys_for(state.http.as_ref(), &src, &endpoint, &parsed.kid)
        .await?;
    let key = keys
        .get(parsed.kid.as_str())
        .cloned()
        .ok_or_else(|| TicketRefusal::InvalidTicket.with("unknown signing key"))?;
    let expect = Expectations {
        issuer: endpoint.as_str(),
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
        return Err(TicketRefusal::InvalidTicket.with("source mismatch"));
    }
    let cnf = bind(state, proof, t.cli, t.jkt.as_ref(), None)?;
    if ticket_revoked(&state.read(), &t) {
        return Err(Error::SessionRevoked);
    }
    match state.read().ownership.get(&t.ctr) {
        Some(OwnershipRecord::Active { generation }) if *generation == t.new_gen => {}
        _ => {
            return Err(TicketRefusal::WrongGeneration.with(format!(
                "this cell is not active for {} at {}",
                t.ctr, t.new_gen
            )));
        }
    }
    let user = state.store.user_by_subject(&t.sub).await?;
    let Some(user) = user.filter(|u| u.status == UserStatus::Active && u.contractor_id == t.ctr)
    else {
        return Err(Error::SessionRevoked);
    };
    // Last before the burn, so a source that cannot answer costs the client nothing but a
    // retry with the same ticket.
    match state
        .peers
        .transfer_status(state.http.as_ref(), &src, &endpoint, ticket)
        .await?
    {
        TransferredSession::Active => {}
        TransferredSession::Revoked => {
            tracing::warn!(sub = %t.sub, ctr = %t.ctr, from = %src, "refused a rebind: the session was revoked at its source");
            return Err(Error::SessionRevoked);
        }
    }
    let burn = TicketBurn {
        jti: t.jti.clone(),
        exp: t.exp,
        sid: t.sid.clone(),
        sexp: t.sexp,
    };
    let fresh = state.store.burn_ticket(&burn, now).await?;
    if !fresh {
        return Err(TicketRefusal::Replayed
            .with("this ticket or this session was already transferred here"));
    }
    let exp = now
        .saturating_add(state.config.session_lifetime_s)
        .min(t.sexp);
    let mut minted = mint(
        state,
        Grant {
            sub: t.sub,
            ctr: t.ctr,
            generation: t.new_gen,
            cli: t.cli,
            auth_time: t.auth_time,
            cnf,
        },
        now,
        exp,
    )
    .await?;
    // The device's token of this cell, in the lineage of the sign-in the session came from
    // (the source's token is not valid here: each cell keys its own).
    if minted.claims.cli == ClientKind::Field {
        minted.device = state.throttle.device_token(
            &minted.claims.ctr,
            &user.login,
            minted.claims.auth_time,
            now,
        );
    }
    tracing::info!(sub = %minted.claims.sub, ctr = %minted.claims.ctr, from = %src, "rebound a transferred session");
    Ok(minted)
}
