//! DESIGN §7 "`WRONG_CELL` with a session: transfer + rebind, then retry the request once".
//!
//! The session's own cell signs a one-use ticket for the owner it released the contractor to
//! (`POST /v1/sessions/transfer`); the owner, reached only if the signed map lists it at the
//! endpoint it was named with, trades the ticket for a session at the new generation
//! (`POST /v1/sessions/rebind`). The new session replaces the old one in the store. A refused
//! transfer or rebind (the contractor moved again, the ticket was refused) ends the session:
//! [`Error::SignInRequired`]. A rebind refused because the session was revoked at its source
//! after the ticket was issued (the user signed out there, ATTACKS A38) ends it as
//! [`Error::SessionRevoked`]. A rebind the owner could not confirm with the source (`503`,
//! nothing burned) keeps the session and is never resent by itself: the next request transfers
//! again, and the source answers the same ticket while it is valid. Single flight: concurrent
//! requests that hit the same `WRONG_CELL` wait for one transfer and use its session. The new
//! session keeps the old one's device key ([`crate::proof`]): the transfer is proved like any
//! request of a bound session, the rebind by the same key.

use http::Method;
use protocol::api::{RebindRequest, TransferResponse};
use protocol::map::CellEntry;
use protocol::{CellId, ErrorCode};

use super::{Client, answer, endpoint_of, same_endpoint, session_from};
use crate::Error;
use crate::device;
use crate::session::{Event, Session};

/// Whether a refusal of the transfer or rebind means "this session cannot follow".
fn cannot_follow(e: &Error) -> bool {
    matches!(
        e,
        Error::Rejected {
            code: ErrorCode::Forbidden | ErrorCode::InvalidRequest | ErrorCode::NotFound,
            ..
        } | Error::WrongCell { .. }
            | Error::UnknownContractor
            | Error::SessionInvalid
    )
}

impl Client {
    /// Moves `session` to the owner named by a `WRONG_CELL` answer and returns the new session
    /// (already stored and active).
    pub(super) async fn transfer(
        &self,
        session: &Session,
        owner_cell: Option<CellId>,
        owner_endpoint: Option<String>,
    ) -> Result<Session, Error> {
        let _one = self.inner.sign_in_lock.lock().await;
        if let Some(now) = self.current()
            && now.info.session_id != session.info.session_id
            && now.info.contractor_id == session.info.contractor_id
        {
            // Another request transferred (or the user signed in again) while we waited.
            return Ok(now);
        }
        let map = self.map();
        let untrusted = || Error::UntrustedRedirect {
            owner_cell: owner_cell.clone(),
            owner_endpoint: owner_endpoint.clone(),
        };
        let owner: CellEntry = owner_cell
            .as_ref()
            .and_then(|id| map.map.cell(id))
            .cloned()
            .ok_or_else(untrusted)?;
        if owner.id == session.info.cell_id
            || owner_endpoint
                .as_deref()
                .is_some_and(|e| !same_endpoint(e, &owner))
        {
            // Named back to its own cell: the cell knows a newer generation of this
            // contractor here (moved away and back) — only a new sign-in helps.
            if owner.id == session.info.cell_id {
                return self.cannot_follow(session).await;
            }
            return Err(untrusted());
        }
        self.transition(Event::SignInStarted)?;
        let result = self.transfer_to(session, &owner).await;
        match result {
            Ok(fresh) => {
                let saved = self.save(&fresh);
                self.transition(Event::SignedIn(fresh.clone()))?;
                saved?;
                tracing::info!(from = %session.info.cell_id, to = %fresh.info.cell_id, "session transferred");
                Ok(fresh)
            }
            Err(e) => {
                self.transition(Event::SignInFailed)?;
                if e.ends_session() {
                    self.end(session, &e)?;
                    return Err(e);
                }
                if cannot_follow(&e) {
                    tracing::info!(error = %e, "transfer refused; the user must sign in again");
                    return self.cannot_follow(session).await;
                }
                Err(e)
            }
        }
    }

    async fn cannot_follow(&self, session: &Session) -> Result<Session, Error> {
        self.end(session, &Error::SignInRequired)?;
        Err(Error::SignInRequired)
    }

    async fn transfer_to(&self, session: &Session, owner: &CellEntry) -> Result<Session, Error> {
        let resp = self
            .session_call(Method::POST, session, "/v1/sessions/transfer", true)
            .await?;
        let t: TransferResponse = answer(&resp, &[200], "transfer")?;
        if t.target_cell != owner.id {
            return Err(Error::CellsDisagree {
                first: session.info.cell_id.clone(),
                second: owner.id.clone(),
                named_owner: Some(t.target_cell),
            });
        }
        let rebind = RebindRequest {
            ticket: t.ticket.expose().to_owned(),
        };
        // Not replay-safe: the ticket is burned by the first rebind that reaches the owner.
        let endpoint = endpoint_of(owner)?;
        // Proved by the session's key: the owner rebinds a bound session only with it, and binds
        // the successor of an unbound one to it (as a sign-in would).
        let resp = self
            .post_json(
                &owner.id,
                &endpoint,
                "/v1/sessions/rebind",
                &rebind,
                session.signer.as_ref(),
                false,
            )
            .await?;
        let fresh = session_from(&resp, &owner.id, endpoint, &session.info.contractor_id)?
            .with_signer(session.signer.clone())?;
        if fresh.info.generation <= session.info.generation
            || fresh.info.subject != session.info.subject
        {
            return Err(Error::InvalidResponse(
                "the rebound session is not a newer session of the same user".into(),
            ));
        }
        if let Some(token) = device::issued_token(&resp) {
            let store = self.inner.store.as_ref();
            (self.inner.devices).rebound(store, &owner.id, &fresh.info.subject, token);
        }
        Ok(fresh)
    }
}
