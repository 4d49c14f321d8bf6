//! The game day report's HTML page in a real (headless) Chromium: a report built in code is
//! written by `cellctl::gameday::report::write`, opened from disk, and its plots are checked
//! as the browser lays them out (sizes, the fault band, the series, the verdict).
//!
//! Needs Debian's `chromium` and `chromium-driver`, like the desk browser test: without them
//! the test fails and says what to install; `CELLBIND_SKIP_BROWSER_TESTS=1` skips it on a
//! machine that has no browser. `CELLBIND_CHROMIUM` / `CELLBIND_CHROMEDRIVER` override where
//! the two binaries are looked up.
//!
//! A full-page screenshot is written to the test's temporary directory; set
//! `GAMEDAY_SCREENSHOT` to a file (or an existing directory) to keep a copy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cellbind_tests::{Slot, fleet_slot};
use cellctl::gameday::model::{
    BoundCheck, Bucket, FaultWindow, Figure, Outcome, REPORT_SCHEMA, Report, ScenarioReport,
};
use fantoccini::{Client, Locator};

use crate::browser::{CHROMEDRIVER_ENV, CHROMIUM_ENV, browser, skipped, start_driver, tool};

/// Where to keep a copy of the screenshot (a file, or an existing directory).
const SCREENSHOT_ENV: &str = "GAMEDAY_SCREENSHOT";
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);
const WIDTH: u32 = 1200;

/// The scenario with the fault, its window (seconds) and its timeline's length.
const FAULTED: &str = "auth-service-down";
const FAULT_S: (u64, u64) = (15, 25);
const TIMELINE_S: u64 = 40;
const FAULT_WHAT: &str = "cell-03/auth-service down (local: SIGKILL pid 4242)";
/// The scenario without a fault.
const QUIET: &str = "control-plane-down";

fn bucket(t: u64, ok: u64, before: u64, in_cell: u64, p50: f64, p99: f64) -> Bucket {
    Bucket {
        t_ms: t * 1000,
        ok,
        failed_before_cell: before,
        failed_in_cell: in_cell,
        p50_ms: p50,
        p99_ms: p99,
    }
}

/// Two scenarios: one with a fault window and a 40-second timeline whose failures dip in
/// during the fault (and passes), one without a fault that misses a bound (so the run fails).
fn report() -> Report {
    let start = 1_741_356_309_000;
    let faulted_timeline = (0..TIMELINE_S)
        .map(|t| {
            let wobble = (t * 7 % 5) as f64;
            if (FAULT_S.0..FAULT_S.1).contains(&t) {
                // The cell's sign-ins fail: connections refused, a few 5xx.
                bucket(t, 18 + t % 3, 14, 4, 24.0 + wobble, 160.0 + 3.0 * wobble)
            } else {
                bucket(t, 36 + t % 4, 0, 0, 11.0 + wobble, 42.0 + 2.0 * wobble)
            }
        })
        .collect::<Vec<_>>();
    let ok: u64 = faulted_timeline.iter().map(|b| b.ok).sum();
    let quiet_timeline = (0..20)
        .map(|t| bucket(t, 25, 0, u64::from(t == 12), 9.0, 30.0 + (t % 4) as f64))
        .collect();
    Report {
        schema: REPORT_SCHEMA,
        cellctl_version: "0.1.0-test".into(),
        started_unix_ms: start,
        finished_unix_ms: start + 75_000,
        cells: vec!["cell-01".into(), "cell-02".into(), "cell-03".into()],
        scale: "small".into(),
        undone_first: vec![],
        scenarios: vec![
            ScenarioReport {
                name: FAULTED.into(),
                proves: "A cell's auth-service down stops only that cell's sign-ins; \
                         serving with existing sessions does not notice."
                    .into(),
                outcome: Outcome::Passed,
                reason: String::new(),
                started_unix_ms: start + 1_000,
                duration_ms: TIMELINE_S * 1000,
                stopped_ms: None,
                faults: vec![FaultWindow {
                    what: FAULT_WHAT.into(),
                    start_ms: FAULT_S.0 * 1000,
                    end_ms: Some(FAULT_S.1 * 1000),
                }],
                figures: vec![
                    Figure {
                        name: "route_loads_ok".into(),
                        value: ok as f64,
                        unit: "count".into(),
                    },
                    Figure {
                        name: "sign_in_unavailable_s".into(),
                        value: 10.0,
                        unit: "s".into(),
                    },
                ],
                bounds: vec![
                    BoundCheck::check("route_loads_ok", ">=", 1000.0, ok as f64),
                    BoundCheck::check("sign_in_unavailable_s", "<=", 12.0, 10.0),
                ],
                timeline: faulted_timeline,
            },
            ScenarioReport {
                name: QUIET.into(),
                proves: "Serving goes on with the control plane down.".into(),
                outcome: Outcome::Failed,
                reason: String::new(),
                started_unix_ms: start + 45_000,
                duration_ms: 20_000,
                stopped_ms: None,
                faults: vec![],
                figures: vec![Figure {
                    name: "route_loads_failed".into(),
                    value: 1.0,
                    unit: "count".into(),
                }],
                bounds: vec![BoundCheck::check("route_loads_failed", "==", 0.0, 1.0)],
                timeline: quiet_timeline,
            },
        ],
    }
}

