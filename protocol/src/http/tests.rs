#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            ::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

/// A stand-in verifier: tokens starting with "good" verify.
fn verify(t: &str, _: Source) -> Result<String, TokenError> {
    if t.starts_with("good") {
        Ok(t.to_owned())
    } else {
        Err(TokenError::BadSignature)
    }
}

fn resolve(h: &HeaderMap) -> Result<(String, Source), TokenError> {
    Presented::from_headers(h).resolve(TokenError::Malformed, verify)
}

#[test]
fn the_credential_rule_table() {
    let big = format!("Bearer {}", "a".repeat(MAX_TOKEN_HEADER_BYTES + 1));
    let big_cookie = format!(
        "{SESSION_COOKIE}={}",
        "a".repeat(MAX_TOKEN_COOKIE_BYTES + 1)
    );
    type Case<'a> = (
        &'a str,
        Vec<(&'a str, &'a str)>,
        Result<(&'a str, Source), TokenError>,
    );
    let cases: Vec<Case> = vec![
        (
            "bearer only",
            vec![("authorization", "Bearer good1")],
            Ok(("good1", Source::Bearer)),
        ),
        (
            "cookie only",
            vec![("cookie", "__Host-cellbind_session=good2")],
            Ok(("good2", Source::Cookie)),
        ),
        (
            "valid bearer wins, cookie ignored",
            vec![
                ("authorization", "Bearer good1"),
                ("cookie", "__Host-cellbind_session=bad"),
            ],
            Ok(("good1", Source::Bearer)),
        ),
        (
            "junk bearer: a cookie request",
            vec![
                ("authorization", "Bearer junk"),
                ("cookie", "__Host-cellbind_session=good2"),
            ],
            Ok(("good2", Source::Cookie)),
        ),
        (
            "Basic: a cookie request",
            vec![
                ("authorization", "Basic dXNlcjpwdw=="),
                ("cookie", "__Host-cellbind_session=good2"),
            ],
            Ok(("good2", Source::Cookie)),
        ),
        (
            "Negotiate: a cookie request",
            vec![
                ("authorization", "Negotiate x"),
                ("cookie", "a=b; __Host-cellbind_session=good3"),
            ],
            Ok(("good3", Source::Cookie)),
        ),
        (
            "lower-case scheme",
            vec![("authorization", "bearer good1")],
            Err(TokenError::Malformed),
        ),
        (
            "upper-case scheme",
            vec![("authorization", "BEARER good1")],
            Err(TokenError::Malformed),
        ),
        (
            "empty token",
            vec![("authorization", "Bearer ")],
            Err(TokenError::Malformed),
        ),
        (
            "two spaces",
            vec![("authorization", "Bearer  good1")],
            Err(TokenError::BadSignature),
        ),
        (
            "two Authorization headers",
            vec![
                ("authorization", "Bearer good1"),
                ("authorization", "Bearer good2"),
            ],
            Err(TokenError::Malformed),
        ),
        (
            "two session cookies",
            vec![(
                "cookie",
                "__Host-cellbind_session=good1; __Host-cellbind_session=good2",
            )],
            Err(TokenError::Malformed),
        ),
        (
            "two session cookies in two headers",
            vec![
                ("cookie", "__Host-cellbind_session=good1"),
                ("cookie", "__Host-cellbind_session=good2"),
            ],
            Err(TokenError::Malformed),
        ),
        (
            "oversized bearer",
            vec![("authorization", big.as_str())],
            Err(TokenError::TooLarge {
                max: MAX_TOKEN_HEADER_BYTES,
            }),
        ),
        (
            "oversized cookie",
            vec![("cookie", big_cookie.as_str())],
            Err(TokenError::TooLarge {
                max: MAX_TOKEN_COOKIE_BYTES,
            }),
        ),
        (
            "other cookies only",
            vec![("cookie", "a=b; c=d")],
            Err(TokenError::Malformed),
        ),
        ("nothing", vec![], Err(TokenError::Malformed)),
        (
            "look-alike cookie name",
            vec![("cookie", "x__Host-cellbind_session=good1")],
            Err(TokenError::Malformed),
        ),
    ];
    for (name, pairs, want) in cases {
        let h = headers(&pairs);
        let got = resolve(&h);
        let got = got
            .as_ref()
            .map(|(t, s)| (t.as_str(), *s))
            .map_err(Clone::clone);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_missing_credential_is_the_callers_missing_error() {
    let r = Presented::from_headers(&HeaderMap::new()).resolve(TokenError::Expired, verify);
    assert_eq!(r, Err(TokenError::Expired));
}

#[test]
fn identity_headers_are_recognised_in_every_spelling() {
    for name in [
        "x-cellbind-contractor",
        "X-Cellbind-Contractor",
        "x_cellbind_contractor",
        "X_CELLBIND_SUBJECT",
        "x-cellbind_edge-key",
        "x_cellbind-",
        // The synthetic-traffic mark is the edge's too: counted there, never forwarded.
        SYNTHETIC_HEADER,
    ] {
        assert!(is_cellbind_header(name), "{name}");
    }
    for name in [
        "x-cellbin",
        "cellbind-x",
        "x-forwarded-for",
        "xx-cellbind-a",
    ] {
        assert!(!is_cellbind_header(name), "{name}");
    }
}

#[test]
fn the_csrf_proof() {
    let me = |o: &str| o == "https://127.0.0.4:8443";
    let ok = headers(&[
        ("origin", "https://127.0.0.4:8443"),
        (
            "cookie",
            "__Host-cellbind_session=t; __Host-cellbind_csrf=abc",
        ),
        ("x-cellbind-csrf", "abc"),
    ]);
    assert_eq!(check_csrf_proof(&ok, me), Ok(()));
    let same_site = headers(&[
        ("sec-fetch-site", "same-origin"),
        ("cookie", "__Host-cellbind_csrf=abc"),
        ("x-cellbind-csrf", "abc"),
    ]);
    assert_eq!(check_csrf_proof(&same_site, me), Ok(()));
    let cases = [
        (
            vec![
                ("origin", "https://evil.example"),
                ("cookie", "__Host-cellbind_csrf=abc"),
                ("x-cellbind-csrf", "abc"),
            ],
            CsrfError::ForeignOrigin,
        ),
        (
            vec![
                ("cookie", "__Host-cellbind_csrf=abc"),
                ("x-cellbind-csrf", "abc"),
            ],
            CsrfError::NoOrigin,
        ),
        (
            vec![
                ("origin", "https://127.0.0.4:8443"),
                ("cookie", "__Host-cellbind_csrf=abc"),
            ],
            CsrfError::Missing,
        ),
        (
            vec![
                ("origin", "https://127.0.0.4:8443"),
                ("x-cellbind-csrf", "abc"),
            ],
            CsrfError::Missing,
        ),
        (
            vec![
                ("origin", "https://127.0.0.4:8443"),
                ("cookie", "__Host-cellbind_csrf=abc"),
                ("x-cellbind-csrf", "abd"),
            ],
            CsrfError::Mismatch,
        ),
        (
            vec![
                ("origin", "https://127.0.0.4:8443"),
                (
                    "cookie",
                    "__Host-cellbind_csrf=abc; __Host-cellbind_csrf=abc",
                ),
                ("x-cellbind-csrf", "abc"),
            ],
            CsrfError::Missing,
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(
            check_csrf_proof(&headers(&pairs), me),
            Err(want),
            "{pairs:?}"
        );
    }
}

#[test]
fn cookies_are_built_with_the_design_attributes() {
    let c = session_cookie("abc", 60).unwrap();
    assert_eq!(
        c.to_str().unwrap(),
        "__Host-cellbind_session=abc; Secure; HttpOnly; SameSite=Strict; Path=/; Max-Age=60"
    );
    assert!(session_cookie(&"a".repeat(MAX_TOKEN_COOKIE_BYTES + 1), 60).is_none());
    let mut h = HeaderMap::new();
    h.append(header::SET_COOKIE, c);
    assert_eq!(
        session_cookie_change(&h),
        Some(SessionCookieChange::Set {
            max_age_s: Some(60)
        })
    );
    h.append(header::SET_COOKIE, clear_session_cookie());
    assert_eq!(
        session_cookie_change(&h),
        Some(SessionCookieChange::Cleared)
    );
    assert_eq!(
        csrf_cookie("x", None).unwrap().to_str().unwrap(),
        "__Host-cellbind_csrf=x; Secure; SameSite=Strict; Path=/"
    );
}

#[test]
fn the_edge_forwards_only_the_chosen_session_cookie_and_the_app_none_of_ours() {
    assert_eq!(
        session_cookie_request("abc").unwrap().to_str().unwrap(),
        "__Host-cellbind_session=abc"
    );
    assert!(session_cookie_request("a\nb").is_none());

    let h = headers(&[
        ("cookie", "theme=dark; __Host-cellbind_session=t; lang=en"),
        (
            "cookie",
            "__Host-cellbind_csrf=c;  __Host-cellbind_session_x=1",
        ),
        ("cookie", "__Host-cellbind_sessionx=2;"),
    ]);
    assert_eq!(
        cookies_without_session(&h).unwrap().to_str().unwrap(),
        "theme=dark; lang=en; __Host-cellbind_session_x=1; __Host-cellbind_sessionx=2"
    );
    let ours_only = headers(&[(
        "cookie",
        "__Host-cellbind_session=t; __Host-cellbind_csrf=c",
    )]);
    assert!(cookies_without_session(&ours_only).is_none());
    assert!(cookies_without_session(&HeaderMap::new()).is_none());
}

/// The word-at-a-time text check agrees with `HeaderValue::to_str` on every byte a header
/// value may hold, alone and inside a token.
#[test]
fn header_text_decides_what_to_str_decides() {
    for b in 0..=255u8 {
        let Ok(alone) = HeaderValue::from_bytes(&[b]) else {
            continue;
        };
        assert_eq!(header_text(&alone), alone.to_str().ok(), "byte {b:#04x}");
        let mut long = b"Bearer eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJjLTEudCJ9.".to_vec();
        long.push(b);
        long.extend_from_slice(b"c2lnbmF0dXJlc2lnbmF0dXJl");
        let inside = HeaderValue::from_bytes(&long).unwrap();
        assert_eq!(header_text(&inside), inside.to_str().ok(), "byte {b:#04x}");
    }
}

#[test]
fn a_client_is_counted_by_its_ipv4_address_or_its_ipv6_slash_64() {
    use std::net::IpAddr;
    let key = |s: &str| client_key(s.parse::<IpAddr>().unwrap()).to_string();
    assert_eq!(key("203.0.113.7"), "203.0.113.7");
    // Every address of one /64 is one client; the next /64 is another.
    assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
    assert_eq!(key("2001:db8:1:2::1"), "2001:db8:1:2::");
    assert_eq!(key("2001:db8:1:3::1"), "2001:db8:1:3::");
    // An IPv4 client on a dual-stack socket is its IPv4 address.
    assert_eq!(key("::ffff:203.0.113.7"), "203.0.113.7");
}
