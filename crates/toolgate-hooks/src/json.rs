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

/// The key of `map` that holds a base64 binary payload of MCP content, if any: `data` of
/// an image or audio block, `blob` of binary resource contents. Detectors skip it: it is
/// not text, and a run of digits inside base64 is no phone number — replacing it would
/// corrupt the image.
pub(crate) fn binary_payload_key(map: &Map<String, Value>) -> Option<&'static str> {
    match map.get("type").and_then(Value::as_str) {
        Some("image" | "audio") if map.contains_key("data") => Some("data"),
        _ if map.contains_key("blob") && map.contains_key("uri") => Some("blob"),
        _ => None,
    }
}
