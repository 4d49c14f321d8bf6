//! The synthetic load a scenario drives, and what it records.
//!
//! Synthetic technicians sign in at their owning cell's public endpoint (marked
//! `x-cellbind-synthetic: 1`, so the edges label even a failed sign-in as synthetic), then
//! load today's route and complete jobs, each completion with its own idempotency key and
//! retried with that key until the cell accepts it (as the SDK's outbox does). A `409
//! WRONG_CELL` is followed as the SDK follows it (transfer at the old cell, rebind at the
//! owner) and counted as a hop; a `409 HANDOFF_IN_PROGRESS` write is a designed refusal (the
//! contractor is read-only while it moves) and is retried.
//!
//! Every request's outcome lands in a [`Recorder`]: per second ([`Bucket`]: ok / failed before
//! reaching a cell / failed inside a cell, latency p50/p99) and per cell.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use protocol::api::{RebindRequest, SignInResponse, TransferResponse};
use protocol::{CellId, ContractorId, SessionToken};
use serde_json::Value;
use tokio::task::JoinSet;

use super::model::Bucket;
use super::synthetic::Technician;

/// Header marking a synthetic client's requests (only a metrics label at the edges).
const SYNTHETIC: (&str, &str) = (protocol::SYNTHETIC_HEADER, "1");
/// Pause of a worker after a request that failed before reaching a cell, in milliseconds
/// (a client backs off; the load must not become a busy loop against a dead endpoint).
pub const FAILURE_PAUSE_MS: u64 = 50;
/// One job completion per this many route loads.
pub const WRITE_EVERY: u64 = 4;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Answered as the request meant.
    Ok,
    /// No HTTP answer from the cell's endpoint.
    BeforeCell,
    /// The cell answered with an error.
    InCell,
}

#[derive(Debug, Default, Clone)]
struct Acc {
    ok: u64,
    before: u64,
    in_cell: u64,
    lat_ms: Vec<f32>,
}

/// Totals of a set of requests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub ok: u64,
    pub before_cell: u64,
    pub in_cell: u64,
}

impl Tally {
    pub fn total(&self) -> u64 {
        self.ok + self.before_cell + self.in_cell
    }
    pub fn failed(&self) -> u64 {
        self.before_cell + self.in_cell
    }
}

/// What the load recorded.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    seconds: Mutex<Vec<Acc>>,
    cells: Mutex<BTreeMap<CellId, Tally>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves counters that are still counters.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `p` (0..1) of `sorted` (0 when empty).
pub fn percentile(sorted: &[f32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)])
}

impl Recorder {
    /// A recorder whose second 0 starts at `start`.
    pub fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            seconds: Mutex::new(Vec::new()),
            cells: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records one request to `cell` that ended now after `latency`.
    pub fn record(&self, cell: &CellId, class: Class, latency: Duration) {
        let second = self.start.elapsed().as_secs() as usize;
        {
            let mut s = lock(&self.seconds);
            if s.len() <= second {
                s.resize(second + 1, Acc::default());
            }
            let acc = &mut s[second];
            match class {
                Class::Ok => acc.ok += 1,
                Class::BeforeCell => acc.before += 1,
                Class::InCell => acc.in_cell += 1,
            }
            acc.lat_ms.push(latency.as_secs_f32() * 1000.0);
        }
        let mut c = lock(&self.cells);
        let t = c.entry(cell.clone()).or_default();
        match class {
            Class::Ok => t.ok += 1,
            Class::BeforeCell => t.before_cell += 1,
            Class::InCell => t.in_cell += 1,
        }
    }

    /// The timeline, one bucket per second.
    pub fn timeline(&self) -> Vec<Bucket> {
        lock(&self.seconds)
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let mut lat = a.lat_ms.clone();
                lat.sort_by(f32::total_cmp);
                Bucket {
                    t_ms: i as u64 * 1000,
                    ok: a.ok,
                    failed_before_cell: a.before,
                    failed_in_cell: a.in_cell,
                    p50_ms: percentile(&lat, 0.50),
                    p99_ms: percentile(&lat, 0.99),
                }
            })
            .collect()
    }

    /// Totals over every cell.
    pub fn total(&self) -> Tally {
        lock(&self.cells)
            .values()
            .fold(Tally::default(), |a, t| Tally {
                ok: a.ok + t.ok,
                before_cell: a.before_cell + t.before_cell,
                in_cell: a.in_cell + t.in_cell,
            })
    }

    /// Totals of one cell.
    pub fn cell(&self, cell: &CellId) -> Tally {
        lock(&self.cells).get(cell).copied().unwrap_or_default()
    }

    /// Every latency so far, sorted, in ms.
    pub fn latencies(&self) -> Vec<f32> {
        let mut v: Vec<f32> = lock(&self.seconds)
            .iter()
            .flat_map(|a| a.lat_ms.iter().copied())
            .collect();
        v.sort_by(f32::total_cmp);
        v
    }
}

