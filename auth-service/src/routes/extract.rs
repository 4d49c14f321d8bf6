//! Request plumbing shared by the route handlers: the JSON body, path and query extractors
//! (typed 400/413 refusals), the authenticated edge and the client IP, the session under the
//! one credential rule of `protocol::http`, the admin token guard and the feed credential.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use protocol::dpop::DPOP_HEADER;
use protocol::http::{Presented, Source, X_CLIENT_IP, X_DPOP_JKT, X_EDGE_KEY};
use protocol::token::{SessionClaims, Verified};
use protocol::{ContractorId, Jkt, Kid, SessionId, SubjectId};
use runtime::dpop::ConnectionProofs;
use runtime::{Secret, feed_credential};
use serde::de::DeserializeOwned;

use crate::binding::{DeviceProof, check_session};
use crate::error::{Error, Result};
use crate::instances::FeedCaller;
use crate::sessions::verify_presented;
use crate::state::AppState;

/// A JSON body whose refusals are typed: 413 `PAYLOAD_TOO_LARGE` over the route's limit,
/// 400 `INVALID_REQUEST` for anything that is not the expected JSON object ([`protocol::json`]).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        protocol::json::from_object_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| Error::BadRequest(format!("body is not the expected JSON: {e}")))
    }
}

/// A raw body with the same typed refusals as [`JsonBody`].
#[derive(Debug)]
pub(crate) struct RawBody(pub(crate) Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(|r| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    Error::PayloadTooLarge
                } else {
                    Error::BadRequest("the request body could not be read".into())
                }
            })
    }
}

/// An identifier that a path segment carries, and what the refusal calls it.
pub(crate) trait PathSegment: std::str::FromStr + Send {
    const WHAT: &'static str;
}

impl PathSegment for ContractorId {
    const WHAT: &'static str = "contractor id";
}
impl PathSegment for Kid {
    const WHAT: &'static str = "kid";
}
impl PathSegment for SubjectId {
    const WHAT: &'static str = "subject";
}
impl PathSegment for SessionId {
    const WHAT: &'static str = "session id";
}
impl PathSegment for u64 {
    const WHAT: &'static str = "sequence number";
}

/// The one identifier in a route's path, parsed; 400 `INVALID_REQUEST` when it is not one.
#[derive(Debug)]
pub(crate) struct PathId<T>(pub(crate) T);

impl<S: Send + Sync, T: PathSegment> FromRequestParts<S> for PathId<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path(s) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::BadRequest(format!("the {} in the path is malformed", T::WHAT)))?;
        s.parse::<T>()
            .map(PathId)
            .map_err(|_| Error::BadRequest(format!("the {} in the path is not valid", T::WHAT)))
    }
}

/// A query string read into `T`; 400 `INVALID_REQUEST` when it does not fit.
#[derive(Debug)]
pub(crate) struct QueryOf<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryOf<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| QueryOf(q))
            .map_err(|e| Error::BadRequest(format!("query: {e}")))
    }
}

/// Whether the request comes from an authenticated edge of this cell: exactly one
/// `X-Cellbind-Edge-Key` header equal to the cell's edge token (compared in constant time).
pub(crate) fn from_edge(headers: &HeaderMap, edge_token: &Secret) -> bool {
    let mut keys = headers.get_all(X_EDGE_KEY).iter();
    match (keys.next(), keys.next()) {
        (Some(key), None) => edge_token.matches(key.as_bytes()),
        _ => false,
    }
}

/// The client's address for throttling: `X-Cellbind-Client-Ip` only from an authenticated
/// edge (exactly one header holding an address); otherwise, and when the edge sent none, the
/// socket peer. A client that reaches the auth-service directly cannot choose its bucket.
pub(crate) fn client_ip(headers: &HeaderMap, peer: Option<SocketAddr>, from_edge: bool) -> IpAddr {
    let told = || {
        let mut all = headers.get_all(X_CLIENT_IP).iter();
        match (all.next(), all.next()) {
            (Some(v), None) => v.to_str().ok()?.trim().parse::<IpAddr>().ok(),
            _ => None,
        }
    };
    from_edge
        .then(told)
        .flatten()
        .or(peer.map(|p| p.ip()))
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// Who is calling: the client's address (believed from an authenticated edge only).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller {
    /// The address the sign-in throttles count against ([`client_ip`]).
    pub(crate) ip: IpAddr,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let from_edge = from_edge(&parts.headers, &state.tokens.edge);
        Ok(Caller {
            ip: client_ip(&parts.headers, peer, from_edge),
        })
    }
}

/// The session credentials of a request under the one credential rule
/// ([`protocol::http::Presented::resolve`]). The session cookie counts only from an
/// authenticated edge, which enforces the CSRF proof on cookie requests; a cookie sent
/// straight to the auth-service is ignored.
fn presented<'a>(headers: &'a HeaderMap, edge_token: &Secret) -> Presented<'a> {
    let mut p = Presented::from_headers(headers);
    if p.cookie.is_some() && !from_edge(headers, edge_token) {
        tracing::debug!("ignored a session cookie that did not come through the edge");
        p.cookie = None;
    }
    p
}

