//! Device-bound sessions (`DPoP`, RFC 9449; `protocol::dpop`): which device key a request
//! proves it holds, and which key a session minted for it is bound to (`cnf.jkt`).
//!
//! A request proves a key in one of two ways ([`DeviceProof`]):
//! - **through an authenticated edge of this cell** (`X-Cellbind-Edge-Key` = the cell's edge
//!   token): the edge verified the request's `DPoP` proof with its own nonces and replay set,
//!   and asserts the key's thumbprint in `X-Cellbind-Dpop-Jkt` (the edge strips every
//!   `x-cellbind-*` header a client sends, so only it can set one). The `DPoP` header is not
//!   verified again here: its nonce is the edge instance's, which this service cannot check.
//! - **straight to this service's listener** (no valid edge key): this replica's own verifier
//!   (`runtime::dpop`: its nonces, its replay set) checks the `DPoP` header against the method,
//!   `htu` = the cell's public URL (`issuer`, what the client was told to use) + the path, and
//!   the hash of the session the request presents. An `X-Cellbind-Dpop-Jkt` without a valid
//!   edge key is ignored. Its refusals carry the `WWW-Authenticate: DPoP` challenge and this
//!   replica's `DPoP-Nonce`.
//!
//! What a minted session is bound to ([`bind`]):
//!
//! | minted from | bound to |
//! |---|---|
//! | a bound session (renewal) or a ticket with `jkt` (rebind) | the same key, whatever the mode; the request must prove it (`DPOP_PROOF_MISSING`, `DPOP_KEY_MISMATCH`, …) |
//! | a sign-in or an unbound ticket, mode `off` | nothing (a proof is ignored) |
//! | the same, mode `optional` | the proved key; nothing when the request carries no proof (a proof that fails is refused, so the client learns the nonce) |
//! | the same, mode `required` | the proved key; `401 DPOP_PROOF_MISSING` without one |
//! | an unbound session (renewal), mode `off` or `optional` | nothing: renewal keeps `cnf` |
//!
//! The mode is the client kind's (`[binding]` of the configuration, the same table as the
//! edges'). On every session route ([`check_session`]) a bound session is accepted only with a
//! valid proof by its key, whatever the mode, and an unbound session of a `required` kind is
//! refused as the edge refuses it (`401 SESSION_INVALID`: sign in again, with a proof).

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use protocol::dpop::{ProofError, ProofRequest};
use protocol::time::UnixSeconds;
use protocol::token::SessionClaims;
use protocol::{ClientKind, Jkt};
use runtime::dpop::ConnectionProofs;

use crate::config::BindingMode;
use crate::error::{Error, Result};
use crate::state::AppState;

/// Proofs this replica's verifier accepts per nonce step (60 s): its replay set's bound. The
/// edge verifies the proofs of the cell's traffic; only requests sent straight to this
/// service's listeners come here. At 16 bytes a proof and two steps held, at most about 3 MiB.
pub(crate) const MAX_PROOFS_PER_STEP: usize = 100_000;

/// What a request brings to prove that it holds a device key.
#[derive(Debug)]
pub(crate) enum DeviceProof {
    /// Through an authenticated edge: the thumbprint of the key whose proof it verified
    /// (`None`: the request carried no proof the edge verified).
    Edge(Option<Jkt>),
    /// Straight to this service's listener: the proof is verified here.
    Direct {
        /// The request's `DPoP` headers only (none, one, or several: refused).
        headers: HeaderMap,
        method: Method,
        /// The cell's public URL and the request's path.
        htu: String,
        /// What the request's TLS connection proved already, when the listener records it.
        connection: Option<Arc<ConnectionProofs>>,
    },
}

