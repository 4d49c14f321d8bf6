//! `POST /v1/sessions`, `GET|DELETE /v1/sessions/current`, `POST /v1/sessions/renew`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use protocol::api::{CookieSessionResponse, SignInRequest, SignInResponse};
use protocol::http::{Source, clear_session_cookie, session_cookie};
use protocol::ownership::{Access, Decision, OwnershipRecord, decide};
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::token::{
    DEFAULT_ABSOLUTE_LIFETIME_S, Expectations, LEEWAY_S, SessionClaims, Verified,
};
use protocol::{CellId, ClientKind, ContractorId, Generation, SessionId, SessionToken, SubjectId};

use crate::error::{Error, Result};
use crate::http::{Caller, JsonBody};
use crate::keys::random;
use crate::state::{AppState, blocking};
use crate::store::UserStatus;

/// `Retry-After` for a sign-in during a handoff, in seconds.
pub const HANDOFF_RETRY_AFTER_S: u64 = 1;

fn outcome(r: &Result<Response>) -> &'static str {
    match r {
        Ok(_) => "success",
        Err(Error::InvalidCredentials) => "invalid_credentials",
        Err(Error::RateLimited { .. }) => "rate_limited",
        Err(Error::WrongCell { .. }) => "wrong_cell",
        Err(Error::UnknownContractor) => "unknown_contractor",
        Err(Error::HandoffInProgress { .. }) => "handoff_in_progress",
        Err(Error::BadRequest(_) | Error::PayloadTooLarge) => "bad_request",
        Err(_) => "error",
    }
}

/// `POST /v1/sessions`.
pub async fn sign_in(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<SignInRequest>, Error>,
) -> Result<Response> {
    let result = sign_in_inner(&state, caller, body).await;
    state.metrics.signin(outcome(&result));
    result
}

async fn sign_in_inner(
    state: &AppState,
    caller: Caller,
    body: Result<JsonBody<SignInRequest>, Error>,
) -> Result<Response> {
    let JsonBody(req) = body?;
    state.throttle.check_ip(caller.ip)?;
    let generation = owned_generation(state, &req.contractor_id)?;
    state
        .throttle
        .check_account(&req.contractor_id, &req.login, caller.ip)?;

    let store = state.store.clone();
    let (ctr, login) = (req.contractor_id.clone(), req.login.clone());
    let user = blocking(move || store.user(&ctr, &login)).await?;
    let _permit = state
        .hashing
        .acquire()
        .await
        .map_err(|_| Error::Internal("hashing pool closed".into()))?;
    let (phc, usable) = match &user {
        Some(u) => (u.password_hash.clone(), u.status == UserStatus::Active),
        None => (state.dummy_hash.clone(), false),
    };
    let password = req.password.clone();
    let verified = blocking(move || Ok(crate::passwords::verify(&phc, &password))).await?;
    state.metrics.password_checked();
    let user = match user {
        Some(u) if verified && usable => u,
        _ => return Err(Error::InvalidCredentials),
    };
    let now = state.now();
    let exp = now.saturating_add(state.config.session_lifetime_s);
    let (token, claims) = mint(
        state,
        user.subject,
        req.contractor_id,
        generation,
        req.client,
        now,
        now,
        exp,
    )?;
    crate::revocations::record_minted(state, &token, &claims).await?;
    tracing::info!(sub = %claims.sub, ctr = %claims.ctr, jti = %claims.jti, "signed in");
    Ok(session_answer(state, token, &claims, now))
}

