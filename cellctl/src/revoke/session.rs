//! The fan-out of `revoke session JTI --cell CELL`: the minting cell's record of the session
//! names its contractor, whose cells are asked too (ATTACKS A28).

use fleet_description::FleetCell;
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, SessionId};

use crate::admin::{AdminClient, Api};

/// What the cell that minted a session says about it.
#[derive(Debug)]
enum SessionLookup {
    /// Its record: the session's contractor and expiry.
    Known {
        contractor: ContractorId,
        expires_at: UnixSeconds,
    },
    /// The cell never minted it (or forgot it).
    Unknown,
    /// The cell could not be asked, or answered something else.
    Failed(String),
}

/// `GET /admin/v1/sessions/{jti}` at the named cell.
async fn look_up_session(admin: &AdminClient, cell: &FleetCell, jti: &SessionId) -> SessionLookup {
    let auth = match Api::auth(cell) {
        Ok(a) => a,
        Err(e) => return SessionLookup::Failed(e.to_string()),
    };
    match admin.session(&auth, jti).await {
        Ok(Some(a)) => SessionLookup::Known {
            contractor: a.session.contractor,
            expires_at: a.session.expires_at,
        },
        Ok(None) => SessionLookup::Unknown,
        Err(e) => SessionLookup::Failed(e.to_string()),
    }
}

/// The revocation of `revoke session JTI --cell CELL`, and what the fan-out adds to the report:
/// the session's contractor when the minting cell knows it (every cell that holds the
/// contractor is then asked too), or a note or an unresolved fan-out when it does not.
pub(super) async fn session_revocation(
    admin: &AdminClient,
    named_cell: &FleetCell,
    jti: &SessionId,
    now: UnixSeconds,
) -> (RevocationKind, SessionFanout) {
    // Without the record the expiry is unknown: the longest a session can live is an upper
    // bound (the minting cell keeps it until the recorded expiry anyway).
    let longest = now + protocol::token::DEFAULT_SESSION_LIFETIME_S + protocol::token::LEEWAY_S;
    match look_up_session(admin, named_cell, jti).await {
        SessionLookup::Known {
            contractor,
            expires_at,
        } => (
            RevocationKind::Session {
                jti: jti.clone(),
                // Every cell keeps it as long as the session (and so any ticket for it) lives.
                exp: expires_at.saturating_add(protocol::token::LEEWAY_S),
            },
            SessionFanout {
                contractor: Some(contractor),
                ..SessionFanout::default()
            },
        ),
        SessionLookup::Unknown => (
            RevocationKind::Session {
                jti: jti.clone(),
                exp: longest,
            },
            SessionFanout {
                note: Some(format!(
                    "{} holds no record of this session: revoked there only, no other cell asked",
                    named_cell.id
                )),
                ..SessionFanout::default()
            },
        ),
        SessionLookup::Failed(e) => (
            RevocationKind::Session {
                jti: jti.clone(),
                exp: longest,
            },
            SessionFanout {
                unresolved: Some(format!(
                    "{} could not be asked which contractor the session belongs to, so the cells \
                     that hold it were not asked: {e}",
                    named_cell.id
                )),
                ..SessionFanout::default()
            },
        ),
    }
}

/// What a session revocation's fan-out adds to the report.
#[derive(Debug, Default)]
pub(super) struct SessionFanout {
    pub(super) contractor: Option<ContractorId>,
    pub(super) note: Option<String>,
    pub(super) unresolved: Option<String>,
}
