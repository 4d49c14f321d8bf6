//! The session and the client's session state machine.
//!
//! ```text
//!                 sign_in()                       201
//!   SignedOut ───────────────▶ SigningIn ─────────────────▶ Active ◀──────────┐
//!      ▲  ▲                      │  failed: back to the           │  in the     │ renewed
//!      │  │  restore() (store)   │  previous session, if any      │  renewal    │ (or renewal
//!      │  └──────────────────────┼────────────────────────────────┤  window     │  failed for
//!      │                         ▼                                ▼             │  a transient
//!      │                    (SignedOut | Active)               Renewing ────────┘  reason)
//!      │                                                          │
//!      │   SESSION_EXPIRED / SESSION_REVOKED / SESSION_INVALID    │
//!      └────────── (Expired | Revoked | Invalid: store cleared) ◀─┘ (from Active or Renewing,
//!                  sign_out() from any state with a session          also while signing in)
//! ```
//!
//! Every transition is in [`State::next`], one `match`. A state that has a session
//! ([`State::session`]) can serve requests; only `SignedOut` and a first `SigningIn` cannot.
//! "Store cleared" is the session's slot only: the offline outbox ([`crate::outbox`]) is kept
//! when a session ends, and handed back to the app by `sign_out()` or `take_undelivered()`.

use serde::{Deserialize, Serialize};

use protocol::time::UnixSeconds;
use protocol::{
    CellId, ContractorId, Endpoint, Generation, Jkt, SessionId, SessionToken, SubjectId,
};

use crate::Error;
use crate::proof::{Signer, bound_key};

/// Sessions last 30 days; the SDK renews in the last 7 of them, each session from its own
/// renew point ([`SessionInfo::renew_at`]).
pub const RENEWAL_WINDOW_S: u64 = 7 * 24 * 3600;

/// How far into the renewal window a session's renew point may fall: 12 hours.
///
/// Sessions minted together (19,000 technicians signing in within a 30-minute shift start)
/// would otherwise all renew in the same minute 23 days later. Each session renews at
/// `expires_at - RENEWAL_WINDOW_S + offset`, the offset taken from its id
/// ([`renewal_offset`]), so a burst's renewals are spread over 12 hours. Why 12 h: the busiest
/// minute must be at most 2x the average minute. The offsets are random-looking, so each minute
/// gets a Poisson-like count, and that needs about 16 renewals per minute or more on average
/// for a 19,000-session burst (at 16 a typical burst's busiest minute is already about 2x), so a
/// spread of well under a day; 12 h gives about 26 a minute (busiest minute about 1.7-1.9x,
/// fewer than 1 burst in 100 above 2x) across a working day's hours. The spread is far shorter
/// than the window, so every session still renews at least 6.5 days before it expires
/// (`sdk/tests/renewal_spread.rs` measures the histogram).
pub const RENEWAL_SPREAD_S: u64 = 12 * 3600;

/// Where a session's renew point falls past the start of its renewal window, in
/// `[0, RENEWAL_SPREAD_S)`: the first 8 bytes (big-endian) of the SHA-256 of the session id
/// string, modulo [`RENEWAL_SPREAD_S`]. Deterministic: stable across app restarts and releases
/// (never `std`'s `DefaultHasher`), with no state stored; any string hashes, so an id of any
/// shape still gets a renew point.
pub fn renewal_offset(session_id: &str) -> u64 {
    sha256_prefix(session_id.as_bytes()) % RENEWAL_SPREAD_S
}

/// When a session expiring at `expires_at` with id `session_id` is renewed: the start of its
/// renewal window plus its [`renewal_offset`].
pub fn renew_point(session_id: &str, expires_at: UnixSeconds) -> UnixSeconds {
    expires_at
        .saturating_sub(RENEWAL_WINDOW_S)
        .saturating_add(renewal_offset(session_id))
}

/// The first 8 bytes of the SHA-256 of `bytes`, big-endian. SHA-256 comes from the `ring`
/// provider the SDK's TLS stack already carries (through `rustls`), so the SDK needs no hash
/// crate of its own.
fn sha256_prefix(bytes: &[u8]) -> u64 {
    let Some(suite) = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13() else {
        return 0; // a TLS 1.3 suite: never reached
    };
    let digest = suite.common.hash_provider.hash(bytes);
    let mut first = [0u8; 8];
    for (to, from) in first.iter_mut().zip(digest.as_ref()) {
        *to = *from;
    }
    u64::from_be_bytes(first)
}

/// A session as the SDK keeps it (and persists it): the token and what an app may know about
/// it (flattened: the persisted members are those of both). `Debug` never shows the token or
/// the device key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    pub token: SessionToken,
    #[serde(flatten)]
    pub info: SessionInfo,
    /// The device key that makes this session's proofs ([`crate::proof`]): the one it is bound
    /// to, or, for an unbound session, the one a rebind would bind its successor to. Persisted
    /// beside the session (`store`) when it is the SDK's own.
    #[serde(skip)]
    pub(crate) signer: Option<Signer>,
}

