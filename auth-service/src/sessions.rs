//! Sessions: sign-in (throttles, ownership, argon2id), minting, verifying a presented
//! session, renewal and sign-out. HTTP shapes (bodies, cookies, status codes) are the route
//! handlers'; this module answers minted sessions and verdicts.
//!
//! A refused sign-in is logged with the client address, the contractor and a reason code;
//! its login only as a [`LoginTag`] (a login field may hold a password typed into the wrong
//! box), its password never.

use std::net::IpAddr;
use std::sync::OnceLock;

use protocol::admin::cell::UserStatus;
use protocol::api::{DeviceToken, SignInRequest};
use protocol::http::{Presented, Source};
use protocol::revocation::RevocationKind;
use protocol::time::UnixSeconds;
use protocol::token::{
    Confirmation, DEFAULT_ABSOLUTE_LIFETIME_S, Expectations, LEEWAY_S, SessionClaims, Verified,
};
use protocol::{
    ClientKind, ContractorId, Generation, Jkt, Login, SessionId, SessionToken, SubjectId,
};
use ring::hmac;

use crate::binding::{DeviceProof, bind};
use crate::error::{Error, Result};
use crate::keys::kek::random;
use crate::ownership::{check_renewal, sign_in_generation};
use crate::revocations::{issue_time, record_minted};
use crate::state::{AppState, blocking};
use crate::store::Store as _;

/// Bytes of the keyed hash a [`LoginTag`] shows.
const LOGIN_TAG_BYTES: usize = 8;

/// How a login appears in the log of a refused sign-in: never verbatim, but a keyed hash of
/// it (HMAC-SHA256 under a random key of this process, truncated to [`LOGIN_TAG_BYTES`]), so
/// the lines of one login correlate within a process and nothing outside it can test a guess
/// against them, and its length. Shown as `<hex>/<length>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoginTag {
    /// `None` only if the process could not draw its key (then only the length is shown).
    hash: Option<[u8; LOGIN_TAG_BYTES]>,
    len: usize,
}

impl LoginTag {
    pub(crate) fn of(login: &Login) -> LoginTag {
        static KEY: OnceLock<Option<hmac::Key>> = OnceLock::new();
        let key = KEY.get_or_init(|| {
            hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new()).ok()
        });
        let hash = key.as_ref().map(|k| {
            let tag = hmac::sign(k, login.as_str().as_bytes());
            let mut out = [0u8; LOGIN_TAG_BYTES];
            out.copy_from_slice(&tag.as_ref()[..LOGIN_TAG_BYTES]);
            out
        });
        LoginTag {
            hash,
            len: login.as_str().len(),
        }
    }
}

impl std::fmt::Display for LoginTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.hash {
            Some(h) => h.iter().try_for_each(|b| write!(f, "{b:02x}"))?,
            None => f.write_str("-")?,
        }
        write!(f, "/{}", self.len)
    }
}

/// A session just minted (and recorded).
#[derive(Debug)]
pub(crate) struct Minted {
    pub(crate) token: SessionToken,
    pub(crate) claims: SessionClaims,
    /// When it was minted (the cookie's max-age runs from here).
    pub(crate) now: UnixSeconds,
    /// A device token for the signed-in device (sign-in and rebind of a field client).
    pub(crate) device: Option<DeviceToken>,
}

