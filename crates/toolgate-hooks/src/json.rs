//! Small helpers for JSON values shared by the policies that rewrite them.

use serde_json::{Map, Value};

/// `key`, or `key (2)`, `key (3)`… when an earlier key of `map` already has that name:
/// two keys that become the same placeholder both keep their values.
pub(crate) fn unique_key(map: &Map<String, Value>, key: String) -> String {
    if !map.contains_key(&key) {
        return key;
    }
    (2..)
        .map(|n| format!("{key} ({n})"))
        .find(|candidate| !map.contains_key(candidate))
        .unwrap_or(key)
}
