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
//! With `state` on Redis the replicas count together: each wrong credential is also
//! charged to the address's allowance on Redis (the rate-limit script, keyed
//! `failed-credentials:<address>`), and once that is spent the replica that counted it
//! refuses the address as its own count would. A replica that has not yet seen a wrong
//! credential from the address checks the next one, and refuses from then on: across N
//! replicas a guesser gets at most N guesses past the allowance, not N allowances.
//! Only wrong credentials reach Redis — a right one costs nothing more — and when Redis
//! does not answer within `state.deadline` each replica's own count stands.
//!
//! Memory is bounded: at most `max_addresses` addresses are tracked. Addresses whose
//! allowance is whole again are swept every 10 s while any is tracked, and at once when a
//! new one needs room; a new address past the bound with none to sweep is not counted
//! (and the gateway logs that it is full), so a flood of addresses costs memory up to the
//! bound and no more.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dashmap::DashMap;
use dashmap::mapref::one::RefMut;
use tokio::time::Instant;
use toolgate_hooks::Rate;
use toolgate_hooks::quota::{QuotaBackend, QuotaDecision, QuotaRequest};
use toolgate_http::HttpError;

use crate::config::{Config, FailedCredentialsConfig};

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
pub struct CredentialLimit {
    table: Arc<FailedCredentials>,
    /// `None` when the limit is off.
    allowance: Option<Allowance>,
    /// Where the replicas count together (Redis), when `state` is shared.
    shared: Option<Arc<dyn QuotaBackend>>,
}

impl std::fmt::Debug for CredentialLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialLimit")
            .field("allowance", &self.allowance)
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

impl CredentialLimit {
    /// The limit `config` sets, counted in `table`, and in `shared` too when the replicas
    /// share one count: the rate-limit backend on the state's Redis, deciding as if it
    /// granted when Redis does not answer.
    pub fn new(
        table: Arc<FailedCredentials>,
        shared: Option<Arc<dyn QuotaBackend>>,
        config: &Config,
    ) -> Self {
        CredentialLimit {
            table,
            allowance: Allowance::of(&config.identity.failed_credentials),
            shared,
        }
    }

