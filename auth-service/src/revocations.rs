//! Per-cell revocation (DESIGN §6) as the admin sees it: revoking any of the five kinds, the
//! append-only audit log and its export, and the record of minted sessions that lets an
//! operator list a subject's active sessions before revoking them.
//!
//! Durability: every revocation is written by [`AppState::commit_with`] in one SQLite
//! transaction (WAL, `synchronous=FULL`) together with its feed entry and its audit row, and
//! the API answers only after that commit; the commit also wakes every long-polling edge.
//!
//! An admin revocation request goes through one decision:
//!
//! ```text
//!   request ──▶ checked (audit text, bounds) ──┬─ key kind ──▶ key ring revoke ──▶ Applied | Already
//!                                             ├─ same kind already held ─────────▶ Already
//!                                             └─ otherwise ──▶ commit ───────────▶ Applied
//! ```
//!
//! `Already` answers the sequence number of the revocation in force, so a retried request
//! (the fan-out CLI retries on transport errors) never records a second copy.
//!
//! "Before" kinds revoke sessions whose `iat` is strictly earlier than `before`, so the CLI
//! asks for `before = now + 1` to include the current second. A sign-in in that same second
//! would then mint an already revoked session; [`issue_time`] moves such a session's `iat`
//! (and `nbf`) to the revocation's `before`, at most [`protocol::token::LEEWAY_S`] ahead.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use protocol::revocation::{Revocation, RevocationKind};
use protocol::time::UnixSeconds;
use protocol::token::{LEEWAY_S, SessionClaims};
use protocol::{ClientKind, ContractorId, Generation, Kid, SessionId, SessionToken, SubjectId};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::admin::{MAX_AUDIT_TEXT_BYTES, RevokeRequest};
use crate::error::{Error, Result};
use crate::http::Admin;
use crate::state::{AppState, Inner, blocking};

/// Default number of audit entries in one export page.
pub const DEFAULT_AUDIT_PAGE: usize = 10_000;
/// Largest audit export page.
pub const MAX_AUDIT_PAGE: usize = 100_000;
/// Most sessions listed for one subject.
pub const MAX_LISTED_SESSIONS: usize = 1_000;
/// `Content-Type` of the JSON-lines audit export.
pub const JSON_LINES: &str = "application/x-ndjson";

/// A session as minted, recorded at sign-in and renewal (and rebind) so that an operator can
/// list a subject's sessions. Tokens themselves are never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintedSession {
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

impl MintedSession {
    /// The record of a freshly minted session.
    pub fn of(kid: Kid, c: &SessionClaims) -> MintedSession {
        MintedSession {
            session_id: c.jti.clone(),
            subject: c.sub.clone(),
            contractor: c.ctr.clone(),
            client: c.cli,
            kid,
            generation: c.r#gen,
            issued_at: c.iat,
            expires_at: c.exp,
            auth_time: c.auth_time,
        }
    }

    /// The claims this session carried (enough for the revocation matcher).
    fn claims(&self, state: &AppState) -> SessionClaims {
        SessionClaims {
            iss: state.config.issuer.clone(),
            aud: state.config.cell_id.clone(),
            sub: self.subject.clone(),
            ctr: self.contractor.clone(),
            cell: state.config.cell_id.clone(),
            r#gen: self.generation,
            iat: self.issued_at,
            nbf: self.issued_at,
            exp: self.expires_at,
            auth_time: self.auth_time,
            jti: self.session_id.clone(),
            cli: self.client,
        }
    }
}

