//! The one credential extractor and rule (`protocol::http`): `Authorization`, the session and
//! CSRF cookies, the CSRF proof, and the `Set-Cookie` reader.
//!
//! Input: header lines `name: value` separated by `\n` (values may be any bytes a header
//! value can hold); lines that are not a valid header are skipped, as the HTTP layer would
//! never hand them over.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use protocol::http::{CSRF_COOKIE, CSRF_HEADER, Presented, SESSION_COOKIE, Source};
use protocol::token::TokenError;

const GOOD: &str = "good.token.value";

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let presented = Presented::from_headers(&headers);
    if let Some(Ok(t)) = presented.authorization {
        assert!(!t.is_empty() && t.len() <= protocol::ids::MAX_TOKEN_HEADER_BYTES);
    }
    if let Some(Ok(v)) = presented.cookie {
        assert!(!v.is_empty() && v.len() <= protocol::ids::MAX_TOKEN_COOKIE_BYTES);
        assert!(!v.contains(';'));
    }
    let resolved = presented.resolve(TokenError::Malformed, |t, _| {
        if t == GOOD {
            Ok(())
        } else {
            Err(TokenError::BadSignature)
        }
    });
    match resolved {
        Ok(((), Source::Bearer)) => assert_eq!(presented.authorization, Some(Ok(GOOD))),
        Ok(((), Source::Cookie)) => {
            assert_ne!(presented.authorization, Some(Ok(GOOD)));
            assert_eq!(presented.cookie, Some(Ok(GOOD)));
        }
        Err(_) => {}
    }
    if protocol::http::check_csrf_proof(&headers, |o| o == "https://127.0.0.3:8443").is_ok() {
        let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        assert!(sent.is_some_and(|s| !s.is_empty()));
        assert_eq!(protocol::http::cookie(&headers, CSRF_COOKIE), Ok(sent));
    }
    let _ = protocol::http::cookie(&headers, SESSION_COOKIE);
    let _ = protocol::http::session_cookie_change(&headers);
    let _ = protocol::http::cookies_without_session(&headers);
});
