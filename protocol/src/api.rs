//! HTTP bodies of the session endpoints (DESIGN §4), shared by the auth-service (which reads
//! requests and writes answers) and the SDK (which writes requests and reads answers), so the
//! two sides cannot drift apart.
//!
//! | Endpoint                         | Request            | Answer                   |
//! |----------------------------------|--------------------|--------------------------|
//! | `POST /v1/sessions`              | [`SignInRequest`]  | `201` [`SignInResponse`] |
//! | `POST /v1/sessions/renew`        | (none)             | `201` [`SignInResponse`] (bearer), [`CookieSessionResponse`] (cookie) |
//! | `POST /v1/sessions/transfer`     | (none)             | `200` [`TransferResponse`] |
//! | `POST /v1/sessions/rebind`       | [`RebindRequest`]  | `201` [`SignInResponse`] |
//! | `POST /v1/sessions/transfer/status` | [`TransferStatusRequest`] | `200` [`TransferStatusResponse`] |
//!
//! `transfer/status` is asked by a target cell of the ticket's source cell, through the
//! source's public endpoint, before it rebinds ([`TRANSFER_STATUS_PATH`]).
//!
//! Members a body does not declare are ignored, except in [`RebindRequest`] (and so
//! [`TransferStatusRequest`]), which refuses them; a member given twice is always refused.

use serde::{Deserialize, Serialize};

use crate::ids::{
    CellId, ClientKind, ContractorId, Generation, Login, Password, SessionId, SessionToken,
    SubjectId,
};
use crate::time::UnixSeconds;

/// Path of the transfer status a target cell asks a ticket's source cell for.
pub const TRANSFER_STATUS_PATH: &str = "/v1/sessions/transfer/status";

/// Body of `POST /v1/sessions`: `{contractor_id, login, password, client}`. `client` may be
/// left out and then means [`ClientKind::Field`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInRequest {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub password: Password,
    #[serde(default = "field")]
    pub client: ClientKind,
}

fn field() -> ClientKind {
    ClientKind::Field
}

/// The `201` answer of sign-in, renewal and rebind:
/// `{session, session_id, cell_id, endpoint, generation, expires_at, subject}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInResponse {
    /// The session token.
    pub session: SessionToken,
    /// Everything else the answer says about the session (its members, flattened).
    #[serde(flatten)]
    pub issued: IssuedSession,
}

/// What every answer that issues a session says about it, the token aside:
/// `{session_id, cell_id, endpoint, generation, expires_at, subject}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssuedSession {
    /// The session's id (`jti`).
    pub session_id: SessionId,
    /// The cell that issued the session.
    pub cell_id: CellId,
    /// That cell's public endpoint.
    pub endpoint: String,
    /// The contractor's ownership generation the session is bound to.
    pub generation: Generation,
    /// Expiry of the session, in unix seconds.
    pub expires_at: UnixSeconds,
    /// The signed-in user.
    pub subject: SubjectId,
}

/// The `201` answer of a renewal made with the session cookie: the new session travels only in
/// `Set-Cookie` (HttpOnly), never in a body a script could read (ATTACKS A24). The members of
/// [`SignInResponse`] without `session`.
pub type CookieSessionResponse = IssuedSession;

/// The `200` answer of `POST /v1/sessions/transfer`: `{ticket, target_cell, target_endpoint}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TransferResponse {
    /// The one-use transfer ticket.
    pub ticket: SessionToken,
    /// The cell the contractor was released to.
    pub target_cell: CellId,
    /// That cell's endpoint, as the source cell's map names it.
    pub target_endpoint: String,
}

/// Body of `POST /v1/sessions/rebind`: `{ticket}`. Unknown members are refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RebindRequest {
    pub ticket: String,
}

/// Body of `POST /v1/sessions/transfer/status`: the ticket, as the target received it.
pub type TransferStatusRequest = RebindRequest;

/// The `200` answer of `POST /v1/sessions/transfer/status`: the source cell signed this
/// ticket and it is valid there; `session` says whether the session it carries is still in
/// force at the source (a sign-out or any revocation there makes it `revoked`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TransferStatusResponse {
    pub session: TransferredSession,
}

