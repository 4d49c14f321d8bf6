//! uniffi bindings of the Cellbind SDK for Kotlin, Swift and Python (module `cellbind`).
//!
//! This crate only converts and forwards: every rule lives in `cellbind-sdk`. Errors cross the
//! boundary through exactly one table, `impl From<sdk::Error> for CellbindError`.

use std::sync::Arc;

use protocol::jwks::PublicKey;
use protocol::{ContractorId, ErrorCode, Login, Password};

uniffi::setup_scaffolding!("cellbind");

/// Where the app keeps the session (Keychain, Keystore-backed storage, a file…). The blob is
/// opaque JSON with a schema version; keep it as it is.
#[uniffi::export(foreign)]
pub trait SessionStore: Send + Sync {
    /// The saved blob, or nothing.
    fn load(&self) -> Result<Option<String>, CellbindError>;
    /// Replaces the saved blob.
    fn save(&self, blob: String) -> Result<(), CellbindError>;
    /// Removes the saved blob.
    fn clear(&self) -> Result<(), CellbindError>;
}

/// How to build a client.
#[derive(uniffi::Record)]
pub struct CellbindConfig {
    /// The signed placement map shipped with the app (JSON bytes).
    pub map: Vec<u8>,
    /// The control plane's map key (base64url Ed25519), pinned in the app.
    pub map_public_key: String,
    /// CA certificate(s) to trust instead of the built-in roots (dev fleets), PEM.
    pub extra_ca_pem: Option<String>,
    pub store: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for CellbindConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellbindConfig")
            .field("map_bytes", &self.map.len())
            .field("map_public_key", &self.map_public_key)
            .field("extra_ca_pem", &self.extra_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

/// An answer of the session's cell.
#[derive(Debug, uniffi::Record)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What the app may know about its session (never the token).
#[derive(Debug, uniffi::Record)]
pub struct SessionInfo {
    pub session_id: String,
    pub contractor_id: String,
    pub subject: String,
    pub cell_id: String,
    pub endpoint: String,
    pub generation: u64,
    pub expires_at: u64,
}

/// Every error: one variant per code of the cell API, then the client-side failures.
#[derive(Debug, thiserror::Error, uniffi::Error)]
#[non_exhaustive]
pub enum CellbindError {
    #[error("INVALID_REQUEST: {detail}")]
    InvalidRequest { detail: String },
    #[error("INVALID_CREDENTIALS: {detail}")]
    InvalidCredentials { detail: String },
    #[error("SESSION_MISSING: {detail}")]
    SessionMissing { detail: String },
    #[error("SESSION_INVALID: {detail}")]
    SessionInvalid { detail: String },
    #[error("SESSION_EXPIRED: {detail}")]
    SessionExpired { detail: String },
    #[error("SESSION_REVOKED: {detail}")]
    SessionRevoked { detail: String },
    #[error("FORBIDDEN: {detail}")]
    Forbidden { detail: String },
    #[error("UNKNOWN_CONTRACTOR: {detail}")]
    UnknownContractor { detail: String },
    #[error("WRONG_CELL: {detail}")]
    WrongCell {
        owner_cell: Option<String>,
        owner_endpoint: Option<String>,
        detail: String,
    },
    #[error("HANDOFF_IN_PROGRESS: {detail}")]
    HandoffInProgress {
        retry_after_s: Option<u64>,
        detail: String,
    },
    #[error("PAYLOAD_TOO_LARGE: {detail}")]
    PayloadTooLarge { detail: String },
    #[error("RATE_LIMITED: {detail}")]
    RateLimited {
        retry_after_s: Option<u64>,
        detail: String,
    },
    #[error("UPSTREAM_UNAVAILABLE: {detail}")]
    UpstreamUnavailable { status: u16, detail: String },
    #[error("CELL_STATE_STALE: {detail}")]
    CellStateStale { detail: String },
    #[error("NOT_READY: {detail}")]
    NotReady { detail: String },
    #[error("NOT_FOUND: {detail}")]
    NotFound { detail: String },
    #[error("INTERNAL: {detail}")]
    Internal { detail: String },
    /// No session on this device: sign in.
    #[error("not signed in: {detail}")]
    NotSignedIn { detail: String },
    /// Sign-in was redirected once and the second cell disagreed too.
    #[error("cells disagree: {detail}")]
    CellsDisagree { detail: String },
    /// Sign-in was redirected to a cell the signed map does not back.
    #[error("untrusted redirect: {detail}")]
    UntrustedRedirect { detail: String },
    #[error("network: {detail}")]
    Network { detail: String },
    #[error("invalid response: {detail}")]
    InvalidResponse { detail: String },
    #[error("placement map refused: {detail}")]
    MapRefused { detail: String },
    #[error("session store: {detail}")]
    Store { detail: String },
    #[error("invalid configuration: {detail}")]
    Config { detail: String },
    #[error("invalid input: {detail}")]
    InvalidInput { detail: String },
    /// The contractor moved and the session could not follow it: sign in again.
    #[error("SIGN_IN_REQUIRED: {detail}")]
    SignInRequired { detail: String },
}

/// The one mapping table from SDK errors to the foreign error enum.
impl From<sdk::Error> for CellbindError {
    fn from(e: sdk::Error) -> Self {
        use sdk::Error as E;
        let detail = e.to_string();
        let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs());
        match e {
            E::NotSignedIn => CellbindError::NotSignedIn { detail },
            E::InvalidCredentials => CellbindError::InvalidCredentials { detail },
            E::UnknownContractor => CellbindError::UnknownContractor { detail },
            E::SessionExpired => CellbindError::SessionExpired { detail },
            E::SessionRevoked => CellbindError::SessionRevoked { detail },
            E::SessionInvalid => CellbindError::SessionInvalid { detail },
            E::WrongCell {
                owner_cell,
                owner_endpoint,
            } => CellbindError::WrongCell {
                owner_cell: owner_cell.map(|c| c.to_string()),
                owner_endpoint,
                detail,
            },
            E::CellsDisagree { .. } => CellbindError::CellsDisagree { detail },
            E::UntrustedRedirect { .. } => CellbindError::UntrustedRedirect { detail },
            E::HandoffInProgress { retry_after } => CellbindError::HandoffInProgress {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::RateLimited { retry_after } => CellbindError::RateLimited {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::CellStateStale => CellbindError::CellStateStale { detail },
            E::Upstream { status, .. } => CellbindError::UpstreamUnavailable { status, detail },
            E::Rejected { code, .. } => match code {
                ErrorCode::InvalidRequest => CellbindError::InvalidRequest { detail },
                ErrorCode::SessionMissing => CellbindError::SessionMissing { detail },
                ErrorCode::Forbidden => CellbindError::Forbidden { detail },
                ErrorCode::PayloadTooLarge => CellbindError::PayloadTooLarge { detail },
                ErrorCode::NotReady => CellbindError::NotReady { detail },
                ErrorCode::NotFound => CellbindError::NotFound { detail },
                _ => CellbindError::Internal { detail },
            },
            E::Network(_) => CellbindError::Network { detail },
            E::InvalidResponse(_) => CellbindError::InvalidResponse { detail },
            E::MapRefused(_) => CellbindError::MapRefused { detail },
            E::Store(_) => CellbindError::Store { detail },
            E::Config(_) => CellbindError::Config { detail },
            E::InvalidInput(_) => CellbindError::InvalidInput { detail },
            E::SignInRequired => CellbindError::SignInRequired { detail },
            _ => CellbindError::Internal { detail },
        }
    }
}

/// A foreign store method failed in a way its signature does not declare.
impl From<uniffi::UnexpectedUniFFICallbackError> for CellbindError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        CellbindError::Store { detail: e.reason }
    }
}

fn input<T>(r: Result<T, protocol::IdError>) -> Result<T, CellbindError> {
    r.map_err(|e| sdk::Error::from(e).into())
}

/// Adapts the foreign store to the SDK's store trait.
struct ForeignStore(Arc<dyn SessionStore>);

impl std::fmt::Debug for ForeignStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForeignStore")
    }
}

