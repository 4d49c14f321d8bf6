//! `POST /v1/sessions/transfer` (at the source) and `POST /v1/sessions/rebind` (at the
//! target): HTTP in and out of `transfer`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use protocol::api::RebindRequest;

use crate::error::Result;
use crate::routes::extract::{JsonBody, Session};
use crate::routes::sessions::session_answer;
use crate::state::AppState;
use crate::transfer;

/// `POST /v1/sessions/transfer` → 200 `TransferResponse`.
pub(crate) async fn transfer(State(state): State<AppState>, session: Session) -> Result<Response> {
    let answer = transfer::transfer(&state, session.verified.claims, session.source).await?;
    Ok(Json(answer).into_response())
}

/// `POST /v1/sessions/rebind` `{ticket}` → 201 as sign-in.
pub(crate) async fn rebind(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<RebindRequest>,
) -> Result<Response> {
    let minted = transfer::rebind(&state, req.ticket.as_str()).await?;
    Ok(session_answer(&state, minted))
}
