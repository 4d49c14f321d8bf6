//! Parse, don't validate: every identifier that crosses a boundary is one of these newtypes,
//! and the only way to get one is a fallible constructor (or `Deserialize`, which calls it).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use zeroize::Zeroizing;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    #[error("{kind} is empty")]
    Empty { kind: &'static str },
    #[error("{kind} is longer than {max} bytes")]
    TooLong { kind: &'static str, max: usize },
    #[error("{kind} contains a character outside {allowed}")]
    BadCharacter {
        kind: &'static str,
        allowed: &'static str,
    },
    #[error("{kind} must be exactly {len} bytes")]
    WrongLength { kind: &'static str, len: usize },
    #[error("{kind} must start with {prefix:?}")]
    BadPrefix {
        kind: &'static str,
        prefix: &'static str,
    },
}

fn check(
    kind: &'static str,
    s: &str,
    max: usize,
    allowed: &'static str,
    ok: impl Fn(u8) -> bool,
) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if s.len() > max {
        return Err(IdError::TooLong { kind, max });
    }
    if !s.bytes().all(ok) {
        return Err(IdError::BadCharacter { kind, allowed });
    }
    Ok(())
}

fn is_slug(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
}

/// A slug id that starts with `prefix` and has something after it (`cell-03`, `c-40711`).
fn check_prefixed_slug(
    kind: &'static str,
    s: &str,
    max: usize,
    prefix: &'static str,
) -> Result<(), IdError> {
    check(kind, s, max, "[a-z0-9-]", is_slug)?;
    if !s.starts_with(prefix) || s.len() == prefix.len() {
        return Err(IdError::BadPrefix { kind, prefix });
    }
    Ok(())
}

fn is_b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

macro_rules! string_id {
    ($(#[$m:meta])* $name:ident, $kind:literal, $parse:expr) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parses and validates.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                let parse: fn(&str) -> Result<(), IdError> = $parse;
                parse(&s)?;
                Ok(Self(s))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", $kind, self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// Maximum length of a cell id in bytes.
pub const CELL_ID_MAX_BYTES: usize = 32;
/// Maximum length of a contractor id in bytes.
pub const CONTRACTOR_ID_MAX_BYTES: usize = 64;
/// Maximum length of a subject id in bytes.
pub const SUBJECT_ID_MAX_BYTES: usize = 128;
/// Maximum length of a login in bytes.
pub const LOGIN_MAX_BYTES: usize = 128;
/// Maximum length of a key id in bytes (ATTACKS A4).
pub const KID_MAX_BYTES: usize = 64;

string_id!(
    /// A cell id: `cell-` then lowercase letters, digits and `-`, at most 32 bytes (`cell-03`).
    CellId, "CellId", |s| check_prefixed_slug("cell id", s, CELL_ID_MAX_BYTES, "cell-")
);

string_id!(
    /// A contractor id: `c-` then lowercase letters, digits and `-`, at most 64 bytes (`c-40711`).
    /// Never contains `/`, `.`, `%` or anything else that could act as a path.
    ContractorId, "ContractorId",
    |s| check_prefixed_slug("contractor id", s, CONTRACTOR_ID_MAX_BYTES, "c-")
);

/// The reserved range of contractor ids a game day provisions: every id that starts with it is
/// a synthetic contractor, and no real contractor may be given one. `cellctl gameday` only ever
/// acts on ids in this range; the edge counts the requests of their sessions as synthetic
/// traffic (its `synthetic` metrics label).
pub const SYNTHETIC_CONTRACTOR_PREFIX: &str = "c-synthetic-";

impl ContractorId {
    /// Whether this contractor is in the reserved range of a game day's synthetic contractors
    /// ([`SYNTHETIC_CONTRACTOR_PREFIX`]).
    pub fn is_synthetic(&self) -> bool {
        self.0.starts_with(SYNTHETIC_CONTRACTOR_PREFIX)
    }
}

string_id!(
    /// A technician or dispatcher id (the `sub` claim): `[A-Za-z0-9_.@-]`, at most 128 bytes.
    SubjectId, "SubjectId", |s| check("subject id", s, SUBJECT_ID_MAX_BYTES, "[A-Za-z0-9_.@-]",
        |b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'-'))
);

string_id!(
    /// A login name within a contractor: printable ASCII without spaces, at most 128 bytes.
    Login, "Login", |s| check("login", s, LOGIN_MAX_BYTES, "printable ASCII without spaces",
        |b| b.is_ascii_graphic())
);

string_id!(
    /// A signing key id: `[A-Za-z0-9_-]{1,64}`. An opaque key into an in-memory map; never a
    /// path, query or URL (ATTACKS A4).
    Kid, "Kid", |s| check("kid", s, KID_MAX_BYTES, "[A-Za-z0-9_-]", is_b64url)
);

/// Maximum length of an edge instance id in bytes.
pub const INSTANCE_ID_MAX_BYTES: usize = 64;

string_id!(
    /// An edge instance's id within its cell (`edge-a`, a pod name): `[A-Za-z0-9._-]`, at most
    /// 64 bytes. It names the instance in the feed's instance list, its credential, logs and
    /// metrics.
    InstanceId, "InstanceId", |s| check("instance id", s, INSTANCE_ID_MAX_BYTES, "[A-Za-z0-9._-]",
        |b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
);

/// Length of a key thumbprint (`cnf.jkt`): a SHA-256 digest, base64url without padding.
pub const JKT_CHARS: usize = 43;

string_id!(
    /// The RFC 7638 thumbprint of a device's proof key (`cnf.jkt` of a bound session, `jkt` of
    /// a transfer ticket): a SHA-256 digest as 43 base64url characters.
    Jkt, "Jkt", |s| {
        check("key thumbprint", s, JKT_CHARS, "[A-Za-z0-9_-]", is_b64url)?;
        if s.len() != JKT_CHARS {
            return Err(IdError::WrongLength { kind: "key thumbprint", len: JKT_CHARS });
        }
        Ok(())
    }
);

impl Jkt {
    /// The thumbprint of a SHA-256 digest.
    pub fn from_digest(digest: [u8; 32]) -> Self {
        use base64::Engine as _;
        Self(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
    }
}

/// Length of a session id (`jti`): 128 random bits, base64url without padding.
pub const SESSION_ID_CHARS: usize = 22;

string_id!(
    /// A session id (`jti`): 128 random bits as 22 base64url characters.
    SessionId, "SessionId", |s| {
        check("session id", s, SESSION_ID_CHARS, "[A-Za-z0-9_-]", is_b64url)?;
        if s.len() != SESSION_ID_CHARS {
            return Err(IdError::WrongLength { kind: "session id", len: SESSION_ID_CHARS });
        }
        Ok(())
    }
);

impl SessionId {
    /// Encodes 16 random bytes as a session id.
    pub fn from_random(bytes: [u8; 16]) -> Self {
        use base64::Engine as _;
        Self(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }
}

/// A placement generation. Generations only go up; a session carries the one it was minted at,
/// and the app can fence writes on it.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Debug, Default,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    pub const FIRST: Generation = Generation(1);
    pub fn next(self) -> Generation {
        Generation(self.0.saturating_add(1))
    }
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Generation {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        check("generation", s, 20, "[0-9]", |b| b.is_ascii_digit())?;
        s.parse::<u64>()
            .map(Generation)
            .map_err(|_| IdError::TooLong {
                kind: "generation",
                max: 20,
            })
    }
}

/// Which kind of client a session was minted for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Debug)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ClientKind {
    /// A technician's phone (bearer token).
    Field,
    /// A dispatcher's browser (cookie session).
    Desk,
}

impl ClientKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Field => "field",
            ClientKind::Desk => "desk",
        }
    }
}

/// Maximum size of a token presented in an `Authorization` header (ATTACKS A11).
pub const MAX_TOKEN_HEADER_BYTES: usize = 8 * 1024;
/// Maximum size of a token presented in a cookie (ATTACKS A11, ASVS 3.3.5).
pub const MAX_TOKEN_COOKIE_BYTES: usize = 4096;

/// A raw compact-JWS token (session or ticket). Its `Debug` never shows the token.
/// The constructor only checks size and alphabet; [`crate::token`] does the real verification.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SessionToken(String);

impl SessionToken {
    /// Accepts at most [`MAX_TOKEN_HEADER_BYTES`] of `[A-Za-z0-9_.-]`. Never trims.
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        check("token", &s, MAX_TOKEN_HEADER_BYTES, "[A-Za-z0-9_.-]", |b| {
            is_b64url(b) || b == b'.'
        })?;
        Ok(Self(s))
    }
    /// The token text, for sending it. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionToken(<redacted, {} bytes>)", self.0.len())
    }
}

