//! Value types of the configuration file that check themselves while they are read, so
//! that a bad value is reported with its field path and line.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};
use toolgate_hooks::Rate;
use toolgate_redis::ClusterNodes;

use super::expand_env;

/// Reads a string and parses it while the YAML reader still points at it, so that an error
/// carries the value's own line and column (not its parent's).
pub(super) fn parse_str<'de, D, T>(
    deserializer: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct Visit<F>(F);

    impl<'de, T, F: FnOnce(&str) -> Result<T, String>> de::Visitor<'de> for Visit<F> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
            (self.0)(text).map_err(E::custom)
        }
    }

    deserializer.deserialize_str(Visit(parse))
}

/// `${VAR}` expansion, then `parse`.
pub(super) fn parse_env_str<'de, D, T>(
    deserializer: D,
    parse: impl FnOnce(String) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    parse_str(deserializer, |raw| expand_env(raw).and_then(parse))
}

/// A string in which `${VAR}` and `${VAR:-default}` are replaced from the environment
/// when the file is read.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvString(pub String);

impl fmt::Debug for EnvString {
    // Expanded values may be secrets: never print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EnvString(..)")
    }
}

impl<'de> Deserialize<'de> for EnvString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_env_str(deserializer, |text| Ok(EnvString(text)))
    }
}

/// A file path in which `${VAR}` references are expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvPath(pub std::path::PathBuf);

impl<'de> Deserialize<'de> for EnvPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_env_str(deserializer, |path| Ok(EnvPath(path.into())))
    }
}

/// The SHA-256 of an API key, 64 hex digits (after `${VAR}` expansion).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(pub [u8; 32]);

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHash(..)")
    }
}

impl KeyHash {
    /// Parses 64 hex digits.
    ///
    /// # Errors
    ///
    /// A message saying what is wrong with the text.
    pub fn from_hex(text: &str) -> Result<KeyHash, String> {
        let text = text.trim();
        if text.len() != 64 {
            return Err(format!(
                "expected the SHA-256 of the API key as 64 hex digits, got {} characters: \
                 run `toolgate hash-key` and paste what it prints",
                text.len()
            ));
        }
        let mut out = [0u8; 32];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            let digit = |b: u8| (b as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(hi), Some(lo)) => out[i] = (hi * 16 + lo) as u8,
                _ => {
                    return Err(
                        "expected the SHA-256 of the API key as 64 hex digits: found a character \
                         that is not a hex digit"
                            .to_owned(),
                    );
                }
            }
        }
        Ok(KeyHash(out))
    }
}

impl<'de> Deserialize<'de> for KeyHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_env_str(deserializer, |text| KeyHash::from_hex(&text))
    }
}

/// A size in bytes: a number, or a number with `B`, `KiB`, `MiB` or `GiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub usize);

impl ByteSize {
    fn parse(text: &str) -> Result<ByteSize, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: usize = number.parse().map_err(|_| {
            format!("`{text}` is not a size: write e.g. `65536`, `64KiB` or `1MiB`")
        })?;
        let factor = match unit.trim() {
            "" | "B" => 1,
            "KiB" | "KB" | "k" => 1024,
            "MiB" | "MB" | "M" => 1024 * 1024,
            "GiB" | "GB" | "G" => 1024 * 1024 * 1024,
            other => {
                return Err(format!(
                    "unknown size unit `{other}`: use B, KiB, MiB or GiB"
                ));
            }
        };
        number
            .checked_mul(factor)
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}` is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(usize),
            Text(String),
        }
        match Raw::deserialize(deserializer)
            .map_err(|_| de::Error::custom("expected a size: a number of bytes or e.g. `1MiB`"))?
        {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(text) => ByteSize::parse(&text).map_err(de::Error::custom),
        }
    }
}

/// A rate: `N/second`, `N/minute`, `N/hour`, or `N/<duration>` such as `10/30s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSpec {
    /// Units per period.
    pub count: u32,
    /// The period.
    pub period: Duration,
}

impl RateSpec {
    /// The rate with `burst` units of burst.
    ///
    /// # Errors
    ///
    /// When the rate or burst is zero.
    pub fn to_rate(self, burst: Option<u32>) -> Result<Rate, toolgate_hooks::quota::RateError> {
        let rate = Rate::new(self.count, self.period)?;
        match burst {
            Some(burst) => rate.with_burst(burst),
            None => Ok(rate),
        }
    }

