//! Per-cell revocation (DESIGN §6): revoking any of the five kinds, the append-only audit log,
//! the record of minted sessions that lets an operator list a subject's active sessions before
//! revoking them, and dropping revocations that can no longer match anything.
//!
//! Durability: every revocation is written by `AppState::commit_with` in one SQLite
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

use std::collections::{HashMap, HashSet};

use protocol::admin::cell::{
    HeldRevocations, ListedSession, RevokeAnswer, RevokeOutcome, SessionRecordAnswer,
    SubjectSessions, WithdrawAnswer,
};
use protocol::feed::{MAX_REAPPLY_REVOCATIONS, Reapplied, Reapply};
use protocol::revocation::{HandBack, Revocation, RevocationKind, SessionRef};
use protocol::time::UnixSeconds;
use protocol::token::{LEEWAY_S, SessionClaims, TicketClaims};
use protocol::{ContractorId, Kid, SessionId, SubjectId};

use crate::error::{Error, Result};
use crate::instances::FeedCaller;
use crate::keys::lifecycle::revoke_key;
use crate::state::{AppState, Inner};
use crate::store::Store as _;
use crate::store::records::MintedSession;

/// Longest audit text (`by`, `reason`) accepted, in bytes.
pub(crate) const MAX_AUDIT_TEXT_BYTES: usize = 512;
/// Most sessions listed for one subject.
pub(crate) const MAX_LISTED_SESSIONS: usize = 1_000;

/// The `iat` to mint a session at: `now`, or the latest "before" of a revocation that would
/// otherwise match it (`RevocationSet::latest_before`) when that lies at most the clock
/// leeway ahead.
pub(crate) fn issue_time(
    inner: &Inner,
    sub: &SubjectId,
    ctr: &ContractorId,
    now: UnixSeconds,
) -> UnixSeconds {
    let floor = inner.revoked.latest_before(sub, ctr).unwrap_or(0);
    floor.clamp(now, now.saturating_add(LEEWAY_S))
}

/// Whether a revocation held here revokes the session a transfer ticket carries, as of the
/// ticket's issue time: by its session id, or by a "before" revocation (subject, contractor,
/// cell) later than the ticket, even though the ticket was signed while the source still
/// accepted it (a ticket lives up to five minutes). The key that signed that session is the
/// source's, never revoked here.
pub(crate) fn ticket_revoked(inner: &Inner, t: &TicketClaims) -> bool {
    inner.revoked.revokes(&SessionRef {
        jti: Some(&t.sid),
        sub: &t.sub,
        ctr: &t.ctr,
        kid: None,
        iat: t.iat,
    })
}

/// Records a session minted with the key `kid` (called by every path that mints one).
pub(crate) async fn record_minted(
    state: &AppState,
    kid: Kid,
    claims: &SessionClaims,
) -> Result<()> {
    state
        .store
        .record_session(&MintedSession::of(kid, claims))
        .await
}

/// Drops the records of sessions that have expired (past the clock leeway). Answers how many.
pub async fn prune_minted(state: &AppState) -> Result<usize> {
    let cutoff = state.now().saturating_sub(LEEWAY_S);
    state.store.delete_sessions_expired_before(cutoff).await
}

/// Drops revocations that can no longer match an unexpired session (DESIGN §6: kept until
/// every session they could match has expired): a session revocation after its `exp`, the
/// "before" kinds and key revocations one session lifetime after their time, each plus the
/// clock leeway. This does not move the feed head: a snapshot at the same head differs only
/// by revocations that match nothing. Answers how many were dropped.
pub async fn prune_revocations(state: &AppState) -> Result<usize> {
    let now = state.now();
    let life = state.config.session_lifetime_s;
    let expired = |r: &Revocation| !r.can_match(life, now);
    let dropped = state
        .replace_revocations(
            |held| {
                let seqs: HashSet<u64> =
                    held.iter().filter(|r| expired(r)).map(|r| r.seq).collect();
                (!seqs.is_empty()).then_some(seqs)
            },
            async |seqs| {
                let listed: Vec<u64> = seqs.iter().copied().collect();
                state.store.delete_revocations(&listed).await.map(|()| seqs)
            },
            |r, seqs| !seqs.contains(&r.seq),
        )
        .await?;
    let n = dropped.map_or(0, |s| s.len());
    if n > 0 {
        tracing::info!(dropped = n, "dropped expired revocations");
    }
    Ok(n)
}

