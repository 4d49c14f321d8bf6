//! A scenario's timeline plot, as inline SVG: requests per second stacked by outcome (ok,
//! failed before a cell, failed inside a cell), latency p50/p99, and the fault windows.

use std::fmt::Write as _;

use super::text::{esc, fault_window_text, num};
use crate::gameday::model::{Bucket, ScenarioReport};

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

pub(super) fn render_timeline(h: &mut String, s: &ScenarioReport) {
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
