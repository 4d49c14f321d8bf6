//! The public error codes of DESIGN §4 and the JSON error body every Cellbind HTTP service
//! answers with: `{"error":"CODE","message":"human text", ...}`.

use http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::ids::CellId;

/// Every error code a cell answers with (DESIGN §4, contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    InvalidRequest,
    InvalidCredentials,
    SessionMissing,
    SessionInvalid,
    SessionExpired,
    SessionRevoked,
    /// Refused by an authorisation check that is not about the session itself (CSRF proof,
    /// admin token, a transfer ticket that is not valid here).
    Forbidden,
    UnknownContractor,
    WrongCell,
    HandoffInProgress,
    PayloadTooLarge,
    RateLimited,
    UpstreamUnavailable,
    CellStateStale,
    /// The request needs something this instance does not have yet (no keys loaded, no map).
    NotReady,
    NotFound,
    Internal,
    /// A bound session came without a `DPoP` proof (RFC 9449).
    DpopProofMissing,
    /// The `DPoP` proof is malformed, badly signed, or for another method, URL or session.
    DpopProofInvalid,
    /// The `DPoP` proof was presented before (its `jti` is in this server's replay set).
    DpopProofReplayed,
    /// The `DPoP` proof carries no nonce, or one another server issued: retry with `DPoP-Nonce`.
    DpopNonceRequired,
    /// The `DPoP` proof's nonce has expired: retry with `DPoP-Nonce`.
    DpopNonceStale,
    /// The `DPoP` proof is signed by another key than the one the session is bound to.
    DpopKeyMismatch,
}

impl ErrorCode {
    /// Every code, for tables and tests.
    pub const ALL: [ErrorCode; 23] = [
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidCredentials,
        ErrorCode::SessionMissing,
        ErrorCode::SessionInvalid,
        ErrorCode::SessionExpired,
        ErrorCode::SessionRevoked,
        ErrorCode::Forbidden,
        ErrorCode::UnknownContractor,
        ErrorCode::WrongCell,
        ErrorCode::HandoffInProgress,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::UpstreamUnavailable,
        ErrorCode::CellStateStale,
        ErrorCode::NotReady,
        ErrorCode::NotFound,
        ErrorCode::Internal,
        ErrorCode::DpopProofMissing,
        ErrorCode::DpopProofInvalid,
        ErrorCode::DpopProofReplayed,
        ErrorCode::DpopNonceRequired,
        ErrorCode::DpopNonceStale,
        ErrorCode::DpopKeyMismatch,
    ];

    /// The HTTP status this code is answered with. The one mapping table for statuses: a
    /// server that answers a code with another status names that exception where it chooses
    /// its answers (the edge's `error::answer`).
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::InvalidCredentials
            | ErrorCode::SessionMissing
            | ErrorCode::SessionInvalid
            | ErrorCode::SessionExpired
            | ErrorCode::SessionRevoked
            | ErrorCode::DpopProofMissing
            | ErrorCode::DpopProofInvalid
            | ErrorCode::DpopProofReplayed
            | ErrorCode::DpopNonceRequired
            | ErrorCode::DpopNonceStale
            | ErrorCode::DpopKeyMismatch => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::UnknownContractor | ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::WrongCell | ErrorCode::HandoffInProgress => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
            ErrorCode::CellStateStale | ErrorCode::NotReady => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::InvalidCredentials => "INVALID_CREDENTIALS",
            ErrorCode::SessionMissing => "SESSION_MISSING",
            ErrorCode::SessionInvalid => "SESSION_INVALID",
            ErrorCode::SessionExpired => "SESSION_EXPIRED",
            ErrorCode::SessionRevoked => "SESSION_REVOKED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::UnknownContractor => "UNKNOWN_CONTRACTOR",
            ErrorCode::WrongCell => "WRONG_CELL",
            ErrorCode::HandoffInProgress => "HANDOFF_IN_PROGRESS",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            ErrorCode::CellStateStale => "CELL_STATE_STALE",
            ErrorCode::NotReady => "NOT_READY",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::DpopProofMissing => "DPOP_PROOF_MISSING",
            ErrorCode::DpopProofInvalid => "DPOP_PROOF_INVALID",
            ErrorCode::DpopProofReplayed => "DPOP_PROOF_REPLAYED",
            ErrorCode::DpopNonceRequired => "DPOP_NONCE_REQUIRED",
            ErrorCode::DpopNonceStale => "DPOP_NONCE_STALE",
            ErrorCode::DpopKeyMismatch => "DPOP_KEY_MISMATCH",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON error body. `owner_cell`/`owner_endpoint` accompany `WRONG_CELL`;
/// `retry_after_s` mirrors the `Retry-After` header for `HANDOFF_IN_PROGRESS`, `RATE_LIMITED`
/// and the 503s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_cell: Option<CellId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

impl ErrorBody {
    pub fn new(error: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
            owner_cell: None,
            owner_endpoint: None,
            retry_after_s: None,
        }
    }
    pub fn wrong_cell(owner: CellId, endpoint: String) -> Self {
        Self {
            message: format!("this contractor is served by {owner} at {endpoint}"),
            owner_cell: Some(owner),
            owner_endpoint: Some(endpoint),
            ..Self::new(ErrorCode::WrongCell, "")
        }
    }
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_s = Some(secs);
        self
    }
    /// The status of this body's code ([`ErrorCode::status`]).
    pub fn status(&self) -> StatusCode {
        self.error.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_on_the_wire() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
        assert_eq!(ErrorCode::WrongCell.status(), StatusCode::CONFLICT);
        assert_eq!(ErrorCode::CellStateStale.status(), 503);
        assert_eq!(ErrorCode::UpstreamUnavailable.status(), 502);
    }

    #[test]
    fn wrong_cell_body_names_owner() {
        let b = ErrorBody::wrong_cell(
            CellId::new("cell-04").unwrap(),
            "https://127.0.0.4:8443".into(),
        );
        let v: serde_json::Value = serde_json::to_value(&b).unwrap();
        assert_eq!(v["error"], "WRONG_CELL");
        assert_eq!(v["owner_cell"], "cell-04");
        assert_eq!(v["owner_endpoint"], "https://127.0.0.4:8443");
    }
}
