//! `policies.retry:` — retries of idempotent, trusted tools, made into a [`Retry`] hook.

use std::time::Duration;

use serde::Deserialize;
use toolgate_hooks::Retry;

use crate::config::ConfigError;
use crate::config::values;

/// `retry:` — retries of idempotent, trusted tools on transient failures.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (default 3).
    pub max_attempts: Option<u32>,
    /// The first backoff (default 100 ms).
    #[serde(default, with = "values::opt_duration")]
    pub base_delay: Option<Duration>,
    /// The longest backoff (default 2 s).
    #[serde(default, with = "values::opt_duration")]
    pub max_delay: Option<Duration>,
    /// Tools to treat as idempotent even if not annotated so.
    #[serde(default)]
    pub idempotent_tools: Vec<String>,
}

impl TryFrom<&RetryPolicy> for Retry {
    type Error = ConfigError;

    /// The hook, or what the retry hook refuses (reported against the whole section).
    fn try_from(policy: &RetryPolicy) -> Result<Self, ConfigError> {
        let mut retry = Retry::builder();
        if let Some(n) = policy.max_attempts {
            retry = retry.max_attempts(n);
        }
        if let Some(d) = policy.base_delay {
            retry = retry.base_delay(d);
        }
        if let Some(d) = policy.max_delay {
            retry = retry.max_delay(d);
        }
        (policy.idempotent_tools.iter())
            .fold(retry, |b, tool| b.idempotent_tool(tool.clone()))
            .build()
            .map_err(|e| ConfigError::invalid("", e.to_string()))
    }
}
