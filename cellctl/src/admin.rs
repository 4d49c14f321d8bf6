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
//! This file holds the services ([`Api`]), the errors and one method per endpoint; `call`
//! (`admin/call.rs`) holds how a call is made: the policy, one attempt, the retries around it
//! and the typed answer.

use std::time::Instant;

use fleet_description::{FleetCell, FleetFile};
use protocol::admin::app::{
    ActivateRequest, ContractorOp, ContractorState, ExportDoc, ImportResponse,
};
use protocol::admin::cell::{
    self, ContractorExport, DrainStatus, HeldRevocations, ImportAnswer, OwnershipRecord,
    OwnershipSet, RevokeAnswer, RevokeRequest, Rotation, SessionRecordAnswer, Status,
    WithdrawAnswer, WithdrawRequest,
};
use protocol::admin::placement::{self, PLACEMENT_MAP_PATH, Placement, PlacementAnswer};
use protocol::map::SignedMap;
use protocol::{ContractorId, Endpoint, ErrorCode, Generation, SessionId};
use reqwest::Method;
use runtime::Secret;

mod call;

pub use call::{
    MAX_ATTEMPTS, QUOTE_CHARS, REQUEST_TIMEOUT_MS, RETRY_MAX_DELAY_MS, RETRY_MIN_DELAY_MS,
    RetryPolicy,
};
use call::{Repeat, expect_some};

/// One service's admin API: where it is (one URL, or its replicas' in order) and the token it
/// accepts.
#[derive(Debug, Clone)]
pub struct Api {
    /// At least one; a retry goes to the next (a replica that died is skipped).
    bases: Vec<Endpoint>,
    token: Secret,
}

impl Api {
    /// A service at `base` accepting `token`.
    pub fn new(base: Endpoint, token: Secret) -> Self {
        Api {
            bases: vec![base],
            token,
        }
    }

    /// A cell's auth-service admin API (its replicas' internal listeners, replica 0 first, the
    /// cell's own admin token): each retry of a call goes to the next replica.
    pub fn auth(cell: &FleetCell) -> fleet_description::Result<Api> {
        let mut bases = vec![cell.auth_admin_endpoint()?];
        for r in cell.replicas().iter().skip(1) {
            bases.push(Endpoint::parse(&r.url).map_err(|e| {
                fleet_description::Error::Config(format!("cells[].auth_services[].url: {e}"))
            })?);
        }
        Ok(Api {
            bases,
            token: cell.admin(),
        })
    }

    /// A cell's app migration interface (its internal listener, the app's own internal token;
    /// never the cell's admin token, which the app does not hold).
    pub fn app(cell: &FleetCell) -> fleet_description::Result<Api> {
        Ok(Api::new(cell.app_internal_endpoint()?, cell.app_internal()))
    }

    /// The control plane's admin API (the control plane's own token).
    pub fn control_plane(fleet: &FleetFile) -> fleet_description::Result<Api> {
        Ok(Api::new(
            fleet.control_plane_endpoint()?,
            fleet.control_plane_admin(),
        ))
    }

    /// The service's (first) base URL.
    pub fn base(&self) -> &Endpoint {
        &self.bases[0]
    }

    /// The URL of `path` at the base of attempt `n` (1-based): attempts rotate over the bases.
    fn url(&self, n: usize, path: &str) -> String {
        self.bases[n.saturating_sub(1) % self.bases.len()].join(path)
    }
}

/// Why an admin call failed (after its retries).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No answer: connect error, timeout, or a broken answer.
    #[error("{call}: {message}")]
    Transport { call: String, message: String },
    /// The service answered with a status other than the one expected.
    #[error("{call} answered {status}: {detail}")]
    Refused {
        call: String,
        status: u16,
        /// The error code of the answer, when it was an [`ErrorBody`].
        code: Option<ErrorCode>,
        detail: String,
    },
    /// A 2xx answer that is not the endpoint's answer type.
    #[error("{call}: unexpected answer: {message}")]
    Decode { call: String, message: String },
}

impl AdminError {
    /// The status the service answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            AdminError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

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

/// A result with the number of attempts it took.
#[derive(Debug)]
pub struct Attempted<T> {
    pub result: Result<T, AdminError>,
    pub attempts: usize,
}

/// The typed admin client (see the module documentation). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdminClient {
    http: reqwest::Client,
    policy: RetryPolicy,
    deadline: Option<Instant>,
}

impl AdminClient {
    /// A client over `http` (an HTTPS client trusting the fleet's CA) with the default policy.
    pub fn new(http: reqwest::Client) -> Self {
        AdminClient {
            http,
            policy: RetryPolicy::default(),
            deadline: None,
        }
    }

    /// A client trusting the CA of `fleet`.
    pub fn for_fleet(fleet: &FleetFile) -> fleet_description::Result<Self> {
        Ok(AdminClient::new(fleet_description::client_trusting_file(
            &fleet.ca_cert,
        )?))
    }

    /// The same client, retrying until `deadline` instead of a number of attempts.
    pub fn until(&self, deadline: Instant) -> Self {
        AdminClient {
            deadline: Some(deadline),
            ..self.clone()
        }
    }

    /// The HTTPS client underneath (for the few calls that are not admin calls).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

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