impl DeviceProof {
    /// The thumbprint of the key the request proves it holds; `None` when it carries no proof.
    /// `access_token`: the session the request presents (the proof's `ath`); `expected`: the
    /// key it must be by (a bound session's or ticket's). A proof that fails is refused.
    pub(crate) fn check(
        &self,
        state: &AppState,
        access_token: Option<&str>,
        expected: Option<&Jkt>,
    ) -> Result<Option<Jkt>> {
        match self {
            DeviceProof::Edge(asserted) => match (asserted, expected) {
                (Some(jkt), Some(want)) if jkt != want => {
                    Err(refused(ProofError::KeyMismatch, None))
                }
                (asserted, _) => Ok(asserted.clone()),
            },
            DeviceProof::Direct {
                headers,
                method,
                htu,
                connection,
            } => {
                if headers.is_empty() {
                    return Ok(None);
                }
                let now = state.now();
                let request = ProofRequest {
                    method: method.as_str(),
                    htu,
                    access_token,
                };
                state
                    .dpop
                    .verify(headers, &request, expected, now, connection.as_deref())
                    .map(|v| Some(v.jkt))
                    .map_err(|e| refused(e, Some((state, now))))
            }
        }
    }

    /// [`DeviceProof::check`], and a request without a proof is refused
    /// (`DPOP_PROOF_MISSING`).
    pub(crate) fn require(
        &self,
        state: &AppState,
        access_token: Option<&str>,
        expected: Option<&Jkt>,
    ) -> Result<Jkt> {
        match self.check(state, access_token, expected)? {
            Some(jkt) => Ok(jkt),
            None => Err(match self {
                DeviceProof::Edge(_) => refused(ProofError::Missing, None),
                DeviceProof::Direct { .. } => {
                    refused(ProofError::Missing, Some((state, state.now())))
                }
            }),
        }
    }
}

/// The refusal of a proof; `here`: refused by this replica's own verifier at that time, so
/// the answer carries its challenge (`WWW-Authenticate: DPoP` and `DPoP-Nonce`) when it is a
/// `401`.
fn refused(error: ProofError, here: Option<(&AppState, UnixSeconds)>) -> Error {
    if error.wants_nonce() {
        // Routine: how a client learns this replica's nonce.
        tracing::debug!(code = error.code().as_str(), error = %error, "asked for a DPoP nonce");
    } else {
        tracing::info!(code = error.code().as_str(), error = %error, from_edge = here.is_none(), "refused a DPoP proof");
    }
    let challenge = here
        .filter(|_| error.code().status() == StatusCode::UNAUTHORIZED)
        .map(|(state, now)| Box::new(state.dpop.challenge(&error, now)));
    Error::Dpop { error, challenge }
}

/// Whether a presented session may be used by this request: a bound one only with a valid
/// proof by its key (`token`: the session as presented, the proof's `ath`), an unbound one
/// unless its kind's binding is `required`.
pub(crate) fn check_session(
    state: &AppState,
    proof: &DeviceProof,
    claims: &SessionClaims,
    token: &str,
) -> Result<()> {
    match claims.jkt() {
        Some(bound) => proof.require(state, Some(token), Some(bound)).map(|_| ()),
        None if state.config.binding.of(claims.cli) == BindingMode::Required => {
            tracing::info!(jti = %claims.jti, "refused an unbound session: binding is required");
            Err(Error::Unbound)
        }
        None => Ok(()),
    }
}

/// The key a session minted for a client of kind `cli` is bound to (the table of the module
/// doc): `held`, the key the session or ticket it is minted from is bound to, which the
/// request must prove; else per the kind's binding mode. `access_token`: the session the
/// request presents, if any.
pub(crate) fn bind(
    state: &AppState,
    proof: &DeviceProof,
    cli: ClientKind,
    held: Option<&Jkt>,
    access_token: Option<&str>,
) -> Result<Option<Jkt>> {
    if let Some(held) = held {
        return proof.require(state, access_token, Some(held)).map(Some);
    }
    match state.config.binding.of(cli) {
        BindingMode::Off => Ok(None),
        BindingMode::Optional => proof.check(state, access_token, None),
        BindingMode::Required => proof.require(state, access_token, None).map(Some),
    }
}
