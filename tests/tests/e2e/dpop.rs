//! Device-bound sessions on a real fleet (DESIGN §3, ATTACKS A39–A45): a cell with two edge
//! instances, a field technician signed in with a P-256 device key, and 1,000 replays of that
//! session on `/api/*`, renew, transfer and sign-out: no proof, a proof by another key, the
//! device's captured proof at the same edge (at once and a second later) and at the other edge
//! instance. None is accepted; each is a 401 whose code says why. The device itself keeps
//! working at both instances. (A proof replayed 60 s and 10 minutes later is the edge's
//! in-process test with a fake clock: `cell-endpoint it::dpop`.)
//!
//! And 20 bound sessions follow their contractor's live migration (transfer at the source,
//! rebind at the target, each with a proof by the device's key) without signing in again,
//! still bound to the same key; a ticket rebound with another key's proof is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::time::Duration;

use crate::revocation_support::*;
use base64::Engine as _;
use cellbind_tests::TestFleet;
use cellctl::migrate::{MigrateOptions, migrate};
use protocol::dpop::{ProofBuilder, ProofClaims, SoftwareP256Key, token_hash};
use serde_json::{Value, json};

/// Replays per route and kind: 4 routes × 5 kinds × 50 = 1,000.
const PER_CASE: usize = 50;

/// A phone's key and what it learnt of each edge's nonce.
struct Device {
    key: SoftwareP256Key,
    /// The cell's public URL: every proof's `htu` starts with it, whichever instance serves.
    public_url: String,
}

impl Device {
    fn new(public_url: &str) -> Self {
        Self {
            key: SoftwareP256Key::generate().unwrap(),
            public_url: public_url.to_owned(),
        }
    }

    fn proof(&self, method: &str, path: &str, token: Option<&str>, nonce: Option<&str>) -> String {
        let claims = ProofClaims {
            jti: format!("{:032x}", rand::random::<u128>()),
            htm: method.into(),
            htu: format!("{}{path}", self.public_url),
            iat: protocol::time::system_clock().now(),
            ath: token.map(token_hash),
            nonce: nonce.map(str::to_owned),
        };
        let b = ProofBuilder::new(self.key.public());
        let input = b.signing_input(&claims).unwrap();
        let sig = self.key.sign(input.as_bytes()).unwrap();
        ProofBuilder::finish(input, &sig).unwrap()
    }
}

/// One request: (status, the `error` code or "", the `DPoP-Nonce` it carried).
async fn send(
    client: &reqwest::Client,
    edge: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    proof: Option<&str>,
) -> (u16, String, Option<String>) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut r = client.request(m, format!("{edge}{path}"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(p) = proof {
        r = r.header("dpop", p);
    }
    if method == "POST" && path == "/v1/sessions/transfer" {
        r = r.json(&json!({}));
    }
    let resp = r.send().await.expect("request");
    let status = resp.status().as_u16();
    let nonce = resp
        .headers()
        .get("dpop-nonce")
        .map(|v| v.to_str().unwrap().to_owned());
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"].as_str().unwrap_or("").to_owned(),
        nonce,
    )
}

/// The nonce `edge` hands a device: the challenge of a proof without one.
async fn nonce_at(client: &reqwest::Client, edge: &str, d: &Device) -> String {
    let p = d.proof("POST", "/v1/sessions", None, None);
    let (status, code, nonce) = send(client, edge, "POST", "/v1/sessions", None, Some(&p)).await;
    assert_eq!((status, code.as_str()), (401, "DPOP_NONCE_REQUIRED"));
    nonce.expect("a DPoP-Nonce with the challenge")
}

/// The `cnf.jkt` a session's claims carry (read, not verified: the cell verified it).
fn bound_to(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["cnf"]["jkt"].as_str().map(str::to_owned)
}

