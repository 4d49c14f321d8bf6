//! The stop conditions: a game day stops when REAL (non-synthetic) traffic at the edges burns
//! its bounds.
//!
//! The [`Guard`] scrapes every edge's management `/metrics` every [`POLL_INTERVAL_MS`] and,
//! over the last `window_s` seconds, sums across edges:
//!
//! - real requests: every `cellbind_edge_requests_total` series not labelled
//!   `synthetic="true"` (a series without the label is real);
//! - real errors: of those, `outcome="upstream_unavailable"`, `outcome="rate_limited"`, and
//!   `outcome="forwarded"` with `class="5xx"` (a refusal such as `SESSION_EXPIRED` is the
//!   client's problem, not an outage);
//! - real p99: from the deltas of `cellbind_edge_request_duration_seconds_bucket` (every
//!   outcome, not `synthetic="true"`), interpolated within its bucket as Prometheus'
//!   `histogram_quantile` does.
//!
//! It trips while the error ratio or the p99 is over its bound, once the window holds at
//! least `min_requests` real requests. An edge whose metrics cannot be read is left out (a
//! warning, once per URL), never a trip; a counter that went backwards (the edge restarted)
//! counts from zero.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use fleet_description::gameday::StopConditions;
use serde::Serialize;
use tokio::sync::watch;

/// How often every edge's metrics are read, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 500;
/// Bound of one read of an edge's metrics, in milliseconds.
pub const SCRAPE_TIMEOUT_MS: u64 = 2_000;
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

/// Watches the edges' real traffic; see the module documentation.
#[derive(Debug)]
pub struct Guard {
    trip: watch::Receiver<Option<String>>,
    figures: watch::Receiver<GuardFigures>,
    task: tokio::task::JoinHandle<()>,
}

impl Guard {
    /// Polls every edge's management `/metrics` (URLs from the gameday section) every
    /// [`POLL_INTERVAL_MS`] with `http` (a client trusting the fleet CA) and trips when, over
    /// the last `stop.window_s`, real traffic's error ratio or p99 passes its bound. Must be
    /// called within a Tokio runtime.
    pub fn spawn(http: reqwest::Client, urls: Vec<String>, stop: StopConditions) -> Guard {
        let (trip_tx, trip) = watch::channel(None);
        let (figures_tx, figures) = watch::channel(GuardFigures {
            window_s: stop.window_s,
            edges_total: urls.len(),
            ..GuardFigures::default()
        });
        if urls.is_empty() {
            tracing::warn!(
                "gameday guard: no edge metrics URLs; the stop conditions cannot be judged"
            );
        }
        let task = tokio::spawn(poll(http, urls, stop, trip_tx, figures_tx));
        Guard {
            trip,
            figures,
            task,
        }
    }

    /// Resolves when a bound is passed, with a one-line reason naming the figure, the bound
    /// and the edges (`real traffic error ratio 0.31 > 0.05 over 5 s at cell-03 (…)`).
    /// Resolves at once while a bound is passed (the condition is the last poll's, not a
    /// latch); never resolves otherwise. Cancel-safe.
    pub async fn tripped(&self) -> String {
        let mut rx = self.trip.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.as_ref().cloned().unwrap_or_default(),
            // The poller is gone (the runtime is shutting down): nothing will trip.
            Err(_) => std::future::pending().await,
        }
    }

    /// The latest figures (for the report): real requests, real errors, real p99 in the last
    /// window.
    pub fn latest(&self) -> GuardFigures {
        self.figures.borrow().clone()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One edge's recent scrapes, oldest first.
#[derive(Debug, Default)]
struct History {
    samples: VecDeque<(Instant, Scrape)>,
    warned: bool,
}

impl History {
    /// Adds a scrape; keeps those within `window`, and the last one before it (the base).
    fn push(&mut self, at: Instant, s: Scrape, window: Duration) {
        self.samples.push_back((at, s));
        while self.samples.len() >= 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| at.saturating_duration_since(*t) >= window)
        {
            self.samples.pop_front();
        }
    }

    /// The change over the window (less when the history is shorter); `None` without a scrape.
    fn window_delta(&self) -> Option<(&Scrape, Delta)> {
        let (_, newest) = self.samples.back()?;
        let (_, base) = self.samples.front()?;
        Some((newest, Delta::between(base, newest)))
    }
}