/// Checks an audit text (`reason`, `by`): 1 to [`MAX_AUDIT_TEXT_BYTES`] bytes, printable.
pub(crate) fn checked_text(name: &str, v: &str) -> Result<()> {
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
    if kind.before().is_some_and(|before| before > horizon) {
        return Err(Error::BadRequest(format!(
            "before may be at most {LEEWAY_S} s ahead of the cell's clock ({now})"
        )));
    }
    match kind {
        RevocationKind::Session { jti, exp } => {
            let recorded = state.store.session(&jti).await?;
            let longest = now
                .saturating_add(state.config.session_lifetime_s)
                .saturating_add(LEEWAY_S);
            let exp = recorded.map_or(exp, |r| exp.max(r.expires_at)).min(longest);
            Ok(RevocationKind::Session { jti, exp })
        }
        RevocationKind::Subject { .. }
        | RevocationKind::Contractor { .. }
        | RevocationKind::Key { .. }
        | RevocationKind::Cell { .. } => Ok(kind),
    }
}

/// Revokes one kind with its audit fields. Key revocations also take the key out of the ring
/// (the current key's successor is promoted and a new next key is published at once).
pub(crate) async fn revoke(
    state: &AppState,
    kind: RevocationKind,
    by: String,
    reason: String,
) -> Result<RevokeAnswer> {
    checked_text("reason", &reason)?;
    checked_text("by", &by)?;
    let kind = normalise(state, kind).await?;
    let outcome = if let Some(kid) = kind.key() {
        if revoke_key(state, kid, by.clone(), reason.clone()).await? {
            RevokeOutcome::Applied
        } else {
            RevokeOutcome::Already
        }
    } else {
        let now = state.now();
        let k = kind.clone();
        let (_, o) = state
            .commit_with(|inner, batch| {
                if held_seq(inner, &k).is_some() {
                    return Ok(RevokeOutcome::Already);
                }
                batch.revocation(k.clone(), now, by.clone(), reason.clone());
                Ok(RevokeOutcome::Applied)
            })
            .await?;
        o
    };
    let (seq, head) = {
        let inner = state.read();
        (held_seq(&inner, &kind).unwrap_or(inner.head), inner.head)
    };
    match outcome {
        RevokeOutcome::Applied => {
            tracing::warn!(seq, kind = ?kind, by = %by, reason = %reason, "revocation recorded");
        }
        RevokeOutcome::Already => tracing::info!(seq, kind = ?kind, "revocation already in force"),
    }
    Ok(RevokeAnswer {
        seq,
        revoked: outcome == RevokeOutcome::Applied,
        outcome,
        head,
        kind,
    })
}

/// Whether a recorded session is revoked here now.
fn is_revoked(state: &AppState, inner: &Inner, m: &MintedSession) -> bool {
    inner.revoked.is_revoked(
        &m.claims(state.config.issuer.as_str(), &state.config.cell_id),
        &m.kid,
    )
}

/// The subject's sessions minted here that have not expired and are not revoked, newest
/// first.
pub(crate) async fn sessions_of_subject(
    state: &AppState,
    sub: SubjectId,
) -> Result<SubjectSessions> {
    let now = state.now();
    let rows = state
        .store
        .sessions_of(&sub, now, MAX_LISTED_SESSIONS)
        .await?;
    let inner = state.read();
    let sessions = rows
        .into_iter()
        .filter(|m| !is_revoked(state, &inner, m))
        .map(|m| ListedSession {
            session: m.into(),
            last_seen: None,
        })
        .collect();
    Ok(SubjectSessions {
        subject: sub,
        sessions,
    })
}

