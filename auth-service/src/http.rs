//! Request plumbing shared by the handlers: the JSON body extractor (typed 400/413 errors),
//! the authenticated edge and the client IP, the session credentials under the one credential
//! rule of `protocol::http`, and the admin/feed token guards.

use std::net::{IpAddr, SocketAddr};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use protocol::http::{Presented, X_CLIENT_IP, X_EDGE_KEY};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::state::{AppState, Secret};

/// A JSON body whose refusals are typed: 413 `PAYLOAD_TOO_LARGE` over the route's limit,
/// 400 `INVALID_REQUEST` for anything that is not the expected JSON.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| Error::BadRequest(format!("body is not the expected JSON: {e}")))
    }
}

/// A raw body with the same typed refusals as [`JsonBody`].
#[derive(Debug)]
pub struct RawBody(pub Bytes);

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

/// Whether the request comes from an authenticated edge of this cell: exactly one
/// `X-Cellbind-Edge-Key` header equal to the cell's edge token (compared in constant time).
pub fn from_edge(headers: &HeaderMap, edge_token: &Secret) -> bool {
    let mut keys = headers.get_all(X_EDGE_KEY).iter();
    match (keys.next(), keys.next()) {
        (Some(key), None) => key.to_str().is_ok_and(|k| edge_token.matches(k)),
        _ => false,
    }
}

/// The client's address for throttling: `X-Cellbind-Client-Ip` only from an authenticated
/// edge (exactly one header holding an address); otherwise, and when the edge sent none, the
/// socket peer. A client that reaches the auth-service directly cannot choose its bucket.
pub fn client_ip(headers: &HeaderMap, peer: Option<SocketAddr>, from_edge: bool) -> IpAddr {
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

/// Who is calling: whether from an authenticated edge, and the client's address.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The request carried this cell's edge token.
    pub from_edge: bool,
    /// The address the sign-in throttles count against ([`client_ip`]).
    pub ip: IpAddr,
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
        let from_edge = from_edge(&parts.headers, &state.edge_token);
        Ok(Caller {
            from_edge,
            ip: client_ip(&parts.headers, peer, from_edge),
        })
    }
}

/// The session credentials of a request under the one credential rule
/// ([`protocol::http::Presented::resolve`]). The session cookie counts only from an
/// authenticated edge, which enforces the CSRF proof on cookie requests; a cookie sent
/// straight to the auth-service is ignored.
pub fn presented<'a>(headers: &'a HeaderMap, edge_token: &Secret) -> Presented<'a> {
    let mut p = Presented::from_headers(headers);
    if p.cookie.is_some() && !from_edge(headers, edge_token) {
        tracing::debug!("ignored a session cookie that did not come through the edge");
        p.cookie = None;
    }
    p
}

fn guard(headers: &HeaderMap, secret: &Secret, what: &'static str) -> Result<()> {
    // The same strict reading as sessions: exactly one header, scheme exactly `Bearer `.
    match Presented::from_headers(headers).authorization {
        Some(Ok(t)) if secret.matches(t) => Ok(()),
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
/// Proof that the request carried the admin token.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        guard(&parts.headers, &state.admin_token, "admin").map(|()| Admin)
    }
}

/// Proof that the request carried the feed token.
#[derive(Debug)]
pub struct FeedReader;

impl FromRequestParts<AppState> for FeedReader {
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        guard(&parts.headers, &state.feed_token, "feed").map(|()| FeedReader)
    }
}