    fn parse(text: &str) -> Result<RateSpec, String> {
        let usage = || {
            format!(
                "`{text}` is not a rate: write `60/minute`, `5/second`, `1000/hour` or `10/30s`"
            )
        };
        let (count, period) = text.split_once('/').ok_or_else(usage)?;
        let count: u32 = count.trim().parse().map_err(|_| usage())?;
        if count == 0 {
            return Err(format!(
                "`{text}`: a rate must allow at least one call per period"
            ));
        }
        let period = match period.trim() {
            "second" | "sec" | "s" => Duration::from_secs(1),
            "minute" | "min" | "m" => Duration::from_secs(60),
            "hour" | "h" => Duration::from_secs(3600),
            "day" | "d" => Duration::from_secs(86_400),
            other => humantime::parse_duration(other).map_err(|_| usage())?,
        };
        if period.is_zero() {
            return Err(usage());
        }
        if period > duration::LONGEST {
            return Err(format!(
                "`{text}`: a rate's period is at most 365 days: write e.g. `10/day` or `100/30d`"
            ));
        }
        Ok(RateSpec { count, period })
    }
}

impl<'de> Deserialize<'de> for RateSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_str(deserializer, RateSpec::parse)
    }
}

/// One entry of `server.trusted_proxies`: an address (`10.0.0.7`, `::1`) or a network
/// (`10.0.0.0/8`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedProxy(ipnet::IpNet);

impl TrustedProxy {
    /// This host's loopback addresses, `127.0.0.0/8` and `::1`: the default, for a proxy
    /// on the same host.
    pub fn loopback() -> Vec<TrustedProxy> {
        ["127.0.0.0/8", "::1/128"]
            .iter()
            .filter_map(|net| net.parse().ok().map(TrustedProxy))
            .collect()
    }

    /// Whether `address` is this proxy, or in its network.
    pub fn contains(&self, address: std::net::IpAddr) -> bool {
        self.0.contains(&address)
    }
}

impl fmt::Display for TrustedProxy {
    /// The address of a single host, the network otherwise: `::1`, `10.0.0.0/8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.prefix_len() == self.0.max_prefix_len() {
            write!(f, "{}", self.0.addr())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl std::str::FromStr for TrustedProxy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        text.parse::<ipnet::IpNet>()
            .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map(TrustedProxy)
            .map_err(|_| {
                format!(
                    "`{text}` is not an IP address or network: write an address, `10.0.0.7`, or a network, `10.0.0.0/8` or `fd00::/8`"
                )
            })
    }
}

impl<'de> Deserialize<'de> for TrustedProxy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_str(deserializer, str::parse)
    }
}

/// `state:` — `memory`, a Redis URL (`redis://…`, `rediss://…`), or a Redis Cluster's
/// (`redis+cluster://host1:port1,host2:port2`, `rediss+cluster://…`), after `${VAR}`
/// expansion.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum StateUrl {
    /// Policy state in this process.
    #[default]
    Memory,
    /// Policy state in Redis, shared by every gateway pointed at it.
    Redis(String),
    /// Policy state in a Redis Cluster, shared by every gateway pointed at it.
    Cluster(ClusterNodes),
}

impl fmt::Debug for StateUrl {
    // A Redis URL may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateUrl::Memory => f.write_str("Memory"),
            StateUrl::Redis(_) => f.write_str("Redis(..)"),
            StateUrl::Cluster(nodes) => write!(f, "Cluster({nodes})"),
        }
    }
}

impl StateUrl {
    fn parse(text: String) -> Result<StateUrl, String> {
        let text = text.trim();
        if text == "memory" {
            Ok(StateUrl::Memory)
        } else if ClusterNodes::is_cluster_url(text) {
            ClusterNodes::parse(text)
                .map(StateUrl::Cluster)
                .map_err(|e| e.to_string())
        } else if text.starts_with("redis://")
            || text.starts_with("rediss://")
            || text.starts_with("redis+unix://")
        {
            readable_redis_url(text)?;
            Ok(StateUrl::Redis(text.to_owned()))
        } else {
            Err("expected `memory`, a Redis URL such as `redis://127.0.0.1:6379`, or a Redis Cluster's such as `redis+cluster://10.0.0.1:7000,10.0.0.2:7000`".to_owned())
        }
    }

    /// What the state is on, for `toolgate check` and logs: no password.
    pub fn describe(&self) -> String {
        match self {
            StateUrl::Memory => "memory".to_owned(),
            StateUrl::Redis(_) => "redis (one node)".to_owned(),
            StateUrl::Cluster(nodes) => format!(
                "redis cluster, {} seed node{} ({nodes}){}",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                if nodes.uses_tls() { " over TLS" } else { "" }
            ),
        }
    }
}

