//! The desk app in a real Chromium, against a real fleet, over TLS the browser trusts through an
//! NSS database in a throw-away `HOME` (never by ignoring certificate errors).
//!
//! Needs Debian's `chromium`, `chromium-driver` and `libnss3-tools` (`certutil`). Without them
//! the test fails and says what to install; set `CELLBIND_SKIP_BROWSER_TESTS=1` to skip it on a
//! machine that has no browser. `CELLBIND_CHROMIUM` / `CELLBIND_CHROMEDRIVER` override where
//! the two binaries are looked up (default: `chromium` and `chromedriver` on `PATH`).
//!
//! The board's screenshot is written to `<target dir>/desk-screenshots/board.png`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cellbind_tests::{TestFleet, bin_dir};
use devfleet::DemoUser;
use fantoccini::cookies::Cookie;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{
    CERTUTIL_ENV, CHROMEDRIVER_ENV, CHROMIUM_ENV, browser, browser_home, skipped, start_driver,
    tool,
};

/// How long any one browser step may take before the test fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a revocation may take to send the open page back to sign-in.
const REVOCATION_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(100);
/// The browser window's size.
const DESK_WINDOW: (u32, u32) = (1200, 900);
/// Wrong passwords tried before the per-account throttle must have answered 429 (its burst
/// is 10 in the dev fleet).
const MAX_SIGN_IN_ATTEMPTS: usize = 20;
const SESSION_COOKIE: &str = "__Host-cellbind_session";
const CSRF_COOKIE: &str = "__Host-cellbind_csrf";
/// The session lifetime of the dev fleet (DESIGN §3 default), in seconds.
const SESSION_LIFETIME_S: u64 = 30 * 24 * 3600;

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Waits until `selector` matches a displayed element.
async fn displayed(c: &Client, selector: &str) -> fantoccini::elements::Element {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Ok(e) = c.find(Locator::Css(selector)).await
            && e.is_displayed().await.unwrap_or(false)
        {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "`{selector}` was not displayed within {STEP_TIMEOUT:?} at {:?}; page: {}",
            c.current_url().await.map(|u| u.to_string()),
            c.source().await.unwrap_or_default()
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn text_of(c: &Client, selector: &str) -> String {
    match c.find(Locator::Css(selector)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn page_json(c: &Client) -> Value {
    let text = text_of(c, "body").await;
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

async fn sign_in_on_page(c: &Client, u: &DemoUser) {
    displayed(c, "#sign-in-form").await;
    for (id, v) in [
        ("#contractor", u.contractor_id.as_str()),
        ("#login", u.login.as_str()),
        ("#password", u.password.as_str()),
    ] {
        let e = c.find(Locator::Css(id)).await.expect("field");
        e.clear().await.expect("clear");
        e.send_keys(v).await.expect("type");
    }
    c.find(Locator::Css("#sign-in-submit"))
        .await
        .expect("submit")
        .click()
        .await
        .expect("click");
}

async fn cookies(c: &Client) -> Vec<Cookie<'static>> {
    c.get_all_cookies().await.expect("cookies")
}

fn named<'a>(cs: &'a [Cookie<'static>], name: &str) -> Option<&'a Cookie<'static>> {
    cs.iter().find(|c| c.name() == name)
}

/// Completions the app applied for a contractor (its admin listing).
async fn completions(t: &TestFleet, u: &DemoUser) -> Vec<String> {
    let app = &t.cell(&u.cell_id).app_internal_url;
    let v: Value = t
        .client
        .get(format!(
            "{app}/internal/v1/contractors/{}/completions",
            u.contractor_id
        ))
        .bearer_auth(&t.cell(&u.cell_id).app_internal_token)
        .send()
        .await
        .expect("completions")
        .json()
        .await
        .expect("completions json");
    v["completions"]
        .as_array()
        .expect("completions list")
        .iter()
        .filter_map(|c| c["job_id"].as_str().map(str::to_owned))
        .collect()
}

/// Revokes every session of `sub` at its cell: `cellctl revoke subject` when this build has
/// it, else the auth-service's admin API (which is what the CLI drives).
async fn revoke_subject(t: &TestFleet, u: &DemoUser, sub: &str) -> &'static str {
    let cellctl = bin_dir().join("cellctl");
    let out = Command::new(cellctl)
        .args([
            "revoke",
            "subject",
            sub,
            "--reason",
            "desk browser test",
            "--fleet",
        ])
        .arg(t.fleet.fleet_file_path())
        .stdin(Stdio::null())
        .output()
        .expect("run cellctl");
    if out.status.success() {
        println!("cellctl revoke: {}", String::from_utf8_lossy(&out.stdout));
        return "cellctl revoke subject";
    }
    let auth = &t.cell(&u.cell_id).auth_service.url;
    let r = t
        .client
        .post(format!("{auth}/admin/v1/revocations"))
        .bearer_auth(&t.cell(&u.cell_id).admin_token)
        .json(&json!({
            "kind": "subject", "sub": sub, "before": now_s() + 1,
            "reason": "desk browser test", "by": "desk-browser-test",
        }))
        .send()
        .await
        .expect("revoke");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    "auth-service admin API"
}

/// Sets the contractor's ownership record at its cell and waits until every edge instance of
/// the cell has applied it (the auth-service's status lists what each instance applied).
async fn set_ownership(t: &TestFleet, u: &DemoUser, record: &Value) {
    let auth = &t.cell(&u.cell_id).auth_service.url;
    let r = t
        .client
        .put(format!("{auth}/admin/v1/ownership/{}", u.contractor_id))
        .bearer_auth(&t.cell(&u.cell_id).admin_token)
        .json(record)
        .send()
        .await
        .expect("put ownership");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    let seq = r.json::<Value>().await.expect("seq")["seq"]
        .as_u64()
        .expect("seq");
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let status: Value = t
            .client
            .get(format!("{auth}/admin/v1/status"))
            .bearer_auth(&t.cell(&u.cell_id).admin_token)
            .send()
            .await
            .expect("status")
            .json()
            .await
            .expect("status json");
        let instances = status["instances"].as_array().cloned().unwrap_or_default();
        if !instances.is_empty()
            && instances
                .iter()
                .all(|i| i["applied_seq"].as_u64().unwrap_or(0) >= seq)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the edge did not apply {record}");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_works_the_board_in_a_real_browser() {
    if skipped("desk browser test") {
        return;
    }
    // Fail fast, before a fleet is started, when a tool is missing.
    tool(CHROMIUM_ENV, "chromium");
    tool(CHROMEDRIVER_ENV, "chromedriver");
    tool(CERTUTIL_ENV, "certutil");
    let started = Instant::now();
    let t = TestFleet::start_exclusive().await;
    let f = t.file();
    let endpoint = |n: usize| f.cells[n - 1].endpoint.trim_end_matches('/').to_owned();
    let (cell01, cell04) = (endpoint(1), endpoint(4));
    let disp = f
        .demo
        .dispatchers
        .iter()
        .find(|u| u.cell_id.as_str() == "cell-04")
        .expect("a dispatcher owned by cell-04")
        .clone();
    println!(
        "fleet up in {:.1} s; dispatcher {}/{} (owner cell-04)",
        started.elapsed().as_secs_f64(),
        disp.contractor_id,
        disp.login
    );

    let driver = start_driver(browser_home(Some(&f.ca_cert))).await;
    let c = browser(&driver, DESK_WINDOW, &["--disable-quic"]).await;

    // 1. Sign in at cell-01; the page follows WRONG_CELL once and lands on cell-04's board.
    let t0 = Instant::now();
    c.goto(&format!("{cell01}/desk/"))
        .await
        .expect("open cell-01");
    sign_in_on_page(&c, &disp).await;
    displayed(&c, "#jobs-body tr").await;
    let landed = c.current_url().await.expect("url").to_string();
    assert!(
        landed.starts_with(&format!("{cell04}/desk/")),
        "landed on {landed}"
    );
    println!(
        "signed in from cell-01, on cell-04's board in {} ms",
        t0.elapsed().as_millis()
    );
    assert_eq!(
        text_of(&c, "#board-contractor").await,
        disp.contractor_id.as_str()
    );
    let banner = c.find(Locator::Css("#handoff")).await.expect("banner");
    assert!(
        !banner.is_displayed().await.expect("banner state"),
        "no handoff banner outside a handoff"
    );

    // 2. The cookies: the session one has every attribute and scripts cannot read it.
    let jar = cookies(&c).await;
    let session = named(&jar, SESSION_COOKIE).expect("the session cookie at cell-04");
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(session.secure(), Some(true));
    assert_eq!(session.same_site(), Some(cookie::SameSite::Strict));
    assert_eq!(session.path(), Some("/"));
    assert!(
        session.value().len() <= 4096,
        "{} bytes",
        session.value().len()
    );
    let expiry = session
        .expires_datetime()
        .map(|d| d.unix_timestamp() as u64)
        .expect("a persistent cookie (Max-Age)");
    let want = now_s() + SESSION_LIFETIME_S;
    assert!(
        expiry + 120 >= want && expiry <= want + 5,
        "expires at {expiry}, want about {want}"
    );
    let csrf = named(&jar, CSRF_COOKIE).expect("the CSRF cookie at cell-04");
    assert_eq!(csrf.http_only(), Some(false));
    assert_eq!(csrf.secure(), Some(true));
    assert_eq!(csrf.same_site(), Some(cookie::SameSite::Strict));
    let script_view = c
        .execute("return document.cookie;", vec![])
        .await
        .expect("document.cookie");
    let script_view = script_view.as_str().unwrap_or_default().to_owned();
    assert!(
        script_view.contains(CSRF_COOKIE) && !script_view.contains(SESSION_COOKIE),
        "document.cookie = {script_view:?}"
    );
    println!(
        "session cookie: {} bytes, HttpOnly, Secure, SameSite=Strict, Path=/, expires in {} s; \
         document.cookie shows only {CSRF_COOKIE}",
        session.value().len(),
        expiry.saturating_sub(now_s())
    );
    let token = session.value().to_owned();
    let csrf_value = csrf.value().to_owned();

    // 3. Complete a job: the board updates, and the app applied it once.
    let row = c
        .find(Locator::Css("#jobs-body tr.pending"))
        .await
        .expect("a pending job");
    let job = row.attr("data-job").await.expect("attr").expect("job id");
    let before = completions(&t, &disp).await;
    row.find(Locator::Css("button.complete"))
        .await
        .expect("button")
        .click()
        .await
        .expect("click");
    let done = format!("#jobs-body tr.completed[data-job=\"{job}\"]");
    displayed(&c, &done).await;
    let status = text_of(&c, "#status").await;
    assert!(status.contains(&job), "status line: {status}");
    let after = completions(&t, &disp).await;
    assert_eq!(after.iter().filter(|j| **j == job).count(), 1, "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    println!(
        "completed {job}; board shows {} done",
        text_of(&c, "#board-done").await
    );

    shoot(&c, "board.png").await;

    // 4. CSRF. A form posted from a page outside the fleet (Origin: null) is refused, and a
    //    same-origin form (it carries the cookie) without the CSRF header is refused too.
    let probe_from_outside = "csrf-probe-outside";
    let probe_same_origin = "csrf-probe-same-origin";
    let form = |action: String| {
        format!(
            "const f = document.createElement('form'); f.method = 'POST'; \
             f.action = '{action}'; document.body.append(f); f.submit(); return true;"
        )
    };
    c.goto("data:text/html,<title>elsewhere</title><body>elsewhere</body>")
        .await
        .expect("a page outside the fleet");
    c.execute(
        &form(format!("{cell04}/api/jobs/{probe_from_outside}/complete")),
        vec![],
    )
    .await
    .expect("submit");
    let answer = wait_json(&c).await;
    assert_eq!(answer["error"], "FORBIDDEN", "{answer}");
    c.goto(&format!("{cell04}/desk/")).await.expect("back");
    displayed(&c, "#jobs-body tr").await;
    c.execute(
        &form(format!("/api/jobs/{probe_same_origin}/complete")),
        vec![],
    )
    .await
    .expect("submit");
    let answer = wait_json(&c).await;
    assert_eq!(answer["error"], "FORBIDDEN", "{answer}");
    let now_done = completions(&t, &disp).await;
    assert_eq!(now_done, after, "a refused form changed nothing");
    println!("cross-site and proof-less form POSTs: 403 FORBIDDEN, completions unchanged");

    // The same checks without a browser: cookie + foreign Origin, cookie without the header.
    let raw = |origin: &str, with_csrf: bool, job: &str| {
        let mut r = t
            .client
            .post(format!("{cell04}/api/jobs/{job}/complete"))
            .header("origin", origin)
            .header(
                "cookie",
                format!("{SESSION_COOKIE}={token}; {CSRF_COOKIE}={csrf_value}"),
            )
            .header("idempotency-key", format!("raw-{job}"));
        if with_csrf {
            r = r.header("x-cellbind-csrf", csrf_value.clone());
        }
        r.send()
    };
    let evil = "https://evil.example";
    for (origin, with_csrf) in [(evil, true), (evil, false), (cell04.as_str(), false)] {
        let r = raw(origin, with_csrf, "raw-refused").await.expect("raw");
        assert_eq!(
            r.status().as_u16(),
            403,
            "origin {origin}, csrf {with_csrf}"
        );
    }
    let r = raw(&cell04, true, "raw-allowed").await.expect("raw");
    assert_eq!(r.status().as_u16(), 200, "the cookie with its proof works");
    let listed = completions(&t, &disp).await;
    assert!(listed.contains(&"raw-allowed".to_owned()));
    assert!(
        !listed
            .iter()
            .any(|j| j.starts_with("csrf-probe") || j == "raw-refused")
    );

    // CORS: a preflight from outside the fleet is refused; one from a fleet cell is allowed on
    // the API, never on the session routes (their answers carry sessions: ATTACKS A24).
    let preflight = |origin: String, path: &str| {
        t.client
            .request(reqwest::Method::OPTIONS, format!("{cell04}{path}"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type")
            .send()
    };
    let r = preflight(evil.to_owned(), "/api/jobs/x/complete")
        .await
        .expect("preflight");
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = preflight(cell01.clone(), "/api/jobs/x/complete")
        .await
        .expect("preflight");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some(cell01.as_str())
    );
    assert_eq!(
        r.headers()
            .get("access-control-allow-credentials")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    for path in ["/v1/sessions", "/v1/sessions/renew"] {
        let r = preflight(cell01.clone(), path).await.expect("preflight");
        assert_eq!(r.status().as_u16(), 403, "{path}");
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }
    println!(
        "preflight from {evil}: 403 without CORS headers; from cell-01: 204 with credentials on \
         /api, 403 on /v1/sessions*"
    );

    // 4b. ATTACKS A24: a junk Authorization header does not turn the cookie request into one
    //     that skips the CSRF proof. From cell-01's page, a script tries to renew cell-04's
    //     session with a junk header and the browser's cookies; then the same request without a
    //     browser, with cell-04's real cookie. Nothing is minted, the session keeps working.
    let sessions_of = || async {
        let auth = &t.cell(&disp.cell_id).auth_service.url;
        let v: Value = t
            .client
            .get(format!(
                "{auth}/admin/v1/subjects/{}.{}/sessions",
                disp.contractor_id, disp.login
            ))
            .bearer_auth(&t.cell(&disp.cell_id).admin_token)
            .send()
            .await
            .expect("sessions")
            .json()
            .await
            .expect("sessions json");
        v["sessions"].as_array().map_or(0, Vec::len)
    };
    let minted_before = sessions_of().await;
    // A page of cell-01's origin without the desk's CSP (which would stop the fetch before the
    // edge sees it): the map document.
    c.goto(&format!("{cell01}/v1/placement-map"))
        .await
        .expect("cell-01");
    let outcome = c
        .execute_async(
            &format!(
                "const done = arguments[arguments.length - 1]; \
                 fetch('{cell04}/v1/sessions/renew', {{ method: 'POST', credentials: 'include', \
                   headers: {{ 'Authorization': 'Basic dXNlcjpwdw==' }} }}) \
                 .then(r => r.text().then(b => done('status ' + r.status + ' ' + b))) \
                 .catch(e => done('blocked: ' + e));"
            ),
            vec![],
        )
        .await
        .expect("script");
    let outcome = outcome.as_str().unwrap_or_default().to_owned();
    assert!(
        outcome.starts_with("blocked") || outcome.starts_with("status 403"),
        "the page at cell-01 read: {outcome}"
    );
    assert!(
        !outcome.contains("eyJ"),
        "a token reached the script: {outcome}"
    );
    for (method, path) in [
        (reqwest::Method::POST, "/v1/sessions/renew"),
        (reqwest::Method::DELETE, "/v1/sessions/current"),
    ] {
        for junk in ["Basic dXNlcjpwdw==", "Bearer junk", "Negotiate x"] {
            let r = t
                .client
                .request(method.clone(), format!("{cell04}{path}"))
                .header("origin", &cell01)
                .header(
                    "cookie",
                    format!("{SESSION_COOKIE}={token}; {CSRF_COOKIE}={csrf_value}"),
                )
                .header("authorization", junk)
                .send()
                .await
                .expect("raw");
            assert_eq!(r.status().as_u16(), 403, "{method} {path} with {junk}");
            assert!(r.headers().get("access-control-allow-origin").is_none());
            let body = r.text().await.unwrap_or_default();
            assert!(!body.contains("eyJ"), "{body}");
        }
    }
    assert_eq!(sessions_of().await, minted_before, "nothing was minted");
    c.goto(&format!("{cell04}/desk/")).await.expect("back");
    displayed(&c, "#jobs-body tr").await;
    println!(
        "A24 from cell-01's origin: the page's junk-Authorization renewal {outcome:?}; 6 raw cookie + junk-Authorization renew/sign-out requests: 403; sessions of the dispatcher {minted_before} before and after; the board still loads"
    );

    // 5. Cell-04's cookie is never sent to another cell.
    for n in [1, 2] {
        let other = endpoint(n);
        c.goto(&format!("{other}/api/routes/today"))
            .await
            .expect("open another cell");
        let answer = wait_json(&c).await;
        assert_eq!(answer["error"], "SESSION_MISSING", "cell-0{n}: {answer}");
        assert!(named(&cookies(&c).await, SESSION_COOKIE).is_none());
    }
    println!("cell-01 and cell-02 see no session from this browser: 401 SESSION_MISSING");

    // 6. Handoff: a write answers 409 HANDOFF_IN_PROGRESS and the board turns read-only with a
    //    banner; once the handoff is over, Retry makes it writable again.
    c.goto(&format!("{cell04}/desk/")).await.expect("back");
    displayed(&c, "#jobs-body tr").await;
    let auth04 = &t.cell(&disp.cell_id).auth_service.url;
    let record: Value = t
        .client
        .get(format!(
            "{auth04}/admin/v1/ownership/{}",
            disp.contractor_id
        ))
        .bearer_auth(&t.cell(&disp.cell_id).admin_token)
        .send()
        .await
        .expect("ownership")
        .json()
        .await
        .expect("ownership json");
    let generation = record["gen"].clone();
    set_ownership(&t, &disp, &json!({"state": "handoff", "gen": generation})).await;
    let before_handoff = completions(&t, &disp).await;
    c.find(Locator::Css("#jobs-body tr.pending button.complete"))
        .await
        .expect("a pending job")
        .click()
        .await
        .expect("click");
    displayed(&c, "#handoff").await;
    let disabled = c
        .find_all(Locator::Css("#jobs-body button.complete"))
        .await
        .expect("buttons");
    for b in &disabled {
        assert!(!b.is_enabled().await.expect("enabled"), "read-only board");
    }
    assert_eq!(completions(&t, &disp).await, before_handoff);
    shoot(&c, "handoff.png").await;
    println!("handoff: {:?}", text_of(&c, "#status").await);
    set_ownership(&t, &disp, &json!({"state": "active", "gen": generation})).await;
    displayed(&c, "#handoff-retry")
        .await
        .click()
        .await
        .expect("retry");
    let deadline = Instant::now() + STEP_TIMEOUT;
    while c
        .find(Locator::Css("#handoff"))
        .await
        .expect("banner")
        .is_displayed()
        .await
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "the banner stayed after Retry");
        tokio::time::sleep(POLL).await;
    }
    displayed(&c, "#jobs-body tr.pending button.complete:enabled").await;

    // 7. Sign-out clears both cookies and revokes the session.
    displayed(&c, "#sign-out")
        .await
        .click()
        .await
        .expect("sign out");
    displayed(&c, "#sign-in-form").await;
    let jar = cookies(&c).await;
    assert!(named(&jar, SESSION_COOKIE).is_none() && named(&jar, CSRF_COOKIE).is_none());
    let r = t
        .client
        .get(format!("{cell04}/api/routes/today"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("old session");
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut status = r.status().as_u16();
    while status != 401 && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        status = cellbind_tests::route_load(&t.client, &cell04, &token).await;
    }
    assert_eq!(status, 401, "the signed-out session is revoked");
    println!("sign-out cleared both cookies; the old session answers 401");

    // 8. Sign in again (same cell this time), then revoke the dispatcher: the open page goes
    //    back to sign-in with a message at its next request.
    sign_in_on_page(&c, &disp).await;
    displayed(&c, "#jobs-body tr").await;
    let sub = format!("{}.{}", disp.contractor_id, disp.login);
    // A subject revocation covers sessions issued strictly before it, in whole seconds: wait
    // for the clock to leave the second the new session was issued in.
    let issued = now_s();
    let deadline = Instant::now() + Duration::from_secs(3);
    while now_s() <= issued && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let revoked_at = Instant::now();
    let how = revoke_subject(&t, &disp, &sub).await;
    let deadline = revoked_at + REVOCATION_TIMEOUT;
    let mut requests = 0;
    loop {
        requests += 1;
        c.find(Locator::Css("#refresh"))
            .await
            .expect("refresh")
            .click()
            .await
            .expect("click refresh");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let signin = c.find(Locator::Css("#sign-in")).await.expect("section");
        if signin.is_displayed().await.unwrap_or(false) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page still shows the board {REVOCATION_TIMEOUT:?} after the revocation"
        );
    }
    let message = text_of(&c, "#sign-in-message").await;
    assert!(message.contains("revoked"), "message: {message}");
    shoot(&c, "revoked.png").await;
    let jar = cookies(&c).await;
    assert!(
        named(&jar, SESSION_COOKIE).is_none() && named(&jar, CSRF_COOKIE).is_none(),
        "the refused session's cookies are cleared"
    );
    println!(
        "revoked via {how}: the page was back at sign-in {} ms later ({requests} refresh(es)): {message:?}",
        revoked_at.elapsed().as_millis()
    );

    // Rate limiting: wrong passwords for one account end in a clear "try again in N s".
    let mut attempts = 0;
    let limited = loop {
        attempts += 1;
        assert!(attempts <= MAX_SIGN_IN_ATTEMPTS, "never rate limited");
        let pw = c.find(Locator::Css("#password")).await.expect("password");
        pw.clear().await.expect("clear");
        pw.send_keys(&format!("wrong-{attempts}"))
            .await
            .expect("type");
        let submit = c
            .find(Locator::Css("#sign-in-submit"))
            .await
            .expect("submit");
        submit.click().await.expect("click");
        let deadline = Instant::now() + STEP_TIMEOUT;
        let message = loop {
            let m = text_of(&c, "#sign-in-message").await;
            if !m.is_empty() && submit.is_enabled().await.unwrap_or(false) {
                break m;
            }
            assert!(Instant::now() < deadline, "no answer to a sign-in");
            tokio::time::sleep(POLL).await;
        };
        if message.contains("Too many") {
            break message;
        }
        assert!(message.contains("not right"), "wrong password: {message}");
    };
    shoot(&c, "rate-limited.png").await;
    println!("after {attempts} wrong passwords: {limited:?}");
    c.close().await.expect("close");

    // 9. Negative: a browser that does not trust the fleet's CA refuses the page.
    let untrusting = start_driver(browser_home(None)).await;
    let c = browser(&untrusting, DESK_WINDOW, &["--disable-quic"]).await;
    let navigation = c.goto(&format!("{cell01}/desk/")).await;
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut page = match navigation {
        Err(e) => e.to_string(),
        Ok(()) => String::new(),
    };
    while !page.contains("ERR_CERT_AUTHORITY_INVALID") && Instant::now() < deadline {
        page = c.source().await.unwrap_or_default();
        tokio::time::sleep(POLL).await;
    }
    assert!(
        page.contains("ERR_CERT_AUTHORITY_INVALID"),
        "an untrusted CA must fail the page"
    );
    assert!(c.find(Locator::Css("#sign-in-form")).await.is_err());
    println!("without the CA in its NSS database the browser shows ERR_CERT_AUTHORITY_INVALID");
    c.close().await.expect("close");
    println!(
        "desk browser test done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Writes a screenshot of the page to `<target dir>/desk-screenshots/NAME`.
async fn shoot(c: &Client, name: &str) {
    let shots = bin_dir()
        .parent()
        .map(|p| p.join("desk-screenshots"))
        .expect("target dir");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(shots.join(name), &png).expect("write screenshot");
    println!(
        "screenshot: {} ({} bytes)",
        shots.join(name).display(),
        png.len()
    );
}

/// The JSON body of the page the browser is on (an API answer), once it has loaded.
async fn wait_json(c: &Client) -> Value {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let v = page_json(c).await;
        if v.is_object() {
            return v;
        }
        assert!(Instant::now() < deadline, "no JSON answer: {v}");
        tokio::time::sleep(POLL).await;
    }
}
