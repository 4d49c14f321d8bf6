//! The edge's three upstreams ([`Upstreams`]: the auth-service's public listener, its
//! internal one for the feed, the app) and what the edge presents to each: its edge token to
//! the auth-service, its app token to the app, this instance's feed credential to the feed.
//! Built from the configuration's URLs and token files ([`Upstreams::from_config`]), or
//! in-process for tests and benchmarks ([`Upstreams::local`]). How one upstream is called is
//! `upstream`.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use runtime::Secret;

use crate::config::{Config, Replicas};
use crate::error::EdgeError;
use crate::net::upstream::{Target, base_url, https_client};

/// The upstreams and what the edge presents to them.
#[derive(Debug, Clone)]
pub struct Upstreams {
    /// The auth-service's public listener (`/v1/sessions*`).
    pub auth: Target,
    /// The auth-service's internal listener (the feed).
    pub feed: Target,
    /// The app's public listener (`/api/*`).
    pub app: Target,
    /// The app token as `X-Cellbind-Edge-Key` towards the app, marked sensitive (never logged
    /// by hyper/h2).
    pub app_key_header: HeaderValue,
    /// The edge token as `X-Cellbind-Edge-Key` towards the auth-service, marked sensitive.
    pub edge_key_header: HeaderValue,
    pub feed_token: Secret,
    pub auth_timeout: Duration,
    pub app_timeout: Duration,
}

/// The app token of in-process upstreams (tests, benchmarks).
pub(crate) const LOCAL_APP_TOKEN: &str = "edge-key-for-tests";
/// The edge token of in-process upstreams (tests, benchmarks).
pub const LOCAL_EDGE_TOKEN: &str = "edge-token-for-tests";

impl Upstreams {
    /// In-process upstreams (tests, benchmarks); the feed is read from the auth router.
    pub fn local(auth: Option<Router>, app: Option<Router>) -> Self {
        let auth = auth.map_or(Target::None, Target::Local);
        Self {
            feed: auth.clone(),
            auth,
            app: app.map_or(Target::None, Target::Local),
            app_key_header: sensitive(LOCAL_APP_TOKEN).unwrap_or(HeaderValue::from_static("")),
            edge_key_header: sensitive(LOCAL_EDGE_TOKEN).unwrap_or(HeaderValue::from_static("")),
            feed_token: Secret::new("feed-token-for-tests"),
            auth_timeout: Duration::from_millis(crate::config::DEFAULT_AUTH_TIMEOUT_MS),
            app_timeout: Duration::from_millis(crate::config::DEFAULT_APP_TIMEOUT_MS),
        }
    }

    /// Real HTTPS upstreams trusting only `ca_cert`.
    pub fn from_config(c: &Config) -> Result<Self, EdgeError> {
        let client = https_client(
            &c.ca_cert,
            Duration::from_millis(c.connect_timeout_ms),
            c.upstream_http,
        )?;
        let http = |what, urls: &Replicas| -> Result<Target, EdgeError> {
            let bases = urls
                .urls()
                .iter()
                .map(|u| base_url(what, u))
                .collect::<Result<Vec<_>, _>>()?;
            Target::http(client.clone(), bases)
                .ok_or_else(|| EdgeError::Config(format!("{what}: an empty list")))
        };
        Ok(Self {
            auth: http("auth_service_url", &c.auth_service_url)?,
            feed: http("feed_url", &c.feed_url)?,
            app: http("app_url", &Replicas::one(c.app_url.clone()))?,
            app_key_header: sensitive(Secret::from_file(&c.app_token_file)?.expose())?,
            edge_key_header: sensitive(Secret::from_file(&c.edge_token_file)?.expose())?,
            feed_token: feed_credential(c)?,
            auth_timeout: Duration::from_millis(c.auth_timeout_ms),
            app_timeout: Duration::from_millis(c.app_timeout_ms),
        })
    }

    /// `Authorization: Bearer <feed token>`, marked sensitive: what the feed and the
    /// revocation handback present to the auth-service's internal listener.
    pub(crate) fn feed_authorization(&self) -> Result<HeaderValue, EdgeError> {
        let bearer = format!(
            "{}{}",
            protocol::http::BEARER_PREFIX,
            self.feed_token.expose()
        );
        let mut auth = HeaderValue::from_str(&bearer)
            .map_err(|_| EdgeError::Config("feed token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        Ok(auth)
    }
}

/// Reads this instance's feed credential (`runtime::feed_credential`): it must name this
/// instance. The cell's shared feed secret is still read (an auth-service with
/// `accept_shared_feed_token` takes it while a fleet moves to credentials), with a warning.
fn feed_credential(c: &Config) -> Result<Secret, EdgeError> {
    let token = Secret::from_file(&c.feed_token_file)?;
    if !runtime::feed_credential::is_instance_credential(token.expose()) {
        tracing::warn!(
            file = %c.feed_token_file.display(),
            "feed_token_file holds the cell's shared feed secret, not this instance's own credential: mint one with `cellctl edge-credential`"
        );
        return Ok(token);
    }
    match runtime::feed_credential::instance_of(token.expose()) {
        Some(named) if named.as_str() == c.instance_id => Ok(token),
        Some(named) => Err(EdgeError::Config(format!(
            "feed_token_file holds the feed credential of instance {named}, but this is instance {}",
            c.instance_id
        ))),
        None => Err(EdgeError::Config(format!(
            "feed_token_file ({}) is not a well-formed instance feed credential",
            c.feed_token_file.display()
        ))),
    }
}

fn sensitive(s: &str) -> Result<HeaderValue, EdgeError> {
    let mut v = HeaderValue::from_str(s)
        .map_err(|_| EdgeError::Config("a token is not a valid header value".into()))?;
    v.set_sensitive(true);
    Ok(v)
}
