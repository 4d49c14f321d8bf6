//! Canonical request targets (ATTACKS A23). The edge routes and forwards a target only when it
//! is already in the one form every component reads the same way, so no upstream, URL library
//! or framework can resolve it into something the edge did not route:
//!
//! | refused (400 `INVALID_REQUEST`)                  | why                                              |
//! |--------------------------------------------------|--------------------------------------------------|
//! | a segment `.` or `..` (also `..;x`, `.;x`)       | dot segments are resolved by URL libraries (RFC 3986 §5.2.4) and by some servers after a `;` |
//! | `%2e`, `%2f`, `%5c` (any case)                   | encoded dot, slash, backslash: decoded later, past the edge's routing |
//! | `%25`                                            | double encoding (`%252e` decodes to `%2e`)       |
//! | `%00`–`%1f`, `%7f`, a `%` not followed by 2 hex   | control bytes and malformed escapes              |
//! | a raw `\`                                        | read as `/` by some servers                      |
//! | `//` anywhere in the path                        | empty segments collapse differently in every parser |
//! | not starting with `/`, `*`                       | only origin-form is routed                       |
//! | HTTP/1 absolute-form naming another authority    | the target would name a host the edge is not     |
//! | two `Host` headers                               | components pick different ones (first, last, joined) |
//! | `Host` ≠ the HTTP/2 `:authority`, or ≠ the authority of an HTTP/1 absolute-form target | one component routes by one, the next by the other |
//!
//! The query is not inspected (it is never used for routing); it is forwarded byte for byte.
//! HTTP/2's `:path` is the same check (hyper gives it as the URI's path), and its `:authority`
//! is treated like `Host`.

use axum::body::Body;
use axum::http::{Request, Uri, Version, header};

/// Why a target was refused (the message of the 400).
pub(crate) const NOT_CANONICAL: &str = "the request target is not in canonical form";
/// Why a request naming its host twice, or two different hosts, was refused (the message of
/// the 400).
pub(crate) const CONFLICTING_HOST: &str =
    "the request names its host more than once or differently";

/// Checks a request's target and host; `authority` is this cell's public authority
/// (`host[:port]`, lower case, default port dropped), which an HTTP/1 absolute-form target must
/// name.
pub(crate) fn check(req: &Request<Body>, authority: &str) -> Result<(), &'static str> {
    check_host(req)?;
    let uri = req.uri();
    if matches!(
        req.version(),
        Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
    ) && let Some(a) = uri.authority()
        && !same_authority(a.as_str(), uri, authority)
    {
        return Err(NOT_CANONICAL);
    }
    check_path(uri.path())
}

/// At most one `Host` header, and, when the request also carries an authority (HTTP/2's
/// `:authority`, an HTTP/1 absolute-form target), the same one.
fn check_host(req: &Request<Body>) -> Result<(), &'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(CONFLICTING_HOST);
    }
    if let (Some(host), Some(authority)) = (host, req.uri().authority()) {
        let host = host.to_str().map_err(|_| CONFLICTING_HOST)?;
        let ours = normalised(authority.as_str(), req.uri());
        if normalised(host, req.uri()) != ours {
            return Err(CONFLICTING_HOST);
        }
    }
    Ok(())
}

fn same_authority(a: &str, uri: &Uri, ours: &str) -> bool {
    normalised(a, uri) == ours
}

/// An authority in lower case, without the default port of `uri`'s scheme.
fn normalised(a: &str, uri: &Uri) -> String {
    let mut a = a.to_ascii_lowercase();
    let default = match uri.scheme_str() {
        Some("https") => ":443",
        Some("http") => ":80",
        _ => "",
    };
    if !default.is_empty() && a.ends_with(default) {
        a.truncate(a.len() - default.len());
    }
    a
}