/// The recorded session (whether revoked or not), or `NotFound`.
pub(crate) async fn session_record(
    state: &AppState,
    jti: SessionId,
) -> Result<SessionRecordAnswer> {
    let row = state.store.session(&jti).await?;
    let row = row.ok_or_else(|| Error::NotFound(format!("session {jti}")))?;
    let revoked = is_revoked(state, &state.read(), &row);
    Ok(SessionRecordAnswer {
        session: row.into(),
        revoked,
    })
}

/// A page of the audit log: every revocation ever recorded by this cell (compaction never
/// removes audit entries) after `after`, oldest first, at most `limit`.
pub(crate) async fn audit_page(
    state: &AppState,
    after: u64,
    limit: usize,
) -> Result<Vec<Revocation>> {
    state.store.revocation_audit(after, limit).await
}

/// Why a handed-back revocation is not taken back (logged, counted as `refused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// Key revocations are never handed back: the key is gone or an operator revokes it again.
    KeyKind,
    /// Not sealed by this cell in the epoch it was handed back from (ATTACKS A32).
    NotSealed,
    /// An operator withdrew it.
    Withdrawn,
    /// Outside the rules of an operator's revocation (`normalise`).
    OutOfBounds,
}

impl Refusal {
    /// The metric label.
    fn label(self) -> &'static str {
        match self {
            Refusal::KeyKind => "key",
            Refusal::NotSealed => "not_sealed",
            Refusal::Withdrawn => "withdrawn",
            Refusal::OutOfBounds => "out_of_bounds",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Refusal::KeyKind => "a key revocation is never handed back",
            Refusal::NotSealed => "not sealed by this cell in that epoch",
            Refusal::Withdrawn => "withdrawn by an operator",
            Refusal::OutOfBounds => "outside the bounds of an operator's revocation",
        }
    }
}

/// When each kind was last withdrawn here (from the audit log): a revocation recorded no later
/// than the withdrawal of its kind is what was withdrawn, and is never taken back from an edge
/// that missed the withdrawal (whatever epoch or copy it holds).
async fn withdrawn_kinds(state: &AppState) -> Result<HashMap<RevocationKind, UnixSeconds>> {
    let withdrawn = crate::store::withdrawals(&state.store).await?;
    let mut at = HashMap::new();
    for r in withdrawn {
        if let Some(w) = r.withdrawn {
            let e = at.entry(r.kind).or_insert(w.at);
            *e = (*e).max(w.at);
        }
    }
    Ok(at)
}

