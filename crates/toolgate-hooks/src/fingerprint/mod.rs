//! Stable fingerprints of JSON values: the canonical form (object keys sorted, no
//! whitespace) and its SHA-256, used by cache keys and audit records so that two
//! equal inputs give the same key whatever order their fields arrived in.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` as canonical JSON: object keys sorted, no whitespace.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::fingerprint::canonical_json;
/// assert_eq!(canonical_json(&json!({"b": 1, "a": [true, null]})), r#"{"a":[true,null],"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

/// `sha256:` and the SHA-256 of the canonical JSON of `value`: a fingerprint that shows
/// whether two values are equal without showing either.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::fingerprint::fingerprint;
/// assert_eq!(fingerprint(&json!({"a": 1, "b": 2})), fingerprint(&json!({"b": 2, "a": 1})));
/// assert!(fingerprint(&json!(1)).starts_with("sha256:"));
/// ```
pub fn fingerprint(value: &Value) -> String {
    format!("sha256:{}", sha256_hex(canonical_json(value).as_bytes()))
}
