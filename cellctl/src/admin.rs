//! The one admin client of `cellctl`: every call it makes to a cell's auth-service admin API
//! (`protocol::admin::cell`), a cell app's migration interface (`protocol::admin::app`) or the
//! control plane (`protocol::admin::placement`) goes through [`AdminClient`], typed with those
//! shared request and answer types, over the one HTTPS client that trusts only the fleet's CA
//! ([`fleet_description::client_trusting`]) and with the one retry policy ([`RetryPolicy`]).
//!
//! Retries: a request is sent again, after a bounded exponential backoff with jitter, when it
//! failed in transport (connect error, timeout, broken answer) or the service answered 429 or
//! a 5xx (overloaded, restarting, or failing for a moment). A 4xx answer other than 429 is
//! never retried: the request itself was refused (bad token, unknown contractor, a transition
//! the cell does not allow) and sending it again would only repeat the refusal. Every admin
//! request is idempotent at the service (upserts, state transitions to a named state, a
//! revocation already in force is answered as such) except a key rotation, which is retried
//! only when it surely was not carried out: a connect error, 429 or 503.
//!
//! Budget: at most [`RetryPolicy::attempts`] attempts, or, for a client made with
//! [`AdminClient::until`], as many as fit before the deadline (each request's timeout is cut
//! to the time left).
//!
//! This file holds one method per endpoint; `call` (`admin/call.rs`) holds the services
//! ([`Api`]), the errors and how a call is made: the policy, one attempt, the retries around it
//! and the typed answer.

use protocol::admin::app::{
    ActivateRequest, CONTRACTORS_PATH, CompletionsResponse, ContractorOp, ContractorState,
    ExportDoc, ImportResponse, SeedRequest, SeedResponse,
};
use protocol::admin::cell::{
    self, ContractorExport, ContractorUsers, DrainStatus, HeldRevocations, ImportAnswer,
    ImportUsers, OwnershipBulk, OwnershipRecord, OwnershipSet, RevokeAnswer, RevokeRequest,
    Rotation, SessionRecordAnswer, Status, UserChange, UserChanged, UsersImported, WithdrawAnswer,
    WithdrawRequest,
};
use protocol::admin::placement::{self, PLACEMENT_MAP_PATH, Placement, PlacementAnswer};
use protocol::map::SignedMap;
use protocol::{ContractorId, Generation, SessionId, SubjectId};
use reqwest::Method;

mod call;

pub use call::{
    AdminClient, AdminError, Api, Attempted, MAX_ATTEMPTS, QUOTE_CHARS, REQUEST_TIMEOUT_MS,
    RETRY_MAX_DELAY_MS, RETRY_MIN_DELAY_MS, RetryPolicy,
};
use call::{Repeat, expect_some};

/// A state transition of a cell app's copy of a contractor (its migration interface).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppTransition {
    /// Active → frozen: reads served, writes refused (the source, before the final copy).
    Freeze,
    /// Active at this generation (the target, once the control plane names it).
    Activate(Generation),
    /// Released: writes answer `WRONG_CELL` (the source, at the end).
    Release,
}

impl AdminClient {
    // ---- a cell's auth-service (`protocol::admin::cell`) -------------------------------------

    /// `GET /admin/v1/status`.
    pub async fn status(&self, auth: &Api) -> Result<Status, AdminError> {
        self.get(auth, cell::STATUS_PATH).await
    }

    /// `POST /admin/v1/keys/rotate` (retried only when surely not carried out).
    pub async fn rotate_keys(&self, auth: &Api) -> Result<Rotation, AdminError> {
        let r = self
            .typed(
                auth,
                Method::POST,
                cell::KEYS_ROTATE_PATH,
                None,
                Repeat::NotCarriedOut,
                None,
            )
            .await;
        r.result.map(expect_some)?
    }

    /// `POST /admin/v1/users/import`: create or replace many users in one transaction.
    pub async fn import_users(
        &self,
        auth: &Api,
        users: &ImportUsers,
    ) -> Result<UsersImported, AdminError> {
        self.send(auth, Method::POST, cell::USERS_IMPORT_PATH, Some(users))
            .await
            .result
    }

