//! A cell auth-service's admin and internal API (`/admin/v1/*`, on its internal listener,
//! bearer admin token), as types. The auth-service reads the requests and writes the answers
//! with them; `cellctl` writes the requests and reads the answers with the same types.
//!
//! | method and path                                  | request (body or query)     | answer                       |
//! |--------------------------------------------------|-----------------------------|------------------------------|
//! | `POST /admin/v1/users`                           | [`NewUser`]                 | `201` [`UserCreated`]        |
//! | `POST /admin/v1/users/import`                    | [`ImportUsers`]             | `200` [`UsersImported`]      |
//! | `PUT /admin/v1/ownership`                        | [`OwnershipBulk`]           | `200` [`OwnershipSet`]       |
//! | `GET /admin/v1/ownership`                        | —                           | `200` [`OwnershipBulk`]      |
//! | `PUT /admin/v1/ownership/{ctr}`                  | [`OwnershipRecord`]         | `200` [`OwnershipSet`]       |
//! | `GET /admin/v1/ownership/{ctr}`                  | —                           | `200` [`OwnershipRecord`] or `404` |
//! | `GET /admin/v1/keys`                             | —                           | `200` [`Keys`]               |
//! | `POST /admin/v1/keys/rotate`                     | —                           | `200` [`Rotation`]           |
//! | `POST /admin/v1/keys/{kid}/revoke`               | [`KeyRevokeRequest`]        | `200` [`KeyRevoked`]         |
//! | `POST /admin/v1/revocations`                     | [`RevokeRequest`]           | `200` [`RevokeAnswer`]       |
//! | `GET /admin/v1/revocations`                      | —                           | `200` [`HeldRevocations`]    |
//! | `POST /admin/v1/revocations/{seq}/withdraw`      | [`WithdrawRequest`]         | `200` [`WithdrawAnswer`] or `404` |
//! | `GET /admin/v1/audit/revocations`                | query [`AuditQuery`]        | `200` [`Revocation`] per line (`jsonl`) or `Vec<Revocation>` (`json`) |
//! | `GET /admin/v1/subjects/{sub}/sessions`          | —                           | `200` [`SubjectSessions`]    |
//! | `PATCH /admin/v1/subjects/{sub}`                 | [`UserChange`]              | `200` [`UserChanged`] or `404` |
//! | `GET /admin/v1/contractors/{ctr}/users`          | —                           | `200` [`ContractorUsers`]    |
//! | `GET /admin/v1/sessions/{jti}`                   | —                           | `200` [`SessionRecordAnswer`] or `404` |
//! | `PUT /admin/v1/placement-map`                    | a signed map ([`crate::map::SignedMap`], its bytes are verified) | `200` [`MapAccepted`] |
//! | `GET /admin/v1/status`                           | —                           | `200` [`Status`]             |
//! | `GET /admin/v1/contractors/{ctr}/export`         | —                           | `200` [`ContractorExport`]   |
//! | `POST /admin/v1/contractors/{ctr}/import`        | [`ContractorExport`]        | `200` [`ImportAnswer`]       |
//! | `GET /admin/v1/drain/{ctr}?seq=S`                | query [`DrainQuery`]        | `200` [`DrainStatus`]        |
//!
//! Refusals are the JSON [`crate::ErrorBody`] of DESIGN §4 (400 `INVALID_REQUEST`, 403
//! `FORBIDDEN` for a missing or wrong admin token, 404 `NOT_FOUND`, 413). The cell state feed
//! (`GET /internal/v1/feed`, feed token) has its types in [`crate::feed`].
//!
//! Request bodies refuse members they do not declare (except [`RevokeRequest`], whose kind is
//! flattened); answers are read leniently by clients.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::feed::{FeedKey, KeyStatus};
use crate::ids::{
    CellId, ClientKind, ContractorId, Generation, Kid, Login, Password, PasswordHash, SessionId,
    SubjectId,
};
pub use crate::ownership::OwnershipRecord;
pub use crate::revocation::{Revocation, RevocationKind};
use crate::time::UnixSeconds;

