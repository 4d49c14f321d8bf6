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
use protocol::{CellId, ContractorId, Endpoint, Generation, SessionId, SessionToken, SubjectId};

use crate::Error;

/// Sessions last 30 days; the SDK renews in the last 7 of them.
pub const RENEWAL_WINDOW_S: u64 = 7 * 24 * 3600;

/// A session as the SDK keeps it (and persists it): the token and what an app may know about
/// it (flattened: the persisted members are those of both). `Debug` never shows the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    pub token: SessionToken,
    #[serde(flatten)]
    pub info: SessionInfo,
}

impl Session {
    /// Whether `now` is inside the renewal window (or past expiry).
    pub fn wants_renewal(&self, now: UnixSeconds) -> bool {
        now.saturating_add(RENEWAL_WINDOW_S) >= self.info.expires_at
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
            },
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
    fn renewal_window_is_the_last_seven_days() {
        let s = sample_session();
        assert!(!s.wants_renewal(s.info.expires_at - RENEWAL_WINDOW_S - 1));
        assert!(s.wants_renewal(s.info.expires_at - RENEWAL_WINDOW_S));
        assert!(s.wants_renewal(s.info.expires_at + 10));
    }
}