async fn poll(
    http: reqwest::Client,
    urls: Vec<String>,
    stop: StopConditions,
    trip: watch::Sender<Option<String>>,
    figures: watch::Sender<GuardFigures>,
) {
    let window = Duration::from_secs(stop.window_s);
    let mut hist: Vec<History> = urls.iter().map(|_| History::default()).collect();
    let mut tick = tokio::time::interval(Duration::from_millis(POLL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let scrapes = futures::future::join_all(urls.iter().map(|u| scrape(&http, u))).await;
        let at = Instant::now();
        let mut read = 0;
        for ((h, url), r) in hist.iter_mut().zip(&urls).zip(scrapes) {
            match r {
                Ok(text) => {
                    read += 1;
                    h.push(at, parse(&text), window);
                }
                Err(e) => {
                    if !h.warned {
                        h.warned = true;
                        tracing::warn!(
                            url = %url,
                            error = %e,
                            "gameday guard: cannot read an edge's metrics; it is left out of the stop conditions"
                        );
                    }
                    // A gap: its next window starts afresh.
                    h.samples.clear();
                }
            }
        }
        let windows: Vec<EdgeWindow<'_>> = hist
            .iter()
            .zip(&urls)
            .filter_map(|(h, url)| {
                let (newest, delta) = h.window_delta()?;
                Some(EdgeWindow {
                    url,
                    cells: &newest.cells,
                    delta,
                })
            })
            .collect();
        let (mut f, reason) = judge(&windows, &stop);
        f.edges_read = read;
        f.edges_total = urls.len();
        figures.send_replace(f);
        trip.send_if_modified(|r| {
            if *r == reason {
                false
            } else {
                *r = reason;
                true
            }
        });
    }
}

async fn scrape(http: &reqwest::Client, url: &str) -> Result<String, reqwest::Error> {
    http.get(url)
        .timeout(Duration::from_millis(SCRAPE_TIMEOUT_MS))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await
}

// ---- the figures ----

/// Real errors, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Errors {
    upstream_unavailable: f64,
    rate_limited: f64,
    forwarded_5xx: f64,
}

impl Errors {
    fn total(&self) -> f64 {
        self.upstream_unavailable + self.rate_limited + self.forwarded_5xx
    }
}

/// One edge's real traffic as one scrape tells it (cumulative counts).
#[derive(Debug, Clone, Default, PartialEq)]
struct Scrape {
    /// The `cell` labels seen.
    cells: BTreeSet<String>,
    requests: f64,
    errors: Errors,
    /// `(le, cumulative count)`, summed over outcomes, by increasing `le`.
    buckets: Vec<(f64, f64)>,
}

/// What changed between two scrapes of an edge.
#[derive(Debug, Clone, Default, PartialEq)]
struct Delta {
    requests: f64,
    errors: Errors,
    buckets: Vec<(f64, f64)>,
}

impl Delta {
    /// `now - base`; when a count went backwards (the edge restarted), `now` from zero.
    fn between(base: &Scrape, now: &Scrape) -> Delta {
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

    fn add(&mut self, o: &Delta) {
        self.requests += o.requests;
        self.errors.upstream_unavailable += o.errors.upstream_unavailable;
        self.errors.rate_limited += o.errors.rate_limited;
        self.errors.forwarded_5xx += o.errors.forwarded_5xx;
        for (le, c) in &o.buckets {
            add_bucket(&mut self.buckets, *le, *c);
        }
    }

    /// The p99 in milliseconds (`None`: no observation).
    fn p99_ms(&self) -> Option<f64> {
        quantile(LATENCY_QUANTILE, &self.buckets).map(|s| s * 1_000.0)
    }
}

fn add_bucket(buckets: &mut Vec<(f64, f64)>, le: f64, c: f64) {
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
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
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
struct EdgeWindow<'a> {
    url: &'a str,
    cells: &'a BTreeSet<String>,
    delta: Delta,
}

impl EdgeWindow<'_> {
    /// `cell-03 (https://…/metrics`: the edge as a reason names it (the closing `)` is the
    /// caller's).
    fn name(&self) -> String {
        let cells = if self.cells.is_empty() {
            "?".to_owned()
        } else {
            self.cells.iter().cloned().collect::<Vec<_>>().join("+")
        };
        format!("{cells} ({}", self.url)
    }
}