/// Prefix of every admin path.
pub const ADMIN_PREFIX: &str = "/admin/v1";
/// `POST`: create or replace one user.
pub const USERS_PATH: &str = "/admin/v1/users";
/// `POST`: create or replace many users in one transaction.
pub const USERS_IMPORT_PATH: &str = "/admin/v1/users/import";
/// `PUT`: many ownership records in one transaction; `GET`: every record held.
pub const OWNERSHIP_PATH: &str = "/admin/v1/ownership";
/// `GET`: the published keys.
pub const KEYS_PATH: &str = "/admin/v1/keys";
/// `POST`: rotate the signing key now.
pub const KEYS_ROTATE_PATH: &str = "/admin/v1/keys/rotate";
/// `POST`: record a revocation; `GET`: the revocations in force.
pub const REVOCATIONS_PATH: &str = "/admin/v1/revocations";
/// `GET`: the revocation audit log.
pub const AUDIT_REVOCATIONS_PATH: &str = "/admin/v1/audit/revocations";
/// `PUT`: push a signed placement map.
pub const PLACEMENT_MAP_PATH: &str = "/admin/v1/placement-map";
/// `GET`: the cell's status.
pub const STATUS_PATH: &str = "/admin/v1/status";

/// `GET|PUT`: one contractor's ownership record ([`ownership_path`]).
pub const OWNERSHIP_ROUTE: &str = "/admin/v1/ownership/{ctr}";
/// `POST`: revoke a signing key ([`key_revoke_path`]).
pub const KEY_REVOKE_ROUTE: &str = "/admin/v1/keys/{kid}/revoke";
/// `GET`: a subject's sessions ([`subject_sessions_path`]).
pub const SUBJECT_SESSIONS_ROUTE: &str = "/admin/v1/subjects/{sub}/sessions";
/// `PATCH`: change one user's role, status or password ([`subject_path`]).
pub const SUBJECT_ROUTE: &str = "/admin/v1/subjects/{sub}";
/// `GET`: a contractor's users, without their password hashes ([`contractor_users_path`]).
pub const CONTRACTOR_USERS_ROUTE: &str = "/admin/v1/contractors/{ctr}/users";
/// `GET`: one recorded session ([`session_path`]).
pub const SESSION_ROUTE: &str = "/admin/v1/sessions/{jti}";
/// `POST`: withdraw the revocation in force at a sequence number ([`withdraw_path`]).
pub const WITHDRAW_ROUTE: &str = "/admin/v1/revocations/{seq}/withdraw";
/// `GET`: a contractor's export document ([`export_path`]).
pub const EXPORT_ROUTE: &str = "/admin/v1/contractors/{ctr}/export";
/// `POST`: import a contractor's export document ([`import_path`]).
pub const IMPORT_ROUTE: &str = "/admin/v1/contractors/{ctr}/import";
/// `GET`: the migration drain of a contractor ([`drain_path`]).
pub const DRAIN_ROUTE: &str = "/admin/v1/drain/{ctr}";

/// `GET|PUT /admin/v1/ownership/{ctr}`.
pub fn ownership_path(ctr: &ContractorId) -> String {
    super::fill(OWNERSHIP_ROUTE, ctr.as_str())
}

/// `POST /admin/v1/keys/{kid}/revoke`.
pub fn key_revoke_path(kid: &Kid) -> String {
    super::fill(KEY_REVOKE_ROUTE, kid.as_str())
}

/// `GET /admin/v1/subjects/{sub}/sessions`.
pub fn subject_sessions_path(sub: &SubjectId) -> String {
    super::fill(SUBJECT_SESSIONS_ROUTE, sub.as_str())
}

/// `PATCH /admin/v1/subjects/{sub}`.
pub fn subject_path(sub: &SubjectId) -> String {
    super::fill(SUBJECT_ROUTE, sub.as_str())
}

