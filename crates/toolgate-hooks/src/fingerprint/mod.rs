//! Stable fingerprints of JSON values: the canonical form (object keys sorted, no
//! whitespace) and its SHA-256, used by cache keys and audit records so that two
//! equal inputs give the same key whatever order their fields arrived in.

use std::io::Write;

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
    let mut out = Vec::new();
    // Writing to a `Vec` cannot fail, and serde_json writes valid UTF-8.
    let _ = write_canonical(value, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Streams the canonical form of `value` into `out`, with no intermediate string: a
/// fingerprint hashes it as it is written.
fn write_canonical<W: Write>(value: &Value, out: &mut W) -> std::io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.write_all(b"{")?;
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, key)?;
                out.write_all(b":")?;
                write_canonical(item, out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        scalar => serde_json::to_writer(out, scalar).map_err(std::io::Error::from),
    }
}

/// Feeds written bytes to a SHA-256.
struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(digest: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in digest {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// The SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    hex(&Sha256::digest(bytes), &mut out);
    out
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
    let mut hasher = HashWriter(Sha256::new());
    // Writing to a hasher cannot fail.
    let _ = write_canonical(value, &mut hasher);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    hex(&hasher.0.finalize(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_streamed_fingerprint_is_the_hash_of_the_canonical_json() {
        let value = json!({
            "z": [1, 2.5, -3, null, true, "é\"\n"],
            "a": {"y": {}, "b": [], "\u{1f}": "unit separator"},
            "m": 18446744073709551615u64,
        });
        let canonical = canonical_json(&value);
        assert_eq!(
            canonical,
            r#"{"a":{"\u001f":"unit separator","b":[],"y":{}},"m":18446744073709551615,"z":[1,2.5,-3,null,true,"é\"\n"]}"#
        );
        assert_eq!(
            fingerprint(&value),
            format!("sha256:{}", sha256_hex(canonical.as_bytes()))
        );
    }

    #[test]
    fn sha256_hex_matches_a_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
