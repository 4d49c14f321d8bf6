//! What happens to a write after one attempt to deliver it: the one table of outcome classes
//! (the diagram in the module documentation of [`crate::outbox`]).

use protocol::ErrorCode;

use crate::Error;
use crate::transport::Response;

/// Why a write was refused for good.
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// A Cellbind error answer, or [`Error::InvalidInput`] when the write no longer passes the
    /// SDK's checks (nothing was sent).
    Error(Error),
    /// The app's own answer of 400 or more, without a Cellbind error body.
    Answer(Response),
}

/// Longest body text of an app's refusal kept in [`Refusal::detail`].
const MAX_DETAIL_CHARS: usize = 1024;

impl Refusal {
    /// Human text: the error, or the start of the app's answer.
    pub fn detail(&self) -> String {
        match self {
            Refusal::Error(e) => e.to_string(),
            Refusal::Answer(r) => String::from_utf8_lossy(&r.body)
                .chars()
                .take(MAX_DETAIL_CHARS)
                .collect(),
        }
    }
}

/// What happens to a write after one attempt to deliver it.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Remove it; next write.
    Delivered(Response),
    /// Remove it, report it; next write.
    Rejected {
        status: u16,
        code: Option<String>,
        refusal: Refusal,
    },
    /// Keep it (and every write after it); stop the flush.
    Kept { why: Error, session_ended: bool },
}

/// The one table of outcome classes (the diagram in the module doc).
pub(crate) fn verdict(result: Result<Response, Error>) -> Verdict {
    let rejected = |status, code: Option<&str>, e| Verdict::Rejected {
        status,
        code: code.map(str::to_owned),
        refusal: Refusal::Error(e),
    };
    match result {
        Ok(r) if r.status < 400 => Verdict::Delivered(r),
        // an app's own 429 is "later", like the edge's
        Ok(r) if r.status == 429 => Verdict::Kept {
            why: Error::RateLimited { retry_after: None },
            session_ended: false,
        },
        Ok(r) => Verdict::Rejected {
            status: r.status,
            code: None,
            refusal: Refusal::Answer(r),
        },
        // the session is gone: the writes wait for their user
        Err(
            e @ (Error::SessionExpired
            | Error::SessionRevoked
            | Error::SessionInvalid
            | Error::SignInRequired
            | Error::NotSignedIn),
        ) => Verdict::Kept {
            why: e,
            session_ended: true,
        },
        // the proof of possession was refused, not the write: kept (after a refusal that ended
        // the session, for its user's next session)
        Err(e) if e.is_proof_refusal() => Verdict::Kept {
            session_ended: e.ends_session(),
            why: e,
        },
        // a refusal for good: a 4xx that waiting does not change
        Err(Error::Rejected {
            code,
            status,
            message,
        }) if (400..500).contains(&status) => rejected(
            status,
            Some(code.as_str()),
            Error::Rejected {
                code,
                status,
                message,
            },
        ),
        Err(Error::UnknownErrorCode {
            code,
            status,
            message,
        }) if (400..500).contains(&status) && status != 429 => {
            let c = code.clone();
            rejected(
                status,
                Some(&c),
                Error::UnknownErrorCode {
                    code,
                    status,
                    message,
                },
            )
        }
        Err(e @ Error::UnknownContractor) => rejected(
            ErrorCode::UnknownContractor.status().as_u16(),
            Some(ErrorCode::UnknownContractor.as_str()),
            e,
        ),
        // the write no longer passes the SDK's checks: it can never be sent
        Err(e @ Error::InvalidInput(_)) => rejected(0, None, e),
        // later: no answer, the cell or its app down (5xx), handoff, rate limits, a stale
        // ownership view, a certificate without its pin, an owner that cannot be followed
        // yet, local trouble (store, state) — and anything this table does not know
        Err(e) => Verdict::Kept {
            why: e,
            session_ended: false,
        },
    }
}
