//! [`Endpoint`]: the base URL of a Cellbind service (a cell's public endpoint, an issuer, an
//! auth-service or control-plane URL), parsed once and normalised once, so every place that
//! joins a path to it gets the same string.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string is not an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    #[error("endpoint {input:?} is not a URL: {reason}")]
    NotAUrl { input: String, reason: String },
    #[error("endpoint {input:?} must use https or http")]
    Scheme { input: String },
    #[error("endpoint {input:?} must not carry {part}")]
    Extra { input: String, part: &'static str },
}

/// A service's base URL: `http` or `https`, a host, an optional port and path prefix; no
/// credentials, query or fragment. Normalised by the URL standard (lower-case scheme and
/// host, no default port) and without a trailing `/`, so `https://cell-1.example/` and
/// `https://cell-1.example` are the same endpoint and `join("/v1/x")` never doubles a slash.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint(String);

impl Endpoint {
    /// Parses and normalises `s`.
    pub fn parse(s: &str) -> Result<Endpoint, EndpointError> {
        let input = || s.to_owned();
        let url = url::Url::parse(s.trim()).map_err(|e| EndpointError::NotAUrl {
            input: input(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(EndpointError::Scheme { input: input() });
        }
        let extra = |part| {
            Err(EndpointError::Extra {
                input: input(),
                part,
            })
        };
        if url.host_str().is_none_or(str::is_empty) {
            return extra("an empty host");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return extra("credentials");
        }
        if url.query().is_some() {
            return extra("a query");
        }
        if url.fragment().is_some() {
            return extra("a fragment");
        }
        Ok(Endpoint(url.as_str().trim_end_matches('/').to_owned()))
    }

    /// The normalised URL (no trailing `/`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `self` followed by `path`, which starts with `/` (a missing `/` is added).
    pub fn join(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{path}", self.0)
        } else {
            format!("{}/{path}", self.0)
        }
    }

    /// `true` when `other` names this endpoint (after the same normalisation).
    pub fn is(&self, other: &str) -> bool {
        Endpoint::parse(other).is_ok_and(|o| o == *self)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoint({})", self.0)
    }
}

impl AsRef<str> for Endpoint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

impl TryFrom<String> for Endpoint {
    type Error = EndpointError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Endpoint::parse(&s)
    }
}

impl From<Endpoint> for String {
    fn from(e: Endpoint) -> String {
        e.0
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Endpoint::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_once() {
        let a = Endpoint::parse("https://127.0.0.1:4003/").unwrap();
        let b = Endpoint::parse("https://127.0.0.1:4003").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_str(), "https://127.0.0.1:4003");
        assert_eq!(a.join("/v1/sessions"), "https://127.0.0.1:4003/v1/sessions");
        assert_eq!(a.join("v1/sessions"), "https://127.0.0.1:4003/v1/sessions");
        assert_eq!(
            Endpoint::parse("HTTPS://Cell-1.Example:443/base/")
                .unwrap()
                .as_str(),
            "https://cell-1.example/base"
        );
        assert!(a.is("https://127.0.0.1:4003/"));
        assert!(!a.is("https://127.0.0.1:4004"));
    }

    #[test]
    fn refuses_what_is_not_a_base_url() {
        for bad in [
            "",
            "cell-1.example",
            "ftp://cell-1.example",
            "https://user:pw@cell-1.example",
            "https://cell-1.example/?x=1",
            "https://cell-1.example/#top",
            "file:///etc/passwd",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn serde_is_a_plain_string() {
        let e: Endpoint = serde_json::from_str("\"https://a.example/\"").unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), "\"https://a.example\"");
        assert!(serde_json::from_str::<Endpoint>("\"nope\"").is_err());
    }
}
