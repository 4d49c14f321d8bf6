//! Cellbind wire protocol: everything two Cellbind processes (or a Cellbind process and a
//! client) must agree on, and nothing else. No I/O happens in this crate.
//!
//! - [`admin`]: the admin and internal API bodies, shared by the servers and `cellctl`.
//! - [`endpoint`]: [`Endpoint`], a service base URL parsed and normalised once.
//! - [`api`]: the HTTP bodies of sign-in, renewal, transfer and rebind (DESIGN §4).
//! - [`ids`]: parsed newtypes (`CellId`, `ContractorId`, `Generation`, `Kid`, `SessionToken`, …).
//! - [`error`]: the public error codes of DESIGN §4 and the JSON error body.
//! - [`dpop`]: DPoP proofs (RFC 9449) of a device key: the strict parser and verifier, the
//!   thumbprint, the stateless server nonces, and the client's proof builder.
//! - [`token`]: session and transfer-ticket claims, minting and the strict verifier every
//!   component uses (edge, auth-service, tests).
//! - [`json`]: strict reading of network JSON: a document must be an object.
//! - [`jwks`]: the JWKS format (RFC 8037 OKP/Ed25519) and the validated key set built from it.
//! - [`map`]: the placement map, its detached Ed25519 signature and the bucket hash.
//! - [`map_key`]: the one check of a configured map public key (never a published example key).
//! - [`ownership`]: ownership records and the one decision table that serves or redirects.
//! - [`http`]: header and cookie names, the one credential extractor and rule, the CSRF proof.
//! - [`feed`]: the cell state feed (keys, ownership, revocations, map) between an auth-service
//!   and its edge instances.
//! - [`revocation`]: revocation kinds and the matcher.
//! - `openapi` (feature `openapi`): the OpenAPI schemas of the validated identifiers and the
//!   pieces every published API document shares (security schemes, error answers).
//! - [`time`]: unix seconds and the clock abstraction (so tests can fake days).

pub mod admin;
pub mod api;
pub mod dpop;
pub mod endpoint;
pub mod error;
pub mod feed;
pub mod http;
pub mod ids;
pub mod json;
pub mod jwks;
pub mod map;
pub mod map_key;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod ownership;
pub mod revocation;
pub mod time;
pub mod token;

pub use endpoint::{Endpoint, EndpointError};
pub use error::{ErrorBody, ErrorCode};
pub use http::SYNTHETIC_HEADER;
pub use ids::{
    CellId, ClientKind, ContractorId, Generation, IdError, InstanceId, Jkt, Kid, Login, Password,
    PasswordHash, SYNTHETIC_CONTRACTOR_PREFIX, SessionId, SessionToken, SubjectId,
};
