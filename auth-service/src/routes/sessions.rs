//! `POST /v1/sessions`, `GET|DELETE /v1/sessions/current`, `POST /v1/sessions/renew`: HTTP in
//! and out of `sessions` (bodies, the session cookie, status codes, the sign-in metric).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use protocol::ClientKind;
use protocol::api::{CookieSessionResponse, IssuedSession, SignInRequest, SignInResponse};
use protocol::http::{Source, clear_session_cookie, session_cookie};
use protocol::token::SessionClaims;

use crate::binding::DeviceProof;
use crate::error::{Error, Result};
use crate::routes::extract::{Caller, JsonBody, Session};
use crate::sessions::{self, Minted};
use crate::state::AppState;

/// The schema of a renewal's answer: [`SignInResponse`] (bearer) or [`CookieSessionResponse`]
/// (cookie: the same without `session`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct RenewAnswer {
    /// The new session token: present when the session came as a bearer token, absent when it
    /// came in the cookie (the new one is only in `Set-Cookie`).
    session: Option<protocol::SessionToken>,
    #[serde(flatten)]
    issued: IssuedSession,
}

fn outcome<T>(r: &Result<T>) -> &'static str {
    match r {
        Ok(_) => "success",
        Err(Error::InvalidCredentials) => "invalid_credentials",
        Err(Error::RateLimited { .. }) => "rate_limited",
        Err(Error::WrongCell { .. }) => "wrong_cell",
        Err(Error::UnknownContractor) => "unknown_contractor",
        Err(Error::HandoffInProgress { .. }) => "handoff_in_progress",
        Err(Error::BadRequest(_) | Error::PayloadTooLarge) => "bad_request",
        Err(Error::Dpop { .. }) => "dpop_refused",
        Err(_) => "error",
    }
}

/// `POST /v1/sessions`.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    request_body = protocol::api::SignInRequest,
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449) of the \
        device key to bind the session to (`cnf.jkt`): `htm` `POST`, `htu` the cell's endpoint \
        and this path, no `ath`, the `nonce` of an earlier `DPoP-Nonce`. Required when the \
        cell binds this client kind's sessions, ignored when it binds none.")),
    responses(
        (status = 201, description = "Signed in (bound to the proof's key when a proof was \
            accepted). A desk sign-in also sets the session cookie.",
            body = protocol::api::SignInResponse),
        (status = 400, description = "`INVALID_REQUEST`: the body is not a sign-in request."),
        (status = 401, description = "`INVALID_CREDENTIALS`: unknown login or wrong password. \
            `DPOP_PROOF_MISSING`: this cell binds this client kind's sessions and the request \
            carries no `DPoP` proof; `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, \
            `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`: the proof was refused (`WWW-Authenticate: \
            DPoP` says why; retry with a new proof and the answer's `DPoP-Nonce`)."),
        (status = 404, description = "`UNKNOWN_CONTRACTOR`: the contractor is placed nowhere."),
        (status = 409, description = "`WRONG_CELL`: another cell serves the contractor \
            (`owner_cell`, `owner_endpoint`); `HANDOFF_IN_PROGRESS`: it is moving."),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`: the body is over the limit."),
        (status = 429, description = "`RATE_LIMITED`: too many sign-in attempts for this login \
            or address (failed attempts are throttled), or too many `DPoP` proofs this nonce \
            period; `retry_after_s` says when to retry."),
        (status = 503, description = "`NOT_READY`: the cell cannot sign in yet.")
    )
)]
pub(crate) async fn sign_in(
    State(state): State<AppState>,
    caller: Caller,
    proof: DeviceProof,
    body: Result<JsonBody<SignInRequest>, Error>,
) -> Result<Response> {
    let result = match body {
        Ok(JsonBody(req)) => sessions::sign_in(&state, caller.ip, req, &proof).await,
        Err(e) => Err(e),
    };
    state.metrics.signin(outcome(&result));
    Ok(session_answer(&state, result?))
}

/// The `201` of a sign-in, a bearer renewal and a rebind: a [`SignInResponse`] (with the
/// device token when one was issued), and for a desk session the session cookie too.
pub(crate) fn session_answer(state: &AppState, minted: Minted) -> Response {
    let Minted {
        token,
        claims,
        now,
        device,
    } = minted;
    let cookie = (claims.cli == ClientKind::Desk)
        .then(|| session_cookie(token.expose(), claims.exp.saturating_sub(now)))
        .flatten();
    let body = SignInResponse {
        issued: issued(state, &claims),
        session: token,
        device_token: device,
    };
    created(body, cookie)
}

/// What the `201` of every minted session says about it, the token aside.
fn issued(state: &AppState, claims: &SessionClaims) -> IssuedSession {
    IssuedSession {
        session_id: claims.jti.clone(),
        cell_id: state.config.cell_id.clone(),
        endpoint: state.config.issuer.to_string(),
        generation: claims.generation,
        expires_at: claims.exp,
        subject: claims.sub.clone(),
    }
}

/// A `201` that is never cached, with the session cookie when there is one.
fn created(body: impl serde::Serialize, cookie: Option<HeaderValue>) -> Response {
    let mut resp = (StatusCode::CREATED, axum::Json(body)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(c) = cookie {
        h.insert(header::SET_COOKIE, c);
    }
    resp
}

/// The `201` of a cookie renewal: `Set-Cookie` with the new session, a body without it.
fn cookie_session_answer(state: &AppState, minted: Minted) -> Result<Response> {
    let Minted {
        token, claims, now, ..
    } = minted;
    let cookie = session_cookie(token.expose(), claims.exp.saturating_sub(now))
        .ok_or_else(|| Error::Internal("the renewed session does not fit in a cookie".into()))?;
    let body: CookieSessionResponse = issued(state, &claims);
    Ok(created(body, Some(cookie)))
}

/// `GET /v1/sessions/current`: the validated session's claims.
#[utoipa::path(
    get,
    path = "/v1/sessions/current",
    tag = "sessions",
    security(("bearerSession" = []), ("sessionCookie" = [])),
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449) by the \
        device key the session is bound to (`cnf.jkt`), with `ath` the session's hash: \
        required when the session is bound (it may then come as `Authorization: DPoP`).")),
    responses(
        (status = 200, description = "The session's verified claims.",
            body = protocol::token::SessionClaims),
        (status = 401, description = "`SESSION_MISSING`, `SESSION_INVALID`, `SESSION_EXPIRED`, \
            `SESSION_REVOKED`: no usable session (`SESSION_INVALID` also for an unbound \
            session where the cell requires device-bound ones). `DPOP_PROOF_MISSING`, \
            `DPOP_KEY_MISMATCH`, `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, \
            `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`: the session is bound to a device key \
            and the request's `DPoP` proof by that key is missing or refused \
            (`WWW-Authenticate: DPoP` says why; retry with a new proof and the answer's \
            `DPoP-Nonce`).")
    )
)]
pub(crate) async fn current(session: Session) -> Result<Response> {
    Ok(axum::Json(session.verified.claims).into_response())
}

