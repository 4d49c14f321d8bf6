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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use runtime::IoContext as _;

use super::model::{Bucket, FaultWindow, Outcome, REPORT_SCHEMA, Report, ScenarioReport};
use crate::error::{CtlError, Result};

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

// ---------------------------------------------------------------------------------------------
// Text summary

/// The human summary: the run, then per scenario its outcome, faults, figures
/// (`name = value unit`) and bounds (`✔ figure op limit — value` / `✘ …`).
pub fn summary_text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "game day: {} ({} of {} scenarios passed)",
        overall(report),
        report
            .scenarios
            .iter()
            .filter(|s| s.outcome == Outcome::Passed)
            .count(),
        report.scenarios.len()
    );
    let _ = writeln!(
        out,
        "cellctl {}, scale {}, cells {}",
        report.cellctl_version,
        report.scale,
        cells_text(&report.cells)
    );
    let _ = writeln!(
        out,
        "started {}, finished {}",
        utc_iso(report.started_unix_ms),
        utc_iso(report.finished_unix_ms)
    );
    if !report.undone_first.is_empty() {
        let _ = writeln!(out, "undone first (left by an interrupted run):");
        for u in &report.undone_first {
            let _ = writeln!(out, "  {u}");
        }
    }
    for s in &report.scenarios {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{}: {} in {}",
            s.name,
            outcome_text(s.outcome),
            duration_text(s.duration_ms)
        );
        if !s.proves.is_empty() {
            let _ = writeln!(out, "  proves: {}", s.proves);
        }
        if !s.reason.is_empty() {
            let _ = writeln!(out, "  reason: {}", s.reason);
        }
        for f in &s.faults {
            let _ = writeln!(out, "  fault: {} ({})", f.what, fault_window_text(f));
        }
        for f in &s.figures {
            let _ = writeln!(out, "  {} = {} {}", f.name, num(f.value), f.unit);
        }
        for b in &s.bounds {
            let _ = writeln!(out, "  {}", bound_text(b));
        }
    }
    out
}

fn overall(report: &Report) -> &'static str {
    if report.passed() { "PASS" } else { "FAIL" }
}

fn outcome_text(o: Outcome) -> &'static str {
    match o {
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
        Outcome::Aborted => "aborted",
        Outcome::Error => "error",
    }
}

fn cells_text(cells: &[String]) -> String {
    if cells.is_empty() {
        "(none)".to_owned()
    } else {
        cells.join(", ")
    }
}

fn bound_text(b: &super::model::BoundCheck) -> String {
    format!(
        "{} {} {} {} — {}",
        if b.met { '✔' } else { '✘' },
        b.figure,
        b.op,
        num(b.limit),
        num(b.value)
    )
}

fn fault_window_text(f: &FaultWindow) -> String {
    match f.end_ms {
        Some(end) => format!("{} s – {} s", secs(f.start_ms), secs(end)),
        None => format!("from {} s, not undone in the scenario", secs(f.start_ms)),
    }
}

