//! The credential rule's table (ATTACKS A24): the same credential presentations, sent to the edge (a
//! validated `/api/*` route and the forwarded `/v1/sessions/renew`, `/v1/sessions/transfer`
//! and `DELETE /v1/sessions/current`) and to the auth-service's own public listener (renew,
//! transfer, sign-out), get the same verdict everywhere, and every verdict is a typed 401
//! (an `ErrorBody` with a 401 code). Both servers read credentials with the one extractor of
//! `protocol::http`; this test is what keeps them from drifting apart again.
//!
//! The sessions a row is built from are valid (checked first, at both servers), so a 401 for
//! them comes from how they are presented; the forged and oversized rows add tokens that are
//! refused on their own. Each row gets sessions of its own: if a server wrongly accepted a
//! row (a sign-out revokes, a renewal mints), no other row is disturbed. The table is sent
//! over HTTP/1.1 and over HTTP/2, one client for both servers, so both see the same bytes;
//! HTTP/1.1 drops the whitespace around a header value before any server code sees it, which
//! is why the whitespace rows keep their whitespace inside the value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::fmt::Write as _;

use cellbind_tests::{TestFleet, session_for};
use devfleet::CellToken;
use protocol::http::{SESSION_COOKIE, X_EDGE_KEY};
use protocol::{CellId, Endpoint, ErrorBody, ErrorCode};
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, COOKIE, HeaderMap, HeaderName, HeaderValue};

/// The cell whose edge and auth-service are compared.
const CELL: &str = "cell-02";
/// Bytes of the oversized tokens: exactly the bearer cap, and one over it.
const BIG_TOKEN_BYTES: usize = protocol::ids::MAX_TOKEN_HEADER_BYTES;

/// Which server and route a presentation is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    EdgeApi,
    EdgeRenew,
    EdgeTransfer,
    EdgeSignOut,
    AuthRenew,
    AuthTransfer,
    AuthSignOut,
}

impl Target {
    /// Sign-outs last on each side: a wrongly accepted one would revoke the row's session.
    const ALL: [Target; 7] = [
        Target::EdgeApi,
        Target::EdgeRenew,
        Target::EdgeTransfer,
        Target::EdgeSignOut,
        Target::AuthRenew,
        Target::AuthTransfer,
        Target::AuthSignOut,
    ];

    fn label(self) -> &'static str {
        match self {
            Target::EdgeApi => "edge /api",
            Target::EdgeRenew => "edge renew",
            Target::EdgeTransfer => "edge transfer",
            Target::EdgeSignOut => "edge sign-out",
            Target::AuthRenew => "auth renew",
            Target::AuthTransfer => "auth transfer",
            Target::AuthSignOut => "auth sign-out",
        }
    }

    fn is_edge(self) -> bool {
        matches!(
            self,
            Target::EdgeApi | Target::EdgeRenew | Target::EdgeTransfer | Target::EdgeSignOut
        )
    }

    fn request(self, edge: &Endpoint, auth: &Endpoint) -> (Method, String) {
        let base = if self.is_edge() { edge } else { auth };
        let (method, path) = match self {
            Target::EdgeApi => (Method::GET, "/api/routes/today"),
            Target::EdgeRenew | Target::AuthRenew => (Method::POST, "/v1/sessions/renew"),
            Target::EdgeTransfer | Target::AuthTransfer => (Method::POST, "/v1/sessions/transfer"),
            Target::EdgeSignOut | Target::AuthSignOut => (Method::DELETE, "/v1/sessions/current"),
        };
        (method, base.join(path))
    }
}

/// What a server answered: the status and, when the body is an `ErrorBody`, its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict {
    status: u16,
    code: Option<ErrorCode>,
}

impl Verdict {
    fn is_typed_401(self) -> bool {
        self.status == 401 && self.code.is_some_and(|c| c.status() == 401)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "{} {c}", self.status),
            None => write!(f, "{} (untyped)", self.status),
        }
    }
}

/// A presentation: the credential headers of one row, built from the row's valid tokens.
#[derive(Debug)]
struct Row {
    name: &'static str,
    /// Valid sessions the row needs (fresh ones, its own).
    sessions: usize,
    build: fn(&[String]) -> Vec<(HeaderName, String)>,
}

impl Row {
    fn has_cookie(headers: &[(HeaderName, String)]) -> bool {
        headers.iter().any(|(n, _)| *n == COOKIE)
    }
}

fn bearer(v: &str) -> (HeaderName, String) {
    (AUTHORIZATION, v.to_owned())
}

fn cookie(v: &str) -> (HeaderName, String) {
    (COOKIE, v.to_owned())
}

/// A token that is not a session (right shape, junk signature): `valid` with its signature
/// replaced.
fn forged(valid: &str) -> String {
    let (signed, _) = valid.rsplit_once('.').expect("a JWS");
    format!("{signed}.{}", "A".repeat(86))
}

