//! The one mapping table from the SDK's errors to [`CellbindError`] (and of the network
//! kinds), tested row by row.

use protocol::ErrorCode;

use crate::{CellbindError, NetworkErrorKind};

/// The one mapping table from SDK errors to the foreign error enum.
impl From<sdk::Error> for CellbindError {
    fn from(e: sdk::Error) -> Self {
        use sdk::Error as E;
        let detail = e.to_string();
        let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs());
        match e {
            E::NotSignedIn => CellbindError::NotSignedIn { detail },
            E::InvalidCredentials => CellbindError::InvalidCredentials { detail },
            E::UnknownContractor => CellbindError::UnknownContractor { detail },
            E::SessionExpired => CellbindError::SessionExpired { detail },
            E::SessionRevoked => CellbindError::SessionRevoked { detail },
            E::SessionInvalid => CellbindError::SessionInvalid { detail },
            E::WrongCell {
                owner_cell,
                owner_endpoint,
            } => CellbindError::WrongCell {
                owner_cell: owner_cell.map(|c| c.to_string()),
                owner_endpoint,
                detail,
            },
            E::CellsDisagree { .. } => CellbindError::CellsDisagree { detail },
            E::UntrustedRedirect { .. } => CellbindError::UntrustedRedirect { detail },
            E::HandoffInProgress { retry_after } => CellbindError::HandoffInProgress {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::RateLimited { retry_after } => CellbindError::RateLimited {
                retry_after_s: secs(retry_after),
                detail,
            },
            E::CellStateStale => CellbindError::CellStateStale { detail },
            E::Upstream { status, .. } => CellbindError::UpstreamUnavailable { status, detail },
            E::Rejected { code, .. } => match code {
                ErrorCode::InvalidRequest => CellbindError::InvalidRequest { detail },
                ErrorCode::SessionMissing => CellbindError::SessionMissing { detail },
                ErrorCode::Forbidden => CellbindError::Forbidden { detail },
                ErrorCode::PayloadTooLarge => CellbindError::PayloadTooLarge { detail },
                ErrorCode::NotReady => CellbindError::NotReady { detail },
                ErrorCode::NotFound => CellbindError::NotFound { detail },
                ErrorCode::Internal => CellbindError::Internal { detail },
                ErrorCode::DpopProofMissing => CellbindError::DpopProofMissing { detail },
                ErrorCode::DpopProofInvalid => CellbindError::DpopProofInvalid { detail },
                ErrorCode::DpopProofReplayed => CellbindError::DpopProofReplayed { detail },
                ErrorCode::DpopNonceRequired => CellbindError::DpopNonceRequired { detail },
                ErrorCode::DpopNonceStale => CellbindError::DpopNonceStale { detail },
                ErrorCode::DpopKeyMismatch => CellbindError::DpopKeyMismatch { detail },
                // a code the protocol gained after this table was written
                other => CellbindError::UnknownErrorCode {
                    code: other.as_str().to_owned(),
                    status: other.status().as_u16(),
                    detail,
                },
            },
            E::Network {
                kind, reached_cell, ..
            } => CellbindError::Network {
                kind: kind.into(),
                reached_cell,
                detail,
            },
            E::UnknownErrorCode { code, status, .. } => CellbindError::UnknownErrorCode {
                code,
                status,
                detail,
            },
            E::PinMismatch { cell } => CellbindError::PinMismatch {
                cell: cell.to_string(),
                detail,
            },
            E::OutboxFull {
                capacity,
                capacity_bytes,
            } => CellbindError::OutboxFull {
                capacity: capacity as u64,
                capacity_bytes: capacity_bytes as u64,
                detail,
            },
            E::InvalidResponse(_) => CellbindError::InvalidResponse { detail },
            E::MapRefused(_) => CellbindError::MapRefused { detail },
            E::Store(_) => CellbindError::Store { detail },
            E::Config(_) => CellbindError::Config { detail },
            E::InvalidInput(_) => CellbindError::InvalidInput { detail },
            E::SignInRequired => CellbindError::SignInRequired { detail },
            E::DeviceKey(_) => CellbindError::DeviceKey { detail },
            _ => CellbindError::Internal { detail },
        }
    }
}