/// The element's laid-out rectangle `(x, y, width, height)`.
async fn rect(c: &Client, selector: &str) -> (f64, f64, f64, f64) {
    c.find(Locator::Css(selector))
        .await
        .unwrap_or_else(|e| panic!("`{selector}` is not on the page: {e}"))
        .rectangle()
        .await
        .expect("rectangle")
}

async fn count(c: &Client, selector: &str) -> usize {
    c.find_all(Locator::Css(selector))
        .await
        .expect("find_all")
        .len()
}

fn keep_screenshot(png: &Path) {
    let Some(to) = std::env::var_os(SCREENSHOT_ENV).map(PathBuf::from) else {
        return;
    };
    let to = if to.is_dir() {
        to.join(png.file_name().expect("a file name"))
    } else {
        to
    };
    std::fs::copy(png, &to).unwrap_or_else(|e| panic!("copying the screenshot to {to:?}: {e}"));
    println!("screenshot kept at {}", to.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_page_shows_its_timelines_in_a_browser() {
    if skipped("game day report browser test") {
        return;
    }
    // Fail fast when a tool is missing.
    tool(CHROMIUM_ENV, "chromium");
    tool(CHROMEDRIVER_ENV, "chromedriver");
    // No fleet, but a browser: stay out of the way of the tests that measure.
    let _slot = fleet_slot(Slot::Shared).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let report = report();
    let (json_path, html_path) =
        cellctl::gameday::report::write(&report, dir.path(), "gameday-test").expect("write");
    assert_eq!(
        cellctl::gameday::report::read(&json_path).expect("read back"),
        report
    );
    let page = std::fs::read_to_string(&html_path).expect("the page");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page references nothing outside itself"
    );

    let driver = start_driver(tempfile::tempdir().expect("home dir")).await;
    let c = browser(&driver, (WIDTH, 2000), &["--hide-scrollbars"]).await;
    c.goto(&format!("file://{}", html_path.display()))
        .await
        .expect("open the report");
    let deadline = Instant::now() + STEP_TIMEOUT;
    while count(&c, "svg.timeline").await < 2 {
        assert!(Instant::now() < deadline, "no timeline plot appeared");
        tokio::time::sleep(POLL).await;
    }

    // The verdict: one scenario failed a bound.
    let overall = c
        .find(Locator::Css("#overall"))
        .await
        .expect("#overall")
        .text()
        .await
        .expect("verdict");
    assert_eq!(overall, "FAIL");

    // Two plots, laid out with a real size, one per scenario.
    let plots = c
        .find_all(Locator::Css("svg.timeline"))
        .await
        .expect("plots");
    assert_eq!(plots.len(), 2);
    for p in &plots {
        let (_, _, w, h) = p.rectangle().await.expect("plot rectangle");
        assert!(w > 100.0 && h > 100.0, "a plot is {w}×{h}");
    }
    let faulted = format!("svg.timeline[data-scenario=\"{FAULTED}\"]");
    let quiet = format!("svg.timeline[data-scenario=\"{QUIET}\"]");
    let (px, _, pw, _) = rect(&c, &faulted).await;

    // The fault band: one, in the faulted scenario only, labelled, where the fault was.
    assert_eq!(count(&c, "svg.timeline .fault").await, 1);
    assert_eq!(count(&c, &format!("{quiet} .fault")).await, 0);
    let band_sel = format!("{faulted} .fault rect");
    let (bx, _, bw, bh) = rect(&c, &band_sel).await;
    assert!(bw > 0.0 && bh > 0.0, "the fault band is {bw}×{bh}");
    let label = c
        .find(Locator::Css(&format!("{faulted} .fault text")))
        .await
        .expect("fault label")
        .text()
        .await
        .expect("label text");
    assert!(label.contains(FAULT_WHAT), "fault label: {label}");
    // The band covers a quarter of the 40 s axis (10 s), in the middle third of the plot.
    let frac = bw / pw;
    assert!((0.2..0.3).contains(&frac), "band is {frac} of the plot");
    assert!(bx > px + pw / 3.0 && bx < px + pw / 2.0, "band at {bx}");

    // The series: every one in the faulted plot; the failure bars only inside the band.
    for class in [
        "series-ok",
        "series-before-cell",
        "series-in-cell",
        "series-p50",
        "series-p99",
    ] {
        let sel = format!("{faulted} .{class}");
        let (_, _, w, h) = rect(&c, &sel).await;
        assert!(w > 0.0 && h > 0.0, "{sel} is {w}×{h}");
    }
    assert_eq!(
        count(&c, &format!("{faulted} .series-ok rect")).await,
        TIMELINE_S as usize
    );
    let failed_bars = c
        .find_all(Locator::Css(&format!("{faulted} .series-before-cell rect")))
        .await
        .expect("failure bars");
    assert_eq!(failed_bars.len() as u64, FAULT_S.1 - FAULT_S.0);
    for bar in &failed_bars {
        let (x, _, w, h) = bar.rectangle().await.expect("bar");
        assert!(h > 0.0, "a failure bar has no height");
        assert!(
            x >= bx - 0.5 && x + w <= bx + bw + 0.5,
            "a failure bar ({x}, {w}) outside the band ({bx}, {bw})"
        );
    }
    for class in ["series-p50", "series-p99"] {
        let d = c
            .find(Locator::Css(&format!("{faulted} .{class}")))
            .await
            .expect("latency line")
            .attr("d")
            .await
            .expect("d")
            .unwrap_or_default();
        assert!(
            d.starts_with('M') && d.matches('L').count() == 39,
            "{class}: {d}"
        );
    }
    // The quiet scenario's one failure in the cell is drawn.
    assert_eq!(count(&c, &format!("{quiet} .series-in-cell rect")).await, 1);
    let unmet = c
        .find(Locator::Css(&format!(
            "section.scenario[data-scenario=\"{QUIET}\"] .bound.unmet"
        )))
        .await
        .expect("the unmet bound")
        .text()
        .await
        .expect("bound text");
    assert_eq!(unmet, "✘ route_loads_failed == 0 — 1");

    full_page_screenshot(&c, &dir.path().join("gameday-report.png")).await;
    c.close().await.expect("close");
}

/// A screenshot of the whole page (the window made as tall as the page) written to `shot`,
/// and kept under `GAMEDAY_SCREENSHOT` when that is set.
async fn full_page_screenshot(c: &Client, shot: &Path) {
    let height = c
        .execute(
            "return Math.ceil(document.documentElement.scrollHeight);",
            vec![],
        )
        .await
        .expect("page height")
        .as_f64()
        .expect("a number");
    let height = (height as u32).clamp(600, 16_000);
    c.set_window_size(WIDTH, height + 140)
        .await
        .expect("resize the window");
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(shot, &png).expect("write the screenshot");
    println!("screenshot: {} ({} bytes)", shot.display(), png.len());
    keep_screenshot(shot);
}

/// Opens the HTML page of a report a real run wrote (`html`, beside its JSON) in headless
/// Chromium and checks what an SRE would look at: one laid-out timeline plot per scenario, the
/// verdict, a fault band in the plot of every scenario that injected a fault. Takes a full-page
/// screenshot (`<html's stem>.png` beside it). Does nothing when browser tests are skipped.
pub(crate) async fn look_at_report(html: &Path, report: &Report) {
    if skipped("game day report check") {
        return;
    }
    let driver = start_driver(tempfile::tempdir().expect("home dir")).await;
    let c = browser(&driver, (WIDTH, 2000), &["--hide-scrollbars"]).await;
    c.goto(&format!("file://{}", html.display()))
        .await
        .expect("open the report");
    let deadline = Instant::now() + STEP_TIMEOUT;
    while count(&c, "svg.timeline").await < report.scenarios.len() {
        assert!(
            Instant::now() < deadline,
            "not every timeline plot appeared"
        );
        tokio::time::sleep(POLL).await;
    }
    for p in c
        .find_all(Locator::Css("svg.timeline"))
        .await
        .expect("plots")
    {
        let (_, _, w, h) = p.rectangle().await.expect("plot rectangle");
        assert!(w > 100.0 && h > 100.0, "a plot of {w}x{h}");
    }
    let overall = c
        .find(Locator::Css("#overall"))
        .await
        .expect("#overall")
        .text()
        .await
        .expect("verdict");
    assert_eq!(overall, if report.passed() { "PASS" } else { "FAIL" });
    for s in report.scenarios.iter().filter(|s| !s.faults.is_empty()) {
        let bands = count(
            &c,
            &format!("svg.timeline[data-scenario=\"{}\"] .fault", s.name),
        )
        .await;
        assert!(bands >= 1, "{}: no fault band in its plot", s.name);
    }
    println!(
        "report page: {} timeline plots, verdict {overall}, fault bands where faults were injected",
        report.scenarios.len()
    );
    full_page_screenshot(&c, &html.with_extension("png")).await;
    c.close().await.expect("close");
}
