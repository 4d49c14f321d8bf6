//! The one error type of the SDK. Every failure a caller can act on has its own variant;
//! nothing is stringly typed except human detail text.

use std::time::Duration;

use protocol::map::MapError;
use protocol::{CellId, ErrorBody, ErrorCode, IdError};

/// Why a request got no complete answer from its cell. The kinds before sending
/// ([`Connect`](Self::Connect), [`Tls`](Self::Tls), [`TimeoutBeforeSend`](Self::TimeoutBeforeSend))
/// guarantee that the cell never saw the attempt; the others mean it may have (the SDK cannot
/// tell a request lost on the way from an answer lost on the way back, so it says "maybe").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NetworkErrorKind {
    /// No connection: the name did not resolve, the connection was refused, the host or
    /// network is unreachable. Nothing was sent.
    Connect,
    /// The TLS handshake failed (the certificate is not trusted, a protocol error). Nothing of
    /// the request was sent. Not retried: a certificate does not become valid by waiting.
    Tls,
    /// No connection within the connect timeout. Nothing was sent.
    TimeoutBeforeSend,
    /// The request was (or may have been) sent and no answer came within the request timeout:
    /// a write may have been applied.
    TimeoutAfterSend,
    /// The connection broke after the request was (or may have been) sent, or while the answer
    /// was being read: a write may have been applied.
    Interrupted,
}

impl NetworkErrorKind {
    /// Whether an attempt that failed this way may have been received by the cell.
    pub fn may_have_reached_cell(self) -> bool {
        match self {
            NetworkErrorKind::Connect
            | NetworkErrorKind::Tls
            | NetworkErrorKind::TimeoutBeforeSend => false,
            NetworkErrorKind::TimeoutAfterSend | NetworkErrorKind::Interrupted => true,
        }
    }

    /// A stable name (for logs and metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkErrorKind::Connect => "connect",
            NetworkErrorKind::Tls => "tls",
            NetworkErrorKind::TimeoutBeforeSend => "timeout_before_send",
            NetworkErrorKind::TimeoutAfterSend => "timeout_after_send",
            NetworkErrorKind::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for NetworkErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn reached_text(reached: bool) -> &'static str {
    if reached {
        "the cell may have received it"
    } else {
        "it never reached the cell"
    }
}

