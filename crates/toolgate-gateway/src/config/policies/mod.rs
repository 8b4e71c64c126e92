//! `policies:` — what every call runs through.
//!
//! One module per policy holds its section of the file (a serde spec that refuses what it
//! can while it is read, so that the error carries a line and column, and checks the rest
//! in its `check`) and its conversion into the hook of `toolgate_hooks`, or into the hook's
//! builder where the gateway still adds a backend from its shared state. The gateway
//! (`gateway::policies`) only wires the hooks to that state and registers them in stage
//! order.

mod approval;
mod authorization;
mod budget;
mod cache;
mod cedar;
mod concurrency;
mod output_limit;
mod rate_limit;
mod redaction;
mod retry;
mod timeout;

use std::collections::BTreeSet;
use std::fmt;
use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::de;
use serde::{Deserialize, Deserializer};
use toolgate_core::error::hides_text;
use toolgate_hooks::{OnBackendError, Partition};

pub use approval::{ApprovalPolicy, WebhookConfig, WebhookEventName, WebhookFormatName};
pub use authorization::{AuthorizationPolicy, RuleEntry};
pub(crate) use budget::describe_for_tool as describe_budgets;
pub use budget::{BudgetPartition, BudgetPolicy, CostSpec, MAX_UNITS};
pub use cache::CachePolicy;
pub use cedar::CedarPolicy;
pub use concurrency::ConcurrencyPolicy;
pub use output_limit::OutputLimitPolicy;
pub use rate_limit::RateLimitPolicy;
pub use redaction::{RedactionModeName, RedactionPattern, RedactionPolicy};
pub use retry::RetryPolicy;
pub use timeout::TimeoutPolicy;

use super::ConfigError;
use super::values::{duration, parse_str};

/// Every policy of the gateway. All are optional; with none, every authenticated user may
/// call every tool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policies {
    /// Who may call what (deny by default when present).
    pub authorization: Option<AuthorizationPolicy>,
    /// Who may call what, with which arguments: Cedar policy files (docs/policies.md).
    pub cedar: Option<CedarPolicy>,
    /// Calls that wait for a person's approval.
    pub approval: Option<ApprovalPolicy>,
    /// Rate limits.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitPolicy>,
    /// Costs per call charged against budgets per window (docs/policies.md).
    #[serde(default)]
    pub budgets: Vec<BudgetPolicy>,
    /// Caps on calls in flight.
    #[serde(default)]
    pub concurrency: Vec<ConcurrencyPolicy>,
    /// Call timeouts.
    pub timeouts: Option<TimeoutPolicy>,
    /// Retries of idempotent tools.
    pub retry: Option<RetryPolicy>,
    /// The result cache.
    pub cache: Option<CachePolicy>,
    /// Redaction of sensitive values in input and output.
    pub redaction: Option<RedactionPolicy>,
    /// Output size limits.
    pub output_limit: Option<OutputLimitPolicy>,
}

impl Policies {
    /// What the sections could not refuse while they were read, one field at a time: each
    /// section's own `check`, and the names that must differ between the entries of a
    /// list. Tool names are checked later, once the tools of upstream servers are known.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if let Some(cedar) = &self.cedar {
            cedar.check().map_err(|e| e.within("policies.cedar"))?;
        }
        unique(
            self.rate_limits.iter().map(|r| r.name.as_str()),
            "policies.rate_limits",
            |name| {
                format!(
                    "two rate limits are named `{name}`: names keep their budgets apart, so give each its own"
                )
            },
        )?;
        unique(
            self.concurrency.iter().map(|c| c.name.as_str()),
            "policies.concurrency",
            |name| format!("two concurrency caps are named `{name}`"),
        )?;
        unique(
            self.budgets.iter().map(|b| b.name.as_str()),
            "policies.budgets",
            |name| {
                format!(
                    "two budgets are named `{name}`: names keep their spending apart, so give each its own"
                )
            },
        )?;
        if let Some(redaction) = &self.redaction {
            redaction
                .check()
                .map_err(|e| e.within("policies.redaction"))?;
        }
        if let Some(approval) = &self.approval {
            approval
                .check()
                .map_err(|e| e.within("policies.approval"))?;
        }
        Ok(())
    }
}