/// Signs `user` in at `edge` with a proof by `d`: the session, checked to be bound to `d`.
async fn bound_sign_in(
    client: &reqwest::Client,
    edge: &str,
    d: &Device,
    user: &devfleet::DemoUser,
) -> String {
    let r = loop {
        let nonce = nonce_at(client, edge, d).await;
        let p = d.proof("POST", "/v1/sessions", None, Some(&nonce));
        let r = client
            .post(format!("{edge}/v1/sessions"))
            .header("dpop", p)
            .json(
                &json!({"contractor_id": user.contractor_id, "login": user.login,
                          "password": user.password, "client": "field"}),
            )
            .send()
            .await
            .unwrap();
        // Many sign-ins of one login in a burst meet the sign-in throttle: its answer says
        // when to come back.
        if r.status().as_u16() == 429 {
            let wait = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        break r;
    };
    assert_eq!(r.status().as_u16(), 201);
    let body: Value = r.json().await.unwrap();
    let token = body["session"].as_str().unwrap().to_owned();
    assert_eq!(
        bound_to(&token),
        Some(d.key.public().thumbprint().as_str().to_owned()),
        "the session is bound to the device's key"
    );
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_replays_of_a_bound_session_at_two_edge_instances_are_all_refused() {
    let t = TestFleet::start_exclusive().await;
    let c = t.file().cells[0].clone();
    let host = c
        .endpoint
        .trim_start_matches("https://")
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    let extra = start_extra_edges(t.fleet.dir(), c.id.as_str(), &host, 1);
    assert!(
        wait_ready(&t.client, &extra[0].url, "/readyz").await,
        "second edge ready; see {}",
        extra[0].log.display()
    );
    let (a, b) = (c.endpoint.clone(), extra[0].url.clone());
    let users: Vec<_> = t
        .file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == c.id)
        .take(2)
        .cloned()
        .collect();
    let client = &t.client;
    let device = Device::new(&c.endpoint);
    let thief = Device::new(&c.endpoint);
    let session = bound_sign_in(client, &a, &device, &users[0]).await;
    // Sign-out ends its session: it gets one of its own.
    let leaving = bound_sign_in(client, &a, &device, &users[1]).await;

    // The device is served at both instances, each with that instance's nonce.
    for edge in [&a, &b] {
        let nonce = nonce_at(client, edge, &device).await;
        let p = device.proof("GET", "/api/routes/today", Some(&session), Some(&nonce));
        let (status, code, _) = send(
            client,
            edge,
            "GET",
            "/api/routes/today",
            Some(&session),
            Some(&p),
        )
        .await;
        assert_eq!(status, 200, "{edge}: {code}");
    }

    let routes = [
        ("GET", "/api/routes/today"),
        ("POST", "/v1/sessions/renew"),
        ("POST", "/v1/sessions/transfer"),
        ("DELETE", "/v1/sessions/current"),
    ];
    let mut tally: BTreeMap<(String, &str, String), usize> = BTreeMap::new();
    let mut accepted = 0;
    let mut note = |route: &str,
                    kind: &'static str,
                    (status, code, _): (u16, String, Option<String>),
                    want: &[&str]| {
        if status < 400 {
            accepted += 1;
        }
        assert_eq!(status, 401, "{route} {kind}: {code}");
        assert!(
            want.contains(&code.as_str()),
            "{route} {kind}: {code}, not {want:?}"
        );
        *tally.entry((route.to_owned(), kind, code)).or_default() += 1;
    };
    for (method, path) in routes {
        let route = format!("{method} {path}");
        let token = if method == "DELETE" {
            &leaving
        } else {
            &session
        };
        let nonce_a = nonce_at(client, &a, &device).await;

        // The copied session alone.
        for _ in 0..PER_CASE {
            let r = send(client, &a, method, path, Some(token), None).await;
            note(&route, "no proof", r, &["DPOP_PROOF_MISSING"]);
        }
        // The thief's own key, with a fresh nonce of the edge it talks to.
        for _ in 0..PER_CASE {
            let p = thief.proof(method, path, Some(token), Some(&nonce_a));
            let r = send(client, &a, method, path, Some(token), Some(&p)).await;
            note(&route, "another key", r, &["DPOP_KEY_MISMATCH"]);
        }
        // The device's own proof, captured on its way: first at the other instance…
        let captured = device.proof(method, path, Some(token), Some(&nonce_a));
        for _ in 0..PER_CASE {
            let r = send(client, &b, method, path, Some(token), Some(&captured)).await;
            note(&route, "other edge", r, &["DPOP_NONCE_REQUIRED"]);
        }
        // …then delivered (the device's request, served as the route serves it)…
        let (status, code, _) = send(client, &a, method, path, Some(token), Some(&captured)).await;
        assert_ne!(status, 401, "{route}: the device's own request: {code}");
        // …and replayed at the same instance, at once and a second later. After the device's
        // sign-out its session is gone too: revoked is as good a refusal.
        let same: &[&str] = if method == "DELETE" {
            &["DPOP_PROOF_REPLAYED", "SESSION_REVOKED"]
        } else {
            &["DPOP_PROOF_REPLAYED"]
        };
        for _ in 0..PER_CASE {
            let r = send(client, &a, method, path, Some(token), Some(&captured)).await;
            note(&route, "same edge", r, same);
        }
        // The replay *after* a second is the subject here, not a synchronisation.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..PER_CASE {
            let r = send(client, &a, method, path, Some(token), Some(&captured)).await;
            note(&route, "same edge, 1 s later", r, same);
        }
    }
    let total: usize = tally.values().sum();
    println!("dpop replays: {total} sent, {accepted} accepted");
    for ((route, kind, code), n) in &tally {
        println!("  {route:<28} {kind:<22} {code:<22} {n}");
    }
    assert_eq!(total, 1_000);
    assert_eq!(accepted, 0);
}