/// The ownership part of the sign-in order: the generation to mint at, or why not.
fn owned_generation(state: &AppState, ctr: &ContractorId) -> Result<Generation> {
    let inner = state.read();
    let endpoint_of = |cell: &CellId| {
        inner
            .map
            .as_ref()
            .and_then(|m| m.map.cell(cell))
            .map(|c| c.endpoint.clone())
    };
    match inner.ownership.get(ctr) {
        Some(OwnershipRecord::Active { r#gen }) => Ok(*r#gen),
        Some(OwnershipRecord::Handoff { .. }) => Err(Error::HandoffInProgress {
            retry_after_s: HANDOFF_RETRY_AFTER_S,
        }),
        Some(OwnershipRecord::Released { successor, .. }) => Err(Error::WrongCell {
            endpoint: endpoint_of(successor),
            owner: successor.clone(),
        }),
        None => match inner.map.as_ref().and_then(|m| m.map.cell_for(ctr)) {
            Some(c) if c.id != state.config.cell_id => Err(Error::WrongCell {
                owner: c.id.clone(),
                endpoint: Some(c.endpoint.clone()),
            }),
            _ => Err(Error::UnknownContractor),
        },
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mint(
    state: &AppState,
    sub: SubjectId,
    ctr: ContractorId,
    generation: Generation,
    cli: ClientKind,
    auth_time: UnixSeconds,
    now: UnixSeconds,
    exp: UnixSeconds,
) -> Result<(SessionToken, SessionClaims)> {
    let signer = state
        .read()
        .ring
        .current()
        .map(|k| k.signer.clone())
        .ok_or(Error::NotReady("no signing key"))?;
    let jti = SessionId::from_random(*random::<16>(&state.rng)?);
    let cell = state.config.cell_id.clone();
    // Never mint a session a "before" revocation of this second already matches.
    let now = crate::revocations::issue_time(&state.read(), &sub, &ctr, now);
    let claims = SessionClaims {
        iss: state.config.issuer.clone(),
        aud: cell.clone(),
        sub,
        ctr,
        cell,
        r#gen: generation,
        iat: now,
        nbf: now,
        exp,
        auth_time,
        jti,
        cli,
    };
    let token = signer
        .mint(&claims)
        .map_err(|e| Error::Internal(e.to_string()))?;
    Ok((token, claims))
}

pub(crate) fn session_answer(
    state: &AppState,
    token: SessionToken,
    claims: &SessionClaims,
    now: UnixSeconds,
) -> Response {
    let cookie = (claims.cli == ClientKind::Desk)
        .then(|| session_cookie(token.expose(), claims.exp.saturating_sub(now)))
        .flatten();
    let body = SignInResponse {
        session: token,
        session_id: claims.jti.clone(),
        cell_id: state.config.cell_id.clone(),
        endpoint: state.config.issuer.clone(),
        generation: claims.r#gen,
        expires_at: claims.exp,
        subject: claims.sub.clone(),
    };
    created(body, cookie)
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

/// Verifies one presented token from one source against this cell's keys and revocations:
/// parsed under the source's size cap, its key not revoked, signature and claims valid, the
/// session itself not revoked.
fn verify_token(state: &AppState, token: &str, source: Source) -> Result<Verified<SessionClaims>> {
    let max = source.cap();
    let inner = state.read();
    let expect = Expectations {
        issuer: &state.config.issuer,
        audience: &state.config.cell_id,
        max_lifetime_s: state.config.session_lifetime_s,
        leeway_s: LEEWAY_S,
    };
    let parsed = protocol::token::parse(token, protocol::token::SESSION_TYP, max)?;
    if inner.revoked.is_key_revoked(&parsed.kid) {
        return Err(Error::SessionRevoked);
    }
    let verified = protocol::token::verify::<SessionClaims>(
        token,
        inner.ring.key_set(),
        &expect,
        state.now(),
        max,
    )?;
    if inner.revoked.is_revoked(&verified.claims, &verified.kid) {
        return Err(Error::SessionRevoked);
    }
    Ok(verified)
}

/// The request's session under the one credential rule (`protocol::http`): a valid bearer
/// session wins; otherwise the session cookie, which counts only from an authenticated edge.
/// No credential is `SESSION_MISSING`; an unreadable one `SESSION_INVALID`.
pub fn verify_presented(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Verified<SessionClaims>, Source)> {
    crate::http::presented(headers, &state.edge_token)
        .resolve(Error::SessionMissing, |token, source| {
            verify_token(state, token, source)
        })
}

/// `GET /v1/sessions/current`: the validated session's claims.
pub async fn current(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let (v, _) = verify_presented(&state, &headers)?;
    Ok(axum::Json(v.claims).into_response())
}

/// `DELETE /v1/sessions/current`: revokes this session (204) and clears the cookie.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let (v, _) = verify_presented(&state, &headers)?;
    let now = state.now();
    let (jti, exp) = (v.claims.jti.clone(), v.claims.exp);
    state
        .commit_with(|_, batch| {
            batch.revocation(
                RevocationKind::Session { jti, exp },
                now,
                "self".into(),
                "sign-out".into(),
            );
            Ok(())
        })
        .await?;
    tracing::info!(jti = %v.claims.jti, "signed out");
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert(header::SET_COOKIE, clear_session_cookie());
    Ok(resp)
}

/// `POST /v1/sessions/renew`: a fresh session, `auth_time` kept, capped at
/// `auth_time + DEFAULT_ABSOLUTE_LIFETIME_S`. Renewed with the session cookie, the new session
/// travels only in `Set-Cookie` and the body is a [`CookieSessionResponse`] (no token a script
/// could read, ATTACKS A24); renewed with a bearer, the answer is as a sign-in's.
pub async fn renew(State(state): State<AppState>, headers: HeaderMap) -> Result<Response> {
    let (v, source) = verify_presented(&state, &headers)?;
    let c = v.claims;
    {
        let inner = state.read();
        match decide(inner.ownership.get(&c.ctr), c.r#gen, Access::Write) {
            Decision::Serve => {}
            Decision::HandoffInProgress => {
                return Err(Error::HandoffInProgress {
                    retry_after_s: HANDOFF_RETRY_AFTER_S,
                });
            }
            Decision::WrongCell { owner } => {
                let endpoint = inner
                    .map
                    .as_ref()
                    .and_then(|m| m.map.cell(&owner))
                    .map(|e| e.endpoint.clone());
                return Err(Error::WrongCell { owner, endpoint });
            }
            Decision::StaleSessionHere => {
                return Err(Error::WrongCell {
                    owner: state.config.cell_id.clone(),
                    endpoint: Some(state.config.issuer.clone()),
                });
            }
            Decision::NoRecord | Decision::ViewBehind => return Err(Error::UnknownContractor),
        }
    }
    let store = state.store.clone();
    let sub = c.sub.clone();
    let user = blocking(move || store.user_by_subject(&sub)).await?;
    if !user.is_some_and(|u| u.status == UserStatus::Active) {
        return Err(Error::SessionRevoked);
    }
    let now = state.now();
    let cap = c.auth_time.saturating_add(DEFAULT_ABSOLUTE_LIFETIME_S);
    let exp = now.saturating_add(state.config.session_lifetime_s).min(cap);
    if exp <= now {
        return Err(Error::Session(protocol::token::TokenError::Expired));
    }
    let (token, claims) = mint(&state, c.sub, c.ctr, c.r#gen, c.cli, c.auth_time, now, exp)?;
    crate::revocations::record_minted(&state, &token, &claims).await?;
    tracing::info!(sub = %claims.sub, jti = %claims.jti, "renewed a session");
    match source {
        Source::Bearer => Ok(session_answer(&state, token, &claims, now)),
        Source::Cookie => cookie_session_answer(&state, &token, &claims, now),
    }
}

/// The `201` of a cookie renewal: `Set-Cookie` with the new session, a body without it.
fn cookie_session_answer(
    state: &AppState,
    token: &SessionToken,
    claims: &SessionClaims,
    now: UnixSeconds,
) -> Result<Response> {
    let cookie = session_cookie(token.expose(), claims.exp.saturating_sub(now))
        .ok_or_else(|| Error::Internal("the renewed session does not fit in a cookie".into()))?;
    let body = CookieSessionResponse {
        session_id: claims.jti.clone(),
        cell_id: state.config.cell_id.clone(),
        endpoint: state.config.issuer.clone(),
        generation: claims.r#gen,
        expires_at: claims.exp,
        subject: claims.sub.clone(),
    };
    Ok(created(body, Some(cookie)))
}