impl<'de> Deserialize<'de> for SessionToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

/// Maximum password length accepted at sign-in, in bytes (bounds argon2 input).
pub const PASSWORD_MAX_BYTES: usize = 1024;

/// A password. Zeroized on drop; `Debug` never shows it.
#[derive(Clone)]
pub struct Password(Zeroizing<String>);

impl Password {
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = Zeroizing::new(s.into());
        if s.is_empty() {
            return Err(IdError::Empty { kind: "password" });
        }
        if s.len() > PASSWORD_MAX_BYTES {
            return Err(IdError::TooLong {
                kind: "password",
                max: PASSWORD_MAX_BYTES,
            });
        }
        Ok(Self(s))
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl Serialize for Password {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Password {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(s).map_err(serde::de::Error::custom)
    }
}

/// A password hash as the admin API carries it: an argon2id PHC string. Not checked here (the
/// auth-service checks an imported one for strength); `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct PasswordHash(String);

impl PasswordHash {
    pub fn new(phc: impl Into<String>) -> Self {
        Self(phc.into())
    }
    /// The PHC string. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordHash(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_refuse() {
        assert!(CellId::new("cell-03").is_ok());
        assert!(CellId::new("cell-").is_err());
        assert!(CellId::new("cell/03").is_err());
        assert!(ContractorId::new("c-40711").is_ok());
        for bad in ["", "c-", "c-../etc", "c-1/2", "c-%2e", "C-1", "x-1", "c-1 "] {
            assert!(ContractorId::new(bad).is_err(), "{bad}");
        }
        assert!(Kid::new("k-2026_11").is_ok());
        assert!(Kid::new("../../dev/null").is_err());
        assert!(Kid::new("a".repeat(65)).is_err());
        assert!(Kid::new("").is_err());
        assert_eq!(SessionId::from_random([7; 16]).as_str().len(), 22);
        assert!(SessionToken::new("a.b.c\n").is_err());
        assert!(serde_json::from_str::<ContractorId>("\"c-1/..\"").is_err());
    }