/// The rows. The ones with a valid credential that the rule would pick (a valid `Bearer`
/// header, or a valid session cookie with no usable header) are left out on purpose: they
/// are served, not refused, and through the edge a cookie write also needs the CSRF proof,
/// which the auth-service leaves to the edge. The header-plus-cookie rows therefore pair a
/// header the rule refuses with a cookie it refuses too (forged, or sent twice), so the
/// rule's fallback from the header to the cookie runs at both servers.
fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "nothing",
            sessions: 0,
            build: |_| Vec::new(),
        },
        Row {
            name: "another scheme (`Basic`)",
            sessions: 0,
            build: |_| vec![bearer("Basic dGVjaC0xOnB3")],
        },
        Row {
            name: "two Authorization headers, each valid",
            sessions: 2,
            build: |t| {
                vec![
                    bearer(&format!("Bearer {}", t[0])),
                    bearer(&format!("Bearer {}", t[1])),
                ]
            },
        },
        Row {
            name: "the same valid Authorization header twice",
            sessions: 1,
            build: |t| {
                vec![
                    bearer(&format!("Bearer {}", t[0])),
                    bearer(&format!("Bearer {}", t[0])),
                ]
            },
        },
        Row {
            name: "bearer <valid>",
            sessions: 1,
            build: |t| vec![bearer(&format!("bearer {}", t[0]))],
        },
        Row {
            name: "BEARER <valid>",
            sessions: 1,
            build: |t| vec![bearer(&format!("BEARER {}", t[0]))],
        },
        Row {
            name: "<valid> without a scheme",
            sessions: 1,
            build: |t| vec![bearer(&t[0])],
        },
        Row {
            name: "forged header + forged cookie",
            sessions: 1,
            build: |t| {
                vec![
                    bearer(&format!("Bearer {}", forged(&t[0]))),
                    cookie(&format!("{SESSION_COOKIE}={}", forged(&t[0]))),
                ]
            },
        },
        Row {
            name: "bearer <valid> + two valid cookies",
            sessions: 2,
            build: |t| {
                vec![
                    bearer(&format!("bearer {}", t[0])),
                    cookie(&format!(
                        "{SESSION_COOKIE}={}; {SESSION_COOKIE}={}",
                        t[0], t[1]
                    )),
                ]
            },
        },
        Row {
            name: "two headers + a forged cookie",
            sessions: 2,
            build: |t| {
                vec![
                    bearer(&format!("Bearer {}", t[0])),
                    bearer(&format!("Bearer {}", t[1])),
                    cookie(&format!("{SESSION_COOKIE}={}", forged(&t[0]))),
                ]
            },
        },
        Row {
            name: "two valid session cookies, one header",
            sessions: 2,
            build: |t| {
                vec![cookie(&format!(
                    "{SESSION_COOKIE}={}; {SESSION_COOKIE}={}",
                    t[0], t[1]
                ))]
            },
        },
        Row {
            name: "two valid session cookies, two headers",
            sessions: 2,
            build: |t| {
                vec![
                    cookie(&format!("{SESSION_COOKIE}={}", t[0])),
                    cookie(&format!("{SESSION_COOKIE}={}", t[1])),
                ]
            },
        },
        Row {
            name: "empty token (`Bearer `)",
            sessions: 0,
            build: |_| vec![bearer("Bearer ")],
        },
        Row {
            name: "empty session cookie",
            sessions: 0,
            build: |_| vec![cookie(&format!("{SESSION_COOKIE}="))],
        },
        Row {
            name: "two spaces (`Bearer  <valid>`)",
            sessions: 1,
            build: |t| vec![bearer(&format!("Bearer  {}", t[0]))],
        },
        Row {
            name: "a tab for the space (`Bearer\\t<valid>`)",
            sessions: 1,
            build: |t| vec![bearer(&format!("Bearer\t{}", t[0]))],
        },
        Row {
            name: "a space inside (`Bearer <valid> x`)",
            sessions: 1,
            build: |t| vec![bearer(&format!("Bearer {} x", t[0]))],
        },
        Row {
            name: "8 KiB token (at the cap)",
            sessions: 0,
            build: |_| vec![bearer(&format!("Bearer {}", "A".repeat(BIG_TOKEN_BYTES)))],
        },
        Row {
            name: "8 KiB + 1 token (over the cap)",
            sessions: 0,
            build: |_| {
                vec![bearer(&format!(
                    "Bearer {}",
                    "A".repeat(BIG_TOKEN_BYTES + 1)
                ))]
            },
        },
    ]
}