/// The path rules of the module doc, in one pass over the bytes (every request is checked
/// twice: by the canonical-target guard and again before it is appended to an upstream's base).
pub(crate) fn check_path(path: &str) -> Result<(), &'static str> {
    let b = path.as_bytes();
    if b.first() != Some(&b'/') {
        return Err(NOT_CANONICAL);
    }
    // The current segment starts at `seg`; its name ends at its first `;`, if any.
    let mut seg = 1;
    let mut name_end = None;
    let mut i = 1;
    loop {
        match b.get(i) {
            end @ (None | Some(b'/')) => {
                if matches!(&b[seg..name_end.unwrap_or(i)], b"." | b"..") {
                    return Err(NOT_CANONICAL);
                }
                if end.is_none() {
                    return Ok(());
                }
                if i == seg {
                    // An empty segment before a `/`: `//`.
                    return Err(NOT_CANONICAL);
                }
                seg = i + 1;
                name_end = None;
                i += 1;
            }
            Some(b'\\') => return Err(NOT_CANONICAL),
            Some(b';') => {
                name_end.get_or_insert(i);
                i += 1;
            }
            Some(b'%') => {
                let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                    return Err(NOT_CANONICAL);
                };
                // Two hex digits: the value fits a byte.
                let decoded = (hi * 16 + lo) as u8;
                if matches!(decoded, b'.' | b'/' | b'\\' | b'%' | 0x00..=0x1f | 0x7f) {
                    return Err(NOT_CANONICAL);
                }
                i += 3;
            }
            Some(_) => i += 1,
        }
    }
}

