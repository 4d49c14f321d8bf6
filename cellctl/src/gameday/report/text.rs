//! The words and numbers of a report: the text summary `cellctl gameday run` and `cellctl
//! gameday report` print, and the formatting the page shares with it.

use std::fmt::Write as _;

use crate::gameday::model::{BoundCheck, FaultWindow, Outcome, Report};

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

pub(super) fn overall(report: &Report) -> &'static str {
    if report.passed() { "PASS" } else { "FAIL" }
}

pub(super) fn outcome_text(o: Outcome) -> &'static str {
    match o {
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
        Outcome::Aborted => "aborted",
        Outcome::Error => "error",
    }
}

pub(super) fn cells_text(cells: &[String]) -> String {
    if cells.is_empty() {
        "(none)".to_owned()
    } else {
        cells.join(", ")
    }
}

pub(super) fn bound_text(b: &BoundCheck) -> String {
    format!(
        "{} {} {} {} — {}",
        if b.met { '✔' } else { '✘' },
        b.figure,
        b.op,
        num(b.limit),
        num(b.value)
    )
}

pub(super) fn fault_window_text(f: &FaultWindow) -> String {
    match f.end_ms {
        Some(end) => format!("{} s – {} s", secs(f.start_ms), secs(end)),
        None => format!("from {} s, not undone in the scenario", secs(f.start_ms)),
    }
}

/// Milliseconds as seconds with one decimal (`12.5`).
pub(super) fn secs(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

pub(super) fn duration_text(ms: u64) -> String {
    if ms < 60_000 {
        format!("{} s", secs(ms))
    } else {
        let s = ms / 1000;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A figure's value: integral values without decimals, others with at most three.
pub(super) fn num(v: f64) -> String {
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
pub(super) fn utc_iso(unix_ms: u64) -> String {
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

/// Escapes text for HTML content and attribute values (also inside inline SVG).
pub(super) fn esc(s: &str) -> String {
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
