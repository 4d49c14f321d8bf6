//! Test fixture: an edge's `/metrics` exposition with real and synthetic traffic.
#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;

use super::window::{DURATION_BUCKET_SERIES, REQUESTS_SERIES};

/// The buckets of the edge's request histogram (0.5 ms × 2^k, 16 of them).
pub(super) fn bounds() -> Vec<f64> {
    (0..16).map(|k| 0.0005 * f64::from(1u32 << k)).collect()
}

/// An edge's exposition: `real`/`synth` are cumulative (ok, 5xx, unavailable) counts
/// (plus 7 refusals each); `slow` of the real requests took ~2 s (the 2.048 s bucket), the
/// rest ~1 ms; `synthetic_label` false drops the label (an edge before it existed).
pub(super) struct Edge {
    pub(super) cell: &'static str,
    pub(super) real: (u64, u64, u64),
    pub(super) synth: (u64, u64, u64),
    pub(super) slow: u64,
    pub(super) synthetic_label: bool,
}

impl Edge {
    pub(super) fn text(&self) -> String {
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

pub(super) fn edge(cell: &'static str) -> Edge {
    Edge {
        cell,
        real: (0, 0, 0),
        synth: (0, 0, 0),
        slow: 0,
        synthetic_label: true,
    }
}
