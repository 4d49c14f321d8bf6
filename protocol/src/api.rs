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

/// Body of `POST /v1/sessions`: `{contractor_id, login, password, client, device_token?}`.
/// `client` may be left out and then means [`ClientKind::Field`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInRequest {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub password: Password,
    #[serde(default = "field")]
    pub client: ClientKind,
    /// The device token an earlier sign-in of this account at this cell gave this device
    /// (ATTACKS A36): with it, failures of other clients cannot lock this device out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<DeviceToken>,
}

/// Longest device token accepted, in bytes.
pub const MAX_DEVICE_TOKEN_BYTES: usize = 256;

/// A device token (ATTACKS A36): proof that this device signed in to one account at one cell
/// before. Opaque to clients; never a session. The constructor only checks size and
/// alphabet (`[A-Za-z0-9_.-]`); the issuing cell verifies it. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct DeviceToken(String);

impl DeviceToken {
    /// Accepts 1 to [`MAX_DEVICE_TOKEN_BYTES`] bytes of `[A-Za-z0-9_.-]`. Never trims.
    pub fn new(s: impl Into<String>) -> Result<Self, crate::IdError> {
        let s = s.into();
        if s.is_empty() {
            return Err(crate::IdError::Empty {
                kind: "device token",
            });
        }
        if s.len() > MAX_DEVICE_TOKEN_BYTES {
            return Err(crate::IdError::TooLong {
                kind: "device token",
                max: MAX_DEVICE_TOKEN_BYTES,
            });
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(crate::IdError::BadCharacter {
                kind: "device token",
                allowed: "[A-Za-z0-9_.-]",
            });
        }
        Ok(Self(s))
    }

    /// The token text, for sending it. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DeviceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceToken(<redacted, {} bytes>)", self.0.len())
    }
}

impl<'de> Deserialize<'de> for DeviceToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DeviceToken {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "A device token: proof that this device signed in to this account at this \
                 cell before. Opaque; never a session. Never log it.",
            ))
            .pattern(Some("^[A-Za-z0-9_.-]+$"))
            .min_length(Some(1))
            .max_length(Some(MAX_DEVICE_TOKEN_BYTES))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for DeviceToken {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("DeviceToken")
    }
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
    /// A device token for this account at this cell (sign-in and rebind of a field client):
    /// keep it beside the session, beyond it, and send it with the next sign-in here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<DeviceToken>,
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
        assert!(r.device_token.is_none(), "no device token unless sent");
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
    fn a_device_token_travels_in_sign_in_and_its_answer_and_never_shows_in_debug() {
        let j = json!({"contractor_id": "c-acme", "login": "ana", "password": "pw",
                       "device_token": "d1.QUJD-_x"});
        let r: SignInRequest = serde_json::from_value(j).unwrap();
        let t = r.device_token.clone().unwrap();
        assert_eq!(t.expose(), "d1.QUJD-_x");
        assert!(!format!("{r:?}").contains("QUJD"), "{r:?}");
        assert_eq!(
            serde_json::to_value(&r).unwrap()["device_token"],
            "d1.QUJD-_x"
        );
        for bad in [
            json!(""),
            json!("has space"),
            json!("a/b"),
            json!("x".repeat(MAX_DEVICE_TOKEN_BYTES + 1)),
            json!(7),
        ] {
            let j = json!({"contractor_id": "c-acme", "login": "ana", "password": "pw",
                           "device_token": bad});
            assert!(serde_json::from_value::<SignInRequest>(j).is_err(), "{bad}");
        }
        let dup = r#"{"contractor_id":"c-acme","login":"ana","password":"pw","device_token":"a","device_token":"b"}"#;
        let e = serde_json::from_str::<SignInRequest>(dup).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
        let answer = json!({
            "session": "aaa.bbb.ccc",
            "session_id": "AAAAAAAAAAAAAAAAAAAAAA",
            "cell_id": "cell-eu-1",
            "endpoint": "https://eu-1.example",
            "generation": 3,
            "expires_at": 1_790_000_000u64,
            "subject": "user-1",
            "device_token": "d1.QUJD",
        });
        let r: SignInResponse = serde_json::from_value(answer.clone()).unwrap();
        assert_eq!(
            r.device_token.as_ref().map(DeviceToken::expose),
            Some("d1.QUJD")
        );
        assert_eq!(serde_json::to_value(&r).unwrap(), answer);
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