impl Session {
    /// A session of `token`, with what its token says about its binding
    /// ([`SessionInfo::key_thumbprint`]) and no key yet.
    pub(crate) fn new(token: SessionToken, info: SessionInfo) -> Self {
        let key_thumbprint = bound_key(token.expose());
        Self {
            token,
            info: SessionInfo {
                key_thumbprint,
                ..info
            },
            signer: None,
        }
    }

    /// The same session, made with `signer` (the key its sign-in, renewal or rebind proved).
    /// Refused when the cell bound it to another key.
    pub(crate) fn with_signer(mut self, signer: Option<Signer>) -> Result<Self, Error> {
        if let Some(bound) = &self.info.key_thumbprint
            && signer.as_ref().is_none_or(|s| s.jkt() != bound)
        {
            return Err(Error::InvalidResponse(
                "the cell bound the session to another device key than the one that proved it"
                    .into(),
            ));
        }
        self.signer = signer;
        Ok(self)
    }

    /// Whether `now` is at or past this session's renew point ([`SessionInfo::renew_at`]), which
    /// includes past expiry.
    pub fn wants_renewal(&self, now: UnixSeconds) -> bool {
        now >= self.info.renew_at()
    }

    pub fn info(&self) -> SessionInfo {
        self.info.clone()
    }
}

/// What an app may know about its session (everything but the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: SessionId,
    pub contractor_id: ContractorId,
    pub subject: SubjectId,
    pub cell_id: CellId,
    /// The endpoint of the session's cell, as the signed map lists it.
    pub endpoint: Endpoint,
    pub generation: Generation,
    pub expires_at: UnixSeconds,
    /// The RFC 7638 thumbprint of the device key the session is bound to (its token's
    /// `cnf.jkt`, RFC 9449); `None` for an unbound session. Read from the token, never stored
    /// apart from it.
    #[serde(skip)]
    pub key_thumbprint: Option<Jkt>,
}

impl SessionInfo {
    /// When the SDK renews this session: the start of its renewal window plus an offset in
    /// `[0, RENEWAL_SPREAD_S)` taken from its id ([`renew_point`]).
    pub fn renew_at(&self) -> UnixSeconds {
        renew_point(self.session_id.as_str(), self.expires_at)
    }
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    SignedOut,
    Expired,
    Revoked,
    Invalid,
}

/// The client's session state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum State {
    #[default]
    SignedOut,
    /// A sign-in is under way; `previous` keeps serving until it succeeds.
    SigningIn {
        previous: Option<Session>,
    },
    Active(Session),
    /// A renewal is under way; the current session keeps serving.
    Renewing(Session),
}