/// `GET /admin/v1/contractors/{ctr}/users`.
pub fn contractor_users_path(ctr: &ContractorId) -> String {
    super::fill(CONTRACTOR_USERS_ROUTE, ctr.as_str())
}

/// `GET /admin/v1/sessions/{jti}`.
pub fn session_path(jti: &SessionId) -> String {
    super::fill(SESSION_ROUTE, jti.as_str())
}

/// `POST /admin/v1/revocations/{seq}/withdraw`.
pub fn withdraw_path(seq: u64) -> String {
    super::fill(WITHDRAW_ROUTE, &seq.to_string())
}

/// `GET /admin/v1/contractors/{ctr}/export`.
pub fn export_path(ctr: &ContractorId) -> String {
    super::fill(EXPORT_ROUTE, ctr.as_str())
}

/// `POST /admin/v1/contractors/{ctr}/import`.
pub fn import_path(ctr: &ContractorId) -> String {
    super::fill(IMPORT_ROUTE, ctr.as_str())
}

/// `GET /admin/v1/drain/{ctr}` (add the [`DrainQuery`]).
pub fn drain_path(ctr: &ContractorId) -> String {
    super::fill(DRAIN_ROUTE, ctr.as_str())
}

// ---- users ----------------------------------------------------------------------------------

/// What a user may do in the product (carried for the app; the token does not distinguish).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Technician,
    Dispatcher,
}

impl Role {
    /// The wire name (`technician`, `dispatcher`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Technician => "technician",
            Role::Dispatcher => "dispatcher",
        }
    }

    /// The role named `s` (its wire name).
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "technician" => Some(Role::Technician),
            "dispatcher" => Some(Role::Dispatcher),
            _ => None,
        }
    }
}

/// Whether a user may sign in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum UserStatus {
    #[default]
    Active,
    Disabled,
}

impl UserStatus {
    /// The wire name (`active`, `disabled`).
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Active => "active",
            UserStatus::Disabled => "disabled",
        }
    }

    /// The status named `s` (its wire name).
    pub fn parse(s: &str) -> Option<UserStatus> {
        match s {
            "active" => Some(UserStatus::Active),
            "disabled" => Some(UserStatus::Disabled),
            _ => None,
        }
    }
}

/// Body of `POST /admin/v1/users` (and one entry of [`ImportUsers`]): exactly one of
/// `password` and `password_hash` (an argon2id PHC string at least as strong as the cell's).
/// `Debug` shows neither.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub contractor_id: ContractorId,
    pub login: Login,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Password>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<PasswordHash>,
    #[serde(default)]
    pub status: UserStatus,
}

/// `201` answer of `POST /admin/v1/users`: `{subject}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserCreated {
    pub subject: SubjectId,
}

/// Body of `POST /admin/v1/users/import`: `{users}` (one transaction).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImportUsers {
    pub users: Vec<NewUser>,
}

/// Answer of `POST /admin/v1/users/import`: `{imported}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsersImported {
    pub imported: u64,
}

/// Body of `PATCH /admin/v1/subjects/{sub}`: what to change of one user (at least one
/// member). A password is hashed by the cell; `Debug` never shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UserChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<UserStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Password>,
}

impl UserChange {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        self.role.is_none() && self.status.is_none() && self.password.is_none()
    }
}

/// Answer of `PATCH /admin/v1/subjects/{sub}`: `changed` is `false` when the user already
/// was as asked (a password is always changed: a new salt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserChanged {
    pub subject: SubjectId,
    pub changed: bool,
}

/// One user of [`ContractorUsers`]: never its password hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListedUser {
    pub login: Login,
    pub subject: SubjectId,
    pub role: Role,
    pub status: UserStatus,
}

/// Answer of `GET /admin/v1/contractors/{ctr}/users`, by login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContractorUsers {
    pub contractor_id: ContractorId,
    pub users: Vec<ListedUser>,
}

// ---- ownership ------------------------------------------------------------------------------

