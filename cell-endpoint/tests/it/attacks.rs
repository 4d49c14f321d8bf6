//! The token attacks of `docs/THREAT-MODEL.md` against the whole edge service, in-process: every forged, malformed or
//! foreign token is a 401 with the right code, never a panic, never a forward to the app.

use crate::common::*;
use axum::http::StatusCode;
use protocol::token::{SESSION_TYP, TICKET_TYP};

fn valid_payload() -> serde_json::Value {
    serde_json::to_value(claims(CTR, 1)).unwrap()
}

fn signed_payload(payload: &serde_json::Value) -> String {
    craft(
        &cell_key(),
        &header_json(cell_key().kid().as_str()),
        &payload.to_string(),
    )
}

fn with_claim(name: &str, value: serde_json::Value) -> String {
    let mut p = valid_payload();
    p[name] = value;
    signed_payload(&p)
}

fn without_claim(name: &str) -> String {
    let mut p = valid_payload();
    p.as_object_mut().unwrap().remove(name);
    signed_payload(&p)
}

fn with_header(header: &str) -> String {
    craft(&cell_key(), header, &valid_payload().to_string())
}

fn hs256_with_public_key() -> String {
    let k = cell_key();
    let header = format!(
        r#"{{"alg":"HS256","typ":"{SESSION_TYP}","kid":"{}"}}"#,
        k.kid().as_str()
    );
    let input = format!(
        "{}.{}",
        b64(header.as_bytes()),
        b64(valid_payload().to_string().as_bytes())
    );
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &k.public_bytes()),
        input.as_bytes(),
    );
    format!("{input}.{}", b64(mac.as_ref()))
}