/// Everything that can go wrong in the SDK.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// There is no session on this client: sign in first. (A cell's `SESSION_MISSING` is
    /// [`Error::Rejected`]: the SDK always sends its session.)
    #[error("not signed in")]
    NotSignedIn,
    /// Sign-in refused (unknown user, wrong password and disabled user look the same).
    #[error("sign-in refused: invalid credentials")]
    InvalidCredentials,
    /// No cell knows this contractor.
    #[error("no cell knows this contractor")]
    UnknownContractor,
    /// The session has expired. The stored session was cleared: sign in again.
    #[error("the session has expired; sign in again")]
    SessionExpired,
    /// The session was revoked. The stored session was cleared: sign in again.
    #[error("the session was revoked; sign in again")]
    SessionRevoked,
    /// The cell does not accept this session (e.g. minted for another cell). The stored session
    /// was cleared: sign in again.
    #[error("the session is not valid at its cell; sign in again")]
    SessionInvalid,
    /// The session's cell no longer owns the contractor. The session is kept (a transfer to the
    /// owner is the way forward); the request was not sent anywhere else.
    #[error(
        "the session's cell does not own this contractor (owner: {owner_cell:?} at {owner_endpoint:?})"
    )]
    WrongCell {
        owner_cell: Option<CellId>,
        owner_endpoint: Option<String>,
    },
    /// The contractor moved and the session could not follow it (a transfer or rebind was
    /// refused, e.g. it moved twice while the device was away). The stored session was
    /// cleared: sign in again.
    #[error("the session cannot follow the contractor to its new cell; sign in again")]
    SignInRequired,
    /// Sign-in was redirected once and the second cell disagreed too.
    #[error("cells disagree about the owner: {first} named {second}, which named {named_owner:?}")]
    CellsDisagree {
        first: CellId,
        second: CellId,
        named_owner: Option<CellId>,
    },
    /// Sign-in was redirected to a cell the signed map does not list, or to an endpoint that is
    /// not the map's endpoint for that cell. Not followed.
    #[error("redirect to {owner_cell:?} at {owner_endpoint:?} is not backed by the signed map")]
    UntrustedRedirect {
        owner_cell: Option<CellId>,
        owner_endpoint: Option<String>,
    },
    /// The contractor is being moved between cells and writes are paused.
    #[error("the contractor is being moved; retry after {retry_after:?}")]
    HandoffInProgress { retry_after: Option<Duration> },
    /// Too many requests.
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited { retry_after: Option<Duration> },
    /// The cell cannot prove its ownership view is fresh and refuses writes.
    #[error("the cell's state is stale; writes are refused for now")]
    CellStateStale,
    /// The cell or its app is unavailable (502/503/504).
    #[error("the cell is unavailable (HTTP {status}, {code:?})")]
    Upstream {
        status: u16,
        code: Option<ErrorCode>,
    },
    /// Any other error answer of a cell, with its code.
    #[error("the cell refused the request: {code} (HTTP {status}): {message}")]
    Rejected {
        code: ErrorCode,
        status: u16,
        message: String,
    },
    /// No complete answer from the cell, after the bounded retries. `kind` is the last
    /// attempt's failure; `reached_cell` says whether the cell may have seen the request at
    /// all (see [`NetworkErrorKind`]).
    #[error("network error ({kind}; {}): {detail}", reached_text(*reached_cell))]
    Network {
        kind: NetworkErrorKind,
        /// `false`: no attempt of this request left the device, so it certainly had no effect
        /// and may be sent again as it is. `true`: at least one attempt was (or may have been)
        /// received by a cell, so a write may have been applied: retry it only with the same
        /// idempotency key ([`crate::Request::idempotency_key`]).
        reached_cell: bool,
        detail: String,
    },
    /// An error answer with a code this SDK does not know (a newer server). The one fallback
    /// for codes added after this SDK was built; nothing in the answer was acted on.
    #[error("the cell refused the request with an unknown code {code} (HTTP {status}): {message}")]
    UnknownErrorCode {
        code: String,
        status: u16,
        message: String,
    },
    /// The cell's TLS certificate matches neither of the SPKI pins (current, next) that the
    /// signed map publishes for it, even if a trusted CA issued it. Nothing was sent. Not
    /// retried: a newer signed map (publishing the certificate's pin) is the way forward.
    #[error("the certificate of {cell} matches none of its pins in the signed map")]
    PinMismatch { cell: CellId },
    /// The offline outbox holds `capacity` writes (or `capacity_bytes` of bodies) already:
    /// nothing was queued. Flush it (or take its writes back) first.
    #[error("the outbox is full ({capacity} writes, {capacity_bytes} bytes); nothing was queued")]
    OutboxFull {
        capacity: usize,
        capacity_bytes: usize,
    },
    /// The device key could not make a proof of possession (DPoP, [`crate::proof`]): the app's
    /// [`DeviceKey`](crate::proof::DeviceKey) failed to sign or gave a public key that is not
    /// P-256 or Ed25519. Nothing was sent by the attempt that needed it.
    #[error("device key: {0}")]
    DeviceKey(String),
    /// The cell answered something that is not the protocol.
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    /// A placement map was refused; the map held before is kept.
    #[error("placement map refused: {0}")]
    MapRefused(#[from] MapError),
    /// The session store failed.
    #[error("session store: {0}")]
    Store(String),
    /// The client configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An argument is not valid (contractor id, login, password, method, path).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An operation that the session state does not allow right now.
    #[error("not allowed in state {state}: {event}")]
    InvalidState {
        state: &'static str,
        event: &'static str,
    },
}

impl From<IdError> for Error {
    fn from(e: IdError) -> Self {
        Error::InvalidInput(e.to_string())
    }
}