/// An HTTPS client trusting only the fleet's CA, speaking only HTTP/1.1 or only HTTP/2.
fn client(ca_pem: &[u8], h2: bool) -> reqwest::Client {
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem).expect("the fleet's CA");
    let b = reqwest::Client::builder()
        .tls_certs_only(certs)
        .timeout(std::time::Duration::from_secs(15));
    let b = if h2 {
        b.http2_prior_knowledge()
    } else {
        b.http1_only()
    };
    b.build().expect("client")
}

async fn send(client: &reqwest::Client, method: Method, url: &str, headers: HeaderMap) -> Verdict {
    let r = client
        .request(method, url)
        .headers(headers)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = r.status().as_u16();
    let code = r.json::<ErrorBody>().await.ok().map(|b| b.error);
    Verdict { status, code }
}

/// The header map of one presentation at one target. The auth-service counts a session
/// cookie only from an authenticated edge (a cookie sent straight to it is ignored, and the
/// edge alone checks the CSRF proof), so at the auth-service a row with a cookie also
/// carries the cell's edge key, as the edge's forwarded requests do: otherwise a cookie row
/// would read SESSION_MISSING there by design, and its cookie would be compared with nothing.
fn headers_for(
    target: Target,
    row: &[(HeaderName, String)],
    edge_key: &str,
    cookie_row: bool,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in row {
        h.append(
            name.clone(),
            HeaderValue::from_str(value).expect("a header-safe presentation"),
        );
    }
    if !target.is_edge() && cookie_row {
        h.insert(
            X_EDGE_KEY,
            HeaderValue::from_str(edge_key).expect("header-safe edge key"),
        );
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_and_the_auth_service_refuse_the_same_presentations_alike() {
    let t = TestFleet::start().await;
    let cell = CellId::new(CELL).expect("cell id");
    let fc = t.cell(&cell).clone();
    let edge = Endpoint::parse(&fc.endpoint).expect("the edge's endpoint");
    let auth = Endpoint::parse(&fc.auth_public_url).expect("the auth-service's public URL");
    let edge_key = t.cell_token(&cell, CellToken::Edge);
    let ca = std::fs::read(&t.file().ca_cert).expect("CA file");
    let mut users = t
        .file()
        .demo
        .technicians
        .iter()
        .filter(|u| u.cell_id == cell)
        .cloned();

    // Fresh, valid sessions of each row's own, shared by its HTTP/1.1 and HTTP/2 passes.
    let rows = rows();
    let mut tokens: Vec<Vec<String>> = Vec::new();
    for row in &rows {
        let mut mine = Vec::new();
        for _ in 0..row.sessions {
            let user = users.next().expect("enough technicians in the cell");
            mine.push(session_for(&t, &user).await.token);
        }
        tokens.push(mine);
    }

    let mut table = String::new();
    let mut failures = Vec::new();
    for (transport, h2) in [("HTTP/1.1", false), ("HTTP/2", true)] {
        let client = client(&ca, h2);
        writeln!(table, "\ncredential verdicts over {transport} at {CELL}:").unwrap();
        for (row, tokens) in rows.iter().zip(&tokens) {
            // The row's sessions are served when presented properly, at both servers.
            for token in tokens {
                let mut ok = HeaderMap::new();
                ok.insert(
                    AUTHORIZATION,
                    HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
                );
                let (m, url) = Target::EdgeApi.request(&edge, &auth);
                let v = send(&client, m, &url, ok.clone()).await;
                assert_eq!(
                    v.status, 200,
                    "{}: the row's session is served: {v}",
                    row.name
                );
                let current = auth.join("/v1/sessions/current");
                let v = send(&client, Method::GET, &current, ok).await;
                assert_eq!(
                    v.status, 200,
                    "{}: the auth-service takes the row's session: {v}",
                    row.name
                );
            }
            let presented = (row.build)(tokens);
            let cookie_row = Row::has_cookie(&presented);
            let mut verdicts = Vec::new();
            for target in Target::ALL {
                let (m, url) = target.request(&edge, &auth);
                let h = headers_for(target, &presented, &edge_key, cookie_row);
                verdicts.push((target, send(&client, m, &url, h).await));
            }
            let first = verdicts[0].1;
            let same = verdicts.iter().all(|(_, v)| *v == first);
            let typed = verdicts.iter().all(|(_, v)| v.is_typed_401());
            let cells: Vec<String> = verdicts
                .iter()
                .map(|(t, v)| format!("{}: {v}", t.label()))
                .collect();
            writeln!(
                table,
                "  {:<44} {} {}",
                row.name,
                if same && typed { "ok  " } else { "FAIL" },
                if same {
                    format!("all {first}")
                } else {
                    cells.join(" | ")
                }
            )
            .unwrap();
            if !same || !typed {
                failures.push(format!("{transport}, {}: {}", row.name, cells.join(" | ")));
            }
        }
    }
    println!("{table}");
    assert!(
        failures.is_empty(),
        "presentations answered differently or not as a typed 401:\n{}",
        failures.join("\n")
    );
    t.fleet.stop().await;
}