/// `DELETE /v1/sessions/current`: revokes this session (204) and clears the cookie.
#[utoipa::path(
    delete,
    path = "/v1/sessions/current",
    tag = "sessions",
    security(("bearerSession" = []), ("sessionCookie" = [])),
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449) by the \
        device key the session is bound to (`cnf.jkt`), with `ath` the session's hash: \
        required when the session is bound (it may then come as `Authorization: DPoP`).")),
    responses(
        (status = 204, description = "Signed out: the session is revoked, the cookie cleared."),
        (status = 401, description = "`SESSION_MISSING`, `SESSION_INVALID`, `SESSION_EXPIRED`, \
            `SESSION_REVOKED`: no usable session (`SESSION_INVALID` also for an unbound \
            session where the cell requires device-bound ones). `DPOP_PROOF_MISSING`, \
            `DPOP_KEY_MISMATCH`, `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, \
            `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`: the session is bound to a device key \
            and the request's `DPoP` proof by that key is missing or refused \
            (`WWW-Authenticate: DPoP` says why; retry with a new proof and the answer's \
            `DPoP-Nonce`)."),
        (status = 403, description = "`FORBIDDEN`: the session cookie without the CSRF proof.")
    )
)]
pub(crate) async fn sign_out(State(state): State<AppState>, session: Session) -> Result<Response> {
    sessions::sign_out(&state, &session.verified.claims).await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, clear_session_cookie());
    Ok(resp)
}

/// `POST /v1/sessions/renew`: a fresh session (see `sessions::renew`). Renewed with the
/// session cookie, the new session travels only in `Set-Cookie` and the body is a
/// [`CookieSessionResponse`] (no token a script could read, ATTACKS A24); renewed with a
/// bearer, the answer is as a sign-in's.
#[utoipa::path(
    post,
    path = "/v1/sessions/renew",
    tag = "sessions",
    security(("bearerSession" = []), ("sessionCookie" = [])),
    params(("DPoP" = Option<String>, Header, description = "A `DPoP` proof (RFC 9449) by the \
        device key the session is bound to (`cnf.jkt`), with `ath` the session's hash: \
        required when the session is bound (it may then come as `Authorization: DPoP`).")),
    responses(
        (status = 201, description = "A new session. With the bearer token: the token in the \
            body; with the cookie: the cookie set, the body without `session`.",
            body = inline(RenewAnswer)),
        (status = 401, description = "`SESSION_MISSING`, `SESSION_INVALID`, `SESSION_EXPIRED`, \
            `SESSION_REVOKED`: no usable session (`SESSION_INVALID` also for an unbound \
            session where the cell requires device-bound ones). `DPOP_PROOF_MISSING`, \
            `DPOP_KEY_MISMATCH`, `DPOP_PROOF_INVALID`, `DPOP_PROOF_REPLAYED`, \
            `DPOP_NONCE_REQUIRED`, `DPOP_NONCE_STALE`: the session is bound to a device key \
            and the request's `DPoP` proof by that key is missing or refused \
            (`WWW-Authenticate: DPoP` says why; retry with a new proof and the answer's \
            `DPoP-Nonce`)."),
        (status = 403, description = "`FORBIDDEN`: the session cookie without the CSRF proof."),
        (status = 409, description = "`WRONG_CELL`: the contractor has moved; \
            `HANDOFF_IN_PROGRESS`: it is moving."),
        (status = 404, description = "`UNKNOWN_CONTRACTOR`: the contractor is placed nowhere."),
        (status = 503, description = "`NOT_READY`: the cell cannot mint yet.")
    )
)]
pub(crate) async fn renew(State(state): State<AppState>, session: Session) -> Result<Response> {
    let minted = sessions::renew(&state, session.verified.claims).await?;
    match session.source {
        Source::Bearer => Ok(session_answer(&state, minted)),
        Source::Cookie => cookie_session_answer(&state, minted),
    }
}