/// The `iat` to mint a session at: `now`, or the latest "before" of a revocation that would
/// otherwise match it (subject, contractor, cell) when that lies at most the clock leeway ahead.
pub fn issue_time(
    inner: &Inner,
    sub: &SubjectId,
    ctr: &ContractorId,
    now: UnixSeconds,
) -> UnixSeconds {
    let floor = inner
        .revocations
        .iter()
        .filter_map(|r| match &r.kind {
            RevocationKind::Subject { sub: s, before } if s == sub => Some(*before),
            RevocationKind::Contractor { ctr: c, before } if c == ctr => Some(*before),
            RevocationKind::Cell { before } => Some(*before),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    floor.clamp(now, now.saturating_add(LEEWAY_S))
}

/// Whether a transfer ticket was issued before a "before" revocation held here (subject,
/// contractor or cell): the session it carries is then revoked too, even though the ticket was
/// signed while the source still accepted it (a ticket lives up to five minutes).
pub fn ticket_revoked(inner: &Inner, t: &protocol::token::TicketClaims) -> bool {
    inner.revocations.iter().any(|r| match &r.kind {
        RevocationKind::Subject { sub, before } => sub == &t.sub && t.iat < *before,
        RevocationKind::Contractor { ctr, before } => ctr == &t.ctr && t.iat < *before,
        RevocationKind::Cell { before } => t.iat < *before,
        RevocationKind::Session { jti, .. } => jti == &t.sid,
        RevocationKind::Key { .. } => false,
    })
}

/// Records a minted session (called by every path that mints one).
pub async fn record_minted(
    state: &AppState,
    token: &SessionToken,
    claims: &SessionClaims,
) -> Result<()> {
    let parsed = protocol::token::parse(
        token.expose(),
        protocol::token::SESSION_TYP,
        protocol::ids::MAX_TOKEN_HEADER_BYTES,
    )?;
    let row = MintedSession::of(parsed.kid, claims);
    let store = state.store.clone();
    blocking(move || store.record_session(&row)).await
}

/// Drops the records of sessions that have expired (past the clock leeway). Answers how many.
pub async fn prune_minted(state: &AppState) -> Result<usize> {
    let cutoff = state.now().saturating_sub(LEEWAY_S);
    let store = state.store.clone();
    blocking(move || store.delete_sessions_expired_before(cutoff)).await
}

/// What became of one revocation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Recorded now.
    Applied,
    /// The same revocation was already in force (a retry, or a repeated request).
    Already,
}

/// Answer of `POST /admin/v1/revocations`.
#[derive(Debug, Clone, Serialize)]
pub struct RevokeAnswer {
    /// Sequence number of the revocation in force.
    pub seq: u64,
    /// Whether this request recorded it (`false` when it was already in force).
    pub revoked: bool,
    pub outcome: Outcome,
    /// The cell's feed head after the request.
    pub head: u64,
    #[serde(flatten)]
    pub kind: RevocationKind,
}

fn checked_text(name: &str, v: &str) -> Result<()> {
    if v.trim().is_empty() || v.len() > MAX_AUDIT_TEXT_BYTES || v.chars().any(char::is_control) {
        return Err(Error::BadRequest(format!(
            "{name} must be 1 to {MAX_AUDIT_TEXT_BYTES} bytes of printable text"
        )));
    }
    Ok(())
}

fn held_seq(inner: &Inner, kind: &RevocationKind) -> Option<u64> {
    inner
        .revocations
        .iter()
        .find(|r| &r.kind == kind)
        .map(|r| r.seq)
}

/// Bounds a requested revocation: "before" at most the clock leeway ahead (a revocation is not
/// a way to lock a user out for the future: disable the user instead), a session revocation
/// kept until the session's recorded expiry and never past the longest possible one.
async fn normalise(state: &AppState, kind: RevocationKind) -> Result<RevocationKind> {
    let now = state.now();
    let horizon = now.saturating_add(LEEWAY_S);
    match kind {
        RevocationKind::Subject { before, .. }
        | RevocationKind::Contractor { before, .. }
        | RevocationKind::Cell { before }
            if before > horizon =>
        {
            Err(Error::BadRequest(format!(
                "before may be at most {LEEWAY_S} s ahead of the cell's clock ({now})"
            )))
        }
        RevocationKind::Session { jti, exp } => {
            let store = state.store.clone();
            let id = jti.clone();
            let recorded = blocking(move || store.session(&id)).await?;
            let longest = now
                .saturating_add(state.config.session_lifetime_s)
                .saturating_add(LEEWAY_S);
            let exp = recorded.map_or(exp, |r| exp.max(r.expires_at)).min(longest);
            Ok(RevocationKind::Session { jti, exp })
        }
        other => Ok(other),
    }
}

/// Revokes one kind with its audit fields. Key revocations also take the key out of the ring
/// (the current key's successor is promoted and a new next key is published at once).
pub async fn revoke(
    state: &AppState,
    kind: RevocationKind,
    by: String,
    reason: String,
) -> Result<RevokeAnswer> {
    checked_text("reason", &reason)?;
    checked_text("by", &by)?;
    let kind = normalise(state, kind).await?;
    let outcome = if let RevocationKind::Key { kid } = &kind {
        if state.revoke_key(kid, by.clone(), reason.clone()).await? {
            Outcome::Applied
        } else {
            Outcome::Already
        }
    } else {
        let now = state.now();
        let k = kind.clone();
        let (_, o) = state
            .commit_with(|inner, batch| {
                if held_seq(inner, &k).is_some() {
                    return Ok(Outcome::Already);
                }
                batch.revocation(k, now, by.clone(), reason.clone());
                Ok(Outcome::Applied)
            })
            .await?;
        o
    };
    let (seq, head) = {
        let inner = state.read();
        (held_seq(&inner, &kind).unwrap_or(inner.head), inner.head)
    };
    match outcome {
        Outcome::Applied => {
            tracing::warn!(seq, kind = ?kind, by = %by, reason = %reason, "revocation recorded");
        }
        Outcome::Already => tracing::info!(seq, kind = ?kind, "revocation already in force"),
    }
    Ok(RevokeAnswer {
        seq,
        revoked: outcome == Outcome::Applied,
        outcome,
        head,
        kind,
    })
}

/// `POST /admin/v1/revocations` with a `RevocationKind`, `reason` and `by` → 200
/// [`RevokeAnswer`].
pub async fn revoke_handler(
    _: Admin,
    State(state): State<AppState>,
    crate::http::JsonBody(req): crate::http::JsonBody<RevokeRequest>,
) -> Result<Response> {
    let answer = revoke(&state, req.kind, req.by, req.reason).await?;
    Ok(Json(answer).into_response())
}

/// Query of the audit export.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only entries with a larger sequence number.
    #[serde(default)]
    pub after: u64,
    #[serde(default)]
    pub limit: Option<usize>,
    /// `jsonl` (default) or `json`.
    #[serde(default)]
    pub format: Option<String>,
}

