//! What the log of a refused sign-in may say about its login: never the login itself (a login
//! field may hold a password typed into the wrong box), only a keyed hash and its length; the
//! same login gives the same tag, so its lines still correlate. The access log of the same
//! requests carries no login either.
//!
//! A test binary of its own: it installs the process's global log subscriber, which the other
//! tests must not share (a thread's scoped subscriber can miss lines whose call sites other
//! threads registered first).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "it/common.rs"]
mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;

/// A password typed into the login box: what must never reach a log.
const TYPED_PASSWORD: &str = "Tr0ub4dor&3-never-logged";

/// Everything logged on this thread, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

async fn sign_in_from(f: &Fixture, from: &str, ctr: &str, login: &str, pw: &str) -> Resp {
    f.call_from(
        SocketAddr::new(from.parse().unwrap(), 40_000),
        Method::POST,
        "/v1/sessions",
        &[("content-type", "application/json")],
        Body::from(
            json!({"contractor_id": ctr, "login": login, "password": pw, "client": "field"})
                .to_string(),
        ),
    )
    .await
}

#[tokio::test]
async fn a_refused_sign_in_never_logs_its_login() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let f =
        Fixture::with_extra("signin_account_ip_burst = 2\nsignin_account_ip_per_minute = 1").await;
    f.seed("c-9", "ana", "pw-anas-own", 1).await;
    // An unknown login (the password typed into the login box), three times, the third
    // throttled; a wrong password for a real user; a contractor placed nowhere.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = sign_in_from(&f, "192.0.2.10", "c-9", TYPED_PASSWORD, TYPED_PASSWORD).await;
        statuses.push(r.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::UNAUTHORIZED,
            StatusCode::UNAUTHORIZED,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let r = sign_in_from(&f, "192.0.2.11", "c-9", "ana", TYPED_PASSWORD).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = sign_in_from(&f, "192.0.2.12", "c-nowhere", TYPED_PASSWORD, "pw").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let text = logs.text();
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("sign-in refused"))
        .collect();
    println!(
        "{} log lines, {} of refused sign-ins, e.g.:\n{}",
        text.lines().count(),
        refused.len(),
        refused.first().unwrap_or(&"")
    );
    assert_eq!(refused.len(), 5, "every refusal is logged:\n{text}");
    assert!(
        !text.contains(TYPED_PASSWORD),
        "the login (or password) appears in the log:\n{text}"
    );
    assert!(
        text.contains("access"),
        "the access log was captured too:\n{text}"
    );
    // The lines of the one login correlate: the same tag, with the login's length.
    let tag_of = |line: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("login="))
            .map(str::to_owned)
    };
    let tags: Vec<String> = refused
        .iter()
        .filter(|l| !l.contains("192.0.2.11"))
        .map(|l| tag_of(l).expect("a login tag on every refusal"))
        .collect();
    assert!(tags.iter().all(|t| *t == tags[0]), "{tags:?}");
    assert!(
        tags[0].ends_with(&format!("/{}", TYPED_PASSWORD.len())),
        "{tags:?}"
    );
    let ana = refused
        .iter()
        .find(|l| l.contains("192.0.2.11"))
        .and_then(|l| tag_of(l))
        .unwrap();
    assert_ne!(ana, tags[0], "another login, another tag");
    assert!(!ana.contains("ana/"), "{ana}");
}