/// A synthetic technician's session.
#[derive(Debug, Clone)]
pub struct Session {
    pub tech: Technician,
    pub cell: CellId,
    pub endpoint: String,
    pub token: SessionToken,
    pub session_id: String,
}

/// What one HTTP exchange gave: the status and JSON body, or no answer.
#[derive(Debug)]
pub enum Answer {
    Status(u16, Value),
    NoAnswer(String),
}

impl Answer {
    /// `503 UPSTREAM_UNAVAILABLE`, `no answer`.
    pub fn describe(&self) -> String {
        match self {
            Answer::Status(status, v) => {
                format!("{status} {}", v["error"].as_str().unwrap_or("(no code)"))
            }
            Answer::NoAnswer(_) => "no answer".to_owned(),
        }
    }

    fn code(&self) -> Option<&str> {
        match self {
            Answer::Status(_, v) => v["error"].as_str(),
            Answer::NoAnswer(_) => None,
        }
    }
}

async fn exchange(req: reqwest::RequestBuilder) -> Answer {
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.json().await.unwrap_or(Value::Null);
            Answer::Status(status, body)
        }
        Err(e) => Answer::NoAnswer(e.to_string()),
    }
}

/// Signs `tech` in at `endpoint` (the cell the caller believes owns it).
pub async fn sign_in(
    http: &reqwest::Client,
    endpoint: &str,
    tech: &Technician,
    password: &protocol::Password,
) -> (Answer, Option<Session>) {
    let body = serde_json::json!({
        "contractor_id": tech.contractor.id(),
        "login": tech.login,
        "password": password.expose(),
        "client": "field",
    });
    let a = exchange(
        http.post(format!("{endpoint}/v1/sessions"))
            .header(SYNTHETIC.0, SYNTHETIC.1)
            .json(&body),
    )
    .await;
    let session = match &a {
        Answer::Status(201, v) => serde_json::from_value::<SignInResponse>(v.clone())
            .ok()
            .map(|r| Session {
                tech: tech.clone(),
                cell: r.issued.cell_id.clone(),
                endpoint: r.issued.endpoint.clone(),
                token: r.session,
                session_id: r.issued.session_id.to_string(),
            }),
        _ => None,
    };
    (a, session)
}

/// `GET /api/routes/today`.
pub async fn route_load(http: &reqwest::Client, s: &Session) -> Answer {
    exchange(
        http.get(format!("{}/api/routes/today", s.endpoint))
            .bearer_auth(s.token.expose()),
    )
    .await
}

/// `POST /api/jobs/{job}/complete` with an idempotency key.
pub async fn complete(http: &reqwest::Client, s: &Session, job: &str, key: &str) -> Answer {
    exchange(
        http.post(format!("{}/api/jobs/{job}/complete", s.endpoint))
            .bearer_auth(s.token.expose())
            .header("idempotency-key", key),
    )
    .await
}

/// Where following a `WRONG_CELL` got.
#[derive(Debug)]
pub enum Followed {
    /// A session at the owner.
    To(Session),
    /// Not now (the old cell or the owner busy or mid-step): the client tries again.
    NotYet,
    /// The session was refused (`401`): its technician would have to sign in again.
    Lost,
}

/// Follows a `WRONG_CELL`: a transfer ticket from the old cell, rebound at the owner.
pub async fn follow(http: &reqwest::Client, s: &Session) -> Followed {
    let a = exchange(
        http.post(format!("{}/v1/sessions/transfer", s.endpoint))
            .bearer_auth(s.token.expose()),
    )
    .await;
    let t: TransferResponse = match a {
        Answer::Status(200, v) => match serde_json::from_value(v) {
            Ok(t) => t,
            Err(_) => return Followed::NotYet,
        },
        Answer::Status(401, _) => return Followed::Lost,
        _ => return Followed::NotYet,
    };
    let a = exchange(
        http.post(format!("{}/v1/sessions/rebind", t.target_endpoint))
            .header(SYNTHETIC.0, SYNTHETIC.1)
            .json(&RebindRequest {
                ticket: t.ticket.expose().to_owned(),
            }),
    )
    .await;
    match a {
        Answer::Status(201, v) => match serde_json::from_value::<SignInResponse>(v) {
            Ok(r) => Followed::To(Session {
                tech: s.tech.clone(),
                cell: r.issued.cell_id.clone(),
                endpoint: r.issued.endpoint.clone(),
                token: r.session,
                session_id: r.issued.session_id.to_string(),
            }),
            Err(_) => Followed::NotYet,
        },
        Answer::Status(401, _) => Followed::Lost,
        _ => Followed::NotYet,
    }
}