/// Records again the revocations an edge held from an epoch this database was restored over
/// and the restored state lacks (DECISIONS "Backup and restore"). A handback is not a write
/// channel (ATTACKS A32): each revocation is taken back only when it carries this cell's seal
/// for `from_epoch`, is not a key revocation (an operator re-runs those), was not withdrawn,
/// and passes the rules of `POST /admin/v1/revocations`; it is recorded at this cell's time,
/// naming the instance (`handed_back`), unless its kind is in force already or it can match
/// nothing any more. The request is refused, changing nothing, when `from_epoch` is the current
/// epoch or one this database never had, or when it names another instance than the caller's
/// credential.
pub(crate) async fn reapply(
    state: &AppState,
    caller: &FeedCaller,
    req: Reapply,
) -> Result<Reapplied> {
    if req.revocations.len() > MAX_REAPPLY_REVOCATIONS {
        return Err(Error::BadRequest(format!(
            "at most {MAX_REAPPLY_REVOCATIONS} revocations per request"
        )));
    }
    checked_text("instance", &req.instance)?;
    let instance = caller.instance_named(&req.instance)?;
    let epochs = state.store.epochs().await?;
    let current = state.read().epoch.clone();
    if req.from_epoch == current || !epochs.contains(&req.from_epoch) {
        return Err(Error::BadRequest(
            "from_epoch is not an epoch this database was restored over".into(),
        ));
    }
    let withdrawn = withdrawn_kinds(state).await?;
    let sealer = state.sealer();
    let now = state.now();
    let lifetime = state.config.session_lifetime_s;
    let mut refused = 0u64;
    let mut withdrawn_seqs = Vec::new();
    let mut skipped = 0u64;
    let mut taken = Vec::new();
    for r in req.revocations {
        if !r.can_match(lifetime, now) {
            skipped += 1;
            continue;
        }
        let refusal = if r.kind.key().is_some() {
            Some(Refusal::KeyKind)
        } else if !sealer.verifies(&req.from_epoch, &r) {
            Some(Refusal::NotSealed)
        } else if withdrawn.get(&r.kind).is_some_and(|w| r.at <= *w) {
            Some(Refusal::Withdrawn)
        } else {
            None
        };
        let kind = match refusal {
            Some(why) => Err(why),
            None => normalise(state, r.kind.clone())
                .await
                .map_err(|_| Refusal::OutOfBounds),
        };
        match kind {
            Ok(kind) => taken.push(Revocation {
                kind,
                at: now,
                by: format!("reapplied:{}", r.by)
                    .chars()
                    .take(MAX_AUDIT_TEXT_BYTES / 4)
                    .collect(),
                handed_back: Some(HandBack {
                    instance: instance.to_string(),
                    from_epoch: req.from_epoch.clone(),
                    seq: r.seq,
                    at: r.at,
                }),
                ..r
            }),
            Err(why) => {
                refused += 1;
                if why == Refusal::Withdrawn {
                    withdrawn_seqs.push(r.seq);
                }
                state.metrics.reapply_refused(why.label());
                tracing::warn!(
                    instance = %instance,
                    from_epoch = %req.from_epoch,
                    seq = r.seq,
                    kind = ?r.kind,
                    why = why.as_str(),
                    "refused a handed-back revocation"
                );
            }
        }
    }
    let (_, added) = state
        .commit_with(|inner, batch| {
            let mut added = 0u64;
            for r in &taken {
                if held_seq(inner, &r.kind).is_none() {
                    batch.record_revocation(r.clone());
                    added += 1;
                }
            }
            Ok(added)
        })
        .await?;
    let recorded = added;
    skipped += taken.len() as u64 - added;
    tracing::warn!(
        instance = %instance,
        from_epoch = %req.from_epoch,
        recorded,
        skipped,
        refused,
        "re-applied revocations an edge held from before a restore"
    );
    Ok(Reapplied {
        recorded,
        skipped,
        refused,
        withdrawn: withdrawn_seqs,
    })
}

/// The revocations in force here, by sequence number.
pub(crate) fn held(state: &AppState) -> HeldRevocations {
    let inner = state.read();
    let mut revocations = inner.revocations.clone();
    revocations.sort_by_key(|r| r.seq);
    HeldRevocations {
        head: inner.head,
        revocations,
    }
}

/// Withdraws the revocation in force at sequence number `seq` (an operator's mistake, or one
/// planted through a compromised credential): it matches nothing from the commit on, at this
/// cell and, through the feed, at every edge (which also drop a copy of the same kind they
/// carried over a restore). Audited with its own sequence number. A key revocation cannot be
/// withdrawn: the key left the ring for good.
pub(crate) async fn withdraw(
    state: &AppState,
    seq: u64,
    by: String,
    reason: String,
) -> Result<WithdrawAnswer> {
    checked_text("reason", &reason)?;
    checked_text("by", &by)?;
    let now = state.now();
    let (head, withdrawn) = state
        .commit_with(|inner, batch| {
            let held = inner
                .revocations
                .iter()
                .find(|r| r.seq == seq)
                .ok_or_else(|| Error::NotFound(format!("revocation {seq} is not in force")))?;
            if let Some(kid) = held.kind.key() {
                return Err(Error::BadRequest(format!(
                    "the revocation of key {kid} cannot be withdrawn: the key left the ring for good"
                )));
            }
            Ok(batch.withdrawal(held, now, by.clone(), reason.clone()))
        })
        .await?;
    tracing::warn!(seq, kind = ?withdrawn.kind, by = %by, reason = %reason, "revocation withdrawn");
    Ok(WithdrawAnswer {
        seq: withdrawn.withdrawn.as_ref().map_or(head, |w| w.seq),
        head,
        withdrawn,
    })
}