    /// `GET /admin/v1/contractors/{ctr}/users`: a contractor's users at the cell (no hashes).
    pub async fn contractor_users(
        &self,
        auth: &Api,
        ctr: &ContractorId,
    ) -> Result<ContractorUsers, AdminError> {
        self.get(auth, &cell::contractor_users_path(ctr)).await
    }

    /// `PATCH /admin/v1/subjects/{sub}`: `None` when the cell has no such user. Repeating it
    /// is harmless (a password repeated is the same password, under a new salt).
    pub async fn change_user(
        &self,
        auth: &Api,
        sub: &SubjectId,
        change: &UserChange,
    ) -> Result<Option<UserChanged>, AdminError> {
        let body = serde_json::to_vec(change).map_err(|e| AdminError::Decode {
            call: format!("PATCH {}", cell::subject_path(sub)),
            message: e.to_string(),
        })?;
        self.typed(
            auth,
            Method::PATCH,
            &cell::subject_path(sub),
            Some(body),
            Repeat::Idempotent,
            Some(404),
        )
        .await
        .result
    }

    /// `GET /admin/v1/ownership`: every ownership record the cell holds.
    pub async fn ownership_records(&self, auth: &Api) -> Result<OwnershipBulk, AdminError> {
        self.get(auth, cell::OWNERSHIP_PATH).await
    }

    /// `GET /admin/v1/ownership/{ctr}`: the cell's record, `None` when it holds none.
    pub async fn ownership(
        &self,
        auth: &Api,
        ctr: &ContractorId,
    ) -> Result<Option<OwnershipRecord>, AdminError> {
        self.lookup(auth, &cell::ownership_path(ctr)).await
    }

    /// `PUT /admin/v1/ownership/{ctr}`.
    pub async fn set_ownership(
        &self,
        auth: &Api,
        ctr: &ContractorId,
        rec: &OwnershipRecord,
    ) -> Result<OwnershipSet, AdminError> {
        self.send(auth, Method::PUT, &cell::ownership_path(ctr), Some(rec))
            .await
            .result
    }

    /// `GET /admin/v1/drain/{ctr}?seq=S`.
    pub async fn drain(
        &self,
        auth: &Api,
        ctr: &ContractorId,
        seq: u64,
    ) -> Result<DrainStatus, AdminError> {
        self.get(auth, &format!("{}?seq={seq}", cell::drain_path(ctr)))
            .await
    }

    /// `GET /admin/v1/contractors/{ctr}/export`.
    pub async fn export_contractor(
        &self,
        auth: &Api,
        ctr: &ContractorId,
    ) -> Result<ContractorExport, AdminError> {
        self.get(auth, &cell::export_path(ctr)).await
    }

    /// `POST /admin/v1/contractors/{ctr}/import`.
    pub async fn import_contractor(
        &self,
        auth: &Api,
        ctr: &ContractorId,
        doc: &ContractorExport,
    ) -> Result<ImportAnswer, AdminError> {
        self.send(auth, Method::POST, &cell::import_path(ctr), Some(doc))
            .await
            .result
    }

    /// `POST /admin/v1/revocations` (a revocation already in force is answered as such, so a
    /// retry records nothing twice), with the attempts it took.
    pub async fn revoke(&self, auth: &Api, req: &RevokeRequest) -> Attempted<RevokeAnswer> {
        self.send(auth, Method::POST, cell::REVOCATIONS_PATH, Some(req))
            .await
    }

    /// `GET /admin/v1/revocations`: the revocations in force at a cell.
    pub async fn held_revocations(&self, auth: &Api) -> Result<HeldRevocations, AdminError> {
        self.get(auth, cell::REVOCATIONS_PATH).await
    }

    /// `POST /admin/v1/revocations/{seq}/withdraw` (retried only when surely not carried out:
    /// a second withdrawal of the same revocation is a `404`).
    pub async fn withdraw(
        &self,
        auth: &Api,
        seq: u64,
        req: &WithdrawRequest,
    ) -> Result<WithdrawAnswer, AdminError> {
        let body = serde_json::to_vec(req).map_err(|e| AdminError::Decode {
            call: format!("POST {}", cell::withdraw_path(seq)),
            message: format!("the request body: {e}"),
        })?;
        let r = self
            .typed(
                auth,
                Method::POST,
                &cell::withdraw_path(seq),
                Some(body),
                Repeat::NotCarriedOut,
                None,
            )
            .await;
        r.result.map(expect_some)?
    }