    /// The answer to a request that carries a credential, when its client is past its
    /// allowance: 429 `too_many_failed_credentials` with `Retry-After`. Its credential is
    /// not to be looked at. `None` lets it be checked.
    ///
    /// `client` names the request's client address (`Gateway::client_address`: the
    /// connection's peer, or the client its trusted proxies name); it is asked only when
    /// some address is tracked.
    pub fn refusal(&self, client: impl FnOnce() -> Option<IpAddr>) -> Option<Response> {
        let allowance = self.allowance.as_ref()?;
        if self.table.is_empty() {
            return None;
        }
        let client = client()?;
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

    /// Counts the wrong credential of a request against its `client` (its address, as
    /// for [`Self::refusal`]; `None` when not known, which counts nothing): in this
    /// process, and on Redis when the replicas share one count (this waits for Redis, at
    /// most `state.deadline`). Answer the request after, so that its client's next request
    /// finds the count.
    pub async fn failed(&self, client: Option<IpAddr>) {
        let (Some(allowance), Some(client)) = (self.allowance.as_ref(), client) else {
            return;
        };
        // `None`: the table is full and the address not counted. Nor is it on Redis then,
        // so that a flood of addresses fills Redis no more than each replica's table.
        let Some(mut spent) = self.table.failed(client, allowance) else {
            return;
        };
        if let Some(shared) = &self.shared {
            spent |= self
                .failed_on_shared(shared.as_ref(), client, allowance)
                .await;
        }
        if spent {
            tracing::warn!(
                target: "toolgate::identity",
                %client,
                "a client presented too many wrong credentials: its requests are refused for a while (`identity.failed_credentials`)"
            );
        }
    }

    /// Charges a wrong credential from `client` to its allowance on Redis; when that is
    /// spent, refuses the client here until it comes back. Whether this refused it anew.
    /// Redis not answering counts as nothing: the backend is made to grant then
    /// (fail open), and this replica's own count stands.
    async fn failed_on_shared(
        &self,
        shared: &dyn QuotaBackend,
        client: IpAddr,
        allowance: &Allowance,
    ) -> bool {
        let key = format!("failed-credentials:{}", counted(client));
        let request = QuotaRequest {
            key: &key,
            rate: allowance.rate,
        };
        match shared.acquire(request).await {
            Ok(QuotaDecision::Limited { retry_after }) => {
                self.table.refuse(client, retry_after, allowance)
            }
            Ok(QuotaDecision::Granted(_)) => false,
            Err(error) => {
                tracing::debug!(%client, %error, "a wrong credential was counted by this replica alone");
                false
            }
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
    /// `max` per `per`, in a burst of `max`: what the replicas' shared count follows.
    rate: Rate,
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
        // `Rate::new` refuses a zero `max` (the limit is off) and a `per` shorter than
        // `max` nanoseconds (which the configuration refuses, naming the field).
        let rate = Rate::new(config.max, config.per).ok()?;
        let interval = rate.emission_interval();
        Some(Allowance {
            rate,
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

    /// Counts a wrong credential from `address`: whether that spent its allowance, or
    /// `None` when the address is not counted (`max_addresses` are tracked, none of them
    /// whole again).
    pub fn failed(&self, address: IpAddr, allowance: &Allowance) -> Option<bool> {
        let now = Instant::now();
        let mut whole_at = self.entry(address, now, allowance)?;
        *whole_at = (*whole_at).max(now) + allowance.interval;
        Some(*whole_at > now + allowance.tolerance)
    }

    /// Refuses `address` for `wait` from now (its allowance, counted elsewhere, is
    /// spent); whether it was let through until now.
    pub fn refuse(&self, address: IpAddr, wait: Duration, allowance: &Allowance) -> bool {
        let now = Instant::now();
        let Some(mut whole_at) = self.entry(address, now, allowance) else {
            return false;
        };
        let refused_before = *whole_at > now + allowance.tolerance;
        *whole_at = (*whole_at).max(now + allowance.tolerance + wait);
        !refused_before
    }

    /// The entry of `address` (an IPv6 one by its /64), made if there is room for it:
    /// `None` when `max_addresses` are tracked and none is whole again.
    fn entry(
        &self,
        address: IpAddr,
        now: Instant,
        allowance: &Allowance,
    ) -> Option<RefMut<'_, IpAddr, Instant>> {
        let key = counted(address);
        if let Some(entry) = self.whole_at.get_mut(&key) {
            return Some(entry);
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
                return None;
            }
        }
        Some(self.whole_at.entry(key).or_insert_with(|| {
            self.tracked.fetch_add(1, Ordering::Relaxed);
            now
        }))
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

/// The key an address is counted under: itself for IPv4, its /64 for IPv6 (the block one
/// host or one customer is given). The console's waiting sign-ins count so too.
pub(crate) fn counted(address: IpAddr) -> IpAddr {
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
            let counted = table.failed(address(i), &allowance);
            assert_eq!(counted.is_some(), i < 50, "address {i}");
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

    #[tokio::test(start_paused = true)]
    async fn an_address_refused_for_a_count_kept_elsewhere_waits_that_long() {
        let table = FailedCredentials::new();
        let allowance = allowance(3, Duration::from_secs(60), 100);
        let guesser = ip("203.0.113.9");
        assert!(table.refuse(guesser, Duration::from_secs(30), &allowance));
        assert_eq!(
            table.check(guesser, &allowance),
            Err(Duration::from_secs(30))
        );
        // Refused already: not refused anew, and a shorter wait does not shorten it.
        assert!(!table.refuse(guesser, Duration::from_secs(5), &allowance));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(table.check(guesser, &allowance), Ok(()));
    }

    /// Two replicas: each its own table, one count between them (the in-memory backend
    /// stands in for Redis here; `tests/replicas.rs` runs two gateways on a real one).
    #[tokio::test]
    async fn replicas_sharing_a_count_refuse_a_guesser_once_the_shared_allowance_is_spent() {
        let config =
            crate::config::parse("identity:\n  failed_credentials: { max: 4, per: 1h }\n").unwrap();
        let shared: Arc<dyn QuotaBackend> =
            Arc::new(toolgate_hooks::quota::InMemoryQuota::default());
        let replica = || CredentialLimit::new(Arc::default(), Some(shared.clone()), &config);
        let (first, second) = (replica(), replica());
        let client = |last: u8| Some(IpAddr::from([192, 0, 2, last]));
        // Four wrong credentials, two on each replica: neither has counted four itself.
        for limit in [&first, &second, &first, &second] {
            assert!(limit.refusal(|| client(9)).is_none());
            limit.failed(client(9)).await;
        }
        // The fifth is the one too many, whichever replica counts it; from then on that
        // replica refuses the guesser unchecked.
        assert!(first.refusal(|| client(9)).is_none());
        first.failed(client(9)).await;
        let refused = first.refusal(|| client(9)).expect("refused");
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        // The other replica checks one more credential, then refuses too.
        assert!(second.refusal(|| client(9)).is_none());
        second.failed(client(9)).await;
        assert!(second.refusal(|| client(9)).is_some());
        // Another address has an allowance of its own on both.
        assert!(first.refusal(|| client(10)).is_none());
        first.failed(client(10)).await;
        assert!(first.refusal(|| client(10)).is_none());
    }

    #[tokio::test]
    async fn an_address_a_full_table_does_not_count_is_not_counted_on_the_shared_store_either() {
        let config = crate::config::parse(
            "identity:\n  failed_credentials: { max: 4, per: 1h, max_addresses: 1 }\n",
        )
        .unwrap();
        let shared = Arc::new(toolgate_hooks::quota::InMemoryQuota::default());
        let limit = CredentialLimit::new(Arc::default(), Some(shared.clone()), &config);
        for last in 1..=20 {
            limit.failed(Some(IpAddr::from([192, 0, 2, last]))).await;
        }
        // A flood of addresses costs the shared store what it costs the table: one.
        assert_eq!(shared.key_count(), 1);
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