/// A ratio with at most three decimals (`0.31`, `0.047`).
fn ratio_text(r: f64) -> String {
    let s = format!("{r:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.into() }
}

fn ms_text(ms: f64) -> String {
    if ms >= 10.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

/// The figures over every edge's window, and the reason to stop, if any.
fn judge(edges: &[EdgeWindow<'_>], stop: &StopConditions) -> (GuardFigures, Option<String>) {
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

// ---- the text exposition ----

/// One sample line: its metric name, labels and value.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

impl Sample<'_> {
    fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
    }

    /// Not labelled `synthetic="true"` (a series without the label is real traffic).
    fn real(&self) -> bool {
        self.label("synthetic") != Some("true")
    }
}

/// Parses one line of the Prometheus / OpenMetrics text format (`None`: a comment, a blank
/// or malformed line). A timestamp or exemplar after the value is ignored.
fn parse_line(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = r.find('=')?;
            let key = r[..eq].trim();
            r = r[eq + 1..].trim_start().strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '"' => break i,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    c => value.push(c),
                }
            };
            labels.push((key, value));
            r = &r[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = parse_number(value)?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A sample value or an `le` bound (`+Inf`, `1e-3`); `None` for NaN or garbage.
fn parse_number(s: &str) -> Option<f64> {
    let v = match s {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse::<f64>().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// The real traffic of one edge's `/metrics` text.
fn parse(text: &str) -> Scrape {
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
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};

    /// The buckets of the edge's request histogram (0.5 ms × 2^k, 16 of them).
    fn bounds() -> Vec<f64> {
        (0..16).map(|k| 0.0005 * f64::from(1u32 << k)).collect()
    }

    /// An edge's exposition: `real`/`synth` are cumulative (ok, 5xx, unavailable) counts
    /// (plus 7 refusals each); `slow` of the real requests took ~2 s (the 2.048 s bucket), the
    /// rest ~1 ms; `synthetic_label` false drops the label (an edge before it existed).
    struct Edge {
        cell: &'static str,
        real: (u64, u64, u64),
        synth: (u64, u64, u64),
        slow: u64,
        synthetic_label: bool,
    }

    impl Edge {
        fn text(&self) -> String {
            let mut t = String::from(
                "# HELP cellbind_edge_requests Requests by outcome.\n# TYPE cellbind_edge_requests counter\n",
            );
            let lab = |synthetic: bool| {
                if self.synthetic_label {
                    format!(",synthetic=\"{synthetic}\"")
                } else {
                    String::new()
                }
            };
            let mut series = vec![(false, self.real)];
            if self.synthetic_label {
                series.push((true, self.synth));
            }
            for (synthetic, (ok, e5, un)) in &series {
                let l = lab(*synthetic);
                let c = self.cell;
                writeln!(t, "{REQUESTS_SERIES}{{cell=\"{c}\",outcome=\"forwarded\",upstream=\"app\",class=\"2xx\"{l}}} {ok}").unwrap();
                writeln!(t, "{REQUESTS_SERIES}{{cell=\"{c}\",outcome=\"forwarded\",upstream=\"app\",class=\"5xx\"{l}}} {e5}").unwrap();
                writeln!(t, "{REQUESTS_SERIES}{{cell=\"{c}\",outcome=\"upstream_unavailable\",upstream=\"app\"{l}}} {un}").unwrap();
                // Refusals are the client's problem: never errors.
                writeln!(t, "{REQUESTS_SERIES}{{cell=\"{c}\",outcome=\"refused\",code=\"SESSION_EXPIRED\"{l}}} 7").unwrap();
                let n = ok + e5 + un + 7;
                let slow = if *synthetic { 0 } else { self.slow };
                let mut les: Vec<String> = bounds().iter().map(|b| b.to_string()).collect();
                les.push("+Inf".into());
                for (i, le) in les.iter().enumerate() {
                    let cum = if i >= 12 {
                        n
                    } else if i >= 1 {
                        n - slow
                    } else {
                        0
                    };
                    writeln!(t, "{DURATION_BUCKET_SERIES}{{cell=\"{c}\",outcome=\"forwarded\"{l},le=\"{le}\"}} {cum}").unwrap();
                }
                writeln!(t, "cellbind_edge_request_duration_seconds_count{{cell=\"{c}\",outcome=\"forwarded\"{l}}} {n}").unwrap();
            }
            t.push_str("# EOF\n");
            t
        }
    }

    fn edge(cell: &'static str) -> Edge {
        Edge {
            cell,
            real: (0, 0, 0),
            synth: (0, 0, 0),
            slow: 0,
            synthetic_label: true,
        }
    }

    fn window<'a>(url: &'a str, a: &Scrape, b: &'a Scrape) -> EdgeWindow<'a> {
        EdgeWindow {
            url,
            cells: &b.cells,
            delta: Delta::between(a, b),
        }
    }

    #[test]
    fn the_parser_reads_labels_escapes_and_special_values() {
        let s = parse_line(r#"x_bucket{a="1",b="q\"uo\\te",le="+Inf"} 12 1700000000"#).unwrap();
        assert_eq!(s.name, "x_bucket");
        assert_eq!(s.label("b"), Some(r#"q"uo\te"#));
        assert_eq!(s.label("le").and_then(parse_number), Some(f64::INFINITY));
        assert_eq!(s.value, 12.0);
        assert_eq!(parse_line("up 1").unwrap().value, 1.0);
        assert_eq!(
            parse_line("x{} 2.5e1 # {trace_id=\"a\"} 1").unwrap().value,
            25.0
        );
        for bad in [
            "",
            "# TYPE x counter",
            "x{a=\"1\" 3",
            "x{a=1} 3",
            "x NaN",
            "{a=\"b\"} 1",
            "x",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
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

    /// A plain-HTTP server answering every request with `body`'s current text.
    async fn serve(body: Arc<Mutex<String>>) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let body = body.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = body.lock().unwrap().clone();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        text.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(text.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        format!("http://{addr}/metrics")
    }

    #[tokio::test]
    async fn the_guard_trips_within_two_seconds_of_real_errors() {
        runtime::install_crypto_provider();
        let e = Arc::new(Mutex::new(edge("cell-03")));
        let body = Arc::new(Mutex::new(e.lock().unwrap().text()));
        let url = serve(body.clone()).await;
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The edge's traffic: 40 real requests per 100 ms, and synthetic errors throughout.
        let ticker = {
            let (e, body, failing) = (e.clone(), body.clone(), failing.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let mut e = e.lock().unwrap();
                    e.real.0 += 40;
                    e.synth.2 += 100;
                    if failing.load(std::sync::atomic::Ordering::SeqCst) {
                        e.real.2 += 20;
                    }
                    *body.lock().unwrap() = e.text();
                }
            })
        };
        let http = reqwest::Client::builder().build().unwrap();
        // A second edge that cannot be read: a warning, not a trip.
        let urls = vec![url, "http://127.0.0.1:9/metrics".to_owned()];
        let guard = Guard::spawn(http, urls, StopConditions::default());
        let calm = tokio::time::timeout(Duration::from_millis(2_000), guard.tripped()).await;
        assert!(calm.is_err(), "tripped on healthy traffic: {calm:?}");
        let f = guard.latest();
        assert!(f.real_requests >= 100, "{f:?}");
        assert_eq!(f.real_errors, 0, "{f:?}");
        assert_eq!((f.edges_read, f.edges_total), (1, 2), "{f:?}");
        failing.store(true, std::sync::atomic::Ordering::SeqCst);
        let started = Instant::now();
        let reason = tokio::time::timeout(Duration::from_secs(2), guard.tripped())
            .await
            .expect("trips within 2 s");
        assert!(
            reason.starts_with("real traffic error ratio")
                && reason.contains("at cell-03 (http://127.0.0.1:"),
            "{reason}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(guard.latest().real_errors > 0);
        // Cancel-safe and level-triggered: asking again answers at once while it holds.
        let again = tokio::time::timeout(Duration::from_millis(100), guard.tripped()).await;
        assert!(again.is_ok());
        ticker.abort();
    }
}
