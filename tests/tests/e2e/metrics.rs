//! The management listeners and the metrics on a real fleet: `/metrics` is
//! served by every server's management listener and by none of the public ones; a scripted mix
//! of outcomes (good route loads, a wrong cell, a revoked session, a bad token, a missing one,
//! sign-ins good and bad, a migration, an app that died, a flood over the rate limit) moves
//! every counter of every server by exactly what it costs; the Grafana dashboard names only
//! metrics the servers expose.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cellbind_tests::{Session, TestFleet, process_gone, session_for, sign_in, sign_in_as};
use cellctl::migrate::{MigrateOptions, migrate};
use devfleet::DemoUser;
use protocol::CellId;
use protocol::admin::app::ContractorOp;
use protocol::admin::cell::{STATUS_PATH, Status};

/// Longest wait for something the fleet propagates (the feed, the map poll).
const PROPAGATION: Duration = Duration::from_secs(45);
/// Content type of `GET /metrics`.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Requests sent at once while flooding an edge past its per-IP rate limit.
const FLOOD_BATCH: usize = 64;
/// Most flood batches before giving up on seeing a `429`.
const FLOOD_BATCHES: usize = 100;

/// A sample's series: its name and labels.
type Series = (String, BTreeMap<String, String>);
/// Every sample of the fleet: (server, series) → value. A cell's auth-service replicas count
/// as one server: their counters and histograms summed, their gauges the largest.
type Samples = BTreeMap<(String, Series), f64>;

/// The labels of a series: `cell="cell-01",outcome="refused",code="WRONG_CELL"`.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(e);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_owned(), value);
        rest = &after[end..];
    }
    out
}

/// Every sample of an OpenMetrics exposition.
fn parse(text: &str) -> Vec<(Series, f64)> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a sample: {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').expect("closing brace")),
                None => (series, ""),
            };
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("not a value: {line}")),
            };
            ((name.to_owned(), parse_labels(labels)), value)
        })
        .collect()
}

/// `GET {url}/metrics` on a management listener: 200, OpenMetrics, the text.
async fn metrics_text(t: &TestFleet, url: &str) -> String {
    let r = t
        .client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}/metrics: {e}"));
    assert_eq!(r.status(), 200, "{url}/metrics");
    assert_eq!(r.headers()["content-type"], OPENMETRICS, "{url}");
    r.text().await.unwrap()
}

/// Scrapes every server's management listener but those named in `skip` (`<cell> app`, say,
/// for an app that was killed).
async fn scrape(t: &TestFleet, skip: &[String]) -> Samples {
    let m = t.fleet.management();
    let mut servers = vec![("control-plane".to_owned(), m.control_plane.clone())];
    for c in &m.cells {
        servers.extend(
            c.edges
                .iter()
                .map(|u| (format!("{} edge", c.id), u.clone())),
        );
        servers.extend(
            c.auth_services
                .iter()
                .map(|u| (format!("{} auth", c.id), u.clone())),
        );
        servers.push((format!("{} app", c.id), c.app.clone()));
    }
    let mut out = Samples::new();
    for (server, url) in servers {
        if skip.contains(&server) {
            continue;
        }
        for (series, value) in parse(&metrics_text(t, &url).await) {
            let summed = ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .any(|s| series.0.ends_with(s));
            let held =
                out.entry((server.clone(), series))
                    .or_insert(if summed { 0.0 } else { f64::MIN });
            *held = if summed {
                *held + value
            } else {
                held.max(value)
            };
        }
    }
    out
}

/// The counter deltas a script is expected to cause.
#[derive(Debug, Default)]
struct Expected(Samples);

impl Expected {
    fn add(&mut self, server: String, name: &str, labels: &[(&str, &str)], n: f64) {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        *self
            .0
            .entry((server, (name.to_owned(), labels)))
            .or_default() += n;
    }

    /// An edge request of `cell` with `labels` (outcome and its own labels): real traffic
    /// (`synthetic="false"`: no script here uses a game day's contractors or header).
    fn edge(&mut self, cell: &CellId, labels: &[(&str, &str)], n: f64) {
        let mut all = vec![("cell", cell.as_str())];
        all.extend_from_slice(labels);
        all.push(("synthetic", "false"));
        self.add(
            format!("{cell} edge"),
            "cellbind_edge_requests_total",
            &all,
            n,
        );
    }