impl Error {
    /// The typed error for an error answer of a cell (the one table from wire codes).
    pub(crate) fn from_body(status: u16, body: ErrorBody, retry_after: Option<Duration>) -> Self {
        let retry_after = retry_after.or(body.retry_after_s.map(Duration::from_secs));
        match body.error {
            ErrorCode::InvalidCredentials => Error::InvalidCredentials,
            ErrorCode::UnknownContractor => Error::UnknownContractor,
            ErrorCode::SessionExpired => Error::SessionExpired,
            ErrorCode::SessionRevoked => Error::SessionRevoked,
            ErrorCode::SessionInvalid => Error::SessionInvalid,
            ErrorCode::WrongCell => Error::WrongCell {
                owner_cell: body.owner_cell,
                owner_endpoint: body.owner_endpoint,
            },
            ErrorCode::HandoffInProgress => Error::HandoffInProgress { retry_after },
            ErrorCode::RateLimited => Error::RateLimited { retry_after },
            ErrorCode::CellStateStale => Error::CellStateStale,
            ErrorCode::UpstreamUnavailable => Error::Upstream {
                status,
                code: Some(body.error),
            },
            code => Error::Rejected {
                code,
                status,
                message: body.message,
            },
        }
    }

    /// The same error, with `reached_cell` set when an earlier attempt of the same request
    /// may have reached a cell (a network error only says so for its own attempt).
    pub(crate) fn reached_earlier(self, earlier: bool) -> Self {
        match self {
            Error::Network {
                kind,
                reached_cell,
                detail,
            } => Error::Network {
                kind,
                reached_cell: reached_cell || earlier,
                detail,
            },
            e => e,
        }
    }

    /// Whether this error ended the session (the store was cleared). Besides the session
    /// codes: a bound session the cell refused because this device made no proof for it
    /// (`DPOP_PROOF_MISSING`) or made it with another key (`DPOP_KEY_MISMATCH`): the device
    /// no longer holds the session's key, so only a new sign-in helps.
    pub fn ends_session(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired
                | Error::SessionRevoked
                | Error::SessionInvalid
                | Error::SignInRequired
                | Error::Rejected {
                    code: ErrorCode::DpopProofMissing | ErrorCode::DpopKeyMismatch,
                    ..
                }
        )
    }

    /// Whether a cell refused the request's proof of possession (a `DPOP_*` code), not the
    /// request itself: it says nothing about the request (an outbox write is kept).
    pub fn is_proof_refusal(&self) -> bool {
        matches!(self, Error::Rejected { code, .. } if is_proof_code(*code))
    }
}

/// The codes of a refused DPoP proof.
pub(crate) fn is_proof_code(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::DpopProofMissing
            | ErrorCode::DpopProofInvalid
            | ErrorCode::DpopProofReplayed
            | ErrorCode::DpopNonceRequired
            | ErrorCode::DpopNonceStale
            | ErrorCode::DpopKeyMismatch
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_code_has_a_typed_error() {
        for code in ErrorCode::ALL {
            let e = Error::from_body(code.status().as_u16(), ErrorBody::new(code, "m"), None);
            let ok = match code {
                ErrorCode::InvalidCredentials => matches!(e, Error::InvalidCredentials),
                ErrorCode::UnknownContractor => matches!(e, Error::UnknownContractor),
                ErrorCode::SessionExpired => matches!(e, Error::SessionExpired),
                ErrorCode::SessionRevoked => matches!(e, Error::SessionRevoked),
                ErrorCode::SessionInvalid => matches!(e, Error::SessionInvalid),
                ErrorCode::WrongCell => matches!(e, Error::WrongCell { .. }),
                ErrorCode::HandoffInProgress => matches!(e, Error::HandoffInProgress { .. }),
                ErrorCode::RateLimited => matches!(e, Error::RateLimited { .. }),
                ErrorCode::CellStateStale => matches!(e, Error::CellStateStale),
                ErrorCode::UpstreamUnavailable => matches!(e, Error::Upstream { .. }),
                other => matches!(e, Error::Rejected { code, .. } if code == other),
            };
            assert!(ok, "{code} mapped to {e:?}");
        }
    }

    #[test]
    fn retry_after_comes_from_header_or_body() {
        let body = ErrorBody::new(ErrorCode::RateLimited, "slow").retry_after(7);
        match Error::from_body(429, body.clone(), None) {
            Error::RateLimited { retry_after } => {
                assert_eq!(retry_after, Some(Duration::from_secs(7)))
            }
            e => panic!("{e:?}"),
        }
        match Error::from_body(429, body, Some(Duration::from_secs(2))) {
            Error::RateLimited { retry_after } => {
                assert_eq!(retry_after, Some(Duration::from_secs(2)))
            }
            e => panic!("{e:?}"),
        }
    }
}