impl sdk::SessionStore for ForeignStore {
    fn load(&self) -> Result<Option<String>, sdk::StoreError> {
        self.0.load().map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn save(&self, blob: &str) -> Result<(), sdk::StoreError> {
        self.0
            .save(blob.to_owned())
            .map_err(|e| sdk::StoreError(e.to_string()))
    }
    fn clear(&self) -> Result<(), sdk::StoreError> {
        self.0.clear().map_err(|e| sdk::StoreError(e.to_string()))
    }
}

fn info(s: sdk::SessionInfo) -> SessionInfo {
    SessionInfo {
        session_id: s.session_id.to_string(),
        contractor_id: s.contractor_id.to_string(),
        subject: s.subject.to_string(),
        cell_id: s.cell_id.to_string(),
        endpoint: s.endpoint.into(),
        generation: s.generation.get(),
        expires_at: s.expires_at,
    }
}

/// The Cellbind client.
#[derive(Debug, uniffi::Object)]
pub struct CellbindClient {
    client: sdk::Client,
}

#[uniffi::export(async_runtime = "tokio")]
impl CellbindClient {
    /// Builds a client. No network, and no session yet: call `restore()` to pick up a saved one.
    #[uniffi::constructor]
    pub fn new(config: CellbindConfig) -> Result<Arc<Self>, CellbindError> {
        let key =
            PublicKey::from_b64(&config.map_public_key).map_err(|e| CellbindError::Config {
                detail: format!("map public key: {e}"),
            })?;
        let mut b =
            sdk::Client::builder(config.map, key).store(Arc::new(ForeignStore(config.store)));
        if let Some(pem) = config.extra_ca_pem {
            b = b.extra_ca_pem(pem.into_bytes());
        }
        Ok(Arc::new(Self { client: b.build()? }))
    }