/// Refuses a one-node Redis URL that `serve` would refuse at start
/// ([`RedisState::check_url`](toolgate_redis::RedisState::check_url), which connects to
/// nothing). The URL is not quoted: it may hold a password.
fn readable_redis_url(text: &str) -> Result<(), String> {
    let reason = match toolgate_redis::RedisState::check_url(text) {
        Ok(()) => return Ok(()),
        Err(toolgate_redis::RedisError::InvalidUrl { reason, .. }) => reason,
        Err(other) => other.to_string(),
    };
    Err(format!(
        "the Redis URL (not shown: it may hold a password) cannot be used: {reason}. Write `redis://[user:password@]host[:port][/database]`, such as `redis://127.0.0.1:6379` (`rediss://` for TLS, `redis+unix:///run/redis.sock` for a Unix socket), with a `/`, `?` or `#` in the password written `%2F`, `%3F`, `%23`"
    ))
}

/// `state.cluster:` — the URLs of a Redis Cluster's nodes (some or all), all `redis://` or
/// all `rediss://`; the same as `url: redis+cluster://…`, as a list.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterNodeList(pub ClusterNodes);

impl fmt::Debug for ClusterNodeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterNodeList({})", self.0)
    }
}

/// One node URL of `state.cluster`, checked alone so that a bad one is reported with its
/// index.
struct ClusterNodeUrl(String);

impl<'de> Deserialize<'de> for ClusterNodeUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_env_str(deserializer, |text| {
            let text = text.trim().to_owned();
            ClusterNodes::from_urls([text.clone()])
                .map(|_| ClusterNodeUrl(text))
                .map_err(|e| e.to_string())
        })
    }
}

impl<'de> Deserialize<'de> for ClusterNodeList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let urls = Vec::<ClusterNodeUrl>::deserialize(deserializer)?;
        ClusterNodes::from_urls(urls.into_iter().map(|u| u.0))
            .map(ClusterNodeList)
            .map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for StateUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        parse_env_str(deserializer, StateUrl::parse)
    }
}

/// `state:` — a URL alone (`memory`, `redis://…`), or a map with the URL and the Redis
/// options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// `memory`, a Redis URL, or a Redis Cluster's (`redis+cluster://…`). Leave it out
    /// when `cluster` lists the nodes.
    #[serde(default)]
    pub url: StateUrl,
    /// A Redis Cluster's node URLs, as a list: the same as `url: redis+cluster://…`.
    pub cluster: Option<ClusterNodeList>,
    /// The deadline of every Redis call (default 100 ms); a rate limit, a concurrency cap
    /// or the cache can set its own (`redis_deadline`).
    #[serde(default, with = "opt_duration")]
    pub deadline: Option<Duration>,
    /// How many Redis calls in a row must get no answer before `toolgate_redis_up` goes
    /// to 0 (default 3): one slow reply does not flip it.
    pub down_after_failures: Option<u32>,
    /// How long a concurrency lease outlives a replica that died holding it (default 30 s).
    #[serde(default, with = "opt_duration")]
    pub lease_ttl: Option<Duration>,
    /// How long a replica waits for another replica filling the same cache entry (default:
    /// no cross-replica fill lock).
    #[serde(default, with = "opt_duration")]
    pub cache_fill_wait: Option<Duration>,
    /// The most bytes of cache entries one caller (a user in its tenant; public results
    /// count as one caller together) may write per `cache_caller_window` (default 16 MiB;
    /// `0` turns the bound off). A result past it is not stored; the call succeeds.
    pub cache_max_bytes_per_caller: Option<ByteSize>,
    /// The window of `cache_max_bytes_per_caller` (default 5 minutes): give it the longest
    /// TTL of the cached tools.
    #[serde(default, with = "opt_duration")]
    pub cache_caller_window: Option<Duration>,
    /// The prefix of every Redis key (default `toolgate`). On a Redis Cluster it may not
    /// hold `{` or `}`: toolgate's own hash tags follow it.
    pub key_prefix: Option<String>,
    /// Certificates for a `rediss://` URL (default: the system's trust store, no client
    /// certificate).
    pub tls: Option<RedisTlsFiles>,
    /// The key that encrypts calls waiting for approval, approvals for a retry, the
    /// outcomes of decided calls, and the console's sessions, waiting sign-ins and decided
    /// history where they are stored on Redis: 64 hexadecimal
    /// characters, the same on every replica (`suspensions_key: ${SUSPENSIONS_KEY}`, made
    /// with `openssl rand -hex 32`). Without one they are stored as JSON in clear (their
    /// input is the validated, redacted one either way).
    pub suspensions_key: Option<EnvString>,
}

/// `state.tls:` — PEM files for TLS to Redis.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisTlsFiles {
    /// The CA that signed Redis's certificate, when it is not in the system's trust store.
    pub ca_file: Option<std::path::PathBuf>,
    /// This gateway's certificate, for a Redis that requires client certificates.
    pub client_cert_file: Option<std::path::PathBuf>,
    /// The private key of `client_cert_file`.
    pub client_key_file: Option<std::path::PathBuf>,
}

