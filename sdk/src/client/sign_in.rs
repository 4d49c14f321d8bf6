//! Sign-in (DESIGN §7): the map's cell first, at most one redirect to a cell the signed map
//! lists, the account's device token of that cell sent along and the new one kept
//! ([`crate::device`]). Every attempt carries a proof by the device key (the app's, or a new
//! software key per sign-in: [`crate::proof`]), so a cell that binds sessions binds this one.

use protocol::api::SignInRequest;
use protocol::map::CellEntry;
use protocol::{ClientKind, ContractorId, Login, Password};

use super::{Client, endpoint_of, same_endpoint, session_from};
use crate::Error;
use crate::device;
use crate::proof::Signer;
use crate::session::{Event, Session, SessionInfo};

impl Client {
    /// Signs in at the contractor's cell (DESIGN §7): the map's cell first; on `WRONG_CELL`
    /// once to the named owner, only if the signed map lists it at the same endpoint; a second
    /// disagreement is [`Error::CellsDisagree`]. The session is saved to the store.
    pub async fn sign_in(
        &self,
        contractor: &ContractorId,
        login: &Login,
        password: &Password,
    ) -> Result<SessionInfo, Error> {
        let _one = self.inner.sign_in_lock.lock().await;
        self.transition(Event::SignInStarted)?;
        let result = async {
            let signer = match &self.inner.device_key {
                Some(key) => key.clone(),
                None => Signer::generate()?,
            };
            let session = self
                .sign_in_redirecting(contractor, login, password, &signer)
                .await?;
            self.save(&session)?;
            Ok(session)
        }
        .await;
        match result {
            Ok(session) => {
                let info = session.info();
                self.transition(Event::SignedIn(session))?;
                tracing::info!(cell = %info.cell_id, "signed in");
                Ok(info)
            }
            Err(e) => {
                self.transition(Event::SignInFailed)?;
                Err(e)
            }
        }
    }

    async fn sign_in_redirecting(
        &self,
        contractor: &ContractorId,
        login: &Login,
        password: &Password,
        signer: &Signer,
    ) -> Result<Session, Error> {
        let map = self.map();
        let first = map
            .map
            .cell_for(contractor)
            .ok_or(Error::UnknownContractor)?;
        let (owner_cell, owner_endpoint) = match self
            .sign_in_at(first, contractor, login, password, signer)
            .await
        {
            Err(Error::WrongCell {
                owner_cell,
                owner_endpoint,
            }) => (owner_cell, owner_endpoint),
            other => return other,
        };
        let untrusted = || Error::UntrustedRedirect {
            owner_cell: owner_cell.clone(),
            owner_endpoint: owner_endpoint.clone(),
        };
        let second = owner_cell
            .as_ref()
            .and_then(|id| map.map.cell(id))
            .ok_or_else(untrusted)?;
        if second.id == first.id
            || owner_endpoint
                .as_deref()
                .is_some_and(|e| !same_endpoint(e, second))
        {
            return Err(untrusted());
        }
        tracing::info!(from = %first.id, to = %second.id, "sign-in redirected once");
        match self
            .sign_in_at(second, contractor, login, password, signer)
            .await
        {
            Err(Error::WrongCell { owner_cell, .. }) => Err(Error::CellsDisagree {
                first: first.id.clone(),
                second: second.id.clone(),
                named_owner: owner_cell,
            }),
            other => other,
        }
    }

    async fn sign_in_at(
        &self,
        cell: &CellEntry,
        contractor: &ContractorId,
        login: &Login,
        password: &Password,
        signer: &Signer,
    ) -> Result<Session, Error> {
        let store = self.inner.store.as_ref();
        let request = SignInRequest {
            contractor_id: contractor.clone(),
            login: login.clone(),
            password: password.clone(),
            client: ClientKind::Field,
            device_token: self
                .inner
                .devices
                .token_for(store, &cell.id, contractor, login),
        };
        let endpoint = endpoint_of(cell)?;
        let resp = self
            .post_json(
                &cell.id,
                &endpoint,
                "/v1/sessions",
                &request,
                Some(signer),
                true,
            )
            .await?;
        let session = session_from(&resp, &cell.id, endpoint, contractor)?
            .with_signer(Some(signer.clone()))?;
        if let Some(token) = device::issued_token(&resp) {
            let subject = &session.info.subject;
            (self.inner.devices).signed_in(store, &cell.id, contractor, login, subject, token);
        }
        Ok(session)
    }
}
