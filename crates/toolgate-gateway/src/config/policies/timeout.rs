//! `policies.timeouts:` — how long a call may run, made into a [`Timeout`] hook.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toolgate_hooks::Timeout;
use toolgate_hooks::timeout::TimeoutScope;

use crate::config::values;

/// `timeouts:` — how long a call may run.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutPolicy {
    /// The limit of every call (default: none beyond the server's request timeout).
    #[serde(default, with = "values::opt_duration")]
    pub default: Option<Duration>,
    /// Limits per tool.
    #[serde(default, with = "values::duration_map")]
    pub tools: BTreeMap<String, Duration>,
    /// Apply each limit to every attempt rather than to the whole call (default false).
    #[serde(default)]
    pub per_attempt: bool,
}

impl From<&TimeoutPolicy> for Timeout {
    fn from(policy: &TimeoutPolicy) -> Self {
        let scope = if policy.per_attempt {
            TimeoutScope::Attempt
        } else {
            TimeoutScope::Call
        };
        let timeout = match (policy.default, scope) {
            (Some(limit), TimeoutScope::Call) => Timeout::per_call(limit),
            (Some(limit), TimeoutScope::Attempt) => Timeout::per_attempt(limit),
            (None, scope) => Timeout::only_listed(scope),
        };
        (policy.tools.iter()).fold(timeout, |b, (tool, limit)| b.tool(tool.clone(), *limit))
    }
}