/// A `state:` written as a URL alone.
struct UrlOnly;

impl<'de> de::Visitor<'de> for UrlOnly {
    type Value = StateConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "`memory`, a Redis URL, a Redis Cluster URL, or a map with `url` (or `cluster`) and Redis options",
        )
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<StateConfig, E> {
        let url = expand_env(text)
            .and_then(StateUrl::parse)
            .map_err(E::custom)?;
        Ok(StateConfig {
            url,
            ..StateConfig::default()
        })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<StateConfig, A::Error> {
        StateConfig::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

impl StateConfig {
    /// Where the state lives: `url`, or the cluster that `cluster` lists.
    pub fn target(&self) -> StateUrl {
        match &self.cluster {
            Some(ClusterNodeList(nodes)) => StateUrl::Cluster(nodes.clone()),
            None => self.url.clone(),
        }
    }

    /// Reads a `state:` value: a string or a map.
    pub(crate) fn deserialize_any<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<StateConfig, D::Error> {
        d.deserialize_any(UrlOnly)
    }
}

/// Durations written as `250ms`, `30s`, `5m`, `1h 30m`.
pub(crate) mod duration {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parse_str(d, parse)
    }

    /// The longest duration the file may give anything: 365 days. Longer ones are
    /// mistakes, and past a few hundred years they no longer fit the clocks and counters
    /// they are added to.
    pub(crate) const LONGEST: Duration = Duration::from_secs(365 * 86_400);

    /// A duration as the file writes it: `250ms`, `30s`, `5m`, at most [`LONGEST`].
    pub(crate) fn parse(text: &str) -> Result<Duration, String> {
        let duration = humantime::parse_duration(text.trim()).map_err(|_| {
            format!(
                "`{text}` is not a duration: write a whole number and a unit, e.g. `250ms`, `30s`, `5m`, `1h 30m` or `7d`"
            )
        })?;
        if duration > LONGEST {
            return Err(format!(
                "`{text}` is longer than the 365 days a duration may be here"
            ));
        }
        Ok(duration)
    }
}

/// Optional durations.
pub(crate) mod opt_duration {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        duration::deserialize(d).map(Some)
    }
}

/// Maps of tool name to duration.
pub(crate) mod duration_map {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Deserialize)]
    struct D(#[serde(with = "duration")] Duration);

    pub(crate) fn deserialize<'de, De: Deserializer<'de>>(
        d: De,
    ) -> Result<BTreeMap<String, Duration>, De::Error> {
        let map = BTreeMap::<String, D>::deserialize(d)?;
        Ok(map.into_iter().map(|(k, D(v))| (k, v)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(ByteSize::parse("1MiB"), Ok(ByteSize(1 << 20)));
        assert_eq!(ByteSize::parse("64KiB"), Ok(ByteSize(64 << 10)));
        assert_eq!(ByteSize::parse("12"), Ok(ByteSize(12)));
        assert!(ByteSize::parse("12 parsecs").is_err());
    }

    #[test]
    fn rates_parse_named_and_duration_periods() {
        let r = RateSpec::parse("60/minute").unwrap();
        assert_eq!((r.count, r.period), (60, Duration::from_secs(60)));
        let r = RateSpec::parse("10/30s").unwrap();
        assert_eq!(r.period, Duration::from_secs(30));
        assert!(RateSpec::parse("0/minute").is_err());
        assert!(RateSpec::parse("lots").is_err());
        let too_long = RateSpec::parse("1/600years").unwrap_err();
        assert!(too_long.contains("at most 365 days"), "{too_long}");
        assert!(RateSpec::parse("1/365d").is_ok());
    }

    #[test]
    fn durations_past_a_year_are_refused_in_words_without_the_parsers_own() {
        assert_eq!(duration::parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(duration::parse("365d"), Ok(duration::LONGEST));
        for huge in ["366d", "18446744073709551615s", "600years"] {
            let refused = duration::parse(huge).unwrap_err();
            assert!(refused.contains("longer than the 365 days"), "{refused}");
        }
        for bad in ["-5s", "10 parsecs", "soon", ""] {
            let refused = duration::parse(bad).unwrap_err();
            assert!(refused.contains("is not a duration: write"), "{refused}");
            assert!(!refused.contains("expected"), "{refused}");
        }
    }

    #[test]
    fn key_hashes_need_64_hex_digits() {
        assert!(KeyHash::from_hex(&"ab".repeat(32)).is_ok());
        assert!(KeyHash::from_hex("abc").is_err());
        assert!(KeyHash::from_hex(&"zz".repeat(32)).is_err());
    }
}
