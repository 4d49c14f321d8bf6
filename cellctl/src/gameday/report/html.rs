//! The report's page: one self-contained HTML document (inline CSS and SVG, no script, no
//! external reference), a header with the verdict and a section per scenario.

use std::fmt::Write as _;

use super::text::{
    cells_text, duration_text, esc, fault_window_text, num, outcome_text, overall, utc_iso,
};
use super::timeline::render_timeline;
use crate::gameday::model::{Outcome, Report, ScenarioReport};

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
