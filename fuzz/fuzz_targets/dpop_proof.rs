//! The DPoP proof parser and verifier (`protocol::dpop`).
//!
//! Input: first byte even → the rest is the `DPoP` header as presented. Odd → the rest is
//! `header JSON \0 claims JSON`, signed here with one P-256 key, so that the fuzzer
//! reaches the key, claim and request checks behind the signature.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

use protocol::dpop::{ProofRequest, SoftwareP256Key, parse};

static KEY: OnceLock<SoftwareP256Key> = OnceLock::new();

const NOW: u64 = 1_800_000_000;

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let raw = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let key = KEY.get_or_init(|| SoftwareP256Key::generate().expect("a P-256 key"));
        let mut parts = rest.splitn(2, |b| *b == 0);
        let header = parts.next().unwrap_or_default();
        let claims = parts.next().unwrap_or_default();
        let input = format!("{}.{}", b64(header), b64(claims));
        let sig = key.sign(input.as_bytes()).expect("signs");
        format!("{input}.{}", b64(&sig))
    };
    let request = ProofRequest {
        method: "GET",
        htu: "https://127.0.0.3:8443/api/routes/today",
        access_token: Some("tok"),
    };
    let verdict = parse(&raw).and_then(|p| {
        p.verify_signature()?;
        p.check_request(&request, NOW)?;
        Ok(p)
    });
    match verdict {
        // Accepted only when signed here: without the key nothing verifies.
        Ok(_) => assert!(mode % 2 == 1, "an unsigned proof verified"),
        Err(e) => assert!(e.code().as_str().starts_with("DPOP_"), "{e:?}"),
    }
});
