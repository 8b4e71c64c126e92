//! A limit on wrong credentials per client address, so that nobody can try API keys or
//! tokens one after another: `identity.failed_credentials`.
//!
//! Each address may present `max` wrong credentials in a burst, and one more every
//! `per / max` after that (GCRA: the state of an address is one instant, when its
//! allowance is whole again). An address past its allowance is refused — 429
//! `too_many_failed_credentials`, with `Retry-After` — **before** its credential is
//! looked at, right or wrong: were a right one let through, the refusals would tell the
//! guesser only which guesses were wrong, and the guessing would go on at full speed.
//!
//! IPv6 addresses are counted by their /64, the block one host or one customer is given,
//! so that a client cannot take a fresh allowance with each address of its own block.
//!
//! Memory is bounded: at most `max_addresses` addresses are tracked. Addresses whose
//! allowance is whole again are swept every 10 s while any is tracked, and at once when a
//! new one needs room; a new address past the bound with none to sweep is not counted
//! (and the gateway logs that it is full), so a flood of addresses costs memory up to the
//! bound and no more.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use dashmap::DashMap;
use tokio::time::Instant;
use toolgate_http::HttpError;

use super::address::client_address;
use crate::config::{Config, FailedCredentialsConfig, TrustedProxy};

/// How often the table is swept of addresses whose allowance is whole again while it
/// tracks any.
const SWEEP_GAP: Duration = Duration::from_secs(10);
/// How often, at most, a new address that finds the table full sweeps it at once.
const FULL_SWEEP_GAP: Duration = Duration::from_secs(1);

/// The limit of one configuration, on the table the process keeps across
/// configurations: what the credential checks of `/v1`, `/mcp` and the console's sign-in
/// consult.
///
/// While no address is tracked — no wrong credential lately — a check costs one atomic
/// load: the client's address is worked out only once there is something to look it up
/// in.
#[derive(Debug)]
pub struct CredentialLimit {
    table: Arc<FailedCredentials>,
    /// `None` when the limit is off.
    allowance: Option<Allowance>,
    trusted: Vec<TrustedProxy>,
}

impl CredentialLimit {
    /// The limit `config` sets, counted in `table`.
    pub fn new(table: Arc<FailedCredentials>, config: &Config) -> Self {
        CredentialLimit {
            table,
            allowance: Allowance::of(&config.identity.failed_credentials),
            trusted: config.server.trusted_proxies.clone(),
        }
    }

    /// The answer to a request that carries a credential, from the connection `peer`
    /// with `headers`, when its client is past its allowance: 429
    /// `too_many_failed_credentials` with `Retry-After`. Its credential is not to be
    /// looked at. `None` lets it be checked.
    pub fn refusal(
        &self,
        peer: Option<&ConnectInfo<SocketAddr>>,
        headers: &HeaderMap,
    ) -> Option<Response> {
        let allowance = self.allowance.as_ref()?;
        if self.table.is_empty() {
            return None;
        }
        let client = client_address(peer, headers, &self.trusted)?;
        let wait = self.table.check(client, allowance).err()?;
        metrics::counter!("toolgate_http_failed_credentials_refused_total").increment(1);
        let seconds = wait.as_millis().div_ceil(1000).max(1);
        let refused = HttpError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_credentials",
            format!(
                "too many wrong credentials came from this address: wait {seconds} s, then try again with a valid one"
            ),
        );
        Some(refused.retry_after(wait).into_response())
    }

    /// Counts the wrong credential of a request from the connection `peer` with
    /// `headers` against its client.
    pub fn failed(&self, peer: Option<&ConnectInfo<SocketAddr>>, headers: &HeaderMap) {
        let Some(allowance) = self.allowance.as_ref() else {
            return;
        };
        let Some(client) = client_address(peer, headers, &self.trusted) else {
            return;
        };
        if self.table.failed(client, allowance) {
            tracing::warn!(
                target: "toolgate::identity",
                %client,
                "a client presented too many wrong credentials: its requests are refused for a while (`identity.failed_credentials`)"
            );
        }
    }
}

