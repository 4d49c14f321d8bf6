//! The game day report on disk and on screen: `<stem>.json` (the [`Report`], schema
//! [`REPORT_SCHEMA`]) and `<stem>.html` beside it, one self-contained page (inline CSS and
//! inline SVG, no script, no external reference) with a timeline plot per scenario; and the
//! text summary `cellctl gameday run` and `cellctl gameday report` print.
//!
//! The page's elements a test can find: `#overall` (`PASS` or `FAIL`), one
//! `section.scenario[data-scenario]` per scenario, in it one `svg.timeline[data-scenario]`,
//! whose groups are `.series-ok`, `.series-before-cell`, `.series-in-cell` (stacked bars of
//! requests per second), `.series-p50`, `.series-p99` (latency lines) and one `.fault` per
//! fault window.

//!
//! This file reads and writes the files; `report/text.rs` makes the summary, `report/html.rs`
//! the page and `report/timeline.rs` its plots.

use std::path::{Path, PathBuf};

use runtime::IoContext as _;

use super::model::{REPORT_SCHEMA, Report};
use crate::error::{CtlError, Result};

mod html;
mod text;
mod timeline;

pub use html::render_html;
pub use text::summary_text;

/// Writes `<dir>/<stem>.json` (pretty JSON) and `<dir>/<stem>.html`; returns their paths in
/// that order. Creates `dir` if needed.
pub fn write(report: &Report, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json_path = dir.join(format!("{stem}.json"));
    let html_path = dir.join(format!("{stem}.html"));
    let mut json = serde_json::to_string_pretty(report)
        .map_err(|e| CtlError::Internal(format!("serialising the game day report: {e}")))?;
    json.push('\n');
    std::fs::write(&json_path, json).with_context(|| format!("writing {}", json_path.display()))?;
    write_html(report, &html_path)?;
    Ok((json_path, html_path))
}

/// Reads a JSON report, refusing one of another schema.
pub fn read(path: &Path) -> Result<Report> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CtlError::Config(format!("{} is not a game day report: {e}", path.display()))
    })?;
    // The schema first: a report of another schema may not parse as this one at all.
    match value.get("schema").and_then(serde_json::Value::as_u64) {
        Some(s) if s == u64::from(REPORT_SCHEMA) => {}
        Some(s) => {
            return Err(CtlError::Config(format!(
                "{} is a game day report of schema {s}; this cellctl reads schema {REPORT_SCHEMA}",
                path.display()
            )));
        }
        None => {
            return Err(CtlError::Config(format!(
                "{} is not a game day report: no numeric `schema` field",
                path.display()
            )));
        }
    }
    serde_json::from_value(value).map_err(|e| {
        CtlError::Config(format!(
            "{} is not a valid game day report: {e}",
            path.display()
        ))
    })
}

/// `cellctl gameday report FILE`: reads the JSON report, writes the HTML page beside it (same
/// stem, `.html`), and prints the text summary (or, with `json`, the report). Only renders:
/// a report whose scenarios failed is not an error of this command.
pub fn run_report(file: &Path, json: bool) -> Result<()> {
    let report = read(file)?;
    let html_path = file.with_extension("html");
    write_html(&report, &html_path)?;
    if json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CtlError::Internal(format!("serialising the game day report: {e}")))?;
        println!("{text}");
        eprintln!("html: {}", html_path.display());
    } else {
        print!("{}", summary_text(&report));
        println!("html: {}", html_path.display());
    }
    Ok(())
}