/// The first entry of `list` whose name an earlier one has, refused at `list[i].name`.
fn unique<'a>(
    names: impl Iterator<Item = &'a str>,
    list: &str,
    twice: impl Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, name) in names.enumerate() {
        if name.trim().is_empty() || name.chars().any(hides_text) {
            return Err(ConfigError::invalid(
                format!("{list}[{i}].name"),
                "a name may not be empty nor hold control characters (a line break, an escape) or invisible formatting characters (a zero-width space, a bidirectional override): it names the policy in logs, metrics and answers",
            ));
        }
        if !seen.insert(name) {
            return Err(ConfigError::invalid(
                format!("{list}[{i}].name"),
                twice(name),
            ));
        }
    }
    Ok(())
}

/// How calls split into budgets.
// A mirror of `Partition`: its `Custom` variant holds a function, which a file cannot give.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionName {
    /// One budget for everyone.
    Global,
    /// One per user.
    User,
    /// One per tool.
    Tool,
    /// One per user and tool (the default).
    #[default]
    UserTool,
}

impl From<PartitionName> for Partition {
    fn from(name: PartitionName) -> Self {
        match name {
            PartitionName::Global => Partition::Global,
            PartitionName::User => Partition::User,
            PartitionName::Tool => Partition::Tool,
            PartitionName::UserTool => Partition::UserTool,
        }
    }
}

/// What a policy does when its state backend (Redis) cannot decide.
// A mirror of `OnBackendError`, which has no `local_fallback`: that one is decided by the
// backend the gateway picks (`state::Backends`), not by the hook.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBackendErrorName {
    /// Refuse the call (503): the default.
    #[default]
    FailClosed,
    /// Let the call through.
    FailOpen,
    /// Decide in this process while Redis is away: the policy's own limit, per replica.
    LocalFallback,
}

impl From<OnBackendErrorName> for OnBackendError {
    fn from(name: OnBackendErrorName) -> Self {
        match name {
            OnBackendErrorName::FailOpen => OnBackendError::FailOpen,
            // A local fallback decides in the backend; if even that fails, refuse.
            OnBackendErrorName::FailClosed | OnBackendErrorName::LocalFallback => {
                OnBackendError::FailClosed
            }
        }
    }
}

/// A whole number of at least 1, refused with `message` while the reader still points at
/// it (so that the error carries its line and column); anything but a whole number, or one
/// past `u32`, is refused as for any `u32`.
fn at_least_one<'de, D: Deserializer<'de>>(d: D, message: &str) -> Result<NonZeroU32, D::Error> {
    let n = whole_number(d, "u32", 1..=u64::from(u32::MAX), message)?;
    u32::try_from(n)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| de::Error::custom(message))
}

/// A whole number within `range`, refused with `message` while the reader still points at
/// it; anything but a whole number, or one past the integer type `kind` (`u32`, `u64`), is
/// refused as for any number of that type (said in plain words by `in_plain_words`).
fn whole_number<'de, D: Deserializer<'de>>(
    d: D,
    kind: &'static str,
    range: RangeInclusive<u64>,
    message: &str,
) -> Result<u64, D::Error> {
    struct Whole<'a> {
        kind: &'static str,
        range: RangeInclusive<u64>,
        message: &'a str,
    }

    impl de::Visitor<'_> for Whole<'_> {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.kind)
        }

        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u64, E> {
            let max = if self.kind == "u32" {
                u64::from(u32::MAX)
            } else {
                u64::MAX
            };
            if n > max {
                Err(E::invalid_value(de::Unexpected::Unsigned(n), &self))
            } else if self.range.contains(&n) {
                Ok(n)
            } else {
                Err(E::custom(self.message))
            }
        }

        fn visit_i64<E: de::Error>(self, n: i64) -> Result<u64, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
            }
        }
    }

    d.deserialize_u64(Whole {
        kind,
        range,
        message,
    })
}

