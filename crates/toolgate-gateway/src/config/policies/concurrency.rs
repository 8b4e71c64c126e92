//! `policies.concurrency:` — caps on calls in flight, made into a [`ConcurrencyBuilder`],
//! to which the gateway adds the concurrency backend of its shared state.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toolgate_hooks::Concurrency;
use toolgate_hooks::concurrency::ConcurrencyBuilder;

use super::{OnBackendErrorName, PartitionName, at_least_one, redis_deadline};
use crate::config::values;

/// One cap on calls in flight.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyPolicy {
    /// The policy's name: it namespaces its budgets.
    pub name: String,
    /// How many calls may run at once.
    #[serde(deserialize_with = "limit")]
    pub limit: NonZeroU32,
    /// How calls split into budgets (default `user_tool`).
    #[serde(default)]
    pub partition: PartitionName,
    /// How long a call waits for a free slot before it is refused (default `0s`).
    #[serde(default, with = "values::opt_duration")]
    pub wait: Option<Duration>,
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

fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<NonZeroU32, D::Error> {
    at_least_one(d, "a concurrency limit must be at least 1")
}

impl From<&ConcurrencyPolicy> for ConcurrencyBuilder {
    /// The hook's builder, without its backend.
    fn from(policy: &ConcurrencyPolicy) -> Self {
        Concurrency::builder_nonzero(policy.limit)
            .name(policy.name.clone())
            .partition(policy.partition.into())
            .wait(policy.wait.unwrap_or_default())
            .on_backend_error(policy.on_backend_error.into())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_limit_of_zero_is_refused_where_it_is_written() {
        let error = crate::config::parse("policies:\n  concurrency:\n    - {name: c, limit: 0}\n")
            .unwrap_err();
        assert_eq!(error.field(), "policies.concurrency[0].limit");
        assert!(error.to_string().starts_with("<config>:3:"), "{error}");
        assert!(
            error.to_string().ends_with(
                "`policies.concurrency[0].limit`: a concurrency limit must be at least 1"
            ),
            "{error}"
        );

        let negative =
            crate::config::parse("policies:\n  concurrency:\n    - {name: c, limit: -1}\n")
                .unwrap_err();
        assert_eq!(negative.field(), "policies.concurrency[0].limit");
        assert!(
            negative
                .to_string()
                .contains("expected a whole number, 0 or more"),
            "{negative}"
        );
    }
}