    /// A sign-in at `cell`'s auth-service with `outcome`; `checked`: it cost one password
    /// verification.
    fn sign_in(&mut self, cell: &CellId, outcome: &str, checked: bool) {
        let server = format!("{cell} auth");
        self.add(
            server.clone(),
            "cellbind_auth_signins_total",
            &[("cell", cell.as_str()), ("outcome", outcome)],
            1.0,
        );
        if checked {
            self.add(
                server,
                "cellbind_auth_password_verifications_total",
                &[("cell", cell.as_str())],
                1.0,
            );
        }
    }

    /// A migration step `cell`'s auth-service performed, `n` times, successfully.
    fn step(&mut self, cell: &CellId, step: &str, n: f64) {
        self.add(
            format!("{cell} auth"),
            "cellbind_auth_migration_steps_total",
            &[("cell", cell.as_str()), ("step", step), ("result", "ok")],
            n,
        );
    }

    /// A request `cell`'s app answered on `listener` for `route` with a status of `class`.
    fn app(&mut self, cell: &CellId, listener: &str, route: &str, class: &str, n: f64) {
        self.add(
            format!("{cell} app"),
            "cellbind_app_requests_total",
            &[
                ("cell", cell.as_str()),
                ("listener", listener),
                ("route", route),
                ("class", class),
            ],
            n,
        );
    }
}

/// Series whose moves no script controls: every feed answer an edge applies, and the control
/// plane's periodic republication of an unchanged map.
fn uncontrolled((_, (name, labels)): &(String, Series)) -> bool {
    name == "cellbind_edge_feed_syncs_total"
        || (name == "cellbind_control_plane_map_publications_total"
            && labels.get("result").map(String::as_str) == Some("unchanged"))
}

/// `value` of `key` after minus before.
fn delta(before: &Samples, after: &Samples, key: &(String, Series)) -> f64 {
    after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
}

/// Every counter of `after` (and every histogram's count) moved from `before` by exactly
/// `expected` (zero where nothing is expected); the report lists every one that did not.
fn check_deltas(before: &Samples, after: &Samples, expected: &Expected) -> Vec<String> {
    let mut wrong = Vec::new();
    for key in after.keys().filter(|k| k.1.0.ends_with("_total")) {
        if uncontrolled(key) {
            continue;
        }
        let (got, want) = (
            delta(before, after, key),
            expected.0.get(key).copied().unwrap_or(0.0),
        );
        if got != want {
            wrong.push(format!(
                "{} {:?}: moved {got}, expected {want}",
                key.0, key.1
            ));
        }
    }
    for key in expected.0.keys().filter(|k| !after.contains_key(k)) {
        wrong.push(format!("{} {:?}: not exposed", key.0, key.1));
    }
    // A histogram's count moves with its counter: edge latency by outcome (and synthetic or
    // real traffic), step durations.
    let mut sums: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for key in after.keys() {
        let (server, (name, labels)) = key;
        let by = |l: &str| labels.get(l).cloned().unwrap_or_default();
        let edge_slot = || format!("{} synthetic={}", by("outcome"), by("synthetic"));
        let slot = match name.as_str() {
            "cellbind_edge_requests_total" => ("latency", edge_slot()),
            "cellbind_edge_request_duration_seconds_count" => ("latency", edge_slot()),
            "cellbind_auth_migration_steps_total" => ("steps", by("step")),
            "cellbind_auth_migration_step_duration_seconds_count" => ("steps", by("step")),
            _ => continue,
        };
        let sign = if name.ends_with("_count") { -1.0 } else { 1.0 };
        *sums
            .entry((server.clone(), slot.0.to_owned(), slot.1))
            .or_default() += sign * delta(before, after, key);
    }
    for ((server, what, label), off) in sums {
        if off != 0.0 {
            wrong.push(format!(
                "{server}: {what} of {label:?}: the histogram's count is off by {off}"
            ));
        }
    }
    wrong
}

/// One of a cell's technicians (`login`) whose contractor is not in `taken`.
fn technician(t: &TestFleet, cell: &CellId, login: &str, taken: &[&DemoUser]) -> DemoUser {
    t.file()
        .demo
        .technicians
        .iter()
        .find(|u| {
            &u.cell_id == cell
                && u.login == login
                && taken.iter().all(|o| o.contractor_id != u.contractor_id)
        })
        .cloned()
        .unwrap_or_else(|| panic!("no {login} on {cell}"))
}