/// Whether the session a ticket carries is still in force at its source cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TransferredSession {
    /// Not revoked at the source: the target may rebind it.
    Active,
    /// Revoked at the source (signed out, or revoked by an operator): never rebound.
    Revoked,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn sign_in_request_round_trip() {
        let j =
            json!({"contractor_id": "c-acme", "login": "ana", "password": "pw", "client": "desk"});
        let r: SignInRequest = serde_json::from_value(j).unwrap();
        assert_eq!(r.client, ClientKind::Desk);
        let out = serde_json::to_value(&r).unwrap();
        assert_eq!(keys(&out), ["client", "contractor_id", "login", "password"]);
        assert_eq!(out["client"], "desk");
        assert_eq!(out["contractor_id"], "c-acme");
        assert_eq!(out["login"], "ana");
        assert_eq!(out["password"], "pw");
        // `client` defaults to field; unknown members are ignored.
        let r: SignInRequest = serde_json::from_value(
            json!({"contractor_id": "c-acme", "login": "ana", "password": "pw", "extra": 1}),
        )
        .unwrap();
        assert_eq!(r.client, ClientKind::Field);
        // A member given twice is refused.
        let dup = r#"{"contractor_id":"c-acme","login":"ana","login":"bo","password":"pw"}"#;
        let e = serde_json::from_str::<SignInRequest>(dup).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
    }

    #[test]
    fn transfer_status_round_trip() {
        for (session, wire) in [
            (TransferredSession::Active, "active"),
            (TransferredSession::Revoked, "revoked"),
        ] {
            let a = TransferStatusResponse { session };
            let v = serde_json::to_value(&a).unwrap();
            assert_eq!(v, json!({ "session": wire }));
            assert_eq!(
                serde_json::from_value::<TransferStatusResponse>(v).unwrap(),
                a
            );
        }
        assert!(
            serde_json::from_value::<TransferStatusResponse>(json!({"session": "maybe"})).is_err()
        );
        let dup = r#"{"session":"active","session":"revoked"}"#;
        let e = serde_json::from_str::<TransferStatusResponse>(dup).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
    }

    #[test]
    fn sign_in_response_round_trip() {
        let j = json!({
            "session": "aaa.bbb.ccc",
            "session_id": "AAAAAAAAAAAAAAAAAAAAAA",
            "cell_id": "cell-eu-1",
            "endpoint": "https://eu-1.example",
            "generation": 3,
            "expires_at": 1_790_000_000u64,
            "subject": "user-1",
        });
        let r: SignInResponse = serde_json::from_value(j.clone()).unwrap();
        assert_eq!(r.issued.generation, Generation(3));
        assert_eq!(r.issued.expires_at, 1_790_000_000);
        assert_eq!(serde_json::to_value(&r).unwrap(), j);
        let dup = r#"{"session":"a.b.c","session":"a.b.c","session_id":"AAAAAAAAAAAAAAAAAAAAAA","cell_id":"cell-eu-1","endpoint":"e","generation":1,"expires_at":1,"subject":"u"}"#;
        let e = serde_json::from_str::<SignInResponse>(dup).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
        // The same for a member of the flattened part.
        let dup = r#"{"session":"a.b.c","session_id":"AAAAAAAAAAAAAAAAAAAAAA","cell_id":"cell-eu-1","endpoint":"e","generation":1,"generation":2,"expires_at":1,"subject":"u"}"#;
        let e = serde_json::from_str::<SignInResponse>(dup).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
        // A cookie renewal's answer is the same without `session`.
        let mut cookie = j.clone();
        cookie.as_object_mut().unwrap().remove("session");
        let c: CookieSessionResponse = serde_json::from_value(cookie.clone()).unwrap();
        assert_eq!(serde_json::to_value(&c).unwrap(), cookie);
        assert_eq!(serde_json::to_value(&r.issued).unwrap(), cookie);
    }

    #[test]
    fn transfer_and_rebind_round_trip() {
        let j = json!({
            "ticket": "aaa.bbb.ccc",
            "target_cell": "cell-us-1",
            "target_endpoint": "https://us-1.example",
        });
        let t: TransferResponse = serde_json::from_value(j.clone()).unwrap();
        assert_eq!(t.ticket.expose(), "aaa.bbb.ccc");
        assert_eq!(serde_json::to_value(&t).unwrap(), j);

        let r = RebindRequest {
            ticket: "aaa.bbb.ccc".into(),
        };
        let out = serde_json::to_value(&r).unwrap();
        assert_eq!(out, json!({"ticket": "aaa.bbb.ccc"}));
        assert_eq!(
            serde_json::from_value::<RebindRequest>(out).unwrap().ticket,
            "aaa.bbb.ccc"
        );
        assert!(serde_json::from_value::<RebindRequest>(json!({"ticket": "t", "x": 1})).is_err());
        let e =
            serde_json::from_str::<RebindRequest>(r#"{"ticket":"t","ticket":"u"}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
    }
}
