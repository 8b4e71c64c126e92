//! `policies.cache:` — the result cache, made into a [`ResultCacheBuilder`], to which the
//! gateway adds the cache backend of its shared state.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toolgate_hooks::ResultCache;
use toolgate_hooks::cache::ResultCacheBuilder;

use super::redis_deadline;
use crate::config::values;

/// `cache:` — the result cache (per user unless a tool is listed in `public`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachePolicy {
    /// How long entries live (default 60 s).
    #[serde(default, with = "values::opt_duration")]
    pub ttl: Option<Duration>,
    /// TTLs per tool; a listed tool is cached even if not annotated read-only.
    #[serde(default, with = "values::duration_map")]
    pub tools: BTreeMap<String, Duration>,
    /// Tools never cached.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Tools whose results every user may share.
    #[serde(default)]
    pub public: Vec<String>,
    /// The most entries kept in memory (default 10 000; ignored on Redis).
    pub max_entries: Option<u64>,
    /// The deadline of this policy's Redis calls, in place of `state.deadline` (default:
    /// that one). Ignored in memory.
    #[serde(default, with = "redis_deadline")]
    pub redis_deadline: Option<Duration>,
}

impl From<&CachePolicy> for ResultCacheBuilder {
    /// The hook's builder, without its backend.
    fn from(policy: &CachePolicy) -> Self {
        let cache = ResultCache::builder().ttl(policy.ttl.unwrap_or(Duration::from_secs(60)));
        let cache =
            (policy.tools.iter()).fold(cache, |b, (tool, ttl)| b.tool_ttl(tool.clone(), *ttl));
        let cache = (policy.exclude.iter()).fold(cache, |b, tool| b.exclude(tool.clone()));
        (policy.public.iter()).fold(cache, |b, tool| b.public(tool.clone()))
    }
}