/// Body of `PUT /admin/v1/ownership` (one transaction) and answer of its `GET`: `{records}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OwnershipBulk {
    pub records: BTreeMap<ContractorId, OwnershipRecord>,
}

/// Answer of both ownership `PUT`s: `{seq}`, the feed head after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OwnershipSet {
    pub seq: u64,
}

// ---- keys -----------------------------------------------------------------------------------

/// Answer of `GET /admin/v1/keys`: `{keys}`, every published key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Keys {
    pub keys: Vec<FeedKey>,
}

/// Answer of `POST /admin/v1/keys/rotate`: the key ids after the rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rotation {
    pub current: Kid,
    pub next: Kid,
    pub retired: Vec<Kid>,
}

/// The audit fields of an operator's change: why and who (the body of `POST
/// /admin/v1/keys/{kid}/revoke` and of `POST /admin/v1/revocations/{seq}/withdraw`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditFields {
    /// 1 to 512 bytes of printable text (the schema: printable ASCII, not blank).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^[ -~]*[!-~][ -~]*$")
    )]
    pub reason: String,
    /// 1 to 512 bytes of printable text (the schema: printable ASCII, not blank).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^[ -~]*[!-~][ -~]*$")
    )]
    pub by: String,
}

/// Body of `POST /admin/v1/keys/{kid}/revoke`.
pub type KeyRevokeRequest = AuditFields;

/// Answer of `POST /admin/v1/keys/{kid}/revoke`: `{seq, revoked}` (`revoked` is `false` when
/// the key was revoked already).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyRevoked {
    pub seq: u64,
    pub revoked: bool,
}

// ---- revocations ----------------------------------------------------------------------------

/// Body of `POST /admin/v1/revocations`: a revocation kind (flattened: `{"kind": …, …}`) with
/// its audit fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeRequest {
    #[serde(flatten)]
    pub kind: RevocationKind,
    /// 1 to 512 bytes of printable text (the schema: printable ASCII, not blank).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^[ -~]*[!-~][ -~]*$")
    )]
    pub reason: String,
    /// 1 to 512 bytes of printable text (the schema: printable ASCII, not blank).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 512, pattern = "^[ -~]*[!-~][ -~]*$")
    )]
    pub by: String,
}

/// What became of one revocation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RevokeOutcome {
    /// Recorded now.
    Applied,
    /// The same revocation was already in force (a retry, or a repeated request).
    Already,
}

/// Answer of `POST /admin/v1/revocations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeAnswer {
    /// Sequence number of the revocation in force.
    pub seq: u64,
    /// Whether this request recorded it (`false` when it was already in force).
    pub revoked: bool,
    pub outcome: RevokeOutcome,
    /// The cell's feed head after the request.
    pub head: u64,
    #[serde(flatten)]
    pub kind: RevocationKind,
}

/// Answer of `GET /admin/v1/revocations`: every revocation in force at the cell, by sequence
/// number (what `POST /admin/v1/revocations/{seq}/withdraw` names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldRevocations {
    /// The cell's feed head.
    pub head: u64,
    pub revocations: Vec<Revocation>,
}

/// Body of `POST /admin/v1/revocations/{seq}/withdraw`.
pub type WithdrawRequest = AuditFields;

/// Answer of `POST /admin/v1/revocations/{seq}/withdraw`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WithdrawAnswer {
    /// The withdrawal's position in the feed (edges apply it from there).
    pub seq: u64,
    /// The cell's feed head after the request.
    pub head: u64,
    /// The revocation withdrawn, with its `withdrawn` audit fields.
    pub withdrawn: Revocation,
}

/// Format of the audit export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AuditFormat {
    /// One [`Revocation`] per line (`application/x-ndjson`).
    #[default]
    Jsonl,
    /// One JSON array of [`Revocation`].
    Json,
}

/// Query of `GET /admin/v1/audit/revocations`: `after=SEQ&limit=N&format=jsonl|json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only entries with a larger sequence number.
    #[serde(default)]
    pub after: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `jsonl` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<AuditFormat>,
}

