//! `POST /v1/sessions/transfer` and `POST /v1/sessions/transfer/status` (at the source) and
//! `POST /v1/sessions/rebind` (at the target): HTTP in and out of `transfer`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use protocol::api::{RebindRequest, TRANSFER_STATUS_PATH, TransferStatusRequest};

use crate::binding::DeviceProof;
use crate::error::Result;
use crate::routes::extract::{JsonBody, Session};
use crate::routes::sessions::session_answer;
use crate::state::AppState;
use crate::transfer;

/// `POST /v1/sessions/transfer` → 200 `TransferResponse`.
#[utoipa::path(
    post,
    path = "/v1/sessions/transfer",
    tag = "sessions",
    security(("bearerSession" = []), ("sessionCookie" = [])),
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449) by the \
        device key the session is bound to (`cnf.jkt`), with `ath` the session's hash: \
        required when the session is bound (it may then come as `Authorization: DPoP`).")),
    responses(
        (status = 200, description = "The one-use ticket for the contractor's new cell.",
            body = protocol::api::TransferResponse),
        (status = 401, description = "`SESSION_MISSING`, `SESSION_INVALID`, `SESSION_EXPIRED`, \
            `SESSION_REVOKED`: no usable session (`SESSION_INVALID` also for an unbound \
            session where the cell requires device-bound ones). `DPOP_PROOF_MISSING`, \
            `DPOP_KEY_MISMATCH`, `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, \
            `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`: the session is bound to a device key \
            and the request's `DPoP` proof by that key is missing or refused \
            (`WWW-Authenticate: DPoP` says why; retry with a new proof and the answer's \
            `DPoP-Nonce`)."),
        (status = 403, description = "`FORBIDDEN`: the session cookie without the CSRF proof, \
            or a cookie session (transfer is for field clients)."),
        (status = 409, description = "`WRONG_CELL`: no move to transfer to; \
            `HANDOFF_IN_PROGRESS`: the move is not finished."),
        (status = 404, description = "`UNKNOWN_CONTRACTOR`: the contractor is placed nowhere.")
    )
)]
pub(crate) async fn transfer(State(state): State<AppState>, session: Session) -> Result<Response> {
    let answer = transfer::transfer(&state, session.verified.claims, session.source).await?;
    Ok(Json(answer).into_response())
}

/// `POST /v1/sessions/rebind` `{ticket}` → 201 as sign-in.
#[utoipa::path(
    post,
    path = "/v1/sessions/rebind",
    tag = "sessions",
    request_body = protocol::api::RebindRequest,
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449), no \
        `ath`: required by the key the ticket's session was bound to (the ticket's `jkt`), \
        and the new session is bound to it; for a ticket of an unbound session, as at \
        sign-in.")),
    responses(
        (status = 201, description = "A session of this cell (bound to the same device key \
            as the transferred one).", body = protocol::api::SignInResponse),
        (status = 400, description = "`INVALID_REQUEST`: the body is not a rebind request."),
        (status = 401, description = "`SESSION_REVOKED`: the session the ticket carries was \
            revoked, here or at its source cell (a sign-out there included), or its user is \
            disabled: sign in again. `DPOP_PROOF_MISSING`, `DPOP_KEY_MISMATCH`, \
            `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, `DPOP_NONCE_REQUIRED`, \
            `DPOP_NONCE_STALE`: the ticket's session was bound to a device key and the \
            request's `DPoP` proof by that key is missing or refused; the ticket is not used: \
            retry with a new proof and the answer's `DPoP-Nonce`."),
        (status = 403, description = "`FORBIDDEN`: the ticket is not valid here (expired, \
            replayed, for another cell or generation), or its source cell does not vouch \
            for it."),
        (status = 409, description = "`WRONG_CELL`: the contractor is not placed here; \
            `HANDOFF_IN_PROGRESS`: it is still moving."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the limit."),
        (status = 503, description = "`NOT_READY`: the ticket's source cell could not be asked \
            whether the session was revoked there; nothing was used: retry with the same \
            ticket (`Retry-After`).")
    )
)]
pub(crate) async fn rebind(
    State(state): State<AppState>,
    proof: DeviceProof,
    JsonBody(req): JsonBody<RebindRequest>,
) -> Result<Response> {
    let minted = transfer::rebind(&state, req.ticket.as_str(), &proof).await?;
    Ok(session_answer(&state, minted))
}

/// `POST /v1/sessions/transfer/status` `{ticket}` → 200 `TransferStatusResponse`.
#[utoipa::path(
    post,
    path = TRANSFER_STATUS_PATH,
    tag = "sessions",
    request_body = protocol::api::RebindRequest,
    responses(
        (status = 200, description = "This cell signed the ticket and it is valid; `session` \
            says whether the session it carries is still in force here (`active`) or was \
            revoked here, by its sign-out or otherwise (`revoked`). Asked by the ticket's \
            target cell before it rebinds.",
            body = protocol::api::TransferStatusResponse),
        (status = 400, description = "`INVALID_REQUEST`: the body is not `{ticket}`."),
        (status = 403, description = "`FORBIDDEN`: not a valid ticket of this cell \
            (`invalid_ticket`)."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the limit.")
    )
)]
pub(crate) async fn transfer_status(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<TransferStatusRequest>,
) -> Result<Response> {
    let answer = transfer::status(&state, req.ticket.as_str()).await?;
    Ok(Json(answer).into_response())
}