/// Counters of a running load beyond the recorder's.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// `WRONG_CELL` answers followed to the owner.
    pub hops: AtomicU64,
    /// Sessions that could not follow (their technician would sign in again).
    pub sign_in_again: AtomicU64,
    /// Writes refused while their contractor was read-only (retried).
    pub read_only_refusals: AtomicU64,
    /// Completions acknowledged, by contractor: their idempotency keys.
    pub acked: Mutex<BTreeMap<ContractorId, Vec<String>>>,
    /// Route loads sent, and served (`200`).
    pub route_loads: AtomicU64,
    pub route_loads_ok: AtomicU64,
    /// Failed requests by kind and what they got (`write 503 CELL_STATE_STALE`, `route no
    /// answer`).
    pub failures: Mutex<BTreeMap<String, u64>>,
}

impl LoadStats {
    /// Acknowledged writes, in all.
    pub fn acked_total(&self) -> usize {
        lock(&self.acked).values().map(Vec::len).sum()
    }
    /// Failed requests by kind and what they got.
    pub fn failures(&self) -> BTreeMap<String, u64> {
        lock(&self.failures).clone()
    }
    /// Counts one failed request (`route 503 CELL_STATE_STALE`).
    pub fn failed(&self, what: &str) {
        *lock(&self.failures).entry(what.to_owned()).or_default() += 1;
    }
    /// Failed requests whose description starts with `prefix` (`route`, `write 503`).
    pub fn failed_where(&self, prefix: &str) -> u64 {
        lock(&self.failures)
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
    /// The acknowledged keys of each contractor.
    pub fn acked(&self) -> BTreeMap<ContractorId, Vec<String>> {
        lock(&self.acked).clone()
    }
}

/// A running load.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: JoinSet<()>,
    pub stats: Arc<LoadStats>,
}