/// A foreign store method failed in a way its signature does not declare.
impl From<uniffi::UnexpectedUniFFICallbackError> for CellbindError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        CellbindError::Store { detail: e.reason }
    }
}

impl From<sdk::NetworkErrorKind> for NetworkErrorKind {
    fn from(k: sdk::NetworkErrorKind) -> Self {
        use sdk::NetworkErrorKind as K;
        match k {
            K::Connect => NetworkErrorKind::Connect,
            K::Tls => NetworkErrorKind::Tls,
            K::TimeoutBeforeSend => NetworkErrorKind::TimeoutBeforeSend,
            K::TimeoutAfterSend => NetworkErrorKind::TimeoutAfterSend,
            K::Interrupted => NetworkErrorKind::Interrupted,
            // a kind the SDK gained after this table was written: the conservative "may have
            // been sent"
            _ => NetworkErrorKind::Interrupted,
        }
    }
}

/// An argument the app passed that is not a valid id, login or password.
impl From<protocol::IdError> for CellbindError {
    fn from(e: protocol::IdError) -> Self {
        sdk::Error::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use protocol::CellId;

    use super::*;

    /// Every SDK error lands on its own foreign variant (a swapped row fails here, and in the
    /// Python and Kotlin binding tests).
    #[test]
    fn the_error_table() {
        let cell = || CellId::new("cell-02").unwrap();
        let rejected = |code| sdk::Error::Rejected {
            code,
            status: code.status().as_u16(),
            message: "m".into(),
        };
        let cases: Vec<(sdk::Error, &str)> = vec![
            (sdk::Error::NotSignedIn, "NotSignedIn"),
            (sdk::Error::InvalidCredentials, "InvalidCredentials"),
            (sdk::Error::UnknownContractor, "UnknownContractor"),
            (sdk::Error::SessionExpired, "SessionExpired"),
            (sdk::Error::SessionRevoked, "SessionRevoked"),
            (sdk::Error::SessionInvalid, "SessionInvalid"),
            (
                sdk::Error::WrongCell {
                    owner_cell: Some(cell()),
                    owner_endpoint: Some("https://127.0.0.2:8443".into()),
                },
                "WrongCell",
            ),
            (
                sdk::Error::CellsDisagree {
                    first: cell(),
                    second: cell(),
                    named_owner: None,
                },
                "CellsDisagree",
            ),
            (
                sdk::Error::UntrustedRedirect {
                    owner_cell: None,
                    owner_endpoint: None,
                },
                "UntrustedRedirect",
            ),
            (
                sdk::Error::HandoffInProgress {
                    retry_after: Some(Duration::from_secs(3)),
                },
                "HandoffInProgress",
            ),
            (sdk::Error::RateLimited { retry_after: None }, "RateLimited"),
            (sdk::Error::CellStateStale, "CellStateStale"),
            (
                sdk::Error::Upstream {
                    status: 502,
                    code: None,
                },
                "UpstreamUnavailable",
            ),
            (rejected(ErrorCode::InvalidRequest), "InvalidRequest"),
            (rejected(ErrorCode::SessionMissing), "SessionMissing"),
            (rejected(ErrorCode::Forbidden), "Forbidden"),
            (rejected(ErrorCode::PayloadTooLarge), "PayloadTooLarge"),
            (rejected(ErrorCode::NotReady), "NotReady"),
            (rejected(ErrorCode::NotFound), "NotFound"),
            (rejected(ErrorCode::Internal), "Internal"),
            (rejected(ErrorCode::DpopProofMissing), "DpopProofMissing"),
            (rejected(ErrorCode::DpopProofInvalid), "DpopProofInvalid"),
            (rejected(ErrorCode::DpopProofReplayed), "DpopProofReplayed"),
            (rejected(ErrorCode::DpopNonceRequired), "DpopNonceRequired"),
            (rejected(ErrorCode::DpopNonceStale), "DpopNonceStale"),
            (rejected(ErrorCode::DpopKeyMismatch), "DpopKeyMismatch"),
            (
                sdk::Error::Network {
                    kind: sdk::NetworkErrorKind::TimeoutAfterSend,
                    reached_cell: true,
                    detail: "x".into(),
                },
                "Network",
            ),
            (
                sdk::Error::UnknownErrorCode {
                    code: "NEWER_CODE".into(),
                    status: 422,
                    message: "m".into(),
                },
                "UnknownErrorCode",
            ),
            (sdk::Error::InvalidResponse("x".into()), "InvalidResponse"),
            (
                sdk::Error::MapRefused(protocol::map::MapError::BadSignature),
                "MapRefused",
            ),
            (sdk::Error::Store("x".into()), "Store"),
            (sdk::Error::Config("x".into()), "Config"),
            (sdk::Error::InvalidInput("x".into()), "InvalidInput"),
            (sdk::Error::SignInRequired, "SignInRequired"),
            (sdk::Error::DeviceKey("x".into()), "DeviceKey"),
        ];
        for (e, want) in cases {
            let shown = format!("{e:?}");
            let got = CellbindError::from(e);
            let name = format!("{got:?}");
            assert!(
                name.starts_with(&format!("{want} ")) || name == want,
                "{shown} mapped to {name}, want {want}"
            );
        }
        match CellbindError::from(sdk::Error::HandoffInProgress {
            retry_after: Some(Duration::from_secs(3)),
        }) {
            CellbindError::HandoffInProgress { retry_after_s, .. } => {
                assert_eq!(retry_after_s, Some(3))
            }
            e => panic!("{e:?}"),
        }
        match CellbindError::from(sdk::Error::Network {
            kind: sdk::NetworkErrorKind::Connect,
            reached_cell: false,
            detail: "refused".into(),
        }) {
            CellbindError::Network {
                kind, reached_cell, ..
            } => assert_eq!((kind, reached_cell), (NetworkErrorKind::Connect, false)),
            e => panic!("{e:?}"),
        }
        match CellbindError::from(sdk::Error::UnknownErrorCode {
            code: "NEWER_CODE".into(),
            status: 422,
            message: "m".into(),
        }) {
            CellbindError::UnknownErrorCode { code, status, .. } => {
                assert_eq!((code.as_str(), status), ("NEWER_CODE", 422))
            }
            e => panic!("{e:?}"),
        }
    }

    /// Every code of the protocol has its own variant: none reaches the app as the fallback
    /// (a code added to the protocol without a row here fails this test).
    #[test]
    fn every_wire_code_is_a_variant_of_its_own() {
        // the codes the SDK types with a variant of its own (rows of `the_error_table`)
        let typed = [
            ErrorCode::InvalidCredentials,
            ErrorCode::UnknownContractor,
            ErrorCode::SessionExpired,
            ErrorCode::SessionRevoked,
            ErrorCode::SessionInvalid,
            ErrorCode::WrongCell,
            ErrorCode::HandoffInProgress,
            ErrorCode::RateLimited,
            ErrorCode::CellStateStale,
            ErrorCode::UpstreamUnavailable,
        ];
        for code in ErrorCode::ALL.into_iter().filter(|c| !typed.contains(c)) {
            let e = sdk::Error::Rejected {
                code,
                status: code.status().as_u16(),
                message: "m".into(),
            };
            let got = CellbindError::from(e);
            assert!(
                !matches!(got, CellbindError::UnknownErrorCode { .. }),
                "{code} is {got:?}"
            );
            assert!(got.to_string().starts_with(code.as_str()), "{code}: {got}");
        }
    }

    #[test]
    fn every_network_kind_keeps_its_name() {
        use sdk::NetworkErrorKind as K;
        for (k, want) in [
            (K::Connect, NetworkErrorKind::Connect),
            (K::Tls, NetworkErrorKind::Tls),
            (K::TimeoutBeforeSend, NetworkErrorKind::TimeoutBeforeSend),
            (K::TimeoutAfterSend, NetworkErrorKind::TimeoutAfterSend),
            (K::Interrupted, NetworkErrorKind::Interrupted),
        ] {
            assert_eq!(NetworkErrorKind::from(k), want);
        }
    }
}