/// Sessions that follow the migration.
const MIGRATING: usize = 20;

/// A bound session's move to its contractor's new cell, as a device does it: `409 WRONG_CELL`
/// at the source, a ticket from the source (a proof with the source's nonce), the rebind at the
/// target (a proof by the same key with the target's nonce), served there.
async fn follow(
    client: &reqwest::Client,
    d: &Device,
    source: &str,
    target: &Device,
    target_ep: &str,
    token: &str,
) -> Result<String, String> {
    let nonce = nonce_at(client, source, d).await;
    let p = d.proof("GET", "/api/routes/today", Some(token), Some(&nonce));
    let (status, code, _) = send(
        client,
        source,
        "GET",
        "/api/routes/today",
        Some(token),
        Some(&p),
    )
    .await;
    if status != 409 || code != "WRONG_CELL" {
        return Err(format!("at the source: {status} {code}"));
    }
    let p = d.proof("POST", "/v1/sessions/transfer", Some(token), Some(&nonce));
    let r = client
        .post(format!("{source}/v1/sessions/transfer"))
        .bearer_auth(token)
        .header("dpop", p)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (status, v): (u16, Value) = (r.status().as_u16(), r.json().await.unwrap_or(Value::Null));
    let ticket = v["ticket"]
        .as_str()
        .ok_or(format!("transfer: {status} {v}"))?
        .to_owned();
    let nonce = nonce_at(client, target_ep, target).await;
    let p = target.proof("POST", "/v1/sessions/rebind", None, Some(&nonce));
    let r = client
        .post(format!("{target_ep}/v1/sessions/rebind"))
        .header("dpop", p)
        .json(&json!({ "ticket": ticket }))
        .send()
        .await
        .unwrap();
    let (status, v): (u16, Value) = (r.status().as_u16(), r.json().await.unwrap_or(Value::Null));
    if status != 201 {
        return Err(format!("rebind: {status} {v} (ticket {ticket})"));
    }
    Ok(v["session"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_sessions_follow_a_live_migration_and_a_ticket_rebinds_only_with_its_key() {
    let t = TestFleet::start().await;
    let f = t.file().clone();
    let client = &t.client;
    let ctr = f.demo.technicians[0].contractor_id.clone();
    let techs: Vec<_> = f
        .demo
        .technicians
        .iter()
        .filter(|u| u.contractor_id == ctr)
        .cloned()
        .collect();
    let source = techs[0].cell_id.clone();
    let target = f
        .cells
        .iter()
        .map(|c| c.id.clone())
        .find(|c| *c != source)
        .unwrap();
    let source_ep = t.cell(&source).endpoint.clone();
    let target_ep = t.cell(&target).endpoint.clone();

    // Twenty devices, each with its own key and bound session, and one more to be stolen.
    let mut devices = Vec::new();
    for i in 0..=MIGRATING {
        let d = Device::new(&source_ep);
        let token = bound_sign_in(client, &source_ep, &d, &techs[i % techs.len()]).await;
        devices.push((d, token));
    }
    let mut opts = MigrateOptions::new(ctr.clone(), target.clone());
    opts.step_timeout = Duration::from_secs(30);
    migrate(&t.fleet.fleet_file_path(), &opts, |_| {})
        .await
        .expect("the migration completes");

    let mut followed = 0;
    for (d, token) in &devices[..MIGRATING] {
        // The same key, speaking to the target's URL.
        let at_target = Device {
            key: SoftwareP256Key::from_pkcs8(d.key.pkcs8()).unwrap(),
            public_url: target_ep.clone(),
        };
        let moved = follow(client, d, &source_ep, &at_target, &target_ep, token)
            .await
            .unwrap_or_else(|e| panic!("a bound session did not follow: {e}"));
        assert_eq!(
            bound_to(&moved),
            Some(d.key.public().thumbprint().as_str().to_owned()),
            "the rebound session is bound to the same key"
        );
        let nonce = nonce_at(client, &target_ep, &at_target).await;
        let p = at_target.proof("GET", "/api/routes/today", Some(&moved), Some(&nonce));
        let (status, code, _) = send(
            client,
            &target_ep,
            "GET",
            "/api/routes/today",
            Some(&moved),
            Some(&p),
        )
        .await;
        assert_eq!(status, 200, "served at the target: {code}");
        // The copied new session without the key is refused there too.
        let (status, code, _) = send(
            client,
            &target_ep,
            "GET",
            "/api/routes/today",
            Some(&moved),
            None,
        )
        .await;
        assert_eq!((status, code.as_str()), (401, "DPOP_PROOF_MISSING"));
        followed += 1;
    }
    println!("dpop migration: {followed}/{MIGRATING} bound sessions followed without signing in");

    // A ticket rebound with a proof by another key is refused, and burns nothing.
    let (d, token) = &devices[MIGRATING];
    let nonce = nonce_at(client, &source_ep, d).await;
    let p = d.proof("POST", "/v1/sessions/transfer", Some(token), Some(&nonce));
    let r = client
        .post(format!("{source_ep}/v1/sessions/transfer"))
        .bearer_auth(token)
        .header("dpop", p)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    let ticket = v["ticket"].as_str().expect("a ticket").to_owned();
    let thief = Device::new(&target_ep);
    let nonce = nonce_at(client, &target_ep, &thief).await;
    let p = thief.proof("POST", "/v1/sessions/rebind", None, Some(&nonce));
    let r = client
        .post(format!("{target_ep}/v1/sessions/rebind"))
        .header("dpop", p)
        .json(&json!({ "ticket": ticket }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    println!(
        "dpop migration: a ticket rebound with another key's proof: {status} {}",
        v["error"]
    );
    assert_eq!(
        (status, v["error"].as_str()),
        (401, Some("DPOP_KEY_MISMATCH"))
    );
    let owner = Device {
        key: SoftwareP256Key::from_pkcs8(d.key.pkcs8()).unwrap(),
        public_url: target_ep.clone(),
    };
    let p = owner.proof("POST", "/v1/sessions/rebind", None, Some(&nonce));
    let r = client
        .post(format!("{target_ep}/v1/sessions/rebind"))
        .header("dpop", p)
        .json(&json!({ "ticket": ticket }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        201,
        "the owner's key still rebinds the ticket"
    );
    assert_eq!(followed, MIGRATING);
}