    #[test]
    fn only_the_reserved_range_is_synthetic() {
        for synthetic in ["c-synthetic-1", "c-synthetic-gd-2026-01-a"] {
            assert!(
                ContractorId::new(synthetic).unwrap().is_synthetic(),
                "{synthetic}"
            );
        }
        // The range is the whole prefix, its `-` included: a look-alike is a real contractor.
        for real in [
            "c-40711",
            "c-synthetic",
            "c-synthetics-1",
            "c-1-synthetic-1",
            "c-syn",
        ] {
            assert!(!ContractorId::new(real).unwrap().is_synthetic(), "{real}");
        }
        // The prefix is itself a valid contractor id's start (lower-case slug after `c-`).
        assert!(SYNTHETIC_CONTRACTOR_PREFIX.starts_with("c-"));
        assert!(ContractorId::new(format!("{SYNTHETIC_CONTRACTOR_PREFIX}1")).is_ok());
    }

    #[test]
    fn secrets_never_print() {
        let p = Password::new("hunter2-long").unwrap();
        assert!(!format!("{p:?}").contains("hunter2"));
        let t = SessionToken::new("eyJhbGciOiJFZERTQSJ9.e30.sig").unwrap();
        assert!(!format!("{t:?}").contains("eyJ"));
        let h = PasswordHash::new("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA");
        assert!(!format!("{h:?}").contains("argon2"));
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            "\"$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA\""
        );
    }
}