/// Milliseconds as seconds with one decimal (`12.5`).
fn secs(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

fn duration_text(ms: u64) -> String {
    if ms < 60_000 {
        format!("{} s", secs(ms))
    } else {
        let s = ms / 1000;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A figure's value: integral values without decimals, others with at most three.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// Unix milliseconds as a UTC ISO 8601 time (`2025-03-07T14:05:09Z`).
fn utc_iso(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Days to civil date (proleptic Gregorian), after H. Hinnant's `civil_from_days`.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------------------------
// HTML

/// Escapes text for HTML content and attribute values (also inside inline SVG).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"
:root { --ok:#2e9d5b; --before:#e69b23; --incell:#d64545; --p50:#3a6fd8; --p99:#8e44ad;
  --fault:#6a6a9a; --ink:#1f2328; --muted:#5d6570; --line:#d8dce2; --bg:#f6f7f9; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 15px/1.45 "DejaVu Sans", "Liberation Sans", system-ui, sans-serif; }
header, section.scenario { max-width: 1040px; margin: 16px auto; background:#fff;
  border:1px solid var(--line); border-radius:8px; padding:18px 24px; }
h1 { font-size: 24px; margin: 0 0 12px; display:flex; align-items:center; gap:14px; }
h2 { font-size: 19px; margin: 0 0 6px; display:flex; align-items:center; gap:10px; flex-wrap:wrap; }
h3 { font-size: 14px; margin: 16px 0 6px; color:var(--muted); text-transform:uppercase;
  letter-spacing:.04em; }
dl.meta { display:grid; grid-template-columns: max-content 1fr; gap:3px 16px; margin:0; }
dl.meta dt { color:var(--muted); }
dl.meta dd { margin:0; }
.overall { font-size:18px; padding:3px 14px; border-radius:6px; color:#fff; letter-spacing:.05em; }
.overall.pass { background:var(--ok); }
.overall.fail { background:var(--incell); }
.badge { font-size:12px; font-weight:bold; padding:2px 9px; border-radius:10px; color:#fff;
  text-transform:uppercase; letter-spacing:.05em; }
.outcome-passed { background:var(--ok); }
.outcome-failed { background:var(--incell); }
.outcome-aborted { background:var(--before); }
.outcome-error { background:#7b2d2d; }
.undone { margin-top:12px; padding:8px 12px; background:#fff6e0; border-left:4px solid var(--before); }
.undone ul { margin:4px 0 0; padding-left:20px; }
table { border-collapse:collapse; font-size:14px; }
th, td { text-align:left; padding:4px 12px 4px 0; border-bottom:1px solid var(--line); }
th { color:var(--muted); font-weight:normal; }
td.value { text-align:right; font-variant-numeric: tabular-nums; }
table.index a { color:inherit; }
.proves { margin: 2px 0; }
.reason { margin: 6px 0; padding:6px 10px; background:#fdecec; border-left:4px solid var(--incell); }
.duration { color:var(--muted); margin:2px 0; }
.cols { display:flex; gap:40px; flex-wrap:wrap; align-items:flex-start; }
ul.bounds, ul.faults { list-style:none; margin:0; padding:0; font-size:14px; }
ul.bounds li { padding:2px 0; font-variant-numeric: tabular-nums; }
.bound.met .mark { color:var(--ok); font-weight:bold; }
.bound.unmet .mark { color:var(--incell); font-weight:bold; }
.bound.unmet { color:#8a1f1f; }
.none { color:var(--muted); font-style:italic; margin:2px 0; }
.note { color:var(--muted); font-style:italic; }
svg.timeline { display:block; width:100%; max-width:992px; height:auto; margin-top:10px;
  font-family: "DejaVu Sans", "Liberation Sans", sans-serif; }
svg.timeline text { fill: var(--ink); font-size:11px; }
svg.timeline .tick text, svg.timeline .axis-label { fill: var(--muted); }
svg.timeline .grid line { stroke:#eceef1; }
svg.timeline .axis { stroke:#9aa1aa; }
svg.timeline .series-ok rect { fill:var(--ok); }
svg.timeline .series-before-cell rect { fill:var(--before); }
svg.timeline .series-in-cell rect { fill:var(--incell); }
svg.timeline .series-p50 { stroke:var(--p50); fill:none; stroke-width:1.8; }
svg.timeline .series-p99 { stroke:var(--p99); fill:none; stroke-width:1.8; stroke-dasharray:5 3; }
svg.timeline .swatch-ok { fill:var(--ok); }
svg.timeline .swatch-before-cell { fill:var(--before); }
svg.timeline .swatch-in-cell { fill:var(--incell); }
svg.timeline .swatch-p50 { stroke:var(--p50); stroke-width:2.5; }
svg.timeline .swatch-p99 { stroke:var(--p99); stroke-width:2.5; stroke-dasharray:5 3; }
svg.timeline .fault rect { fill:var(--fault); fill-opacity:.13; }
svg.timeline .fault line { stroke:var(--fault); stroke-width:1.2; }
svg.timeline .fault line.open-end { stroke-dasharray:3 3; }
svg.timeline .fault text { fill:#3f3f6a; font-size:11.5px; }
svg.timeline .panel-title { font-weight:bold; font-size:12px; }
svg.timeline .empty-note { fill:var(--muted); font-size:14px; font-style:italic; }
"#;

/// The report as one self-contained HTML page.
pub fn render_html(report: &Report) -> String {
    let mut h = String::with_capacity(32 * 1024);
    let verdict = overall(report);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Game day {} — {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        verdict,
        esc(&utc_iso(report.started_unix_ms))
    );
    render_header(&mut h, report);
    h.push_str("<main>\n");
    for (i, s) in report.scenarios.iter().enumerate() {
        render_scenario(&mut h, i, s);
    }
    h.push_str("</main>\n</body>\n</html>\n");
    h
}

fn render_header(h: &mut String, report: &Report) {
    let verdict = overall(report);
    let passed = report
        .scenarios
        .iter()
        .filter(|s| s.outcome == Outcome::Passed)
        .count();
    let _ = write!(
        h,
        "<header>\n<h1>Game day report <span id=\"overall\" class=\"overall {}\">{verdict}</span></h1>\n\
         <dl class=\"meta\">\n\
         <dt>Scenarios</dt><dd>{passed} of {} passed</dd>\n\
         <dt>Started</dt><dd>{}</dd>\n<dt>Finished</dt><dd>{} ({})</dd>\n\
         <dt>Cells</dt><dd>{}</dd>\n<dt>Scale</dt><dd>{}</dd>\n<dt>cellctl</dt><dd>{}</dd>\n</dl>\n",
        verdict.to_ascii_lowercase(),
        report.scenarios.len(),
        esc(&utc_iso(report.started_unix_ms)),
        esc(&utc_iso(report.finished_unix_ms)),
        esc(&duration_text(
            report
                .finished_unix_ms
                .saturating_sub(report.started_unix_ms)
        )),
        esc(&cells_text(&report.cells)),
        esc(&report.scale),
        esc(&report.cellctl_version),
    );
    if !report.undone_first.is_empty() {
        h.push_str(
            "<div class=\"undone\">Undone first — faults an interrupted run had left:\n<ul>\n",
        );
        for u in &report.undone_first {
            let _ = writeln!(h, "<li>{}</li>", esc(u));
        }
        h.push_str("</ul>\n</div>\n");
    }
    if !report.scenarios.is_empty() {
        h.push_str(
            "<h3>Scenarios</h3>\n<table class=\"index\">\n\
             <tr><th>Scenario</th><th>Outcome</th><th>Duration</th><th>Bounds met</th></tr>\n",
        );
        for (i, s) in report.scenarios.iter().enumerate() {
            let met = s.bounds.iter().filter(|b| b.met).count();
            let _ = writeln!(
                h,
                "<tr><td><a href=\"#scenario-{i}\">{}</a></td><td>{}</td><td>{}</td><td>{met} of {}</td></tr>",
                esc(&s.name),
                badge(s.outcome),
                esc(&duration_text(s.duration_ms)),
                s.bounds.len()
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</header>\n");
}

fn badge(o: Outcome) -> String {
    let t = outcome_text(o);
    format!("<span class=\"badge outcome outcome-{t}\">{t}</span>")
}

fn render_scenario(h: &mut String, i: usize, s: &ScenarioReport) {
    let name = esc(&s.name);
    let _ = write!(
        h,
        "<section class=\"scenario\" id=\"scenario-{i}\" data-scenario=\"{name}\">\n\
         <h2><span class=\"name\">{name}</span> {}</h2>\n",
        badge(s.outcome)
    );
    if !s.proves.is_empty() {
        let _ = writeln!(h, "<p class=\"proves\">{}</p>", esc(&s.proves));
    }
    if !s.reason.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"reason\"><strong>Reason:</strong> {}</p>",
            esc(&s.reason)
        );
    }
    let _ = writeln!(
        h,
        "<p class=\"duration\">Ran {} from {}</p>",
        esc(&duration_text(s.duration_ms)),
        esc(&utc_iso(s.started_unix_ms))
    );

    h.push_str("<h3>Faults</h3>\n");
    if s.faults.is_empty() {
        h.push_str("<p class=\"none\">No faults injected.</p>\n");
    } else {
        h.push_str("<ul class=\"faults\">\n");
        for f in &s.faults {
            let _ = writeln!(
                h,
                "<li>{} <span class=\"note\">({})</span></li>",
                esc(&f.what),
                esc(&fault_window_text(f))
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<div class=\"cols\">\n<div>\n<h3>Figures</h3>\n");
    if s.figures.is_empty() {
        h.push_str("<p class=\"none\">No figures.</p>\n");
    } else {
        h.push_str(
            "<table class=\"figures\">\n<tr><th>Figure</th><th>Value</th><th>Unit</th></tr>\n",
        );
        for f in &s.figures {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"value\">{}</td><td>{}</td></tr>",
                esc(&f.name),
                esc(&num(f.value)),
                esc(&f.unit)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</div>\n<div>\n<h3>Bounds</h3>\n");
    if s.bounds.is_empty() {
        h.push_str("<p class=\"none\">No bounds.</p>\n");
    } else {
        h.push_str("<ul class=\"bounds\">\n");
        for b in &s.bounds {
            let _ = writeln!(
                h,
                "<li class=\"bound {}\"><span class=\"mark\">{}</span> {} {} {} — {}</li>",
                if b.met { "met" } else { "unmet" },
                if b.met { '✔' } else { '✘' },
                esc(&b.figure),
                esc(&b.op),
                esc(&num(b.limit)),
                esc(&num(b.value))
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</div>\n</div>\n<h3>Timeline</h3>\n");
    render_timeline(h, s);
    h.push_str("</section>\n");
}

// ---------------------------------------------------------------------------------------------
// The timeline plot (inline SVG)

const PLOT_W: f64 = 992.0;
const MARGIN_L: f64 = 64.0;
const MARGIN_R: f64 = 20.0;
const FAULT_ROW: f64 = 16.0;
const TITLE_ROW: f64 = 22.0;
const REQ_H: f64 = 190.0;
const GAP: f64 = 26.0;
const LAT_H: f64 = 130.0;
const AXIS_ROOM: f64 = 44.0;

/// A step of 1, 2 or 5 times a power of ten giving about `ticks` ticks up to `max` (> 0).
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= raw {
            return m * mag;
        }
    }
    10.0 * mag
}

/// The axis' top (a multiple of the step at or above `max`) and its step; `max` may be 0.
fn axis(max: f64, ticks: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max, ticks);
    let top = (max / step).ceil() * step;
    (if top > 0.0 { top } else { step }, step)
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else {
        num(v)
    }
}

/// A vertical panel: its top and height in the SVG and its y axis.
struct Panel {
    top: f64,
    height: f64,
    y_max: f64,
    y_step: f64,
}

impl Panel {
    fn y(&self, v: f64) -> f64 {
        self.top + self.height - (v / self.y_max) * self.height
    }
    fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

fn render_timeline(h: &mut String, s: &ScenarioReport) {
    let name = esc(&s.name);
    // x: seconds since the scenario's start, covering the run, the buckets and the faults.
    let last_bucket = s.timeline.iter().map(|b| b.t_ms + 1000).max().unwrap_or(0);
    let last_fault = s
        .faults
        .iter()
        .map(|f| f.end_ms.unwrap_or(f.start_ms))
        .max()
        .unwrap_or(0);
    let span_s = (s.duration_ms.max(last_bucket).max(last_fault) as f64 / 1000.0).max(1.0);
    let (x_max, x_step) = axis(span_s, 10.0);
    let plot_l = MARGIN_L;
    let plot_w = PLOT_W - MARGIN_L - MARGIN_R;
    let x = |secs: f64| plot_l + secs.clamp(0.0, x_max) / x_max * plot_w;

    let fault_rows = s.faults.len() as f64 * FAULT_ROW;
    let max_req = s
        .timeline
        .iter()
        .map(|b| (b.ok + b.failed_before_cell + b.failed_in_cell) as f64)
        .fold(0.0, f64::max);
    let max_lat = s
        .timeline
        .iter()
        .filter(|b| has_requests(b))
        .map(|b| b.p99_ms.max(b.p50_ms))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (req_max, req_step) = axis(max_req, 4.0);
    let (lat_max, lat_step) = axis(max_lat, 3.0);
    let req = Panel {
        top: 8.0 + fault_rows + TITLE_ROW,
        height: REQ_H,
        y_max: req_max,
        y_step: req_step,
    };
    let lat = Panel {
        top: req.bottom() + GAP + TITLE_ROW,
        height: LAT_H,
        y_max: lat_max,
        y_step: lat_step,
    };
    let total_h = lat.bottom() + AXIS_ROOM;

    let _ = writeln!(
        h,
        "<svg class=\"timeline\" data-scenario=\"{name}\" viewBox=\"0 0 {PLOT_W} {total_h:.0}\" \
         width=\"{PLOT_W}\" height=\"{total_h:.0}\" role=\"img\" \
         aria-label=\"Timeline of {name}: requests per second and latency\">"
    );

    // Grid, axes and tick labels of both panels; x tick labels under the lower one only.
    for (panel, title, unit) in [(&req, "Requests per second", ""), (&lat, "Latency", " ms")] {
        let _ = writeln!(
            h,
            "<text class=\"panel-title\" x=\"{plot_l}\" y=\"{:.1}\">{title}</text>",
            panel.top - 8.0
        );
        h.push_str("<g class=\"grid tick\">\n");
        let mut v = 0.0;
        while v <= panel.y_max + panel.y_step / 1000.0 {
            let y = panel.y(v);
            let _ = writeln!(
                h,
                "<line x1=\"{plot_l}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}{unit}</text>",
                plot_l + plot_w,
                plot_l - 6.0,
                y + 3.5,
                tick_label(v, panel.y_step)
            );
            v += panel.y_step;
        }
        let mut t = 0.0;
        while t <= x_max + x_step / 1000.0 {
            let xv = x(t);
            let _ = writeln!(
                h,
                "<line x1=\"{xv:.1}\" x2=\"{xv:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
                panel.top,
                panel.bottom()
            );
            t += x_step;
        }
        h.push_str("</g>\n");
        let _ = writeln!(
            h,
            "<line class=\"axis\" x1=\"{plot_l}\" x2=\"{plot_l}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <line class=\"axis\" x1=\"{plot_l}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
            panel.top,
            panel.bottom(),
            plot_l + plot_w,
            panel.bottom(),
            panel.bottom()
        );
    }
    h.push_str("<g class=\"tick x-ticks\">\n");
    let mut t = 0.0;
    while t <= x_max + x_step / 1000.0 {
        let _ = writeln!(
            h,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x(t),
            lat.bottom() + 15.0,
            tick_label(t, x_step)
        );
        t += x_step;
    }
    h.push_str("</g>\n");
    let _ = writeln!(
        h,
        "<text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds since the scenario's start</text>",
        plot_l + plot_w / 2.0,
        lat.bottom() + 34.0
    );

    // Legends, right-aligned on each panel's title line.
    legend(
        h,
        plot_l + plot_w,
        req.top - 8.0,
        &[
            ("ok", "ok", false),
            ("failed before the cell", "before-cell", false),
            ("failed in the cell", "in-cell", false),
        ],
    );
    legend(
        h,
        plot_l + plot_w,
        lat.top - 8.0,
        &[("p50", "p50", true), ("p99", "p99", true)],
    );

    // Fault windows: a band across both panels, start and end lines, a label row each.
    for (i, f) in s.faults.iter().enumerate() {
        let x0 = x(f.start_ms as f64 / 1000.0);
        let (x1, open) = match f.end_ms {
            Some(e) => (x(e as f64 / 1000.0), false),
            None => (plot_l + plot_w, true),
        };
        let x1 = x1.max(x0);
        let label_y = 8.0 + (i as f64 + 1.0) * FAULT_ROW - 4.0;
        let what = esc(&f.what);
        let label = if open {
            format!("{what} (not undone)")
        } else {
            what.clone()
        };
        // Labels of faults starting in the right part of the plot end at their start line.
        let (lx, anchor) = if x0 > plot_l + plot_w * 0.6 {
            (x0 - 4.0, "end")
        } else {
            (x0 + 4.0, "start")
        };
        let _ = writeln!(
            h,
            "<g class=\"fault\" data-what=\"{what}\"><title>{what} ({})</title>\
             <rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>\
             <line x1=\"{x0:.1}\" x2=\"{x0:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <line{} x1=\"{x1:.1}\" x2=\"{x1:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{lx:.1}\" y=\"{label_y:.1}\" text-anchor=\"{anchor}\">{label}</text></g>",
            esc(&fault_window_text(f)),
            req.top,
            x1 - x0,
            lat.bottom() - req.top,
            label_y + 4.0,
            lat.bottom(),
            if open { " class=\"open-end\"" } else { "" },
            req.top,
            lat.bottom(),
        );
    }

    if s.timeline.is_empty() {
        let _ = writeln!(
            h,
            "<text class=\"empty-note\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no load recorded</text>",
            plot_l + plot_w / 2.0,
            req.top + req.height / 2.0
        );
    } else {
        render_bars(h, s, &req, &x, x_max, plot_w);
        render_latency(h, s, &lat, &x);
    }
    h.push_str("</svg>\n");
}

fn has_requests(b: &Bucket) -> bool {
    b.ok + b.failed_before_cell + b.failed_in_cell > 0
}

/// A legend ending at `right`: items `(label, swatch class suffix, drawn as a line)`.
fn legend(h: &mut String, right: f64, y: f64, items: &[(&str, &str, bool)]) {
    // Laid out from the right: each item is a swatch and its label (about 5.8 px a character).
    let mut x = right;
    let mut parts = Vec::new();
    for (label, swatch, line) in items.iter().rev() {
        let text_w = label.chars().count() as f64 * 5.8;
        x -= text_w;
        let tx = x;
        x -= 18.0;
        let swatch = if *line {
            format!(
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" class=\"swatch-{swatch}\"/>",
                x,
                x + 14.0,
                y - 4.0,
                y - 4.0
            )
        } else {
            format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"10\" class=\"swatch-{swatch}\"/>",
                x + 1.0,
                y - 9.0
            )
        };
        parts.push(format!(
            "{swatch}<text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            tx - 2.0,
            esc(label)
        ));
        x -= 14.0;
    }
    h.push_str("<g class=\"legend\">");
    for p in parts.iter().rev() {
        h.push_str(p);
    }
    h.push_str("</g>\n");
}

fn render_bars(
    h: &mut String,
    s: &ScenarioReport,
    panel: &Panel,
    x: &impl Fn(f64) -> f64,
    x_max: f64,
    plot_w: f64,
) {
    // A bar a second, a small gap between bars when there is room.
    let second_w = plot_w / x_max;
    let bar_w = if second_w > 4.0 {
        second_w * 0.84
    } else {
        second_w
    };
    let inset = (second_w - bar_w) / 2.0;
    let mut ok = String::new();
    let mut before = String::new();
    let mut in_cell = String::new();
    for b in &s.timeline {
        let x0 = x(b.t_ms as f64 / 1000.0) + inset;
        let mut base = 0.0;
        for (out, n) in [
            (&mut ok, b.ok),
            (&mut before, b.failed_before_cell),
            (&mut in_cell, b.failed_in_cell),
        ] {
            if n == 0 {
                continue;
            }
            let top = base + n as f64;
            let y0 = panel.y(top);
            let y1 = panel.y(base);
            let _ = write!(
                out,
                "<rect x=\"{x0:.2}\" y=\"{y0:.2}\" width=\"{bar_w:.2}\" height=\"{:.2}\"><title>{} s: {n}</title></rect>",
                (y1 - y0).max(0.0),
                b.t_ms / 1000
            );
            base = top;
        }
    }
    let _ = writeln!(
        h,
        "<g class=\"series-ok\" shape-rendering=\"crispEdges\">{ok}</g>\n\
         <g class=\"series-before-cell\" shape-rendering=\"crispEdges\">{before}</g>\n\
         <g class=\"series-in-cell\" shape-rendering=\"crispEdges\">{in_cell}</g>"
    );
}

fn render_latency(h: &mut String, s: &ScenarioReport, panel: &Panel, x: &impl Fn(f64) -> f64) {
    for (class, pick) in [
        ("series-p50", (|b: &Bucket| b.p50_ms) as fn(&Bucket) -> f64),
        ("series-p99", |b: &Bucket| b.p99_ms),
    ] {
        // A line through the middle of each second with requests; broken over seconds without.
        let mut d = String::new();
        let mut prev_t: Option<u64> = None;
        for b in &s.timeline {
            let v = pick(b);
            if !has_requests(b) || !v.is_finite() {
                prev_t = None;
                continue;
            }
            let cmd = match prev_t {
                Some(p) if b.t_ms <= p + 1000 => 'L',
                _ => 'M',
            };
            let _ = write!(
                d,
                "{cmd}{:.2},{:.2} ",
                x(b.t_ms as f64 / 1000.0 + 0.5),
                panel.y(v.clamp(0.0, panel.y_max))
            );
            prev_t = Some(b.t_ms);
        }
        let _ = writeln!(h, "<path class=\"{class}\" d=\"{}\"/>", d.trim_end());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::gameday::model::{BoundCheck, Figure};

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
