//! Sign-in throttles (governor), built so that a third party cannot turn them into a lockout
//! of the account's owner (ATTACKS A31, A36, OWASP ASVS V6):
//!
//! ```text
//!   attempt ──▶ client bucket ──┬─ valid device token ──▶ (account, device) bucket ────────────▶ password
//!               every attempt   │                          10 burst, 10/h by default
//!                               └─ otherwise ──▶ (account, client) bucket ──▶ account ceiling ──▶ password
//!                                                10 burst, 10/min by default  50 burst, 50/h
//! ```
//!
//! - A client is its address as `protocol::http::client_key` counts it: an IPv4 address, or
//!   an IPv6 client by its /64 (one subscriber's prefix), so rotating through the addresses
//!   of a /64 does not make a new client (ATTACKS A36).
//! - The per-client bucket bounds what one client can try across all accounts.
//! - The per-(account, client) bucket is the one an attacker at one address exhausts: the owner
//!   at another address has a bucket of their own and still signs in.
//! - The per-account ceiling bounds guesses on one account from all clients together (ASVS:
//!   at most 100 attempts on one account in any hour, burst + hourly rate). It is only reached
//!   by attempts the first two buckets let through, so one address hammering an account does
//!   not drain it. A few addresses together do drain it, which would lock the owner out too —
//!   except on a device that signed in before:
//! - A device token (`devices`), given by an earlier sign-in of this account at this cell,
//!   puts the attempt in a bucket of that device's own instead of the (account, client) bucket
//!   and the ceiling, so nobody else's failures can reach it. Every token descended from one
//!   password sign-in shares one bucket (it is keyed by that sign-in's time), so a new device
//!   bucket costs a correct password; the bucket is slow (an hourly rate), so a stolen token
//!   buys a thief few guesses. A token that does not verify counts as none.
//! - Accounts are named in bucket keys by a keyed hash of (contractor, login), never by the
//!   login itself (a login field may hold a password typed into the wrong box, and with
//!   PostgreSQL the keys are stored). The key is derived from the cell's KEK, so every replica
//!   names an account alike.
//!
//! The client IP is the socket peer, or the edge's `X-Cellbind-Client-Ip` from an
//! authenticated edge only (`routes::extract::client_ip`).
//!
//! With several replicas (PostgreSQL) the buckets are shared: each attempt takes its tokens
//! from one table in the database (the same GCRA as governor's, one statement per bucket), so
//! a brute force spread over the replicas is throttled exactly like one on a single replica.
//! With one replica they are governor's in memory.

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use protocol::api::DeviceToken;
use protocol::http::client_key;
use protocol::time::UnixSeconds;
use protocol::{ContractorId, Login};
use ring::hmac;

use crate::config::Config;
use crate::coordination::Coordination;
use crate::devices::{Device, DeviceTokens};
use crate::error::{Error, Result};
use crate::keys::kek::Kek;
use crate::store::postgres::PgCoordination;

/// Attempts a known device may make at once (its bucket's burst).
pub(crate) const DEVICE_BURST: u32 = 10;
/// Attempts a known device gets back per hour.
pub(crate) const DEVICE_PER_HOUR: u32 = 10;
/// Label of the account-naming key derived from the KEK.
const ACCOUNT_KEY_LABEL: &[u8] = b"throttle-account";
/// Bytes of an account's name in bucket keys (a truncated HMAC-SHA256).
const ACCOUNT_KEY_BYTES: usize = 16;

/// An account as the buckets name it: a keyed hash of (contractor, login).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AccountKey([u8; ACCOUNT_KEY_BYTES]);

impl std::fmt::Display for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// One bucket's shape for the shared table: capacity and the time one token takes to come
/// back, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Shape {
    burst: u32,
    interval_ms: u64,
}

impl Shape {
    fn new(burst: u32, per: u32, period_ms: u64) -> Shape {
        Shape {
            burst: burst.max(1),
            interval_ms: (period_ms / u64::from(per.max(1))).max(1),
        }
    }
}

/// The shapes of the four buckets (for the shared table).
#[derive(Debug, Clone, Copy)]
struct Shapes {
    client: Shape,
    account_client: Shape,
    account: Shape,
    device: Shape,
}

