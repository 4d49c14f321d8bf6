//! Request plumbing shared by the handlers: the JSON body extractor (typed 400/413 errors),
//! bearer and cookie token extraction, the client IP, and the admin/feed token guards.

use std::net::{IpAddr, SocketAddr};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::state::{AppState, Secret};

/// Name of the desk session cookie (DESIGN §4).
pub const SESSION_COOKIE: &str = "__Host-cellbind_session";
/// Header the edge sets to the client's address.
pub const CLIENT_IP_HEADER: &str = "x-cellbind-client-ip";

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

/// The client's address: `X-Cellbind-Client-Ip` (set by the edge), else the socket peer.
pub fn client_ip(headers: &HeaderMap, peer: Option<SocketAddr>) -> IpAddr {
    headers
        .get(CLIENT_IP_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<IpAddr>().ok())
        .or(peer.map(|p| p.ip()))
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// The socket peer, when the server recorded it.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<SocketAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
        ))
    }
}

/// A bearer token from `Authorization`, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Where a presented session came from (the size caps differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    Bearer,
    Cookie,
}

/// The session token presented: bearer first, else the session cookie.
pub fn session_token(headers: &HeaderMap) -> Option<(&str, TokenSource)> {
    if let Some(t) = bearer(headers) {
        return Some((t, TokenSource::Bearer));
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| (value, TokenSource::Cookie))
}

fn guard(headers: &HeaderMap, secret: &Secret, what: &'static str) -> Result<()> {
    match bearer(headers) {
        Some(t) if secret.matches(t) => Ok(()),
        Some(_) => {
            tracing::warn!(api = what, "refused a wrong bearer token");
            Err(Error::Unauthorized("the bearer token is wrong"))
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
