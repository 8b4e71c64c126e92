//! The key layout. Every key starts with the configured prefix (default `toolgate`), and
//! each Lua script touches keys of one Redis Cluster slot: a budget's key carries the
//! budget in a hash tag (`{…}`), and a fill lock's hash tag is the whole key of its entry.
//!
//! | what | key | expiry |
//! |---|---|---|
//! | quota state (GCRA TAT) | `<prefix>:{<policy key>}:quota` | when the budget is full again |
//! | concurrency leases | `<prefix>:{<policy key>}:leases` (sorted set) | the latest lease's expiry |
//! | cached result | `<prefix>:<tool>:<sha256>` (the `CacheKey`) | the entry's TTL |
//! | cache fill lock | `<prefix>:fill:{<prefix>:<tool>:<sha256>}` | the fill wait |

use toolgate_hooks::cache::CacheKey;

pub(crate) fn quota(prefix: &str, key: &str) -> String {
    format!("{prefix}:{{{key}}}:quota")
}

pub(crate) fn leases(prefix: &str, key: &str) -> String {
    format!("{prefix}:{{{key}}}:leases")
}

/// The `CacheKey` (`toolgate:<tool>:<sha256>`) with its first part replaced by the prefix:
/// the key itself under the default prefix.
pub(crate) fn cache_entry(prefix: &str, key: &CacheKey) -> String {
    let key = key.as_str();
    match key.strip_prefix("toolgate:") {
        Some(rest) => format!("{prefix}:{rest}"),
        None => format!("{prefix}:{key}"),
    }
}

pub(crate) fn fill_lock(prefix: &str, entry: &str) -> String {
    format!("{prefix}:fill:{{{entry}}}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolgate_core::tool::ToolDefinition;
    use toolgate_hooks::cache::{KeyScope, cache_key};

    #[test]
    fn a_cache_entry_is_stored_under_its_cache_key_by_default() {
        let tool: ToolDefinition = serde_json::from_value(
            json!({"name": "weather", "description": "", "version": "1", "input_schema": {}}),
        )
        .unwrap();
        let key = cache_key(
            &tool,
            &KeyScope::User("ann".into()),
            &json!({"city": "Oslo"}),
        );
        assert_eq!(super::cache_entry("toolgate", &key), key.as_str());
        let moved = super::cache_entry("staging", &key);
        assert!(moved.starts_with("staging:weather:"), "{moved}");
        assert_eq!(
            super::fill_lock("toolgate", key.as_str()),
            format!("toolgate:fill:{{{key}}}")
        );
    }

    #[test]
    fn every_budget_key_is_one_hash_tag() {
        assert_eq!(
            super::quota("toolgate", "q\u{1f}*"),
            "toolgate:{q\u{1f}*}:quota"
        );
        assert_eq!(super::leases("p", "k"), "p:{k}:leases");
    }
}