/// The wrong credentials of each client address, across configurations.
#[derive(Debug, Default)]
pub struct FailedCredentials {
    /// Per address (an IPv6 one by its /64): when its allowance is whole again.
    whole_at: DashMap<IpAddr, Instant>,
    /// How many addresses `whole_at` holds, read without touching the map.
    tracked: AtomicUsize,
    /// When the table was last swept.
    last_sweep: Mutex<Option<Instant>>,
}

/// The allowance of one configuration.
#[derive(Clone, Copy, Debug)]
pub struct Allowance {
    /// How often one wrong credential comes back (`per / max`).
    interval: Duration,
    /// How far ahead of now an address's `whole_at` may be before it is refused
    /// (`max - 1` intervals).
    tolerance: Duration,
    max_addresses: usize,
}

impl Allowance {
    /// The allowance `config` sets; `None` when it is off (`max: 0`).
    pub fn of(config: &FailedCredentialsConfig) -> Option<Allowance> {
        if config.max == 0 {
            return None;
        }
        let interval = config.per / config.max;
        Some(Allowance {
            interval,
            tolerance: interval * (config.max - 1),
            max_addresses: config.max_addresses,
        })
    }
}

impl FailedCredentials {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Err` with the wait when `address` has presented more wrong credentials than
    /// `allowance` lets it now: its next credential is not to be looked at.
    pub fn check(&self, address: IpAddr, allowance: &Allowance) -> Result<(), Duration> {
        let now = Instant::now();
        self.sweep_if_due(now, SWEEP_GAP);
        let Some(whole_at) = self.whole_at.get(&counted(address)).map(|entry| *entry) else {
            return Ok(());
        };
        match whole_at.checked_duration_since(now + allowance.tolerance) {
            Some(wait) if !wait.is_zero() => Err(wait),
            _ => Ok(()),
        }
    }

    /// Counts a wrong credential from `address`; whether that spent its allowance.
    pub fn failed(&self, address: IpAddr, allowance: &Allowance) -> bool {
        let key = counted(address);
        let now = Instant::now();
        let charge = |whole_at: &mut Instant| {
            *whole_at = (*whole_at).max(now) + allowance.interval;
            *whole_at > now + allowance.tolerance
        };
        if let Some(mut entry) = self.whole_at.get_mut(&key) {
            return charge(&mut entry);
        }
        if self.len() >= allowance.max_addresses {
            let swept = self.sweep_if_due(now, FULL_SWEEP_GAP);
            if self.len() >= allowance.max_addresses {
                if swept {
                    // Said at most once per sweep, not once per address turned away.
                    tracing::warn!(
                        max_addresses = allowance.max_addresses,
                        "wrong credentials are not counted for new client addresses: `identity.failed_credentials.max_addresses` are tracked"
                    );
                }
                return false;
            }
        }
        let mut entry = self.whole_at.entry(key).or_insert_with(|| {
            self.tracked.fetch_add(1, Ordering::Relaxed);
            now
        });
        charge(&mut entry)
    }

    /// How many addresses are tracked now.
    pub fn len(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// Whether no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the addresses whose allowance is whole again, when `gap` has passed since
    /// the last sweep and no other caller is sweeping; whether it did.
    fn sweep_if_due(&self, now: Instant, gap: Duration) -> bool {
        let Ok(mut last) = self.last_sweep.try_lock() else {
            return false;
        };
        if last.is_some_and(|at| now.duration_since(at) < gap) {
            return false;
        }
        *last = Some(now);
        self.whole_at.retain(|_, whole_at| {
            let keep = *whole_at > now;
            if !keep {
                self.tracked.fetch_sub(1, Ordering::Relaxed);
            }
            keep
        });
        true
    }
}

/// The key an address is counted under: itself for IPv4, its /64 for IPv6.
fn counted(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowance(max: u32, per: Duration, max_addresses: usize) -> Allowance {
        Allowance::of(&FailedCredentialsConfig {
            max,
            per,
            max_addresses,
        })
        .unwrap()
    }

    fn ip(address: &str) -> IpAddr {
        address.parse().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_is_refused_after_its_burst_and_let_back_one_credential_at_a_time() {
        let table = FailedCredentials::new();
        let allowance = allowance(3, Duration::from_secs(60), 100);
        let guesser = ip("203.0.113.9");
        for _ in 0..3 {
            assert_eq!(table.check(guesser, &allowance), Ok(()));
            table.failed(guesser, &allowance);
        }
        assert_eq!(
            table.check(guesser, &allowance),
            Err(Duration::from_secs(20))
        );
        // Another address is not held to the guesser's count.
        assert_eq!(table.check(ip("203.0.113.10"), &allowance), Ok(()));
        tokio::time::advance(Duration::from_secs(19)).await;
        assert_eq!(
            table.check(guesser, &allowance),
            Err(Duration::from_secs(1))
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(table.check(guesser, &allowance), Ok(()));
        table.failed(guesser, &allowance);
        assert_eq!(
            table.check(guesser, &allowance),
            Err(Duration::from_secs(20))
        );
        // A whole period later the whole burst is back.
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..3 {
            assert_eq!(table.check(guesser, &allowance), Ok(()));
            table.failed(guesser, &allowance);
        }
        assert!(table.check(guesser, &allowance).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_addresses_of_one_ipv6_block_share_an_allowance() {
        let table = FailedCredentials::new();
        let allowance = allowance(2, Duration::from_secs(60), 100);
        table.failed(ip("2001:db8:1:2::1"), &allowance);
        table.failed(ip("2001:db8:1:2:ffff::9"), &allowance);
        assert!(table.check(ip("2001:db8:1:2::77"), &allowance).is_err());
        assert_eq!(table.check(ip("2001:db8:1:3::1"), &allowance), Ok(()));
        assert_eq!(table.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_addresses_is_tracked_up_to_the_bound_and_swept_when_whole_again() {
        let table = FailedCredentials::new();
        let allowance = allowance(2, Duration::from_secs(10), 50);
        let address = |i: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        for i in 0..500 {
            table.failed(address(i), &allowance);
        }
        assert_eq!(table.len(), 50);
        // The first fifty are still counted; the ones past the bound were not.
        table.failed(address(0), &allowance);
        assert!(table.check(address(0), &allowance).is_err());
        assert_eq!(table.check(address(499), &allowance), Ok(()));
        // Once their allowances are whole again they make room.
        tokio::time::advance(Duration::from_secs(11)).await;
        table.failed(address(1000), &allowance);
        assert_eq!(table.len(), 1);
        table.failed(address(1000), &allowance);
        assert!(table.check(address(1000), &allowance).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn addresses_whose_allowance_is_whole_again_leave_the_table() {
        let table = FailedCredentials::new();
        let allowance = allowance(5, Duration::from_secs(60), 100);
        table.failed(ip("203.0.113.9"), &allowance);
        table.failed(ip("2001:db8::1"), &allowance);
        assert_eq!(table.len(), 2);
        // Still owed: a check keeps them.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(table.check(ip("198.51.100.1"), &allowance), Ok(()));
        assert_eq!(table.len(), 2);
        // Whole again: the next check past the sweep's gap drops them, and checks are
        // back to the one atomic load of an empty table.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(table.check(ip("198.51.100.1"), &allowance), Ok(()));
        assert!(table.is_empty());
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let off = FailedCredentialsConfig {
            max: 0,
            ..FailedCredentialsConfig::default()
        };
        assert!(Allowance::of(&off).is_none());
    }
}