/// `GET /api/routes/today` at `endpoint` with `token` (or none): the status and the error
/// code, if any.
async fn route(t: &TestFleet, endpoint: &str, token: Option<&str>) -> (u16, String) {
    let mut req = t.client.get(format!("{endpoint}/api/routes/today"));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Waits until `cell`'s edge has applied everything its auth-service's feed holds now.
async fn wait_applied(t: &TestFleet, cell: &CellId) {
    let c = t.cell(cell);
    let status = || async {
        t.client
            .get(format!("{}{STATUS_PATH}", c.auth_service.url))
            .bearer_auth(&c.admin_token)
            .send()
            .await
            .unwrap()
            .json::<Status>()
            .await
            .unwrap()
    };
    let head = status().await.seq;
    let edge = format!("{cell}-edge-1");
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let s = status().await;
        if s.instances
            .iter()
            .any(|i| i.id == edge && i.applied_seq >= head)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{edge} did not apply seq {head}: {:?}",
            s.instances
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of a gauge on one server (the largest across its series).
fn gauge(samples: &Samples, server: &str, name: &str) -> Option<f64> {
    samples
        .iter()
        .filter(|((s, (n, _)), _)| s == server && n == name)
        .map(|(_, v)| *v)
        .reduce(f64::max)
}

/// Every `cellbind_*` metric name the queries of a dashboard use.
fn dashboard_metrics(dashboard: &serde_json::Value) -> BTreeSet<String> {
    fn walk(v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(expr)) => {
                            let mut rest = expr.as_str();
                            while let Some(i) = rest.find("cellbind_") {
                                let name: String = rest[i..]
                                    .chars()
                                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                                    .collect();
                                rest = &rest[i + name.len()..];
                                out.insert(name);
                            }
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(dashboard, &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_listeners_serve_metrics_and_every_counter_moves_by_exactly_what_happened() {
    let t = TestFleet::start().await;
    let cells: Vec<CellId> = t.file().cells.iter().map(|c| c.id.clone()).collect();
    let (a, b, c, d) = (&cells[0], &cells[1], &cells[2], &cells[3]);

    // ── Where metrics are served ──────────────────────────────────────────────────────────
    // No public listener answers /metrics: the edges, the auth-services' public and internal
    // listeners, the control plane, the apps' public and internal listeners.
    let mut public = vec![t.file().control_plane.url.clone()];
    for cell in &t.file().cells {
        public.push(cell.endpoint.clone());
        public.extend(cell.replicas().iter().map(|s| s.url.clone()));
        public.extend(cell.auth_public_urls.iter().cloned());
        public.push(cell.app_url.clone());
        public.push(cell.app_internal_url.clone());
    }
    for url in &public {
        let r = t.client.get(format!("{url}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{url}/metrics");
    }
    // Every management listener serves metrics, health and readiness, and nothing else.
    let management = t.fleet.management().clone();
    let urls = management.urls();
    assert_eq!(
        urls.len(),
        1 + cells.len() * (2 + t.file().cells[0].replicas().len())
    );
    for url in urls {
        for (path, status) in [("/healthz", 200), ("/readyz", 200), ("/v1/sessions", 404)] {
            let r = t.client.get(format!("{url}{path}")).send().await.unwrap();
            assert_eq!(r.status(), status, "{url}{path}");
        }
        metrics_text(&t, url).await;
    }

    let before = scrape(&t, &[]).await;

    // ── The dashboard names only metrics the servers expose ───────────────────────────────
    let exposed: BTreeSet<&str> = before.keys().map(|(_, (n, _))| n.as_str()).collect();
    let dashboard: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/grafana/cellbind.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let used = dashboard_metrics(&dashboard);
    assert!(used.len() >= 10, "{used:?}");
    for name in &used {
        assert!(
            exposed.contains(name.as_str()),
            "the dashboard queries {name}, which no server exposes"
        );
    }
    let cell_var = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cell")
        .unwrap();
    assert_eq!(
        cell_var["definition"],
        "label_values(cellbind_edge_requests_total, cell)"
    );

    // ── The script, and what each step must cost ──────────────────────────────────────────
    let mut want = Expected::default();
    let good_user = technician(&t, a, "tech-1", &[]);
    let leaver = technician(&t, a, "tech-1", &[&good_user]);
    let quitter = technician(&t, a, "tech-2", &[&leaver]);
    let endpoint_a = t.cell(a).endpoint.clone();

    // Good sign-ins and route loads: forwarded, and the cell answered 2xx.
    let good: Session = session_for(&t, &good_user).await;
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "2xx"),
        ],
        1.0,
    );
    want.sign_in(a, "success", true);
    for _ in 0..5 {
        assert_eq!(route(&t, &endpoint_a, Some(&good.token)).await.0, 200);
    }
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "app"),
            ("class", "2xx"),
        ],
        5.0,
    );
    want.app(a, "public", "/api/routes/today", "2xx", 5.0);

    // A wrong password: forwarded, the auth-service answered 401.
    let (st, v) = sign_in_as(
        &t.client,
        &endpoint_a,
        good_user.contractor_id.as_str(),
        &good_user.login,
        "not-the-password",
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("INVALID_CREDENTIALS"))
    );
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "4xx"),
        ],
        1.0,
    );
    want.sign_in(a, "invalid_credentials", true);

    // No session, and a token whose signature does not verify: refused at the edge.
    assert_eq!(
        route(&t, &endpoint_a, None).await,
        (401, "SESSION_MISSING".into())
    );
    want.edge(
        a,
        &[("outcome", "refused"), ("code", "SESSION_MISSING")],
        1.0,
    );
    let mut forged = good.token.clone();
    let last = if forged.ends_with('A') { 'B' } else { 'A' };
    forged.pop();
    forged.push(last);
    assert_eq!(
        route(&t, &endpoint_a, Some(&forged)).await,
        (401, "SESSION_INVALID".into())
    );
    want.edge(
        a,
        &[("outcome", "refused"), ("code", "SESSION_INVALID")],
        1.0,
    );

    // A session signed out, then used: refused as revoked once the edge applied it.
    let quit = session_for(&t, &quitter).await;
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "2xx"),
        ],
        1.0,
    );
    want.sign_in(a, "success", true);
    let r = t
        .client
        .delete(format!("{endpoint_a}/v1/sessions/current"))
        .bearer_auth(&quit.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "2xx"),
        ],
        1.0,
    );
    wait_applied(&t, a).await;
    want.add(
        format!("{a} edge"),
        "cellbind_edge_revocation_apply_seconds_count",
        &[("cell", a.as_str())],
        1.0,
    );
    assert_eq!(
        route(&t, &endpoint_a, Some(&quit.token)).await,
        (401, "SESSION_REVOKED".into())
    );
    want.edge(
        a,
        &[("outcome", "refused"), ("code", "SESSION_REVOKED")],
        1.0,
    );

    // A contractor moved to another cell: its old session is refused as WRONG_CELL at the
    // old cell's edge. The migration's steps are counted where they happen.
    let left = session_for(&t, &leaver).await;
    want.edge(
        a,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "2xx"),
        ],
        1.0,
    );
    want.sign_in(a, "success", true);
    let mut opts = MigrateOptions::new(leaver.contractor_id.clone(), b.clone());
    opts.step_timeout = PROPAGATION;
    migrate(&t.fleet.fleet_file_path(), &opts, |_| {})
        .await
        .expect("the migration completes");
    // Credentials and app data are copied twice (before the handoff and after the drain).
    want.step(a, "export", 2.0);
    want.step(a, "handoff", 1.0);
    want.step(a, "release", 1.0);
    want.step(b, "import", 2.0);
    want.step(b, "activate", 1.0);
    want.app(a, "internal", ContractorOp::Export.route(), "2xx", 2.0);
    want.app(a, "internal", ContractorOp::Freeze.route(), "2xx", 1.0);
    want.app(a, "internal", ContractorOp::Release.route(), "2xx", 1.0);
    want.app(b, "internal", ContractorOp::Import.route(), "2xx", 2.0);
    want.app(b, "internal", ContractorOp::Activate.route(), "2xx", 1.0);
    want.add(
        "control-plane".into(),
        "cellbind_control_plane_placement_changes_total",
        &[("cell", b.as_str())],
        1.0,
    );
    want.add(
        "control-plane".into(),
        "cellbind_control_plane_map_publications_total",
        &[("result", "new_version")],
        1.0,
    );
    wait_applied(&t, a).await;
    assert_eq!(
        route(&t, &endpoint_a, Some(&left.token)).await,
        (409, "WRONG_CELL".into())
    );
    want.edge(a, &[("outcome", "refused"), ("code", "WRONG_CELL")], 1.0);

    // The app of a cell dies: its edge answers UPSTREAM_UNAVAILABLE, counted before the cell.
    let victim = session_for(&t, &technician(&t, c, "tech-1", &[])).await;
    want.edge(
        c,
        &[
            ("outcome", "forwarded"),
            ("upstream", "auth"),
            ("class", "2xx"),
        ],
        1.0,
    );
    want.sign_in(c, "success", true);
    let app_c = format!("{c}-app");
    let pid = t.fleet.pid_of(&app_c).unwrap();
    t.fleet.kill(&app_c).unwrap();
    let deadline = Instant::now() + PROPAGATION;
    while !process_gone(pid) {
        assert!(Instant::now() < deadline, "{app_c} did not die");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, code) = route(&t, &victim.endpoint, Some(&victim.token)).await;
    assert!(
        matches!(st, 502 | 504) && code == "UPSTREAM_UNAVAILABLE",
        "{st} {code}"
    );
    want.edge(
        c,
        &[("outcome", "upstream_unavailable"), ("upstream", "app")],
        1.0,
    );

    // A flood from one address past the edge's per-IP limit: every 429 is counted as
    // rate-limited, every answer given as local (health).
    let endpoint_d = t.cell(d).endpoint.clone();
    let (mut ok, mut limited) = (0u32, 0u32);
    for _ in 0..FLOOD_BATCHES {
        let batch = (0..FLOOD_BATCH).map(|_| t.client.get(format!("{endpoint_d}/healthz")).send());
        for r in futures::future::join_all(batch).await {
            match r.unwrap().status().as_u16() {
                200 => ok += 1,
                429 => limited += 1,
                other => panic!("the flood got {other}"),
            }
        }
        if limited > 0 {
            break;
        }
    }
    assert!(limited > 0, "{ok} requests and no 429");
    want.edge(d, &[("outcome", "local")], f64::from(ok));
    want.edge(d, &[("outcome", "rate_limited")], f64::from(limited));

    // ── Every counter moved by exactly that ───────────────────────────────────────────────
    let after = scrape(&t, &[format!("{c} app")]).await;
    let wrong = check_deltas(&before, &after, &want);
    let moved: Vec<String> = want
        .0
        .keys()
        .map(|k| {
            format!(
                "{} {} {:?} +{}",
                k.0,
                k.1.0,
                k.1.1,
                delta(&before, &after, k)
            )
        })
        .collect();
    println!("scripted deltas:\n{}", moved.join("\n"));
    assert!(wrong.is_empty(), "counters off:\n{}", wrong.join("\n"));

    // ── Gauges: each cell holds and serves the version the control plane published ────────
    let published = gauge(
        &after,
        "control-plane",
        "cellbind_control_plane_map_version",
    )
    .unwrap();
    assert_eq!(
        published,
        gauge(
            &before,
            "control-plane",
            "cellbind_control_plane_map_version"
        )
        .unwrap()
            + 1.0
    );
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let now = scrape(&t, &[format!("{c} app")]).await;
        let behind: Vec<String> = cells
            .iter()
            .flat_map(|cell| {
                [
                    (format!("{cell} auth"), "cellbind_auth_map_version"),
                    (format!("{cell} edge"), "cellbind_edge_map_version"),
                ]
            })
            .filter(|(server, name)| gauge(&now, server, name) != Some(published))
            .map(|(server, name)| format!("{server} {name} {:?}", gauge(&now, &server, name)))
            .collect();
        if behind.is_empty() {
            // Each edge instance reports its feed lag and the age of its last sync.
            for cell in &cells {
                let server = format!("{cell} edge");
                let age = gauge(&now, &server, "cellbind_edge_last_sync_age_seconds").unwrap();
                assert!(
                    (0.0..60.0).contains(&age),
                    "{server}: last sync {age} s ago"
                );
                assert!(gauge(&now, &server, "cellbind_edge_feed_lag").is_some());
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every cell reached map version {published}: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (st, _) = sign_in(&t.client, &t.cell(b).endpoint, &leaver).await;
    assert_eq!(st, 201, "the moved contractor signs in at its new cell");
}