/// The thumbprint an authenticated edge asserts in `X-Cellbind-Dpop-Jkt`: `None` without
/// the header; an unreadable one (or several) is the edge's fault, never the client's (the
/// edge strips every `x-cellbind-*` header a client sends).
fn edge_jkt(headers: &HeaderMap) -> Result<Option<Jkt>> {
    let mut all = headers.get_all(X_DPOP_JKT).iter();
    match (all.next(), all.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => v
            .to_str()
            .ok()
            .and_then(|s| Jkt::new(s).ok())
            .map(Some)
            .ok_or_else(|| {
                Error::Internal("the edge sent an unreadable X-Cellbind-Dpop-Jkt".into())
            }),
        (Some(_), Some(_)) => Err(Error::Internal(
            "the edge sent more than one X-Cellbind-Dpop-Jkt".into(),
        )),
    }
}

/// The request's proof of a device key (`binding`): the thumbprint an authenticated edge
/// asserts, or, straight to this listener, the `DPoP` header with what it must match (an
/// `X-Cellbind-Dpop-Jkt` without a valid edge key is ignored).
impl FromRequestParts<AppState> for DeviceProof {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        if from_edge(&parts.headers, &state.tokens.edge) {
            return edge_jkt(&parts.headers).map(DeviceProof::Edge);
        }
        let mut headers = HeaderMap::new();
        for v in parts.headers.get_all(DPOP_HEADER) {
            headers.append(DPOP_HEADER, v.clone());
        }
        Ok(DeviceProof::Direct {
            headers,
            method: parts.method.clone(),
            htu: protocol::dpop::htu(state.config.issuer.as_str(), parts.uri.path()),
            connection: parts.extensions.get::<Arc<ConnectionProofs>>().cloned(),
        })
    }
}

/// The request's verified session and where it came from (bearer or cookie); the refusals
/// are the typed 401s of `sessions::verify_presented`, then those of device binding
/// (`binding::check_session`): a bound session (`cnf.jkt`) without a valid proof by its key
/// (`DPOP_PROOF_MISSING`, `DPOP_KEY_MISMATCH` or the proof's own code), an unbound one of a
/// kind whose binding is `required` (`SESSION_INVALID`).
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) verified: Verified<SessionClaims>,
    pub(crate) source: Source,
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let (verified, source, token) =
            verify_presented(state, presented(&parts.headers, &state.tokens.edge))?;
        let proof = DeviceProof::from_request_parts(parts, state).await?;
        check_session(state, &proof, &verified.claims, &token)?;
        Ok(Session { verified, source })
    }
}

fn guard(headers: &HeaderMap, secret: &Secret, what: &'static str) -> Result<()> {
    // The same strict reading as sessions: exactly one header, scheme exactly `Bearer `.
    match Presented::from_headers(headers).authorization {
        Some(Ok(t)) if secret.matches(t.as_bytes()) => Ok(()),
        Some(Ok(_)) => {
            tracing::warn!(api = what, "refused a wrong bearer token");
            Err(Error::Unauthorized("the bearer token is wrong"))
        }
        Some(Err(e)) => {
            tracing::warn!(api = what, error = %e, "refused an unreadable Authorization header");
            Err(Error::Unauthorized(
                "exactly one `Authorization: Bearer <token>` header is required",
            ))
        }
        None => {
            tracing::warn!(api = what, "refused a request without a bearer token");
            Err(Error::Unauthorized("a bearer token is required"))
        }
    }
}

/// Proof that the request carried the admin token ([`guard`]).
#[derive(Debug)]
pub(crate) struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        guard(&parts.headers, &state.tokens.admin, "admin")?;
        // Admin actions are logged with the token's name, never its value.
        if !parts.method.is_safe() {
            tracing::info!(token = "admin", method = %parts.method, path = parts.uri.path(), "admin action");
        }
        Ok(Admin)
    }
}

/// Proof that the request carried a feed credential, and whose (ATTACKS A32, A37): an edge
/// instance's own (`runtime::feed_credential`, verified with the cell's feed secret), or the
/// cell's shared feed secret itself where `accept_shared_feed_token` still allows it (while a
/// fleet's edges are given credentials of their own). Anything else is `403 FORBIDDEN`, counted.
#[derive(Debug)]
pub(crate) struct FeedReader(pub(crate) FeedCaller);

impl FromRequestParts<AppState> for FeedReader {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let refuse = |why: &'static str| {
            state.metrics.feed_credential_refused();
            tracing::warn!(api = "feed", why, "refused a feed credential");
            Error::Unauthorized(why)
        };
        match Presented::from_headers(&parts.headers).authorization {
            Some(Ok(t)) if feed_credential::is_instance_credential(t) => {
                feed_credential::verify(&state.tokens.feed, &state.config.cell_id, t)
                    .map(|instance| FeedReader(FeedCaller::Instance(instance)))
                    .map_err(|_| refuse("the instance feed credential does not verify"))
            }
            Some(Ok(t)) if state.tokens.feed.matches(t.as_bytes()) => {
                if state.config.accept_shared_feed_token {
                    Ok(FeedReader(FeedCaller::Shared))
                } else {
                    Err(refuse(
                        "the cell's feed secret is not a credential: each edge instance presents its own",
                    ))
                }
            }
            Some(Ok(_)) => Err(refuse("the bearer token is wrong")),
            Some(Err(_)) => Err(refuse(
                "exactly one `Authorization: Bearer <token>` header is required",
            )),
            None => Err(refuse("a bearer token is required")),
        }
    }
}
