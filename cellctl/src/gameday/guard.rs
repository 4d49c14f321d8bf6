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
//!
//! This file polls; `guard/window.rs` holds the arithmetic (a scrape's real traffic, the
//! window's change, the verdict) and `guard/exposition.rs` reads the metrics text format.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fleet_description::gameday::StopConditions;
use tokio::sync::watch;

mod exposition;
#[cfg(test)]
mod fixture;
mod window;

pub use window::{DURATION_BUCKET_SERIES, GuardFigures, LATENCY_QUANTILE, REQUESTS_SERIES};
use window::{Delta, EdgeWindow, Scrape, judge, parse};

/// How often every edge's metrics are read, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 500;
/// Bound of one read of an edge's metrics, in milliseconds.
pub const SCRAPE_TIMEOUT_MS: u64 = 2_000;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::sync::{Arc, Mutex};

    use fixture::edge;

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
