//! The guard's arithmetic: what one scrape of an edge says about its real traffic
//! ([`parse`]), the change over a window ([`Delta`]), and the verdict over every edge's window
//! ([`judge`]): the figures, and the reason to stop when a bound is passed.

use std::collections::BTreeSet;

use fleet_description::gameday::StopConditions;
use serde::Serialize;

use super::exposition::{parse_line, parse_number};

/// The quantile the latency bound is judged on.
pub const LATENCY_QUANTILE: f64 = 0.99;
/// The edges' request counter.
pub const REQUESTS_SERIES: &str = "cellbind_edge_requests_total";
/// The edges' request latency histogram's buckets.
pub const DURATION_BUCKET_SERIES: &str = "cellbind_edge_request_duration_seconds_bucket";

/// The real traffic at the edges over the last window (for the report).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuardFigures {
    pub real_requests: u64,
    pub real_errors: u64,
    /// `None` when the window holds no real request.
    pub real_p99_ms: Option<f64>,
    /// The window, in seconds.
    pub window_s: u64,
    /// Edges whose metrics were read in the last poll, of `edges_total`.
    pub edges_read: usize,
    pub edges_total: usize,
}

/// Real errors, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Errors {
    pub(super) upstream_unavailable: f64,
    pub(super) rate_limited: f64,
    pub(super) forwarded_5xx: f64,
}

impl Errors {
    pub(super) fn total(&self) -> f64 {
        self.upstream_unavailable + self.rate_limited + self.forwarded_5xx
    }
}

/// One edge's real traffic as one scrape tells it (cumulative counts).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Scrape {
    /// The `cell` labels seen.
    pub(super) cells: BTreeSet<String>,
    pub(super) requests: f64,
    pub(super) errors: Errors,
    /// `(le, cumulative count)`, summed over outcomes, by increasing `le`.
    pub(super) buckets: Vec<(f64, f64)>,
}

/// What changed between two scrapes of an edge.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Delta {
    pub(super) requests: f64,
    pub(super) errors: Errors,
    pub(super) buckets: Vec<(f64, f64)>,
}

impl Delta {
    /// `now - base`; when a count went backwards (the edge restarted), `now` from zero.
    pub(super) fn between(base: &Scrape, now: &Scrape) -> Delta {
        let bucket_of = |s: &Scrape, le: f64| {
            s.buckets
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, c)| *c)
        };
        let reset = now.requests < base.requests
            || now.errors.upstream_unavailable < base.errors.upstream_unavailable
            || now.errors.rate_limited < base.errors.rate_limited
            || now.errors.forwarded_5xx < base.errors.forwarded_5xx
            || now.buckets.iter().any(|(le, c)| *c < bucket_of(base, *le));
        if reset {
            return Delta {
                requests: now.requests,
                errors: now.errors,
                buckets: now.buckets.clone(),
            };
        }
        Delta {
            requests: now.requests - base.requests,
            errors: Errors {
                upstream_unavailable: now.errors.upstream_unavailable
                    - base.errors.upstream_unavailable,
                rate_limited: now.errors.rate_limited - base.errors.rate_limited,
                forwarded_5xx: now.errors.forwarded_5xx - base.errors.forwarded_5xx,
            },
            buckets: now
                .buckets
                .iter()
                .map(|(le, c)| (*le, c - bucket_of(base, *le)))
                .collect(),
        }
    }

    pub(super) fn add(&mut self, o: &Delta) {
        self.requests += o.requests;
        self.errors.upstream_unavailable += o.errors.upstream_unavailable;
        self.errors.rate_limited += o.errors.rate_limited;
        self.errors.forwarded_5xx += o.errors.forwarded_5xx;
        for (le, c) in &o.buckets {
            add_bucket(&mut self.buckets, *le, *c);
        }
    }

    /// The p99 in milliseconds (`None`: no observation).
    pub(super) fn p99_ms(&self) -> Option<f64> {
        quantile(LATENCY_QUANTILE, &self.buckets).map(|s| s * 1_000.0)
    }
}

pub(super) fn add_bucket(buckets: &mut Vec<(f64, f64)>, le: f64, c: f64) {
    match buckets.iter_mut().find(|(l, _)| *l == le) {
        Some((_, n)) => *n += c,
        None => {
            buckets.push((le, c));
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
}

/// The `q` quantile of cumulative buckets `(le, count)` sorted by `le`, interpolated linearly
/// within its bucket (Prometheus' `histogram_quantile`); in the `+Inf` bucket: the highest
/// finite bound.
pub(super) fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.iter().map(|(_, c)| *c).fold(0.0, f64::max);
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut prev_le, mut prev_c) = (0.0, 0.0);
    for &(le, c) in buckets {
        if c >= rank {
            if le.is_infinite() {
                return Some(prev_le);
            }
            let inside = c - prev_c;
            let frac = if inside > 0.0 {
                (rank - prev_c) / inside
            } else {
                1.0
            };
            return Some(prev_le + (le - prev_le) * frac);
        }
        (prev_le, prev_c) = (le, c);
    }
    Some(prev_le)
}