/// `GET /admin/v1/audit/revocations?after=SEQ&limit=N&format=jsonl|json`: every revocation
/// ever recorded by this cell (compaction never removes audit entries), oldest first, with
/// who, when and why. JSON lines by default, a JSON array with `format=json`.
pub async fn audit_export(
    _: Admin,
    State(state): State<AppState>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(|e| Error::BadRequest(format!("audit query: {e}")))?;
    let limit = q
        .limit
        .unwrap_or(DEFAULT_AUDIT_PAGE)
        .clamp(1, MAX_AUDIT_PAGE);
    let store = state.store.clone();
    let after = q.after;
    let entries = blocking(move || store.revocation_audit(after, limit)).await?;
    match q.format.as_deref() {
        None | Some("jsonl") => {
            let mut body = String::new();
            for e in &entries {
                body.push_str(
                    &serde_json::to_string(e).map_err(|e| Error::Internal(e.to_string()))?,
                );
                body.push('\n');
            }
            let mut resp = body.into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON_LINES));
            Ok(resp)
        }
        Some("json") => Ok(Json(entries).into_response()),
        Some(_) => Err(Error::BadRequest("format is jsonl or json".into())),
    }
}

/// One listed session.
#[derive(Debug, Clone, Serialize)]
pub struct ListedSession {
    #[serde(flatten)]
    pub session: MintedSession,
    /// When an edge last served it; edges do not report use, so this is unknown (`null`).
    pub last_seen: Option<UnixSeconds>,
}

/// `GET /admin/v1/subjects/{sub}/sessions` → `{subject, sessions}`: the subject's sessions
/// minted here that have not expired and are not revoked, newest first.
pub async fn sessions_of_subject(
    _: Admin,
    State(state): State<AppState>,
    sub: Result<Path<String>, PathRejection>,
) -> Result<Response> {
    let Path(sub) =
        sub.map_err(|_| Error::BadRequest("the subject in the path is malformed".into()))?;
    let sub = SubjectId::new(sub)
        .map_err(|_| Error::BadRequest("the subject in the path is not valid".into()))?;
    let now = state.now();
    let store = state.store.clone();
    let s = sub.clone();
    let rows = blocking(move || store.sessions_of(&s, now, MAX_LISTED_SESSIONS)).await?;
    let sessions: Vec<ListedSession> = {
        let inner = state.read();
        rows.into_iter()
            .filter(|m| !inner.revoked.is_revoked(&m.claims(&state), &m.kid))
            .map(|session| ListedSession {
                session,
                last_seen: None,
            })
            .collect()
    };
    Ok(Json(json!({ "subject": sub, "sessions": sessions })).into_response())
}

/// `GET /admin/v1/sessions/{jti}` → the recorded session (whether revoked or not) or 404.
pub async fn session_record(
    _: Admin,
    State(state): State<AppState>,
    jti: Result<Path<String>, PathRejection>,
) -> Result<Response> {
    let Path(jti) =
        jti.map_err(|_| Error::BadRequest("the session id in the path is malformed".into()))?;
    let jti = SessionId::new(jti)
        .map_err(|_| Error::BadRequest("the session id in the path is not valid".into()))?;
    let store = state.store.clone();
    let id = jti.clone();
    let row = blocking(move || store.session(&id)).await?;
    let row = row.ok_or_else(|| Error::NotFound(format!("session {jti}")))?;
    let revoked = state
        .read()
        .revoked
        .is_revoked(&row.claims(&state), &row.kid);
    Ok(Json(json!({ "session": row, "revoked": revoked })).into_response())
}

/// The revocations currently in force at this cell (for tests and tools).
pub fn in_force(state: &AppState) -> Vec<Revocation> {
    state.read().revocations.clone()
}