/// This cell's public authority from its public URL (`https://Cell.Example:443/` →
/// `cell.example`).
pub(crate) fn authority_of(public_url: &str) -> String {
    crate::held::origin::origin_of(public_url)
        .and_then(|o| o.split_once("://").map(|(_, a)| a.to_owned()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The rules as first written (several passes): the one-pass check must agree with it.
    fn reference(path: &str) -> Result<(), &'static str> {
        if !path.starts_with('/') || path.contains("//") || path.contains('\\') {
            return Err(NOT_CANONICAL);
        }
        let bytes = path.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = bytes.get(i + 1..i + 3).ok_or(NOT_CANONICAL)?;
                let decoded = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(NOT_CANONICAL)?;
                if matches!(decoded, b'.' | b'/' | b'\\' | b'%' | 0x00..=0x1f | 0x7f) {
                    return Err(NOT_CANONICAL);
                }
                i += 3;
            } else {
                i += 1;
            }
        }
        for segment in path.split('/').skip(1) {
            let name = segment.split(';').next().unwrap_or(segment);
            if name == "." || name == ".." {
                return Err(NOT_CANONICAL);
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        #[test]
        fn the_one_pass_check_agrees_with_the_reference(
            path in "(/|[a-z]|\\.|;|%|[0-9a-fA-F]|\\\\|x|%2[eEfF]|%5[cC]|%00|%7[fF]|%25){0,12}"
        ) {
            proptest::prop_assert_eq!(check_path(&path), reference(&path), "{}", path);
        }
    }

    #[test]
    fn non_canonical_paths_are_refused() {
        for bad in [
            "/v1/sessions/../../admin/v1/status",
            "/v1/sessions/%2e%2e/%2E%2E/admin/v1/status",
            "/v1/sessions/.%2e/.%2e/admin/v1/status",
            "/v1/sessions/./../admin",
            "/api/..%2finternal/v1/contractors",
            "/api/..%2Finternal",
            "/api/%5c..%5cinternal",
            "/api/..\\internal",
            "//admin/v1/status",
            "/api//routes/today",
            "/api/..;/internal",
            "/api/.;x/routes",
            "/api/%252e%252e/internal",
            "/api/x%00y",
            "/api/x%0a",
            "/api/x%",
            "/api/x%2",
            "/api/x%zz",
            "/api/.",
            "/api/..",
            "",
        ] {
            assert_eq!(check_path(bad), Err(NOT_CANONICAL), "{bad}");
        }
    }

    #[test]
    fn canonical_paths_pass() {
        for good in [
            "/",
            "/v1/sessions",
            "/v1/sessions/current",
            "/api/routes/today",
            "/api/jobs/j-1/complete",
            "/api/jobs/a%20b/complete",
            "/api/x.y/..z/...",
            "/desk/",
            "/.well-known/jwks.json",
        ] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn an_absolute_form_target_must_name_this_cell() {
        let me = authority_of("https://127.0.0.4:8443");
        assert_eq!(me, "127.0.0.4:8443");
        let req = |uri: &str, v: Version| {
            Request::builder()
                .uri(uri)
                .version(v)
                .body(Body::empty())
                .unwrap()
        };
        for (uri, version, ok) in [
            ("https://127.0.0.4:8443/api/x", Version::HTTP_11, true),
            ("https://127.0.0.9:8443/api/x", Version::HTTP_11, false),
            (
                "http://internal:8446/admin/v1/status",
                Version::HTTP_11,
                false,
            ),
            ("/api/x", Version::HTTP_11, true),
            // HTTP/2 always carries :authority; it is Host, not a target to route elsewhere.
            ("https://127.0.0.9:8443/api/x", Version::HTTP_2, true),
            ("https://127.0.0.4:8443/api/../x", Version::HTTP_2, false),
        ] {
            assert_eq!(
                check(&req(uri, version), &me).is_ok(),
                ok,
                "{uri} {version:?}"
            );
        }
        assert_eq!(authority_of("https://Cell.Example:443/"), "cell.example");
    }

    #[test]
    fn a_second_host_or_a_host_other_than_the_authority_is_refused() {
        let me = authority_of("https://127.0.0.4:8443");
        let req = |uri: &str, v: Version, hosts: &[&str]| {
            let mut b = Request::builder().uri(uri).version(v);
            for h in hosts {
                b = b.header("host", *h);
            }
            b.body(Body::empty()).unwrap()
        };
        let h1 = Version::HTTP_11;
        let h2 = Version::HTTP_2;
        for (uri, version, hosts, verdict) in [
            ("/api/x", h1, &["127.0.0.4:8443"][..], Ok(())),
            ("/api/x", h1, &[][..], Ok(())),
            (
                "/api/x",
                h1,
                &["127.0.0.4:8443", "127.0.0.4:8443"][..],
                Err(CONFLICTING_HOST),
            ),
            (
                "/api/x",
                h1,
                &["127.0.0.4:8443", "evil.example"][..],
                Err(CONFLICTING_HOST),
            ),
            // HTTP/2: `host` must agree with `:authority` (case and default port aside).
            ("https://127.0.0.4:8443/api/x", h2, &[][..], Ok(())),
            (
                "https://127.0.0.4:8443/api/x",
                h2,
                &["127.0.0.4:8443"][..],
                Ok(()),
            ),
            (
                "https://Cell.Example/api/x",
                h2,
                &["cell.example:443"][..],
                Ok(()),
            ),
            (
                "https://127.0.0.4:8443/api/x",
                h2,
                &["evil.example"][..],
                Err(CONFLICTING_HOST),
            ),
            (
                "https://127.0.0.4:8443/api/x",
                h2,
                &["127.0.0.4:9999"][..],
                Err(CONFLICTING_HOST),
            ),
            // HTTP/1.1 absolute-form: `Host` must name the target's authority.
            (
                "https://127.0.0.4:8443/api/x",
                h1,
                &["127.0.0.4:8443"][..],
                Ok(()),
            ),
            (
                "https://127.0.0.4:8443/api/x",
                h1,
                &["evil.example"][..],
                Err(CONFLICTING_HOST),
            ),
        ] {
            assert_eq!(
                check(&req(uri, version, hosts), &me),
                verdict,
                "{uri} {version:?} {hosts:?}"
            );
        }
    }
}