    /// Loads the saved session from the store (no network).
    pub fn restore(&self) -> Result<Option<SessionInfo>, CellbindError> {
        Ok(self.client.restore()?.map(info))
    }

    /// Signs in at the contractor's cell and saves the session.
    pub async fn sign_in(
        &self,
        contractor_id: String,
        login: String,
        password: String,
    ) -> Result<SessionInfo, CellbindError> {
        let contractor = input(ContractorId::new(contractor_id))?;
        let login = input(Login::new(login))?;
        let password = input(Password::new(password))?;
        Ok(info(
            self.client.sign_in(&contractor, &login, &password).await?,
        ))
    }

    /// Sends a request to the session's cell (`method` e.g. "GET", `path` e.g.
    /// "/api/routes/today", `body` JSON bytes).
    pub async fn request(
        &self,
        method: String,
        path: String,
        body: Option<Vec<u8>>,
    ) -> Result<Response, CellbindError> {
        let method = http_method(&method)?;
        let r = self.client.request(method, &path, body).await?;
        Ok(Response {
            status: r.status,
            body: r.body.to_vec(),
        })
    }

    /// The current session, if any.
    pub fn session(&self) -> Option<SessionInfo> {
        self.client.session().map(info)
    }

    /// Signs out: the cell revokes the session (when reachable) and the store is cleared.
    /// Returns whether the cell confirmed the revocation.
    pub async fn sign_out(&self) -> Result<bool, CellbindError> {
        Ok(matches!(
            self.client.sign_out().await?,
            sdk::SignOut::Revoked
        ))
    }

