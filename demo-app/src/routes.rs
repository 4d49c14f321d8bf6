//! A deterministic day route per contractor (the demo's "business data").

use protocol::ContractorId;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// Fewest jobs on a day route.
pub const MIN_JOBS_PER_DAY: u64 = 4;
/// Most jobs on a day route.
pub const MAX_JOBS_PER_DAY: u64 = 8;
const SECONDS_PER_DAY: u64 = 86_400;

const STREETS: [&str; 8] = [
    "Harbour Road",
    "Mill Lane",
    "Station Street",
    "Orchard Close",
    "Quarry Hill",
    "Bridge Avenue",
    "Church Walk",
    "Kiln Yard",
];

/// One planned job (status filled in by the caller).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedJob {
    pub job_id: String,
    pub address: String,
    pub window: String,
}

/// `YYYY-MM-DD` (UTC) of a unix time.
pub fn utc_date(unix: u64) -> String {
    // Days to civil date (proleptic Gregorian), after H. Hinnant's `civil_from_days`.
    let z = (unix / SECONDS_PER_DAY) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The jobs planned for a contractor on a date; the same inputs always give the same route.
pub fn plan(contractor: &ContractorId, date: &str) -> Vec<PlannedJob> {
    let digest = Sha256::new()
        .chain_update(b"cellbind-demo-route-v1:")
        .chain_update(contractor.as_str().as_bytes())
        .chain_update(b":")
        .chain_update(date.as_bytes())
        .finalize();
    let span = MAX_JOBS_PER_DAY - MIN_JOBS_PER_DAY + 1;
    let count = MIN_JOBS_PER_DAY + u64::from(digest[0]) % span;
    (0..count)
        .map(|i| {
            let b = digest[(1 + i as usize) % digest.len()];
            let start = 8 + i; // one-hour windows from 08:00
            PlannedJob {
                job_id: format!("{date}-{}", i + 1),
                address: format!(
                    "{} {}",
                    1 + u32::from(b) % 120,
                    STREETS[usize::from(b) % STREETS.len()]
                ),
                window: format!("{start:02}:00-{:02}:00", start + 1),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_plans_are_deterministic() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_798_675_200), "2026-12-31");
        let c = ContractorId::new("c-10001").unwrap();
        let a = plan(&c, "2026-11-29");
        assert_eq!(a, plan(&c, "2026-11-29"));
        assert!((MIN_JOBS_PER_DAY..=MAX_JOBS_PER_DAY).contains(&(a.len() as u64)));
        assert_ne!(
            a,
            plan(&ContractorId::new("c-10002").unwrap(), "2026-11-29")
        );
    }
}
