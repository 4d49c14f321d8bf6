//! The token verifier (`protocol::token::verify`) as both token kinds, from both sources.
//!
//! Input: first byte even → the rest is the token as presented. Odd → the rest is
//! `header JSON \0 claims JSON`, signed here with the key the key set holds, so that the
//! fuzzer reaches the header and claim checks behind the signature.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::jwks::KeySet;
use protocol::token::{
    DEFAULT_SESSION_LIFETIME_S, Expectations, LEEWAY_S, SessionClaims, SigningKey,
    TICKET_MAX_LIFETIME_S, TicketClaims, TokenError,
};
use protocol::{CellId, Kid};

const NOW: u64 = 1_790_000_000;

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn check(e: &TokenError) {
    // Every refusal maps to a public code that is not Internal.
    assert_ne!(e.code(), protocol::ErrorCode::Internal, "{e:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let key = SigningKey::from_seed(Kid::new("k1").unwrap(), &[1; 32]).unwrap();
    let keys = KeySet::new([(key.kid().clone(), key.public_key())].into());
    let cell = CellId::new("cell-03").unwrap();
    let token = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let mut parts = rest.splitn(2, |b| *b == 0);
        let header = parts.next().unwrap_or_default();
        let claims = parts.next().unwrap_or_default();
        let input = format!("{}.{}", b64(header), b64(claims));
        let sig = key.sign_raw(input.as_bytes());
        format!("{input}.{}", b64(&sig))
    };
    let session = Expectations {
        issuer: "https://127.0.0.3:8443",
        audience: &cell,
        max_lifetime_s: DEFAULT_SESSION_LIFETIME_S,
        leeway_s: LEEWAY_S,
    };
    let ticket = Expectations {
        max_lifetime_s: TICKET_MAX_LIFETIME_S,
        ..session.clone()
    };
    for cap in [
        protocol::ids::MAX_TOKEN_HEADER_BYTES,
        protocol::ids::MAX_TOKEN_COOKIE_BYTES,
    ] {
        let s = protocol::token::verify::<SessionClaims>(&token, &keys, &session, NOW, cap);
        let t = protocol::token::verify::<TicketClaims>(&token, &keys, &ticket, NOW, cap);
        assert!(s.is_err() || t.is_err(), "a token verified as both kinds");
        if mode % 2 == 0 {
            // Without the key, nothing verifies.
            assert!(s.is_err() && t.is_err(), "unsigned input verified");
        }
        for e in [s.err(), t.err()].iter().flatten() {
            check(e);
        }
    }
});
