//! Targeted lockout from several addresses (ATTACKS A36): a few addresses' wrong passwords
//! drain an account's ceiling, but the owner's device that signed in before keeps a bucket of
//! its own (its device token); a device token that does not verify counts as none; an IPv6
//! client rotating through its /64 is one client for every throttle.

use std::net::SocketAddr;

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

const CTR: &str = "c-36";
const OWNER_PW: &str = "pw-the-owners-own";

fn peer(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), 40_000)
}

/// A field sign-in from socket peer `from`, with a device token when given.
async fn sign_in(f: &Fixture, from: &str, login: &str, pw: &str, device: Option<&str>) -> Resp {
    let mut body = json!({"contractor_id": CTR, "login": login, "password": pw, "client": "field"});
    if let Some(d) = device {
        body["device_token"] = Value::String(d.to_owned());
    }
    f.call_from(
        peer(from),
        Method::POST,
        "/v1/sessions",
        &[("content-type", "application/json")],
        Body::from(body.to_string()),
    )
    .await
}

fn assert_rate_limited(r: &Resp) {
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.json["error"], "RATE_LIMITED");
}

fn device_token(r: &Resp) -> String {
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    r.json["device_token"]
        .as_str()
        .expect("a field sign-in answers a device token")
        .to_owned()
}

#[tokio::test]
async fn six_addresses_of_wrong_passwords_do_not_lock_out_the_owners_known_device() {
    // The default throttles: (account, address) 10 burst, account ceiling 50 burst.
    let f = Fixture::new().await;
    f.seed(CTR, "ana", OWNER_PW, 1).await;
    f.seed(CTR, "bo", "pw-bos-own", 1).await;
    // The owner's phone signed in once before the attack, and kept its device token.
    let phone = device_token(&sign_in(&f, "198.51.100.200", "ana", OWNER_PW, None).await);
    let bos = device_token(&sign_in(&f, "198.51.100.201", "bo", "pw-bos-own", None).await);

    // 10 wrong passwords from each of 6 addresses.
    let (mut wrong, mut throttled) = (0, 0);
    for a in 1..=6 {
        for _ in 0..10 {
            let r = sign_in(&f, &format!("203.0.113.{a}"), "ana", "a-guess", None).await;
            match r.status {
                StatusCode::UNAUTHORIZED => wrong += 1,
                StatusCode::TOO_MANY_REQUESTS => throttled += 1,
                other => panic!("{other}: {}", r.text),
            }
        }
    }
    println!(
        "A36: 6 addresses x 10 wrong passwords: {wrong} checked (401), {throttled} throttled by the account ceiling (429)"
    );
    assert!(throttled > 0, "the ceiling was reached");

    // A device that never signed in (a new phone, or the attacker) is held by the ceiling,
    // the right password or not, from a fresh address.
    assert_rate_limited(&sign_in(&f, "198.51.100.7", "ana", OWNER_PW, None).await);
    // So is a device token that proves nothing here: another account's, altered, or junk.
    let mut altered = phone.clone().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for bad in [bos.as_str(), altered.as_str(), "d1.AAAA"] {
        assert_rate_limited(&sign_in(&f, "198.51.100.8", "ana", OWNER_PW, Some(bad)).await);
    }
    // The owner's known device signs in, from anywhere.
    f.clock.advance(60);
    let r = sign_in(&f, "198.51.100.9", "ana", OWNER_PW, Some(&phone)).await;
    println!(
        "A36: the owner's known device after the attack: {}",
        r.status
    );
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let renewed_token = device_token(&r);
    assert_ne!(renewed_token, phone, "a fresh token for the next sign-in");
    // And a wrong password on the known device is an ordinary 401 (its own bucket, not the
    // ceiling), then its own bucket runs out (10 at once): a stolen token buys few guesses.
    let (mut checked, mut held) = (0, 0);
    for _ in 0..12 {
        let r = sign_in(&f, "198.51.100.9", "ana", "a-guess", Some(&phone)).await;
        match r.status {
            StatusCode::UNAUTHORIZED => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => held += 1,
            other => panic!("{other}: {}", r.text),
        }
    }
    println!(
        "A36: 12 wrong passwords with the owner's device token: {checked} checked, {held} throttled"
    );
    assert_eq!(
        (checked, held),
        (9, 3),
        "the device's burst of 10, one used above"
    );
}

#[tokio::test]
async fn a_device_token_of_one_replica_is_known_to_another_and_never_a_session() {
    let f = Fixture::new().await;
    f.seed(CTR, "ana", OWNER_PW, 1).await;
    let phone = device_token(&sign_in(&f, "198.51.100.200", "ana", OWNER_PW, None).await);
    // Never accepted as a session.
    let r = f
        .with_session(Method::GET, "/v1/sessions/current", &phone)
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    // A desk sign-in gets none in its body (the desk has no store for it).
    let r = f.sign_in(CTR, "ana", OWNER_PW, "desk").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert!(r.json["device_token"].is_null(), "{}", r.text);
    // Another replica of the cell (same KEK) knows the token: drain the ceiling there and
    // sign in with it.
    let other = Fixture::replica_of(&f).await;
    for a in 1..=6 {
        for _ in 0..10 {
            sign_in(&other, &format!("203.0.113.{a}"), "ana", "a-guess", None).await;
        }
    }
    assert_rate_limited(&sign_in(&other, "198.51.100.7", "ana", OWNER_PW, None).await);
    let r = sign_in(&other, "198.51.100.7", "ana", OWNER_PW, Some(&phone)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}

#[tokio::test]
async fn an_ipv6_client_rotating_through_its_slash_64_is_throttled_as_one_client() {
    const BURST: usize = 20;
    let f = Fixture::with_extra(&format!(
        "signin_ip_burst = {BURST}\nsignin_ip_per_minute = 1"
    ))
    .await;
    f.seed(CTR, "ana", OWNER_PW, 1).await;
    // The client bucket: an unknown contractor answers 404 right after it (no hashing).
    let (mut through, mut throttled) = (0, 0);
    for i in 0..100u32 {
        let addr = format!("2001:db8:1:2:{:x}:{:x}::{:x}", i * 7 + 1, i * 13 + 3, i + 1);
        let r = f
            .call_from(
                peer(&addr),
                Method::POST,
                "/v1/sessions",
                &[("content-type", "application/json")],
                Body::from(
                    json!({"contractor_id": "c-nobody", "login": "x", "password": "p"}).to_string(),
                ),
            )
            .await;
        match r.status {
            StatusCode::NOT_FOUND => through += 1,
            StatusCode::TOO_MANY_REQUESTS => throttled += 1,
            other => panic!("{other}: {}", r.text),
        }
    }
    println!(
        "A36: 100 sign-ins from 100 addresses of one IPv6 /64: {through} through, {throttled} throttled"
    );
    assert_eq!((through, throttled), (BURST, 100 - BURST));

    // The (account, client) bucket counts the /64 too: 10 wrong passwords from 10 addresses
    // of another /64, then that /64 is held on this account even with the right password,
    // while the owner at another /64 signs in.
    for i in 1..=10 {
        let r = sign_in(&f, &format!("2001:db8:9:9::{i:x}"), "ana", "a-guess", None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    }
    assert_rate_limited(&sign_in(&f, "2001:db8:9:9:ffff::1", "ana", OWNER_PW, None).await);
    let r = sign_in(&f, "2001:db8:9:a::1", "ana", OWNER_PW, None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
}