/// A JOSE cookbook token with its header's kid replaced by ours (alg kept).
fn cookbook_with_our_kid(file: &str) -> Vec<String> {
    let path = format!(
        "{}/../vectors/jose-cookbook/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let compact = v["output"]["compact"].as_str().unwrap().to_owned();
    let mut protected = v["signing"]["protected"].clone();
    protected["kid"] = serde_json::json!(cell_key().kid().as_str());
    let parts: Vec<&str> = compact.split('.').collect();
    let replayed = format!(
        "{}.{}.{}",
        b64(protected.to_string().as_bytes()),
        parts[1],
        parts[2]
    );
    let mut typed = protected.clone();
    typed["typ"] = serde_json::json!(SESSION_TYP);
    let replayed_typed = format!(
        "{}.{}.{}",
        b64(typed.to_string().as_bytes()),
        b64(valid_payload().to_string().as_bytes()),
        parts[2]
    );
    vec![compact, replayed, replayed_typed]
}

fn alg_none(alg: &str) -> Vec<String> {
    let header = format!(
        r#"{{"alg":"{alg}","typ":"{SESSION_TYP}","kid":"{}"}}"#,
        cell_key().kid().as_str()
    );
    let input = format!(
        "{}.{}",
        b64(header.as_bytes()),
        b64(valid_payload().to_string().as_bytes())
    );
    let sig = b64(&cell_key().sign_raw(input.as_bytes()));
    vec![format!("{input}."), input.clone(), format!("{input}.{sig}")]
}

/// A token whose base64url text contains `-` or `_` (so its `+/` twin differs).
fn token_with_url_alphabet() -> String {
    loop {
        let t = session();
        if t.contains('-') || t.contains('_') {
            return t;
        }
    }
}

fn attack_table() -> Vec<(String, String, &'static str)> {
    let kid = cell_key().kid().as_str().to_owned();
    let good = session();
    let parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let mut t: Vec<(String, String, &'static str)> = Vec::new();
    let mut add = |name: &str, token: String, code: &'static str| {
        t.push((name.to_owned(), token, code));
    };
    const INVALID: &str = "SESSION_INVALID";
    for alg in ["none", "None", "NONE", "nOnE"] {
        for (i, tok) in alg_none(alg).into_iter().enumerate() {
            add(&format!("alg {alg} #{i}"), tok, INVALID);
        }
    }
    add(
        "HS256 keyed with the public key",
        hs256_with_public_key(),
        INVALID,
    );
    for (i, tok) in cookbook_with_our_kid("jws_4_1.rsa_v15_signature.json")
        .into_iter()
        .enumerate()
    {
        add(&format!("RS256 cookbook #{i}"), tok, INVALID);
    }
    for (i, tok) in cookbook_with_our_kid("jws_4_3.ecdsa_signature.json")
        .into_iter()
        .enumerate()
    {
        add(&format!("ES512 cookbook #{i}"), tok, INVALID);
    }
    add(
        "alg eddsa lowercase",
        with_header(&format!(
            r#"{{"alg":"eddsa","typ":"{SESSION_TYP}","kid":"{kid}"}}"#
        )),
        INVALID,
    );
    add(
        "alg Ed25519",
        with_header(&format!(
            r#"{{"alg":"Ed25519","typ":"{SESSION_TYP}","kid":"{kid}"}}"#
        )),
        INVALID,
    );
    // kid
    let other = key("k-other", 3);
    add(
        "unknown kid (signed by an unknown key)",
        craft(
            &other,
            &header_json("k-other"),
            &valid_payload().to_string(),
        ),
        INVALID,
    );
    add(
        "our kid, another key",
        craft(&other, &header_json(&kid), &valid_payload().to_string()),
        INVALID,
    );
    add(
        "overlong kid",
        with_header(&header_json(&"k".repeat(65))),
        INVALID,
    );
    add(
        "traversal kid",
        with_header(&header_json("../../dev/null")),
        INVALID,
    );
    add("empty kid", with_header(&header_json("")), INVALID);
    add(
        "sql kid",
        with_header(&header_json("x' OR '1'='1")),
        INVALID,
    );
    add(
        "missing kid",
        with_header(&format!(r#"{{"alg":"EdDSA","typ":"{SESSION_TYP}"}}"#)),
        INVALID,
    );
    // payload tampering
    let mut tampered = valid_payload();
    tampered["ctr"] = serde_json::json!(CTR_HANDOFF);
    add(
        "tampered payload",
        format!(
            "{}.{}.{}",
            parts[0],
            b64(tampered.to_string().as_bytes()),
            parts[2]
        ),
        INVALID,
    );
    let mut sig =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &parts[2])
            .unwrap();
    sig[10] ^= 1;
    add(
        "flipped signature bit",
        format!("{}.{}.{}", parts[0], parts[1], b64(&sig)),
        INVALID,
    );
    // typ
    for typ in [TICKET_TYP, "JWT", "at+jwt", "cellmap+jwt", ""] {
        add(
            &format!("typ {typ:?}"),
            with_header(&format!(r#"{{"alg":"EdDSA","typ":"{typ}","kid":"{kid}"}}"#)),
            INVALID,
        );
    }
    add(
        "no typ",
        with_header(&format!(r#"{{"alg":"EdDSA","kid":"{kid}"}}"#)),
        INVALID,
    );
    // extra header members
    for extra in [
        r#""crit":["exp"]"#,
        r#""crit":["x-unknown"]"#,
        r#""cty":"JWT""#,
        r#""jwk":{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
        r#""jku":"https://127.0.0.1:1/jwks.json""#,
        r#""x5u":"https://127.0.0.1:1/x5u""#,
        r#""x5c":["MIIB"]"#,
        r#""x5t":"abc""#,
        r#""zip":"DEF""#,
    ] {
        add(
            &format!("header {extra}"),
            with_header(&format!(
                r#"{{"alg":"EdDSA","typ":"{SESSION_TYP}","kid":"{kid}",{extra}}}"#
            )),
            INVALID,
        );
    }
    add(
        "duplicate alg in header",
        with_header(&format!(
            r#"{{"alg":"EdDSA","alg":"none","typ":"{SESSION_TYP}","kid":"{kid}"}}"#
        )),
        INVALID,
    );
    // claims
    add(
        "aud array",
        with_claim("aud", serde_json::json!([CELL])),
        INVALID,
    );
    add(
        "aud array with another cell",
        with_claim("aud", serde_json::json!(["cell-04", CELL])),
        INVALID,
    );
    add(
        "aud another cell",
        with_claim("aud", serde_json::json!("cell-04")),
        INVALID,
    );
    add("missing iss", without_claim("iss"), INVALID);
    add("missing aud", without_claim("aud"), INVALID);
    add("missing exp", without_claim("exp"), INVALID);
    add(
        "iss another endpoint",
        with_claim("iss", serde_json::json!("https://127.0.0.4:8443")),
        INVALID,
    );
    add(
        "cell claim another cell",
        with_claim("cell", serde_json::json!("cell-04")),
        INVALID,
    );
    add(
        "future iat",
        with_claim("iat", serde_json::json!(NOW + 3600)),
        INVALID,
    );
    add(
        "iat in 2100",
        with_claim("iat", serde_json::json!(4_102_444_800u64)),
        INVALID,
    );
    add(
        "exp = u64::MAX",
        with_claim("exp", serde_json::json!(u64::MAX)),
        INVALID,
    );
    add(
        "exp = 2^53 + 1",
        with_claim("exp", serde_json::json!((1u64 << 53) + 1)),
        INVALID,
    );
    add(
        "string exp",
        with_claim("exp", serde_json::json!(format!("{}", NOW + 100))),
        INVALID,
    );
    add(
        "float exp",
        with_claim("exp", serde_json::json!(1.0e300)),
        INVALID,
    );
    add(
        "negative exp",
        with_claim("exp", serde_json::json!(-1)),
        INVALID,
    );
    add(
        "lifetime longer than configured",
        with_claim("exp", serde_json::json!(NOW + 31 * 24 * 3600)),
        INVALID,
    );
    let mut expired = claims(CTR, 1);
    expired.iat = NOW - 3600;
    expired.nbf = expired.iat;
    expired.auth_time = expired.iat;
    expired.exp = NOW - 61;
    add("expired (61 s past exp)", mint(&expired), "SESSION_EXPIRED");
    add(
        "nbf in the future",
        with_claim("nbf", serde_json::json!(NOW + 120)),
        INVALID,
    );
    add(
        "unknown claim",
        with_claim("admin", serde_json::json!(true)),
        INVALID,
    );
    // duplicate members (parser differential)
    let dup = |name: &str, value: &str| {
        let p = valid_payload().to_string();
        let body = format!("{},\"{name}\":{value}}}", &p[..p.len() - 1]);
        craft(&cell_key(), &header_json(&kid), &body)
    };
    add("duplicate cell", dup("cell", "\"cell-04\""), INVALID);
    add(
        "duplicate exp",
        dup("exp", &(NOW + 10).to_string()),
        INVALID,
    );
    add("duplicate sub", dup("sub", "\"c-40711.admin\""), INVALID);
    add(
        "non-JSON payload",
        craft(&cell_key(), &header_json(&kid), "not json"),
        INVALID,
    );
    // encodings and structure
    add("padded base64", format!("{good}="), INVALID);
    add(
        "padded header segment",
        format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
        INVALID,
    );
    add(
        "+/ alphabet",
        token_with_url_alphabet()
            .replace('-', "+")
            .replace('_', "/"),
        INVALID,
    );
    add(
        "two segments",
        format!("{}.{}", parts[0], parts[1]),
        INVALID,
    );
    add("four segments", format!("{good}.{}", parts[2]), INVALID);
    add("five segments (JWE shape)", format!("{good}.a.b"), INVALID);
    add(
        "empty payload segment",
        format!("{}..{}", parts[0], parts[2]),
        INVALID,
    );
    add("trailing space", format!("{good} "), INVALID);
    add("trailing tab", format!("{good}\t"), INVALID);
    add("leading space", format!(" {good}"), INVALID);
    add("empty token", String::new(), INVALID);
    add(
        "1 MiB token",
        format!("{good}{}", "A".repeat(1 << 20)),
        INVALID,
    );
    add("8 KiB + 1 token", "A".repeat(8 * 1024 + 1), INVALID);
    add("only dots", ".".repeat(4000), INVALID);
    // another cell
    let b = key("k-cell04", 44);
    let mut theirs = claims(CTR, 1);
    theirs.iss = OTHER_ENDPOINT.into();
    theirs.aud = protocol::CellId::new(OTHER_CELL).unwrap();
    theirs.cell = theirs.aud.clone();
    add(
        "token minted by another cell",
        b.mint(&theirs).unwrap().expose().to_owned(),
        INVALID,
    );
    let same_kid_other_cell = key(cell_key().kid().as_str(), 45);
    add(
        "another cell's token reusing our kid name",
        same_kid_other_cell
            .mint(&theirs)
            .unwrap()
            .expose()
            .to_owned(),
        INVALID,
    );
    add(
        "our key, but aud/iss of another cell",
        mint(&theirs),
        INVALID,
    );
    t
}

#[tokio::test]
async fn attack_table_is_refused_with_the_right_code() {
    let (edge, seen, _clock) = edge();
    // Sanity: the genuine session is served, so the refusals below are about the attack.
    let (status, _, _) = send(&edge, get("/api/routes/today", Some(&session()))).await;
    assert_eq!(status, StatusCode::OK);
    let served_before = seen.count();
    let table = attack_table();
    let mut failures = Vec::new();
    for (name, token, want) in &table {
        let mut req = get("/api/routes/today", None);
        let Ok(v) = axum::http::HeaderValue::from_str(&format!("Bearer {token}")) else {
            failures.push(format!("{name}: not presentable as a header"));
            continue;
        };
        req.headers_mut().insert("authorization", v);
        let (status, _, body) = send(&edge, req).await;
        if status != StatusCode::UNAUTHORIZED || code(&body) != *want {
            failures.push(format!("{name}: got {status} {body}"));
        }
    }
    assert!(failures.is_empty(), "attacks not refused: {failures:#?}");
    assert_eq!(seen.count(), served_before, "an attack reached the app");
    println!("attack table: {} cases, all refused with 401", table.len());
}

#[test]
fn trailing_newline_is_refused_by_the_parser_and_unsendable_as_a_header() {
    let t = format!("{}\n", session());
    assert!(
        protocol::token::parse(&t, SESSION_TYP, protocol::ids::MAX_TOKEN_HEADER_BYTES).is_err()
    );
    assert!(axum::http::HeaderValue::from_str(&format!("Bearer {t}")).is_err());
}

#[tokio::test]
async fn attack_tokens_in_the_cookie_are_refused_too() {
    let (edge, seen, _clock) = edge();
    for (name, token, want) in attack_table() {
        if token.len() > 4000 {
            continue;
        }
        let Ok(v) = axum::http::HeaderValue::from_str(&format!("__Host-cellbind_session={token}"))
        else {
            continue;
        };
        let mut req = get("/api/routes/today", None);
        req.headers_mut().insert("cookie", v);
        let (status, _, body) = send(&edge, req).await;
        // A token with a space or tab splits as a cookie pair; either way it is refused.
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {body}");
        assert!(
            code(&body) == want || code(&body) == "SESSION_INVALID",
            "{name}: {body}"
        );
    }
    assert_eq!(seen.count(), 0);
}

#[tokio::test]
async fn every_wycheproof_jws_vector_is_refused() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../vectors/wycheproof/json_web_signature_test.json"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let (edge, seen, _clock) = edge();
    let (mut total, mut presented, mut unsendable) = (0, 0, 0);
    for group in doc["testGroups"].as_array().unwrap() {
        for case in group["tests"].as_array().unwrap() {
            total += 1;
            let Some(jws) = case["jws"].as_str() else {
                continue;
            };
            let Ok(v) = axum::http::HeaderValue::from_str(&format!("Bearer {jws}")) else {
                // Multi-line JSON serializations cannot even be sent as a header.
                unsendable += 1;
                continue;
            };
            presented += 1;
            let mut req = get("/api/routes/today", None);
            req.headers_mut().insert("authorization", v);
            let (status, _, body) = send(&edge, req).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "tcId {}: {body}",
                case["tcId"]
            );
            assert_eq!(code(&body), "SESSION_INVALID", "tcId {}", case["tcId"]);
        }
    }
    println!(
        "wycheproof JWS: {total} cases, {presented} presented as sessions and rejected with 401, \
         {unsendable} not representable as an HTTP header"
    );
    assert_eq!(total, 401);
    assert_eq!(presented + unsendable, 401);
    assert_eq!(seen.count(), 0);
}