/// A duration that `check` accepts, refused with its message while the reader still
/// points at it.
fn checked_duration<'de, D: Deserializer<'de>>(
    d: D,
    check: impl FnOnce(Duration) -> Result<(), &'static str>,
) -> Result<Duration, D::Error> {
    parse_str(d, |text| {
        let duration = duration::parse(text)?;
        check(duration).map_err(str::to_owned)?;
        Ok(duration)
    })
}

/// `redis_deadline`: the deadline of a policy's Redis calls in place of `state.deadline`,
/// refused at zero.
mod redis_deadline {
    use super::*;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        checked_duration(d, |deadline| {
            if deadline.is_zero() {
                Err(
                    "a Redis deadline of zero would fail every call: use e.g. `100ms` (or leave it out for the default)",
                )
            } else {
                Ok(())
            }
        })
        .map(Some)
    }
}

pub(super) fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    #[test]
    fn a_policy_can_set_its_own_redis_deadline_and_a_zero_one_is_refused_with_its_line() {
        let config = parse(
            "policies:\n  rate_limits:\n    - {name: a, rate: 5/second, redis_deadline: 250ms}\n  cache:\n    redis_deadline: 1s\n",
        )
        .unwrap();
        assert_eq!(
            config.policies.rate_limits[0].redis_deadline,
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(
            config.policies.cache.as_ref().unwrap().redis_deadline,
            Some(std::time::Duration::from_secs(1))
        );

        for (text, field) in [
            (
                "policies:\n  concurrency:\n    - {name: c, limit: 2, redis_deadline: 0s}\n",
                "policies.concurrency[0].redis_deadline",
            ),
            (
                "policies:\n  rate_limits:\n    - {name: r, rate: 1/s, redis_deadline: 0ms}\n",
                "policies.rate_limits[0].redis_deadline",
            ),
            (
                "policies:\n  budgets:\n    - {name: b, limit: 5, redis_deadline: 0s}\n",
                "policies.budgets[0].redis_deadline",
            ),
            (
                "policies:\n  cache:\n    redis_deadline: 0s\n",
                "policies.cache.redis_deadline",
            ),
        ] {
            let zero = parse(text).unwrap_err();
            assert_eq!(zero.field(), field, "{text}");
            let message = zero.to_string();
            let line = text.lines().count();
            let column = text.lines().last().unwrap().find(" 0").unwrap() + 2;
            assert!(
                message.starts_with(&format!("<config>:{line}:{column}:")),
                "{message}"
            );
            assert!(
                message.ends_with("a Redis deadline of zero would fail every call: use e.g. `100ms` (or leave it out for the default)"),
                "{message}"
            );
        }
    }

    #[test]
    fn names_of_one_list_must_differ() {
        for (text, field, says) in [
            (
                "policies:\n  rate_limits:\n    - {name: a, rate: 1/s}\n    - {name: a, rate: 2/s}\n",
                "policies.rate_limits[1].name",
                "two rate limits are named `a`",
            ),
            (
                "policies:\n  concurrency:\n    - {name: a, limit: 1}\n    - {name: a, limit: 2}\n",
                "policies.concurrency[1].name",
                "two concurrency caps are named `a`",
            ),
            (
                "policies:\n  budgets:\n    - {name: a, limit: 1}\n    - {name: a, limit: 2}\n",
                "policies.budgets[1].name",
                "two budgets are named `a`",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.field(), field, "{text}");
            assert!(error.to_string().contains(says), "{error}");
        }
        // A rate limit and a cap may share a name: their budgets live apart.
        parse("policies:\n  rate_limits:\n    - {name: a, rate: 1/s}\n  concurrency:\n    - {name: a, limit: 1}\n")
            .unwrap();
    }
}
