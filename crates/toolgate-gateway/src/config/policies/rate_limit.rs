//! `policies.rate_limits:` — calls per period, made into a [`QuotaBuilder`], to which the
//! gateway adds the quota backend of its shared state.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toolgate_hooks::Quota;
use toolgate_hooks::quota::{QuotaBuilder, Rate};

use super::{OnBackendErrorName, PartitionName, at_least_one, redis_deadline};
use crate::config::ConfigError;
use crate::config::values::RateSpec;

/// One rate limit.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitPolicy {
    /// The policy's name: it namespaces its budgets, so give each a different one.
    pub name: String,
    /// The rate: `60/minute`, `5/second`, `10/30s`.
    pub rate: RateSpec,
    /// The most calls allowed at once, after a quiet spell (default: the rate's count, so
    /// `60/minute` allows 60 at once, then one a second). Not added to the rate: it
    /// replaces that allowance, so `burst: 10` with `60/minute` allows 10 at once.
    #[serde(default, deserialize_with = "burst")]
    pub burst: Option<NonZeroU32>,
    /// How calls split into budgets (default `user_tool`).
    #[serde(default)]
    pub partition: PartitionName,
    /// The tools it applies to (default: all).
    #[serde(default)]
    pub tools: Vec<String>,
    /// What happens when the state backend fails (default `fail_closed`).
    #[serde(default)]
    pub on_backend_error: OnBackendErrorName,
    /// The deadline of this policy's Redis calls, in place of `state.deadline` (default:
    /// that one). Ignored in memory.
    #[serde(default, with = "redis_deadline")]
    pub redis_deadline: Option<Duration>,
}

fn burst<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NonZeroU32>, D::Error> {
    at_least_one(d, "a burst must be at least 1 (leave it out for none)").map(Some)
}

impl RateLimitPolicy {
    /// The rate with its burst (field paths relative to the entry).
    fn rate(&self) -> Result<Rate, ConfigError> {
        (self.rate.to_rate(self.burst.map(NonZeroU32::get)))
            .map_err(|e| ConfigError::invalid("rate", e.to_string()))
    }
}

impl TryFrom<&RateLimitPolicy> for QuotaBuilder {
    type Error = ConfigError;

    /// The hook's builder, without its backend.
    fn try_from(policy: &RateLimitPolicy) -> Result<Self, ConfigError> {
        Ok(Quota::builder(policy.rate()?)
            .name(policy.name.clone())
            .partition(policy.partition.into())
            .on_backend_error(policy.on_backend_error.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_zero_is_refused_where_it_is_written() {
        let error = crate::config::parse(
            "policies:\n  rate_limits:\n    - name: a\n      rate: 5/second\n      burst: 0\n",
        )
        .unwrap_err();
        assert_eq!(error.field(), "policies.rate_limits[0].burst");
        assert_eq!(
            error.to_string(),
            "<config>:5:14: `policies.rate_limits[0].burst`: a burst must be at least 1 (leave it out for none)"
        );
    }

    #[test]
    fn the_rate_and_burst_become_the_quota_s() {
        let config = crate::config::parse(
            "policies:\n  rate_limits:\n    - {name: a, rate: 5/second, burst: 9}\n",
        )
        .unwrap();
        let quota = QuotaBuilder::try_from(&config.policies.rate_limits[0]).unwrap();
        assert_eq!(
            quota.rate(),
            Rate::per_second(5).unwrap().with_burst(9).unwrap()
        );

        let too_fine =
            crate::config::parse("policies:\n  rate_limits:\n    - {name: a, rate: 1000/1ns}\n")
                .unwrap();
        let error = QuotaBuilder::try_from(&too_fine.policies.rate_limits[0])
            .err()
            .unwrap();
        assert_eq!(error.field(), "rate");
        assert!(error.to_string().contains("nanosecond"), "{error}");
    }
}