/// What happens to the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    SignInStarted,
    SignedIn(Session),
    SignInFailed,
    Restored(Session),
    RenewStarted,
    Renewed(Session),
    RenewFailed,
    /// The session `session_id` ended. Ignored when the state holds another session (a
    /// newer sign-in or renewal already replaced it).
    Ended(SessionId, EndReason),
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::SignedOut => "SignedOut",
            State::SigningIn { .. } => "SigningIn",
            State::Active(_) => "Active",
            State::Renewing(_) => "Renewing",
        }
    }

    /// The session requests use, if any.
    pub fn session(&self) -> Option<&Session> {
        match self {
            State::Active(s) | State::Renewing(s) => Some(s),
            State::SigningIn { previous } => previous.as_ref(),
            State::SignedOut => None,
        }
    }

    /// The whole state machine.
    pub fn next(self, event: Event) -> Result<State, Error> {
        let invalid = |state: &State, event: &Event| Error::InvalidState {
            state: state.name(),
            event: event_name(event),
        };
        match (self, event) {
            (State::SignedOut, Event::SignInStarted) => Ok(State::SigningIn { previous: None }),
            (State::Active(s) | State::Renewing(s), Event::SignInStarted) => {
                Ok(State::SigningIn { previous: Some(s) })
            }
            (State::SigningIn { .. }, Event::SignedIn(s)) => Ok(State::Active(s)),
            (State::SigningIn { previous }, Event::SignInFailed) => {
                Ok(previous.map_or(State::SignedOut, State::Active))
            }
            (State::SignedOut, Event::Restored(s)) => Ok(State::Active(s)),
            (State::Active(s), Event::RenewStarted) => Ok(State::Renewing(s)),
            // A renewal mints a new session (new id) for the same contractor.
            (State::Renewing(old), Event::Renewed(s))
                if old.info.contractor_id == s.info.contractor_id =>
            {
                Ok(State::Active(s))
            }
            (State::Renewing(s), Event::RenewFailed) => Ok(State::Active(s)),
            (State::Active(s) | State::Renewing(s), Event::Ended(id, _)) => {
                if s.info.session_id == id {
                    Ok(State::SignedOut)
                } else {
                    Ok(State::Active(s))
                }
            }
            (State::SigningIn { previous }, Event::Ended(id, _)) => Ok(State::SigningIn {
                previous: previous.filter(|s| s.info.session_id != id),
            }),
            (State::SignedOut, Event::Ended(..)) => Ok(State::SignedOut),
            (state, event) => Err(invalid(&state, &event)),
        }
    }
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::SignInStarted => "SignInStarted",
        Event::SignedIn(_) => "SignedIn",
        Event::SignInFailed => "SignInFailed",
        Event::Restored(_) => "Restored",
        Event::RenewStarted => "RenewStarted",
        Event::Renewed(_) => "Renewed",
        Event::RenewFailed => "RenewFailed",
        Event::Ended(..) => "Ended",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_session() -> Session {
        Session {
            token: SessionToken::new("aaa.bbb.ccc").unwrap(),
            info: SessionInfo {
                session_id: SessionId::from_random([1; 16]),
                contractor_id: ContractorId::new("c-40711").unwrap(),
                subject: SubjectId::new("c-40711.ana").unwrap(),
                cell_id: CellId::new("cell-03").unwrap(),
                endpoint: Endpoint::parse("https://127.0.0.3:8443").unwrap(),
                generation: Generation(4),
                expires_at: 1_000_000 + 30 * 24 * 3600,
                key_thumbprint: None,
            },
            signer: None,
        }
    }

    #[test]
    fn sign_in_renew_and_end() {
        let s = sample_session();
        let st = State::SignedOut.next(Event::SignInStarted).unwrap();
        assert_eq!(st.session(), None);
        let st = st.next(Event::SignedIn(s.clone())).unwrap();
        assert_eq!(st.session(), Some(&s));
        let st = st.next(Event::RenewStarted).unwrap();
        assert_eq!(st.name(), "Renewing");
        assert_eq!(
            st.session(),
            Some(&s),
            "the old session serves while renewing"
        );
        let mut renewed = s.clone();
        renewed.info.session_id = SessionId::from_random([2; 16]);
        renewed.info.expires_at += 20 * 24 * 3600;
        let st = st.next(Event::Renewed(renewed.clone())).unwrap();
        assert_eq!(st, State::Active(renewed.clone()));
        // the old session's end does not end the renewed one
        let st = st
            .next(Event::Ended(s.info.session_id.clone(), EndReason::Expired))
            .unwrap();
        assert_eq!(st, State::Active(renewed.clone()));
        let st = st
            .next(Event::Ended(
                renewed.info.session_id.clone(),
                EndReason::Revoked,
            ))
            .unwrap();
        assert_eq!(st, State::SignedOut);
    }

    #[test]
    fn failed_sign_in_keeps_the_previous_session() {
        let s = sample_session();
        let st = State::Active(s.clone()).next(Event::SignInStarted).unwrap();
        assert_eq!(st.session(), Some(&s));
        assert_eq!(st.next(Event::SignInFailed).unwrap(), State::Active(s));
        let st = State::SignedOut.next(Event::SignInStarted).unwrap();
        assert_eq!(st.next(Event::SignInFailed).unwrap(), State::SignedOut);
    }

    #[test]
    fn refused_transitions() {
        let s = sample_session();
        assert!(matches!(
            State::SignedOut.next(Event::RenewStarted),
            Err(Error::InvalidState {
                state: "SignedOut",
                ..
            })
        ));
        assert!(
            State::Active(s.clone())
                .next(Event::Restored(s.clone()))
                .is_err()
        );
        assert!(State::SignedOut.next(Event::SignedIn(s)).is_err());
    }

    #[test]
    fn a_session_renews_from_its_own_point_in_the_window() {
        let s = sample_session();
        let window_start = s.info.expires_at - RENEWAL_WINDOW_S;
        let at = s.info.renew_at();
        assert_eq!(
            at,
            window_start + renewal_offset(s.info.session_id.as_str())
        );
        assert!((window_start..window_start + RENEWAL_SPREAD_S).contains(&at));
        assert!(!s.wants_renewal(window_start - 1));
        assert!(!s.wants_renewal(at - 1), "just before its renew point");
        assert!(s.wants_renewal(at), "at its renew point");
        assert!(s.wants_renewal(window_start + RENEWAL_SPREAD_S));
        assert!(s.wants_renewal(s.info.expires_at - 1));
        assert!(s.wants_renewal(s.info.expires_at + 10), "past expiry");
        // the point belongs to the session: another id, another point (same expiry)
        let mut other = s.clone();
        other.info.session_id = SessionId::from_random([2; 16]);
        assert_ne!(other.info.renew_at(), at);
        assert_eq!(other.info.renew_at(), other.info.renew_at());
    }

    #[test]
    fn the_renewal_offset_is_sha256_of_the_id_mod_the_spread() {
        // SHA-256("abc") starts ba7816bf8f01cfea (FIPS 180-2 test vector)
        assert_eq!(
            renewal_offset("abc"),
            0xba78_16bf_8f01_cfea % RENEWAL_SPREAD_S
        );
        assert_eq!(renewal_offset("abc"), 18_474);
        // any string gets an offset in range, the empty one too
        for id in ["", "x", "not a session id", "AAAAAAAAAAAAAAAAAAAAAA"] {
            assert!(renewal_offset(id) < RENEWAL_SPREAD_S);
        }
        // a session expiring before the window could start renews from its offset on
        assert_eq!(renew_point("abc", 10), 18_474);
    }
}
