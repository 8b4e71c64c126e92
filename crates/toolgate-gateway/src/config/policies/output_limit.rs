//! `policies.output_limit:` — the largest output returned, made into an [`OutputLimit`]
//! hook.

use std::collections::BTreeMap;

use serde::Deserialize;
use toolgate_hooks::OutputLimit;
use toolgate_hooks::output_limit::Overflow;

use crate::config::values::ByteSize;

/// `output_limit:` — the largest output returned.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputLimitPolicy {
    /// The limit for every tool.
    pub max_bytes: ByteSize,
    /// Limits per tool.
    #[serde(default)]
    pub tools: BTreeMap<String, ByteSize>,
    /// `truncate` (default) or `fail`.
    #[serde(default)]
    pub on_overflow: Overflow,
}

impl From<&OutputLimitPolicy> for OutputLimit {
    fn from(policy: &OutputLimitPolicy) -> Self {
        let limit = OutputLimit::new()
            .max_bytes(policy.max_bytes.0)
            .on_overflow(policy.on_overflow);
        (policy.tools.iter()).fold(limit, |b, (tool, size)| {
            b.tool_max_bytes(tool.clone(), size.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_overflow_is_read_as_the_hook_s_own() {
        let config = crate::config::parse(
            "policies:\n  output_limit:\n    max_bytes: 1KiB\n    on_overflow: fail\n",
        )
        .unwrap();
        let policy = config.policies.output_limit.unwrap();
        assert_eq!(policy.on_overflow, Overflow::Fail);

        let error = crate::config::parse(
            "policies:\n  output_limit:\n    max_bytes: 1KiB\n    on_overflow: cut\n",
        )
        .unwrap_err();
        assert_eq!(error.field(), "policies.output_limit.on_overflow");
        assert!(
            error.to_string().contains("`truncate` or `fail`"),
            "{error}"
        );
    }
}