/// The sign-in order: the device key's proof per the client kind's binding mode (`binding`),
/// the client's bucket, ownership, the account's buckets (a known device's own when the
/// request carries a valid device token), then one argon2id verification (against a dummy
/// hash for an unknown user), then the session (bound to the proved key) and, for a field
/// client, a device token.
pub(crate) async fn sign_in(
    state: &AppState,
    ip: IpAddr,
    req: SignInRequest,
    proof: &DeviceProof,
) -> Result<Minted> {
    let device = state.throttle.known_device(
        req.device_token.as_ref(),
        &req.contractor_id,
        &req.login,
        state.now(),
    );
    // Every refusal is logged with the client address and a reason code (the login only as
    // its tag, never the password); the three credential failures share one answer to the
    // client.
    let login = LoginTag::of(&req.login);
    let known_device = device.is_some();
    let refused = |reason: &'static str| {
        tracing::warn!(client_ip = %ip, ctr = %req.contractor_id, %login, known_device, reason, "sign-in refused");
    };
    // First, as it costs the least: a proof refused (a nonce to learn, a replay) takes from
    // no bucket and costs no password verification.
    let cnf = bind(state, proof, req.client, None, None).inspect_err(|_| refused("dpop"))?;
    if let Err(e) = state.throttle.check_ip(ip).await {
        refused("throttled");
        return Err(e);
    }
    let generation =
        sign_in_generation(state, &req.contractor_id).inspect_err(|_| refused("wrong_cell"))?;
    if let Err(e) = state
        .throttle
        .check_account(&req.contractor_id, &req.login, ip, device)
        .await
    {
        refused("throttled");
        return Err(e);
    }

    let user = state.store.user(&req.contractor_id, &req.login).await?;
    let _permit = state
        .hashing
        .acquire()
        .await
        .map_err(|_| Error::Internal("hashing pool closed".into()))?;
    let (phc, usable) = match &user {
        Some(u) => (
            u.password_hash.expose().to_owned(),
            u.status == UserStatus::Active,
        ),
        None => (state.dummy_hash.clone(), false),
    };
    let password = req.password;
    let verified = blocking(move || Ok(crate::passwords::verify(&phc, &password))).await?;
    state.metrics.password_checked();
    let user = match user {
        Some(u) if verified && usable => u,
        other => {
            refused(match other {
                None => "unknown_user",
                Some(_) if !verified => "wrong_password",
                Some(_) => "disabled",
            });
            return Err(Error::InvalidCredentials);
        }
    };
    let now = state.now();
    let exp = now.saturating_add(state.config.session_lifetime_s);
    let mut minted = mint(
        state,
        Grant {
            sub: user.subject,
            ctr: req.contractor_id.clone(),
            generation,
            cli: req.client,
            auth_time: now,
            cnf,
        },
        now,
        exp,
    )
    .await?;
    if req.client == ClientKind::Field {
        minted.device = state.throttle.device_token(
            &req.contractor_id,
            &user.login,
            minted.claims.auth_time,
            now,
        );
    }
    tracing::info!(sub = %minted.claims.sub, ctr = %minted.claims.ctr, jti = %minted.claims.jti, known_device, bound = minted.claims.cnf.is_some(), "signed in");
    Ok(minted)
}

/// Who a session is minted for.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) sub: SubjectId,
    pub(crate) ctr: ContractorId,
    pub(crate) generation: Generation,
    pub(crate) cli: ClientKind,
    /// When the user last presented credentials.
    pub(crate) auth_time: UnixSeconds,
    /// The device key the session is bound to (`cnf.jkt`), if any.
    pub(crate) cnf: Option<Jkt>,
}

/// Mints a session with the current key, expiring at `exp` (`SESSION_EXPIRED` when that is
/// not after `now`), and records it.
pub(crate) async fn mint(
    state: &AppState,
    grant: Grant,
    now: UnixSeconds,
    exp: UnixSeconds,
) -> Result<Minted> {
    if exp <= now {
        return Err(Error::Session(protocol::token::TokenError::Expired));
    }
    let signer = state
        .current_signer()
        .ok_or(Error::NotReady("no signing key"))?;
    let jti = SessionId::from_random(*random::<16>(&state.rng)?);
    let cell = state.config.cell_id.clone();
    // Never mint a session a "before" revocation of this second already matches.
    let iat = issue_time(&state.read(), &grant.sub, &grant.ctr, now);
    let claims = SessionClaims {
        iss: state.config.issuer.to_string(),
        aud: cell.clone(),
        sub: grant.sub,
        ctr: grant.ctr,
        cell,
        generation: grant.generation,
        iat,
        nbf: iat,
        exp,
        auth_time: grant.auth_time,
        jti,
        cli: grant.cli,
        cnf: grant.cnf.map(|jkt| Confirmation { jkt }),
    };
    let token = signer
        .mint(&claims)
        .map_err(|e| Error::Internal(e.to_string()))?;
    record_minted(state, signer.kid().clone(), &claims).await?;
    Ok(Minted {
        token,
        claims,
        now,
        device: None,
    })
}