    /// Refreshes the placement map from the session's cell; returns the version in use.
    pub async fn refresh_map(&self) -> Result<u64, CellbindError> {
        Ok(self.client.refresh_map().await?.version)
    }
}

fn http_method(m: &str) -> Result<http::Method, CellbindError> {
    let upper = m.to_ascii_uppercase();
    http::Method::from_bytes(upper.as_bytes()).map_err(|_| CellbindError::InvalidInput {
        detail: format!("{m:?} is not an HTTP method"),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use protocol::CellId;

    use super::*;

    /// Every SDK error lands on its own foreign variant (a swapped row fails here, and in the
    /// Python and Kotlin binding tests).
    #[test]
    fn the_error_table() {
        let cell = || CellId::new("cell-02").unwrap();
        let rejected = |code| sdk::Error::Rejected {
            code,
            status: code.status(),
            message: "m".into(),
        };
        let cases: Vec<(sdk::Error, &str)> = vec![
            (sdk::Error::NotSignedIn, "NotSignedIn"),
            (sdk::Error::InvalidCredentials, "InvalidCredentials"),
            (sdk::Error::UnknownContractor, "UnknownContractor"),
            (sdk::Error::SessionExpired, "SessionExpired"),
            (sdk::Error::SessionRevoked, "SessionRevoked"),
            (sdk::Error::SessionInvalid, "SessionInvalid"),
            (
                sdk::Error::WrongCell {
                    owner_cell: Some(cell()),
                    owner_endpoint: Some("https://127.0.0.2:8443".into()),
                },
                "WrongCell",
            ),
            (
                sdk::Error::CellsDisagree {
                    first: cell(),
                    second: cell(),
                    named_owner: None,
                },
                "CellsDisagree",
            ),
            (
                sdk::Error::UntrustedRedirect {
                    owner_cell: None,
                    owner_endpoint: None,
                },
                "UntrustedRedirect",
            ),
            (
                sdk::Error::HandoffInProgress {
                    retry_after: Some(Duration::from_secs(3)),
                },
                "HandoffInProgress",
            ),
            (sdk::Error::RateLimited { retry_after: None }, "RateLimited"),
            (sdk::Error::CellStateStale, "CellStateStale"),
            (
                sdk::Error::Upstream {
                    status: 502,
                    code: None,
                },
                "UpstreamUnavailable",
            ),
            (rejected(ErrorCode::InvalidRequest), "InvalidRequest"),
            (rejected(ErrorCode::SessionMissing), "SessionMissing"),
            (rejected(ErrorCode::Forbidden), "Forbidden"),
            (rejected(ErrorCode::PayloadTooLarge), "PayloadTooLarge"),
            (rejected(ErrorCode::NotReady), "NotReady"),
            (rejected(ErrorCode::NotFound), "NotFound"),
            (rejected(ErrorCode::Internal), "Internal"),
            (sdk::Error::Network("x".into()), "Network"),
            (sdk::Error::InvalidResponse("x".into()), "InvalidResponse"),
            (
                sdk::Error::MapRefused(protocol::map::MapError::BadSignature),
                "MapRefused",
            ),
            (sdk::Error::Store("x".into()), "Store"),
            (sdk::Error::Config("x".into()), "Config"),
            (sdk::Error::InvalidInput("x".into()), "InvalidInput"),
            (sdk::Error::SignInRequired, "SignInRequired"),
        ];
        for (e, want) in cases {
            let shown = format!("{e:?}");
            let got = CellbindError::from(e);
            let name = format!("{got:?}");
            assert!(
                name.starts_with(&format!("{want} ")) || name == want,
                "{shown} mapped to {name}, want {want}"
            );
        }
        match CellbindError::from(sdk::Error::HandoffInProgress {
            retry_after: Some(Duration::from_secs(3)),
        }) {
            CellbindError::HandoffInProgress { retry_after_s, .. } => {
                assert_eq!(retry_after_s, Some(3))
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn methods_parse_case_insensitively() {
        assert_eq!(http_method("get").unwrap(), http::Method::GET);
        assert!(matches!(
            http_method("GE T"),
            Err(CellbindError::InvalidInput { .. })
        ));
    }
}