/// The sign-in throttles.
pub(crate) struct Throttle {
    client: DefaultKeyedRateLimiter<IpAddr>,
    account_client: DefaultKeyedRateLimiter<(AccountKey, IpAddr)>,
    account: DefaultKeyedRateLimiter<AccountKey>,
    device: DefaultKeyedRateLimiter<(AccountKey, UnixSeconds)>,
    shapes: Shapes,
    coordination: Coordination,
    /// Names accounts in bucket keys.
    accounts: hmac::Key,
    devices: DeviceTokens,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("shapes", &self.shapes)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the unix epoch (the shared buckets' clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn nonzero(n: u32) -> NonZeroU32 {
    // The config refuses zero; a zero here would only ever mean "as strict as possible".
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn refuse(not_until: governor::NotUntil<governor::clock::QuantaInstant>) -> Error {
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Error::RateLimited {
        retry_after_s: secs.max(1),
    }
}

impl Throttle {
    /// The throttles of the configured shapes; account names and device tokens keyed from the
    /// cell's KEK.
    pub(crate) fn new(config: &Config, coordination: Coordination, kek: &Kek) -> Throttle {
        const MINUTE_MS: u64 = 60_000;
        const HOUR_MS: u64 = 3_600_000;
        let shapes = Shapes {
            client: Shape::new(
                config.signin_ip_burst,
                config.signin_ip_per_minute,
                MINUTE_MS,
            ),
            account_client: Shape::new(
                config.signin_account_ip_burst,
                config.signin_account_ip_per_minute,
                MINUTE_MS,
            ),
            account: Shape::new(
                config.signin_account_burst,
                config.signin_account_per_hour,
                HOUR_MS,
            ),
            device: Shape::new(DEVICE_BURST, DEVICE_PER_HOUR, HOUR_MS),
        };
        let per_minute = |rate, burst| Quota::per_minute(nonzero(rate)).allow_burst(nonzero(burst));
        let per_hour = |rate, burst| Quota::per_hour(nonzero(rate)).allow_burst(nonzero(burst));
        Throttle {
            client: RateLimiter::keyed(per_minute(
                config.signin_ip_per_minute,
                config.signin_ip_burst,
            )),
            account_client: RateLimiter::keyed(per_minute(
                config.signin_account_ip_per_minute,
                config.signin_account_ip_burst,
            )),
            account: RateLimiter::keyed(per_hour(
                config.signin_account_per_hour,
                config.signin_account_burst,
            )),
            device: RateLimiter::keyed(per_hour(DEVICE_PER_HOUR, DEVICE_BURST)),
            shapes,
            coordination,
            accounts: kek.derive_mac_key(ACCOUNT_KEY_LABEL),
            devices: DeviceTokens::new(kek, config.cell_id.clone()),
        }
    }

    /// The account's name in bucket keys.
    fn account_key(&self, contractor: &ContractorId, login: &Login) -> AccountKey {
        let mut msg = Vec::with_capacity(16 + contractor.as_str().len() + login.as_str().len());
        for text in [contractor.as_str(), login.as_str()] {
            msg.extend_from_slice(&(text.len() as u64).to_be_bytes());
            msg.extend_from_slice(text.as_bytes());
        }
        let tag = hmac::sign(&self.accounts, &msg);
        let mut key = [0u8; ACCOUNT_KEY_BYTES];
        key.copy_from_slice(&tag.as_ref()[..ACCOUNT_KEY_BYTES]);
        AccountKey(key)
    }

    /// The device a sign-in's device token proves for this account, if it proves one.
    pub(crate) fn known_device(
        &self,
        token: Option<&DeviceToken>,
        contractor: &ContractorId,
        login: &Login,
        now: UnixSeconds,
    ) -> Option<Device> {
        token.and_then(|t| self.devices.verify(t, contractor, login, now))
    }

    /// A device token for this account, descending from the sign-in at `lineage`.
    pub(crate) fn device_token(
        &self,
        contractor: &ContractorId,
        login: &Login,
        lineage: UnixSeconds,
        now: UnixSeconds,
    ) -> Option<DeviceToken> {
        self.devices.issue(contractor, login, lineage, now)
    }

    /// Takes one token from a shared bucket.
    async fn take(shared: &PgCoordination, key: String, shape: Shape) -> Result<()> {
        match shared
            .take(&key, shape.burst, shape.interval_ms, now_ms())
            .await?
        {
            None => Ok(()),
            Some(retry_after_s) => Err(Error::RateLimited {
                retry_after_s: retry_after_s.max(1),
            }),
        }
    }

    /// Takes one attempt from the client's bucket (an IPv6 client by its /64).
    pub(crate) async fn check_ip(&self, ip: IpAddr) -> Result<()> {
        let client = client_key(ip);
        if let Some(shared) = self.coordination.shared() {
            return Self::take(shared, format!("ip/{client}"), self.shapes.client).await;
        }
        self.client.check_key(&client).map_err(refuse)
    }

    /// Takes one attempt from the account's buckets: from the known `device`'s own bucket
    /// when there is one; otherwise from the (account, client) bucket, then, only when that
    /// one let it through, from the account's ceiling.
    pub(crate) async fn check_account(
        &self,
        contractor: &ContractorId,
        login: &Login,
        ip: IpAddr,
        device: Option<Device>,
    ) -> Result<()> {
        let account = self.account_key(contractor, login);
        let client = client_key(ip);
        if let Some(shared) = self.coordination.shared() {
            // Neither an address, an account key (hex) nor a number holds a `/`, and every
            // kind has its own prefix, so two different buckets never share a key.
            if let Some(d) = device {
                let key = format!("device/{account}/{}", d.lineage);
                return Self::take(shared, key, self.shapes.device).await;
            }
            let key = format!("account-ip/{client}/{account}");
            Self::take(shared, key, self.shapes.account_client).await?;
            return Self::take(shared, format!("account/{account}"), self.shapes.account).await;
        }
        if let Some(d) = device {
            return self.device.check_key(&(account, d.lineage)).map_err(refuse);
        }
        self.account_client
            .check_key(&(account, client))
            .map_err(refuse)?;
        self.account.check_key(&account).map_err(refuse)
    }

    /// Forgets buckets that are full again (bounds memory; with shared buckets, the table).
    pub(crate) async fn shrink(&self) {
        if let Some(shared) = self.coordination.shared()
            && let Err(e) = shared.shrink_buckets(now_ms()).await
        {
            tracing::warn!(error = %e, "could not drop full sign-in throttle buckets");
        }
        self.client.retain_recent();
        self.account_client.retain_recent();
        self.account.retain_recent();
        self.device.retain_recent();
        self.client.shrink_to_fit();
        self.account_client.shrink_to_fit();
        self.account.shrink_to_fit();
        self.device.shrink_to_fit();
    }
}