/// One edge's window.
#[derive(Debug)]
pub(super) struct EdgeWindow<'a> {
    pub(super) url: &'a str,
    pub(super) cells: &'a BTreeSet<String>,
    pub(super) delta: Delta,
}

impl EdgeWindow<'_> {
    /// `cell-03 (https://…/metrics`: the edge as a reason names it (the closing `)` is the
    /// caller's).
    pub(super) fn name(&self) -> String {
        let cells = if self.cells.is_empty() {
            "?".to_owned()
        } else {
            self.cells.iter().cloned().collect::<Vec<_>>().join("+")
        };
        format!("{cells} ({}", self.url)
    }
}

/// A ratio with at most three decimals (`0.31`, `0.047`).
pub(super) fn ratio_text(r: f64) -> String {
    let s = format!("{r:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.into() }
}

pub(super) fn ms_text(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

/// The figures over every edge's window, and the reason to stop, if any.
pub(super) fn judge(
    edges: &[EdgeWindow<'_>],
    stop: &StopConditions,
) -> (GuardFigures, Option<String>) {
    let mut sum = Delta::default();
    for e in edges {
        sum.add(&e.delta);
    }
    let requests = sum.requests.max(0.0);
    let errors = sum.errors.total().max(0.0);
    let p99 = sum.p99_ms();
    // Counts are integers in the exposition; the sums of their differences are exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let figures = GuardFigures {
        real_requests: requests.round() as u64,
        real_errors: errors.round() as u64,
        real_p99_ms: p99,
        window_s: stop.window_s,
        edges_read: edges.len(),
        edges_total: edges.len(),
    };
    #[allow(clippy::cast_precision_loss)]
    let min_requests = stop.min_requests as f64;
    if requests < min_requests || requests <= 0.0 {
        return (figures, None);
    }
    let ratio = errors / requests;
    if ratio > stop.max_error_ratio {
        let mut worst: Vec<&EdgeWindow<'_>> = edges
            .iter()
            .filter(|e| e.delta.errors.total() > 0.0)
            .collect();
        worst.sort_by(|a, b| b.delta.errors.total().total_cmp(&a.delta.errors.total()));
        let at: Vec<String> = worst
            .iter()
            .map(|e| {
                let x = &e.delta.errors;
                format!(
                    "{}: {:.0} errors of {:.0} requests: {:.0} upstream unavailable, {:.0} rate limited, {:.0} 5xx)",
                    e.name(),
                    x.total(),
                    e.delta.requests,
                    x.upstream_unavailable,
                    x.rate_limited,
                    x.forwarded_5xx
                )
            })
            .collect();
        let reason = format!(
            "real traffic error ratio {} > {} over {} s at {}",
            ratio_text(ratio),
            stop.max_error_ratio,
            stop.window_s,
            at.join(", ")
        );
        return (figures, Some(reason));
    }
    #[allow(clippy::cast_precision_loss)]
    let max_p99 = stop.max_p99_ms as f64;
    if let Some(p) = p99
        && p > max_p99
    {
        let mut slow: Vec<(f64, &EdgeWindow<'_>)> = edges
            .iter()
            .filter_map(|e| e.delta.p99_ms().map(|p| (p, e)))
            .collect();
        slow.sort_by(|a, b| b.0.total_cmp(&a.0));
        // The edges over the bound (or, when only their sum is, the slowest).
        let over: Vec<&(f64, &EdgeWindow<'_>)> =
            slow.iter().filter(|(p, _)| *p > max_p99).collect();
        let named: Vec<&(f64, &EdgeWindow<'_>)> = if over.is_empty() {
            slow.iter().take(1).collect()
        } else {
            over
        };
        let at: Vec<String> = named
            .iter()
            .map(|(p, e)| {
                format!(
                    "{}: p99 {} ms of {:.0} requests)",
                    e.name(),
                    ms_text(*p),
                    e.delta.requests
                )
            })
            .collect();
        let reason = format!(
            "real traffic p99 {} ms > {} ms over {} s at {}",
            ms_text(p),
            stop.max_p99_ms,
            stop.window_s,
            at.join(", ")
        );
        return (figures, Some(reason));
    }
    (figures, None)
}

/// The real traffic of one edge's `/metrics` text.
pub(super) fn parse(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for sample in text.lines().filter_map(parse_line) {
        if !sample.real() || sample.value < 0.0 {
            continue;
        }
        if sample.name == REQUESTS_SERIES {
            if let Some(c) = sample.label("cell") {
                s.cells.insert(c.to_owned());
            }
            s.requests += sample.value;
            match (sample.label("outcome"), sample.label("class")) {
                (Some("upstream_unavailable"), _) => s.errors.upstream_unavailable += sample.value,
                (Some("rate_limited"), _) => s.errors.rate_limited += sample.value,
                (Some("forwarded"), Some("5xx")) => s.errors.forwarded_5xx += sample.value,
                _ => {}
            }
        } else if sample.name == DURATION_BUCKET_SERIES
            && let Some(le) = sample.label("le").and_then(parse_number)
        {
            add_bucket(&mut s.buckets, le, sample.value);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::gameday::guard::fixture::edge;

    fn window<'a>(url: &'a str, a: &Scrape, b: &'a Scrape) -> EdgeWindow<'a> {
        EdgeWindow {
            url,
            cells: &b.cells,
            delta: Delta::between(a, b),
        }
    }

    #[test]
    fn the_ratio_and_the_p99_come_from_the_real_traffic_of_the_window() {
        let stop = StopConditions::default();
        let mut e = edge("cell-03");
        e.real = (1_000, 10, 5);
        e.synth = (50, 500, 500);
        let a = parse(&e.text());
        // Over the window: 100 ok, 20 forwarded 5xx, 11 unavailable, 7·0 refused (unchanged),
        // and a flood of synthetic errors that must not count.
        e.real = (1_100, 30, 16);
        e.synth = (60, 5_000, 5_000);
        e.slow = 131; // every request of the window: 0.5 ms · 2^12 = 2.048 s
        let b = parse(&e.text());
        let w = [window("https://edge/metrics", &a, &b)];
        let (f, reason) = judge(&w, &stop);
        assert_eq!(f.real_requests, 131);
        assert_eq!(f.real_errors, 31);
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("real traffic error ratio 0.237 > 0.05 over 5 s at cell-03 (https://edge/metrics: 31 errors of 131 requests: 11 upstream unavailable, 0 rate limited, 20 5xx)"),
            "{reason}"
        );
        // Every real request of the window fell in the 2.048 s bucket: the p99 is
        // interpolated inside it (1.024 s .. 2.048 s).
        let p99 = f.real_p99_ms.unwrap();
        assert!(p99 > 1_024.0 && p99 <= 2_048.0, "{p99}");
        // The same window with no errors trips on latency instead.
        let mut quiet = b.clone();
        quiet.errors = a.errors;
        let w = [window("https://edge/metrics", &a, &quiet)];
        let (_, reason) = judge(&w, &stop);
        let reason = reason.unwrap();
        assert!(reason.starts_with("real traffic p99 2"), "{reason}");
        assert!(
            reason.contains("> 2000 ms over 5 s at cell-03 (https://edge/metrics: p99"),
            "{reason}"
        );
        // Within bounds: nothing.
        let loose = StopConditions {
            max_p99_ms: 5_000,
            ..StopConditions::default()
        };
        assert_eq!(judge(&w, &loose).1, None);
    }

    #[test]
    fn a_series_without_the_synthetic_label_is_real() {
        let mut e = edge("cell-01");
        e.synthetic_label = false;
        let a = parse(&e.text());
        e.real = (10, 0, 20);
        let b = parse(&e.text());
        assert_eq!(b.errors.upstream_unavailable, 20.0);
        let (f, reason) = judge(&[window("u", &a, &b)], &StopConditions::default());
        assert_eq!((f.real_requests, f.real_errors), (30, 20));
        assert!(reason.unwrap().contains("error ratio 0.667"));
    }

    #[test]
    fn below_min_requests_nothing_is_judged() {
        let mut e = edge("cell-01");
        let a = parse(&e.text());
        e.real = (0, 19, 0);
        e.slow = 19;
        let b = parse(&e.text());
        let (f, reason) = judge(&[window("u", &a, &b)], &StopConditions::default());
        assert_eq!((f.real_requests, f.real_errors), (19, 19));
        assert_eq!(reason, None);
        // One more, and it trips.
        e.real = (0, 20, 0);
        e.slow = 20;
        let c = parse(&e.text());
        assert!(
            judge(&[window("u", &a, &c)], &StopConditions::default())
                .1
                .is_some()
        );
    }

    #[test]
    fn a_restarted_edge_counts_from_zero_and_edges_add_up() {
        let mut e = edge("cell-01");
        e.real = (1_000, 0, 0);
        let a = parse(&e.text());
        e.real = (40, 0, 10);
        let b = parse(&e.text());
        let d = Delta::between(&a, &b);
        assert_eq!(d.requests, 57.0); // 40 + 10 + 7 refused
        let mut other = edge("cell-02");
        let c = parse(&other.text());
        other.real = (50, 0, 0);
        let d2 = parse(&other.text());
        let w = [window("a", &a, &b), window("b", &c, &d2)];
        let (f, reason) = judge(&w, &StopConditions::default());
        assert_eq!((f.real_requests, f.real_errors), (107, 10));
        let reason = reason.unwrap();
        assert!(reason.contains("at cell-01 (a: 10 errors"), "{reason}");
        assert!(!reason.contains("cell-02"), "{reason}");
    }

    #[test]
    fn the_quantile_interpolates_within_its_bucket() {
        let b = [(0.1, 50.0), (0.2, 100.0), (f64::INFINITY, 100.0)];
        assert_eq!(quantile(0.5, &b), Some(0.1));
        assert!((quantile(0.99, &b).unwrap() - 0.198).abs() < 1e-9);
        assert_eq!(
            quantile(0.99, &[(0.1, 0.0), (f64::INFINITY, 10.0)]),
            Some(0.1)
        );
        assert_eq!(quantile(0.99, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
    }
}