    /// `GET /admin/v1/sessions/{jti}`: the cell's record of a session, `None` when it has none.
    pub async fn session(
        &self,
        auth: &Api,
        jti: &SessionId,
    ) -> Result<Option<SessionRecordAnswer>, AdminError> {
        self.lookup(auth, &cell::session_path(jti)).await
    }

    // ---- a cell's app (`protocol::admin::app`) -----------------------------------------------

    /// `PUT /internal/v1/contractors`: the app's copies of new contractors (a contractor it
    /// already holds at a higher generation keeps it).
    pub async fn app_seed(&self, app: &Api, req: &SeedRequest) -> Result<SeedResponse, AdminError> {
        self.send(app, Method::PUT, CONTRACTORS_PATH, Some(req))
            .await
            .result
    }

    /// `GET /internal/v1/contractors/{ctr}/completions`: the job completions the app holds for
    /// a contractor, `None` when it holds no copy of it.
    pub async fn app_completions(
        &self,
        app: &Api,
        ctr: &ContractorId,
    ) -> Result<Option<CompletionsResponse>, AdminError> {
        self.lookup(app, &ContractorOp::Completions.path(ctr)).await
    }

    /// `GET /internal/v1/contractors/{ctr}/export`.
    pub async fn app_export(&self, app: &Api, ctr: &ContractorId) -> Result<ExportDoc, AdminError> {
        self.get(app, &ContractorOp::Export.path(ctr)).await
    }

    /// `POST /internal/v1/contractors/{ctr}/import`.
    pub async fn app_import(
        &self,
        app: &Api,
        ctr: &ContractorId,
        doc: &ExportDoc,
    ) -> Result<ImportResponse, AdminError> {
        let path = ContractorOp::Import.path(ctr);
        self.send(app, Method::POST, &path, Some(doc)).await.result
    }

    /// One of the app's state transitions, `POST /internal/v1/contractors/{ctr}/{op}`:
    /// [`AppTransition::Freeze`], [`AppTransition::Activate`] (at a generation) or
    /// [`AppTransition::Release`]. Each moves to a named state, so repeating it is harmless.
    pub async fn app_transition(
        &self,
        app: &Api,
        ctr: &ContractorId,
        to: AppTransition,
    ) -> Result<ContractorState, AdminError> {
        let (op, body) = match to {
            AppTransition::Freeze => (ContractorOp::Freeze, None),
            AppTransition::Activate(generation) => {
                (ContractorOp::Activate, Some(ActivateRequest { generation }))
            }
            AppTransition::Release => (ContractorOp::Release, None),
        };
        let path = op.path(ctr);
        self.send(app, Method::POST, &path, body.as_ref())
            .await
            .result
    }

    // ---- the control plane (`protocol::admin::placement`) ------------------------------------

    /// `GET /admin/v1/placements/{ctr}`: `None` when the control plane holds none.
    pub async fn placement(
        &self,
        cp: &Api,
        ctr: &ContractorId,
    ) -> Result<Option<Placement>, AdminError> {
        self.lookup(cp, &placement::placement_path(ctr)).await
    }

    /// `PUT /admin/v1/placements/{ctr}` (the control plane publishes a new map).
    pub async fn set_placement(
        &self,
        cp: &Api,
        ctr: &ContractorId,
        p: &Placement,
    ) -> Result<PlacementAnswer, AdminError> {
        let path = placement::placement_path(ctr);
        self.send(cp, Method::PUT, &path, Some(p)).await.result
    }

    /// `GET /v1/placement-map`: the control plane's signed map (not verified here).
    pub async fn placement_map(&self, cp: &Api) -> Result<SignedMap, AdminError> {
        self.get(cp, PLACEMENT_MAP_PATH).await
    }
}
