//! Stable fingerprints of JSON values: the canonical form (object keys sorted, no
//! whitespace) and its SHA-256, used by cache keys so that two equal inputs give the
//! same key whatever order their fields arrived in; and [`KeyedFingerprint`], its
//! HMAC-SHA-256 under a secret key, used by audit records.

use std::fmt;
use std::io::Write;

use hmac::{Hmac, KeyInit, Mac};
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

/// Feeds written bytes to a hash or a MAC.
struct HashWriter<H>(H);

impl<H: sha2::digest::Update> Write for HashWriter<H> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends the lowercase hex of a SHA-256 `digest` to `out`, in one write (a push per
/// digit costs a capacity check and a UTF-8 encoding each).
fn hex(digest: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 64];
    for (pair, byte) in text.chunks_exact_mut(2).zip(digest) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    let written = 2 * digest.len().min(32);
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&text[..written]).unwrap_or_default());
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

/// Fingerprints under a secret key: `hmac-sha256:` and the HMAC-SHA-256 of the canonical
/// JSON of a value. Equal values give equal fingerprints under one key, so records can
/// still be correlated; but without the key nobody can test a guess — a phone number, a
/// card number, a name — against a fingerprint, which a plain SHA-256 of such short
/// values allows.
///
/// Use one key per deployment (every replica the same one, so their records correlate)
/// and keep it with your other secrets. [`KeyedFingerprint::random`] makes a key that
/// lives as long as the value.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::fingerprint::KeyedFingerprint;
///
/// let ours = KeyedFingerprint::new(b"deployment key from the vault");
/// let a = ours.of(&json!({"phone": "+44 20 7946 0958", "n": 1}));
/// assert_eq!(a, ours.of(&json!({"n": 1, "phone": "+44 20 7946 0958"})));
/// assert!(a.starts_with("hmac-sha256:"));
/// assert_ne!(a, KeyedFingerprint::new(b"another key").of(&json!({"phone": "+44 20 7946 0958", "n": 1})));
/// ```
#[derive(Clone)]
pub struct KeyedFingerprint {
    /// The MAC with the key already absorbed: each fingerprint starts from a copy.
    mac: Hmac<Sha256>,
}

impl fmt::Debug for KeyedFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyedFingerprint(hmac-sha256, key hidden)")
    }
}

impl KeyedFingerprint {
    /// Fingerprints under `key` (any length; 32 random bytes or more is right).
    pub fn new(key: impl AsRef<[u8]>) -> Self {
        KeyedFingerprint {
            mac: <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_ref())
                .expect("HMAC accepts keys of any length"),
        }
    }

    /// Fingerprints under a random key of 32 bytes from the operating system: they
    /// correlate only with fingerprints taken by this value (or its clones).
    pub fn random() -> Self {
        let mut key = random_key();
        let keyed = Self::new(key);
        key.fill(0);
        keyed
    }

    /// The fingerprint of `value`.
    pub fn of(&self, value: &Value) -> String {
        let mut mac = HashWriter(self.mac.clone());
        // Writing to a MAC cannot fail.
        let _ = write_canonical(value, &mut mac);
        let mut out = String::with_capacity(12 + 64);
        out.push_str("hmac-sha256:");
        hex(&mac.0.finalize().into_bytes(), &mut out);
        out
    }
}

/// 32 random bytes from the operating system, for a [`KeyedFingerprint`] key.
pub fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_err() {
        // No OS randomness: fall back to a key no caller can predict either.
        for chunk in key.chunks_mut(8) {
            chunk.copy_from_slice(&fastrand::u64(..).to_le_bytes());
        }
    }
    key
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
    fn the_keyed_fingerprint_is_the_hmac_of_the_canonical_json() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let keyed = KeyedFingerprint::new(b"Jefe");
        assert_eq!(
            keyed.of(&Value::String("what do ya want for nothing?".into())),
            // The canonical JSON of a string is quoted, so this is not the RFC's digest;
            // the RFC's digest is checked on the raw bytes below.
            {
                let mut mac = keyed.mac.clone();
                mac.update(br#""what do ya want for nothing?""#);
                let mut out = "hmac-sha256:".to_owned();
                hex(&mac.finalize().into_bytes(), &mut out);
                out
            }
        );
        let mut mac = KeyedFingerprint::new(b"Jefe").mac;
        mac.update(b"what do ya want for nothing?");
        let mut digest = String::new();
        hex(&mac.finalize().into_bytes(), &mut digest);
        assert_eq!(
            digest,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn random_keys_differ() {
        let value = json!({"a": 1});
        assert_ne!(
            KeyedFingerprint::random().of(&value),
            KeyedFingerprint::random().of(&value)
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