impl Load {
    /// Starts `workers` workers over `sessions` (worker `w` drives sessions `w`, `w+workers`,
    /// …, in turn), counting into `stats`, together at most `rate_per_s` requests a second; `run` names the
    /// idempotency keys so runs never collide.
    ///
    /// The rate is what makes the load a fleet's traffic rather than a flood: every synthetic
    /// client of one game day comes from one address, and an edge limits each address
    /// (`rate_per_ip_per_s`) before it knows the session, so an unpaced load would be refused
    /// as real traffic and trip the game day's own stop condition.
    pub fn start(
        http: reqwest::Client,
        sessions: Vec<Session>,
        rec: Arc<Recorder>,
        stats: Arc<LoadStats>,
        workers: usize,
        rate_per_s: u32,
        run: &str,
    ) -> Load {
        let per_s = std::num::NonZeroU32::new(rate_per_s).unwrap_or(std::num::NonZeroU32::MIN);
        let pace = Arc::new(RateLimiter::direct(
            Quota::per_second(per_s).allow_burst(std::num::NonZeroU32::MIN),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        let workers = workers.max(1).min(sessions.len().max(1));
        for w in 0..workers {
            let mine: Vec<Session> = sessions.iter().skip(w).step_by(workers).cloned().collect();
            if mine.is_empty() {
                continue;
            }
            let worker = Worker {
                http: http.clone(),
                rec: rec.clone(),
                stats: stats.clone(),
                stop: stop.clone(),
                pace: pace.clone(),
                prefix: format!("gd-{run}-{w}"),
            };
            tasks.spawn(worker.run(mine));
        }
        Load { stop, tasks, stats }
    }

    /// Stops the workers (each finishes the request it is in) and waits for them.
    pub async fn stop(mut self) -> Arc<LoadStats> {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        self.stats.clone()
    }
}

struct Worker {
    http: reqwest::Client,
    rec: Arc<Recorder>,
    stats: Arc<LoadStats>,
    stop: Arc<AtomicBool>,
    pace: Arc<DefaultDirectRateLimiter>,
    prefix: String,
}

impl Worker {
    async fn run(self, mut sessions: Vec<Session>) {
        let mut k: u64 = 0;
        // A write refused (read-only) or unanswered is sent again with its key.
        let mut pending: Vec<Option<(String, String)>> = vec![None; sessions.len()];
        while !self.stop.load(Ordering::Relaxed) {
            self.pace.until_ready().await;
            let i = (k as usize) % sessions.len();
            k += 1;
            // A write refused for now (read-only, stale) is sent again, with its key, at the
            // next write turn of its session; route loads go on in between.
            let write = k.is_multiple_of(WRITE_EVERY);
            let s = &sessions[i];
            let started = Instant::now();
            let (a, job_key) = if write {
                let (job, key) = pending[i].clone().unwrap_or_else(|| {
                    (
                        format!("{}-{k}", self.prefix),
                        format!("{}-{k}", self.prefix),
                    )
                });
                (complete(&self.http, s, &job, &key).await, Some((job, key)))
            } else {
                (route_load(&self.http, s).await, None)
            };
            let latency = started.elapsed();
            let class = match (&a, a.code()) {
                (Answer::NoAnswer(_), _) => Class::BeforeCell,
                (Answer::Status(200 | 201, _), _) => Class::Ok,
                (Answer::Status(409, _), Some("WRONG_CELL")) => {
                    match follow(&self.http, s).await {
                        Followed::To(next) => {
                            self.stats.hops.fetch_add(1, Ordering::Relaxed);
                            sessions[i] = next;
                        }
                        Followed::NotYet => {
                            tokio::time::sleep(Duration::from_millis(FAILURE_PAUSE_MS)).await;
                        }
                        Followed::Lost => {
                            self.stats.sign_in_again.fetch_add(1, Ordering::Relaxed);
                            sessions.swap_remove(i);
                            pending.swap_remove(i);
                            if sessions.is_empty() {
                                return;
                            }
                        }
                    }
                    // The hop is the designed answer of a stale client, not a failure; the
                    // request is sent again on the next turn.
                    continue;
                }
                (Answer::Status(409, _), Some("HANDOFF_IN_PROGRESS")) => {
                    self.stats
                        .read_only_refusals
                        .fetch_add(1, Ordering::Relaxed);
                    Class::Ok
                }
                (Answer::Status(..), _) => Class::InCell,
            };
            let cell = sessions[i].cell.clone();
            self.rec.record(&cell, class, latency);
            if !write {
                self.stats.route_loads.fetch_add(1, Ordering::Relaxed);
                if class == Class::Ok {
                    self.stats.route_loads_ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            if class != Class::Ok {
                let kind = if write { "write" } else { "route" };
                self.stats.failed(&format!("{kind} {}", a.describe()));
            }
            if let Some((job, key)) = job_key {
                if matches!(a, Answer::Status(200 | 201, _)) {
                    pending[i] = None;
                    lock(&self.stats.acked)
                        .entry(sessions[i].tech.contractor.id().clone())
                        .or_default()
                        .push(key);
                } else {
                    pending[i] = Some((job, key));
                }
            }
            if class == Class::BeforeCell {
                tokio::time::sleep(Duration::from_millis(FAILURE_PAUSE_MS)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_recorder_buckets_by_second_and_by_cell() {
        let start = Instant::now() - Duration::from_millis(2_500);
        let rec = Recorder::new(start);
        let (a, b) = (
            CellId::new("cell-01").unwrap(),
            CellId::new("cell-02").unwrap(),
        );
        rec.record(&a, Class::Ok, Duration::from_millis(10));
        rec.record(&a, Class::BeforeCell, Duration::from_millis(30));
        rec.record(&b, Class::InCell, Duration::from_millis(20));
        let t = rec.timeline();
        // Everything ended in second 2; seconds 0 and 1 exist, empty.
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].ok, t[1].ok), (0, 0));
        assert_eq!(
            (
                t[2].t_ms,
                t[2].ok,
                t[2].failed_before_cell,
                t[2].failed_in_cell
            ),
            (2_000, 1, 1, 1)
        );
        assert!((t[2].p50_ms - 20.0).abs() < 0.01, "{}", t[2].p50_ms);
        assert!((t[2].p99_ms - 30.0).abs() < 0.01, "{}", t[2].p99_ms);
        assert_eq!(
            rec.cell(&a),
            Tally {
                ok: 1,
                before_cell: 1,
                in_cell: 0
            }
        );
        assert_eq!(rec.total().failed(), 2);
        assert_eq!(percentile(&[], 0.99), 0.0);
    }
}