/// A session as the cell minted it (sign-in, renewal, rebind). Tokens themselves are never
/// recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRecord {
    pub session_id: SessionId,
    pub subject: SubjectId,
    pub contractor: ContractorId,
    pub client: ClientKind,
    pub kid: Kid,
    pub generation: Generation,
    pub issued_at: UnixSeconds,
    pub expires_at: UnixSeconds,
    pub auth_time: UnixSeconds,
}

/// One entry of [`SubjectSessions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListedSession {
    #[serde(flatten)]
    pub session: SessionRecord,
    /// When an edge last served it; edges do not report use, so this is unknown (`null`).
    pub last_seen: Option<UnixSeconds>,
}

/// Answer of `GET /admin/v1/subjects/{sub}/sessions`: the subject's sessions minted at this
/// cell that have not expired and are not revoked, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubjectSessions {
    pub subject: SubjectId,
    pub sessions: Vec<ListedSession>,
}

/// Answer of `GET /admin/v1/sessions/{jti}`: the recorded session, revoked or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRecordAnswer {
    pub session: SessionRecord,
    pub revoked: bool,
}

// ---- placement map and status ---------------------------------------------------------------

/// Answer of `PUT /admin/v1/placement-map`: `{version, seq}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MapAccepted {
    pub version: u64,
    pub seq: u64,
}

/// A published key id and its status, in [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KidStatus {
    pub kid: Kid,
    pub status: KeyStatus,
}

/// An edge instance as the feed last saw it, in [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceSeen {
    pub id: String,
    pub applied_seq: u64,
    pub last_seen: UnixSeconds,
    /// Contractors in handoff for which it reported writes still in flight (migration drain).
    pub busy: Vec<ContractorId>,
}

/// Answer of `GET /admin/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Status {
    pub cell_id: CellId,
    /// The feed head.
    pub seq: u64,
    pub kids: Vec<KidStatus>,
    pub map_version: Option<u64>,
    pub users: u64,
    pub contractors: u64,
    /// Sorted by id.
    pub instances: Vec<InstanceSeen>,
}

// ---- migration ------------------------------------------------------------------------------

/// Schema version of [`ContractorExport`].
pub const EXPORT_SCHEMA: u32 = 1;

/// One exported user: password hash only, never a password. `Debug` never shows the hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExportedUser {
    pub login: Login,
    pub role: Role,
    /// argon2id PHC string.
    pub password_hash: PasswordHash,
    pub status: UserStatus,
}

/// Answer of `GET /admin/v1/contractors/{ctr}/export` and body of its `import`: a
/// contractor's credentials and the revocations that concern it, as moved by a migration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ContractorExport {
    /// [`EXPORT_SCHEMA`].
    pub schema: u32,
    pub contractor_id: ContractorId,
    pub users: Vec<ExportedUser>,
    pub revocations: Vec<Revocation>,
}

/// Answer of `POST /admin/v1/contractors/{ctr}/import`: users upserted, revocations added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImportAnswer {
    pub users: u64,
    pub revocations: u64,
}

/// Query of `GET /admin/v1/drain/{ctr}`: `seq=S`, the feed sequence every live edge instance
/// must have applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrainQuery {
    pub seq: u64,
}

/// One instance's part of a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrainInstance {
    pub id: String,
    pub applied_seq: u64,
    pub last_seen: UnixSeconds,
    /// Whether its lease is current (only those count).
    pub live: bool,
    /// Whether it still reports a write in flight for the contractor.
    pub busy: bool,
}

/// Answer of `GET /admin/v1/drain/{ctr}?seq=S`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DrainStatus {
    pub contractor_id: ContractorId,
    pub seq: u64,
    /// Every live instance has applied `seq` and has no write in flight for the contractor.
    pub drained: bool,
    /// Sorted by id.
    pub instances: Vec<DrainInstance>,
}

#[cfg(test)]
mod tests;
