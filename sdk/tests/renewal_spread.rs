//! A shift-start burst of sign-ins must not come back as a burst of renewals 23 days later
//! (`cellbind_sdk::session::RENEWAL_SPREAD_S`): 19,000 sessions minted within 30 minutes renew
//! spread out, the busiest minute at most twice the average one.
//!
//! `cargo test -p cellbind-sdk --test renewal_spread -- --nocapture` prints the histograms.

use cellbind_sdk::session::{RENEWAL_SPREAD_S, RENEWAL_WINDOW_S, renew_point};
use protocol::SessionId;

const SESSIONS: usize = 19_000;
const BURST_S: u64 = 30 * 60;
const LIFETIME_S: u64 = 30 * 24 * 3600;
/// 2026-03-02 06:30:00 UTC, a Monday's shift start.
const SHIFT_START: u64 = 1_772_433_000;

/// SplitMix64: a seeded generator whose output is fixed forever, so the test is reproducible.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The burst: `(session id, expires_at)` for sessions minted uniformly within 30 minutes, with
/// ids as the auth-service makes them (128 random bits, 22 base64url characters).
fn burst(seed: u64) -> Vec<(SessionId, u64)> {
    let mut rng = SplitMix64(seed);
    (0..SESSIONS)
        .map(|_| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&rng.next().to_le_bytes());
            id[8..].copy_from_slice(&rng.next().to_le_bytes());
            let minted = SHIFT_START + rng.next() % BURST_S;
            (SessionId::from_random(id), minted + LIFETIME_S)
        })
        .collect()
}

/// Renewals per minute over `[from, to]` (whole minutes from `from`).
struct Histogram {
    per_minute: Vec<usize>,
}

impl Histogram {
    fn of(points: &[u64], from: u64, to: u64) -> Histogram {
        let mut per_minute = vec![0; ((to - from) / 60 + 1) as usize];
        for &p in points {
            assert!((from..=to).contains(&p));
            per_minute[((p - from) / 60) as usize] += 1;
        }
        Histogram { per_minute }
    }

    fn peak(&self) -> usize {
        self.per_minute.iter().copied().max().unwrap_or(0)
    }

    fn average(&self) -> f64 {
        self.per_minute.iter().sum::<usize>() as f64 / self.per_minute.len() as f64
    }

    fn ratio(&self) -> f64 {
        self.peak() as f64 / self.average()
    }

    /// The figures, and with `chart` 30 coarse buckets (each bar its busiest minute).
    fn print(&self, title: &str, chart: bool) {
        let mut sorted = self.per_minute.clone();
        sorted.sort_unstable();
        println!(
            "{title}: {} renewals over {} minutes; per minute min {} / median {} / peak {}, \
             average {:.1}, peak/average {:.2}",
            self.per_minute.iter().sum::<usize>(),
            self.per_minute.len(),
            sorted[0],
            sorted[sorted.len() / 2],
            self.peak(),
            self.average(),
            self.ratio(),
        );
        if !chart {
            return;
        }
        let width = self.per_minute.len().div_ceil(30);
        let peak = self.peak().max(1);
        for (i, chunk) in self.per_minute.chunks(width).enumerate() {
            let busiest = chunk.iter().copied().max().unwrap_or(0);
            let bar = "#".repeat((busiest * 50).div_ceil(peak));
            println!("  +{:>5} min  peak {busiest:>5}/min  {bar}", i * width);
        }
    }
}

fn span(points: &[u64]) -> (u64, u64) {
    let first = points.iter().copied().min().unwrap_or(0);
    let last = points.iter().copied().max().unwrap_or(0);
    (first, last)
}

#[test]
fn a_sign_in_burst_renews_spread_out() {
    let sessions = burst(0x5eed_2026);
    let spread: Vec<u64> = sessions
        .iter()
        .map(|(id, expires_at)| renew_point(id.as_str(), *expires_at))
        .collect();
    // every renew point is in its session's window, within the spread
    for ((_, expires_at), p) in sessions.iter().zip(&spread) {
        let window_start = expires_at - RENEWAL_WINDOW_S;
        assert!((window_start..window_start + RENEWAL_SPREAD_S).contains(p));
    }
    let (first, last) = span(&spread);
    let with = Histogram::of(&spread, first, last);
    with.print("with the spread (12 h)", true);
    assert!(
        with.peak() as f64 <= 2.0 * with.average(),
        "peak {} > 2 x average {:.1}",
        with.peak(),
        with.average()
    );

    // Without the spread (offset 0) every session renews at its window's start. Over its own
    // span (the 30 minutes of the burst) that histogram is flat, so the ratio cannot see the
    // burst; over the span the spread renewals fall in (the same 19,000 renewals in the same
    // stretch of time) it fails the same bound many times over.
    let unspread: Vec<u64> = sessions
        .iter()
        .map(|(_, expires_at)| expires_at - RENEWAL_WINDOW_S)
        .collect();
    let (u_first, u_last) = span(&unspread);
    let own = Histogram::of(&unspread, u_first, u_last);
    own.print("without the spread, over its own 30 minutes", false);
    let without = Histogram::of(&unspread, u_first.min(first), u_last.max(last));
    without.print("without the spread, over the spread's span", true);
    assert!(
        without.peak() as f64 > 2.0 * without.average(),
        "without the spread the peak {} should exceed 2 x average {:.1}",
        without.peak(),
        without.average()
    );
    assert!(
        own.peak() > 10 * with.peak(),
        "the spread cuts the busiest minute by more than 10x"
    );
}

#[test]
fn a_renew_point_is_fixed_by_the_id() {
    // the same id gives the same point in every process and release (no stored state, no
    // per-process hash seed): SHA-256("BwcHBwcHBwcHBwcHBwcHBw")[..8] mod 43,200 = 33,099
    let id = SessionId::from_random([7; 16]);
    assert_eq!(id.as_str(), "BwcHBwcHBwcHBwcHBwcHBw");
    let expires_at = SHIFT_START + LIFETIME_S;
    assert_eq!(
        renew_point(id.as_str(), expires_at),
        expires_at - RENEWAL_WINDOW_S + 33_099
    );
}