fn write_html(report: &Report, path: &Path) -> Result<()> {
    std::fs::write(path, render_html(report))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::text::{esc, num, utc_iso};
    use super::*;
    use crate::gameday::model::{BoundCheck, Bucket, FaultWindow, Figure, Outcome, ScenarioReport};

    fn bucket(t: u64, fault: bool) -> Bucket {
        Bucket {
            t_ms: t * 1000,
            ok: if fault { 12 } else { 40 },
            failed_before_cell: if fault { 20 } else { 0 },
            failed_in_cell: if fault { 8 } else { 0 },
            p50_ms: if fault { 35.0 } else { 12.0 },
            p99_ms: if fault { 180.5 } else { 48.0 },
        }
    }

    fn report() -> Report {
        Report {
            schema: REPORT_SCHEMA,
            cellctl_version: "0.1.0".into(),
            started_unix_ms: 1_741_356_309_000,
            finished_unix_ms: 1_741_356_400_000,
            cells: vec!["cell-01".into(), "cell-02".into()],
            scale: "small".into(),
            undone_first: vec!["cell-02/edge down".into()],
            scenarios: vec![
                ScenarioReport {
                    name: "auth-down".into(),
                    proves: "A cell's auth-service down stops only that cell's sign-ins.".into(),
                    outcome: Outcome::Failed,
                    reason: "<script>alert(1)</script> & more".into(),
                    started_unix_ms: 1_741_356_310_000,
                    duration_ms: 30_000,
                    stopped_ms: None,
                    faults: vec![
                        FaultWindow {
                            what: "cell-01/auth-service down <SIGKILL>".into(),
                            start_ms: 10_000,
                            end_ms: Some(20_000),
                        },
                        FaultWindow {
                            what: "key revoked".into(),
                            start_ms: 25_000,
                            end_ms: None,
                        },
                    ],
                    figures: vec![
                        Figure {
                            name: "route_loads_ok".into(),
                            value: 900.0,
                            unit: "count".into(),
                        },
                        Figure {
                            name: "read_only_window_p99_ms".into(),
                            value: 180.5,
                            unit: "ms".into(),
                        },
                    ],
                    bounds: vec![
                        BoundCheck::check("route_loads_ok", ">=", 800.0, 900.0),
                        BoundCheck::check("read_only_window_p99_ms", "<=", 100.0, 180.5),
                    ],
                    timeline: (0..30).map(|t| bucket(t, (10..20).contains(&t))).collect(),
                },
                ScenarioReport {
                    name: "empty".into(),
                    proves: "Nothing.".into(),
                    outcome: Outcome::Passed,
                    reason: String::new(),
                    started_unix_ms: 1_741_356_350_000,
                    duration_ms: 0,
                    stopped_ms: None,
                    faults: vec![],
                    figures: vec![],
                    bounds: vec![],
                    timeline: vec![],
                },
            ],
        }
    }

    #[test]
    fn renders_two_scenarios_self_contained_and_escaped() {
        let html = render_html(&report());
        assert_eq!(html.matches("class=\"timeline\"").count(), 2, "{html}");
        assert!(html.contains("data-scenario=\"auth-down\""));
        assert!(html.contains("data-scenario=\"empty\""));
        assert!(!html.contains("<script"), "unescaped script");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
        assert!(html.contains("&lt;SIGKILL&gt;"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert_eq!(html.matches("class=\"fault\"").count(), 2);
        for class in [
            "series-ok",
            "series-before-cell",
            "series-in-cell",
            "series-p50",
            "series-p99",
        ] {
            assert_eq!(
                html.matches(&format!("class=\"{class}\"")).count(),
                1,
                "{class}"
            );
        }
        assert!(html.contains("id=\"overall\" class=\"overall fail\">FAIL<"));
        assert!(html.contains("no load recorded"));
        assert!(html.contains("✘</span> read_only_window_p99_ms &lt;= 100 — 180.5"));
        assert!(html.contains("✔</span> route_loads_ok &gt;= 800 — 900"));
        assert!(html.contains("2025-03-07T14:05:09Z"), "UTC start");
        assert!(!html.contains("NaN") && !html.contains("inf\""), "{html}");
    }

    #[test]
    fn an_empty_report_renders() {
        let mut r = report();
        r.scenarios.clear();
        r.undone_first.clear();
        let html = render_html(&r);
        assert!(html.contains(">PASS<"));
        assert!(!html.contains("class=\"timeline\""));
    }

    #[test]
    fn a_scenario_with_faults_but_no_load_and_zero_duration_renders() {
        let mut r = report();
        r.scenarios[1].faults = vec![FaultWindow {
            what: "x".into(),
            start_ms: 0,
            end_ms: Some(0),
        }];
        let html = render_html(&r);
        assert!(!html.contains("NaN"));
    }

    #[test]
    fn summary_lists_outcomes_figures_and_bounds() {
        let text = summary_text(&report());
        assert!(text.starts_with("game day: FAIL (1 of 2 scenarios passed)"));
        assert!(text.contains("auth-down: failed in 30.0 s"));
        assert!(text.contains("  route_loads_ok = 900 count"));
        assert!(text.contains("  read_only_window_p99_ms = 180.5 ms"));
        assert!(text.contains("  ✘ read_only_window_p99_ms <= 100 — 180.5"));
        assert!(text.contains("  ✔ route_loads_ok >= 800 — 900"));
        assert!(text.contains("empty: passed in 0.0 s"));
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let r = report();
        let (json, html) = write(&r, dir.path(), "gameday-test").unwrap();
        assert_eq!(json, dir.path().join("gameday-test.json"));
        assert_eq!(html, dir.path().join("gameday-test.html"));
        assert_eq!(read(&json).unwrap(), r);
        let page = std::fs::read_to_string(&html).unwrap();
        assert_eq!(page, render_html(&r));
    }

    #[test]
    fn run_report_writes_the_html_beside_the_json() {
        let dir = tempfile::tempdir().unwrap();
        let (json, html) = write(&report(), dir.path(), "g").unwrap();
        std::fs::remove_file(&html).unwrap();
        run_report(&json, false).unwrap();
        assert!(html.is_file());
    }

    #[test]
    fn another_schema_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (json, _) = write(&report(), dir.path(), "old").unwrap();
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        v["schema"] = 2.into();
        v["new_field"] = "x".into();
        std::fs::write(&json, v.to_string()).unwrap();
        let err = read(&json).unwrap_err().to_string();
        assert!(err.contains("schema 2"), "{err}");
        assert!(err.contains(&json.display().to_string()), "{err}");
    }

    #[test]
    fn utc_times_and_numbers() {
        assert_eq!(utc_iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(num(3.0), "3");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(2.5000), "2.5");
        assert_eq!(esc("a\"'<>&"), "a&quot;&#39;&lt;&gt;&amp;");
    }
}