/// Verifies one presented token from one source against this cell's keys and revocations:
/// parsed under the source's size cap, its key not revoked, signature and claims valid, the
/// session itself not revoked.
fn verify_token(state: &AppState, token: &str, source: Source) -> Result<Verified<SessionClaims>> {
    let max = source.cap();
    let inner = state.read();
    let expect = Expectations {
        issuer: state.config.issuer.as_str(),
        audience: &state.config.cell_id,
        max_lifetime_s: state.config.session_lifetime_s,
        leeway_s: LEEWAY_S,
    };
    let parsed = protocol::token::parse(token, protocol::token::SESSION_TYP, max)?;
    if inner.revoked.is_key_revoked(&parsed.kid) {
        return Err(Error::SessionRevoked);
    }
    let verified = protocol::token::verify::<SessionClaims>(
        token,
        inner.ring.key_set(),
        &expect,
        state.now(),
        max,
    )?;
    if inner.revoked.is_revoked(&verified.claims, &verified.kid) {
        return Err(Error::SessionRevoked);
    }
    Ok(verified)
}

/// The request's session under the one credential rule (`protocol::http`): a valid bearer
/// session wins; otherwise the session cookie (which the route layer keeps only from an
/// authenticated edge). No credential is `SESSION_MISSING`; an unreadable one
/// `SESSION_INVALID`. Answers the verified session, its source and the token itself (a
/// `DPoP` proof's `ath` is its hash).
pub(crate) fn verify_presented(
    state: &AppState,
    presented: Presented<'_>,
) -> Result<(Verified<SessionClaims>, Source, String)> {
    presented
        .resolve(Error::SessionMissing, |token, source| {
            verify_token(state, token, source).map(|v| (v, token.to_owned()))
        })
        .map(|((verified, token), source)| (verified, source, token))
}

/// Sign-out: revokes this session.
pub(crate) async fn sign_out(state: &AppState, claims: &SessionClaims) -> Result<()> {
    let now = state.now();
    let (jti, exp) = (claims.jti.clone(), claims.exp);
    state
        .commit_with(|_, batch| {
            batch.revocation(
                RevocationKind::Session {
                    jti: jti.clone(),
                    exp,
                },
                now,
                "self".into(),
                "sign-out".into(),
            );
            Ok(())
        })
        .await?;
    tracing::info!(jti = %claims.jti, "signed out");
    Ok(())
}

/// Renewal: a fresh session for an active one, `auth_time` kept, capped at
/// `auth_time + DEFAULT_ABSOLUTE_LIFETIME_S`; only while this cell serves the contractor at
/// the session's generation and the user is still active. `cnf` is kept: a bound session
/// (whose proof the route checked) renews bound to the same key, an unbound one unbound.
pub(crate) async fn renew(state: &AppState, c: SessionClaims) -> Result<Minted> {
    check_renewal(state, &c.ctr, c.generation)?;
    let user = state.store.user_by_subject(&c.sub).await?;
    if !user.is_some_and(|u| u.status == UserStatus::Active) {
        return Err(Error::SessionRevoked);
    }
    let now = state.now();
    let cap = c.auth_time.saturating_add(DEFAULT_ABSOLUTE_LIFETIME_S);
    let exp = now.saturating_add(state.config.session_lifetime_s).min(cap);
    let minted = mint(
        state,
        Grant {
            sub: c.sub,
            ctr: c.ctr,
            generation: c.generation,
            cli: c.cli,
            auth_time: c.auth_time,
            cnf: c.cnf.map(|cnf| cnf.jkt),
        },
        now,
        exp,
    )
    .await?;
    tracing::info!(sub = %minted.claims.sub, jti = %minted.claims.jti, "renewed a session");
    Ok(minted)
}
