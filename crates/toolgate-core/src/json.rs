//! JSON read strictly: an object that names a key twice is refused.
//!
//! serde_json keeps the last of two values given for one key, and says nothing. Two readers
//! of one document can then disagree — a policy that reads the first `path` and a tool that
//! reads the last — which is how an attacker slips a value past a check; and a caller who
//! repeats a key by mistake never learns that half of what they sent was dropped. Every
//! JSON a caller sends toolgate is read here, and such a document is refused with
//! [`RepeatedKey`], which names the key and the object it is in.
//!
//! The check costs one map operation per key, the one that builds the object anyway:
//! [`from_slice`] and [`from_str`] read in a single pass, as serde_json does, with its
//! limit of 128 nested levels and the line and column of its other errors.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

use crate::error::{MAX_SHOWN_ID, shown_text};

/// The longest pointer, in characters, that a message repeats whole.
const MAX_SHOWN_POINTER: usize = 2 * MAX_SHOWN_ID;

/// The length of `value` as JSON text, in bytes, counted as it would be written without
/// keeping the text. A value that cannot be written as JSON (a map with keys that are not
/// strings) counts what was written of it before it failed.
///
/// ```
/// use serde_json::json;
///
/// assert_eq!(toolgate_core::json::text_len(&json!({"a": [1, 2]})), 11); // {"a":[1,2]}
/// assert_eq!(toolgate_core::json::text_len(&"é"), 4);
/// ```
pub fn text_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    /// Counts what is written to it.
    struct Counted(usize);

    impl std::io::Write for Counted {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let mut counted = Counted(0);
    // Writing to a counter cannot fail; only the value can.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// Reads `bytes` as one JSON value, refusing an object that names a key twice.
///
/// What reads is exactly what `serde_json::from_slice::<Value>` gives.
///
/// # Errors
///
/// [`JsonError::RepeatedKey`] for an object with a key given twice, anywhere in the
/// document; [`JsonError::Malformed`] for bytes that are not one JSON value (or that nest
/// 128 levels deep or more: at most 127 are read); [`JsonError::InexactNumber`] for a whole
/// number no JSON value here holds exactly.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::json::{self, JsonError};
///
/// let value = json::from_slice(br#"{"path": "/tmp/x", "mode": "r"}"#)?;
/// assert_eq!(value, json!({"path": "/tmp/x", "mode": "r"}));
///
/// let sent = br#"{"arguments": {"path": "/etc/passwd", "path": "/tmp/x"}}"#;
/// let Err(JsonError::RepeatedKey(repeated)) = json::from_slice(sent) else { panic!() };
/// assert_eq!((repeated.key(), repeated.pointer()), ("path", "/arguments"));
/// assert_eq!(
///     repeated.to_string(),
///     "the key `path` appears twice in the object at `/arguments`: send each key once"
/// );
/// # Ok::<(), JsonError>(())
/// ```
pub fn from_slice(bytes: &[u8]) -> Result<Value, JsonError> {
    let value = read(&mut serde_json::Deserializer::from_slice(bytes))?;
    check_whole_numbers(bytes)?;
    Ok(value)
}

/// Reads `text` as one JSON value, refusing an object that names a key twice: as
/// [`from_slice`].
///
/// # Errors
///
/// As [`from_slice`].
///
/// # Examples
///
/// ```
/// use toolgate_core::json::{self, JsonError};
///
/// assert_eq!(json::from_str("[1, {\"a\": null}]")?, serde_json::json!([1, {"a": null}]));
///
/// let err = json::from_str("{\"a\": 1, \"a\": 2}").unwrap_err();
/// assert_eq!(err.to_string(), "the key `a` appears twice in the top-level object: send each key once");
///
/// let err = json::from_str("{\"a\": 1,").unwrap_err();
/// assert!(matches!(err, JsonError::Malformed(_)));
/// assert_eq!(err.to_string(), "EOF while parsing a value at line 1 column 8");
/// # Ok::<(), JsonError>(())
/// ```
pub fn from_str(text: &str) -> Result<Value, JsonError> {
    let value = read(&mut serde_json::Deserializer::from_str(text))?;
    check_whole_numbers(text.as_bytes())?;
    Ok(value)
}

/// A `Value` field of a derived struct, read refusing an object that names a key twice:
/// `#[serde(deserialize_with = "toolgate_core::json::unique_keys")]`.
///
/// The rest of the struct is read as serde reads it (which already refuses a field given
/// twice); this covers what a `Value` would otherwise take silently.
///
/// # Errors
///
/// The deserializer's custom error, saying which key appears twice and where within the
/// field's value; with serde_json, followed by the line and column.
///
/// # Examples
///
/// ```
/// use serde::Deserialize;
/// use serde_json::Value;
///
/// #[derive(Deserialize)]
/// struct Complete {
///     #[serde(deserialize_with = "toolgate_core::json::unique_keys")]
///     output: Value,
/// }
///
/// let read = serde_json::from_str::<Complete>(r#"{"output": {"rows": [{"id": 1}]}}"#).unwrap();
/// assert_eq!(read.output, serde_json::json!({"rows": [{"id": 1}]}));
///
/// let err = serde_json::from_str::<Complete>(r#"{"output": {"rows": [{"id": 1, "id": 2}]}}"#)
///     .err()
///     .unwrap();
/// assert_eq!(
///     err.to_string(),
///     "the key `id` appears twice in the object at `/rows/0` of this value: send each key once at line 1 column 35"
/// );
/// ```
pub fn unique_keys<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    let mut repeated = None;
    UniqueKeys {
        repeated: &mut repeated,
    }
    .deserialize(deserializer)
    .map_err(|error| match repeated {
        Some(found) => {
            let found = found.finish();
            de::Error::custom(format_args!(
                "{}{}: send each key once",
                found.key_phrase(),
                found.place(" of this value", "in one object")
            ))
        }
        None => error,
    })
}

/// Why JSON a caller sent was refused.
///
/// # Examples
///
/// ```
/// use toolgate_core::json::{self, JsonError};
///
/// match json::from_slice(b"{\"a\": 1, \"a\": 2}") {
///     Err(JsonError::RepeatedKey(repeated)) => assert_eq!(repeated.key(), "a"),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// An object names a key twice.
    #[error(transparent)]
    RepeatedKey(#[from] RepeatedKey),
    /// Not one JSON value (cut short, a syntax error, text after it), or nested 128 levels
    /// deep or more: serde_json's error, with the line and column.
    #[error(transparent)]
    Malformed(#[from] serde_json::Error),
    /// A whole number past what a JSON value here holds exactly.
    #[error(transparent)]
    InexactNumber(#[from] InexactNumber),
}

/// The least and the greatest whole numbers read exactly: those of a signed and an
/// unsigned 64-bit integer, as the message of [`InexactNumber`] gives them.
const EXACT_RANGE: &str = "from -9223372036854775808 to 18446744073709551615";

/// A whole number written without a fraction or an exponent, past the range JSON values
/// hold exactly here (from -2^63 to 2^64 − 1): read as it is, it would become the nearest
/// floating-point number — another number than the one sent, which a tool would get, and
/// which two different numbers could share (one cache entry, one approval).
///
/// # Examples
///
/// ```
/// use toolgate_core::json::{self, JsonError};
///
/// let Err(JsonError::InexactNumber(found)) = json::from_str(r#"{"id": 18446744073709551616}"#)
/// else {
///     panic!()
/// };
/// assert_eq!(found.number(), "18446744073709551616");
/// assert_eq!((found.line(), found.column()), (1, 8));
/// assert!(json::from_str(r#"{"id": "18446744073709551616", "x": 1.8e19}"#).is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the number {number} at line {line} column {column} is a whole number past those kept exactly ({EXACT_RANGE}): it would reach the tool as another number; send it as a string"
)]
pub struct InexactNumber {
    number: String,
    line: usize,
    column: usize,
}

impl InexactNumber {
    /// The number as sent (its first 64 digits, then `…`).
    pub fn number(&self) -> &str {
        &self.number
    }

    /// Its line, from 1.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column of its first character, from 1 (counted in bytes, as serde_json counts).
    pub fn column(&self) -> usize {
        self.column
    }
}

/// Checks that every whole number `bytes` writes without a fraction or an exponent is one
/// a JSON value here holds exactly ([`InexactNumber`]). `bytes` is JSON already read (or to
/// be read): what is not JSON is passed over. Runs of digits shorter than 19, which every
/// number within the range is written with, are passed over without a closer look, so
/// the check costs a pass over the bytes.
///
/// # Errors
///
/// [`InexactNumber`] for the first such number.
///
/// # Examples
///
/// ```
/// use toolgate_core::json::check_whole_numbers;
///
/// assert!(check_whole_numbers(br#"[18446744073709551615, -9223372036854775808, 1e400]"#).is_ok());
/// assert!(check_whole_numbers(br#"["99999999999999999999"]"#).is_ok());
/// assert!(check_whole_numbers(br#"[-9223372036854775809]"#).is_err());
/// ```
pub fn check_whole_numbers(bytes: &[u8]) -> Result<(), InexactNumber> {
    if !has_long_digit_run(bytes) {
        return Ok(());
    }
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                at += 1;
                let mut whole = true;
                while at < bytes.len() {
                    match bytes[at] {
                        b'0'..=b'9' => {}
                        b'.' | b'e' | b'E' | b'+' | b'-' => whole = false,
                        _ => break,
                    }
                    at += 1;
                }
                let number = &bytes[start..at];
                // Digits alone, at most 20 of them after a sign: anything else is not JSON,
                // for the reader to refuse.
                if whole && !fits(number) {
                    return Err(inexact(bytes, start, number));
                }
            }
            _ => at += 1,
        }
    }
    Ok(())
}

/// Whether `bytes` has 19 ASCII digits in a row: the fewest a whole number past the exact
/// range is written with.
fn has_long_digit_run(bytes: &[u8]) -> bool {
    let mut run = 0u32;
    for &byte in bytes {
        run = if byte.is_ascii_digit() { run + 1 } else { 0 };
        if run >= 19 {
            return true;
        }
    }
    false
}

/// Whether the whole number `number` (digits after an optional `-`) is within the range.
fn fits(number: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(number) else {
        return true;
    };
    text == "-" || text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok()
}

/// The error for `number`, at byte `start` of `bytes`.
#[cold]
fn inexact(bytes: &[u8], start: usize, number: &[u8]) -> InexactNumber {
    let before = &bytes[..start];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = start
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1)
        + 1;
    let text = String::from_utf8_lossy(number);
    let number = match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.into_owned(),
    };
    InexactNumber {
        number,
        line,
        column,
    }
}

/// An object that names a key twice: which key, in which object, and where in the text.
///
/// The key and the pointer are kept as a message shows them, since they come from the
/// sender: at most 64 characters of the key (128 of the pointer), then `…`, and control
/// characters (and those that turn text around or break lines) escaped, so that a hostile
/// key can neither forge a log line nor send back megabytes.
///
/// # Examples
///
/// ```
/// use toolgate_core::json::{self, JsonError};
///
/// let Err(JsonError::RepeatedKey(repeated)) =
///     json::from_str("{\"a\": [{}, {\"evil\\nkey\": 1, \"evil\\nkey\": 2}]}")
/// else {
///     panic!()
/// };
/// assert_eq!(repeated.key(), "evil\\nkey");
/// assert_eq!(repeated.pointer(), "/a/1");
/// assert_eq!((repeated.line(), repeated.column()), (1, 39));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: send each key once", self.found.key_phrase(), self.found.place("", "in the top-level object"))]
pub struct RepeatedKey {
    found: Found,
    line: usize,
    column: usize,
}

impl RepeatedKey {
    /// The key, as a message shows it.
    pub fn key(&self) -> &str {
        &self.found.key
    }

    /// The object the key is repeated in, as a JSON pointer (RFC 6901) from the top of the
    /// document (`""` for the top-level object), as a message shows it.
    pub fn pointer(&self) -> &str {
        &self.found.pointer
    }

    /// The line of the second occurrence of the key, from 1.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column just after the second occurrence of the key, from 1.
    pub fn column(&self) -> usize {
        self.column
    }
}

/// What the reading found, filled in as the error goes back out of the objects and arrays
/// it was in: nothing is tracked while all goes well.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Found {
    /// The key, shown.
    key: String,
    /// The pointer so far, from the innermost step out (each one `/`-prefixed and shown).
    steps: Vec<String>,
    /// The pointer, once the reading is done.
    pointer: String,
}

impl Found {
    fn new(key: &str) -> Self {
        Found {
            key: shown_text(key, MAX_SHOWN_ID).into_owned(),
            steps: Vec::new(),
            pointer: String::new(),
        }
    }

    /// The pointer of the steps taken, outermost first, as a message shows it.
    fn finish(mut self) -> Self {
        let pointer: String = self.steps.iter().rev().map(String::as_str).collect();
        self.pointer = match pointer.char_indices().nth(MAX_SHOWN_POINTER) {
            Some((end, _)) => format!("{}…", &pointer[..end]),
            None => pointer,
        };
        self.steps = Vec::new();
        self
    }

    fn key_phrase(&self) -> String {
        format!("the key `{}` appears twice ", self.key)
    }

    /// Where: `in the object at `/a`{suffix}`, or `top` for the outermost object.
    fn place(&self, suffix: &str, top: &str) -> String {
        if self.pointer.is_empty() {
            top.to_owned()
        } else {
            format!("in the object at `{}`{suffix}", self.pointer)
        }
    }
}

/// A key as a pointer's step shows it: `~` and `/` escaped as RFC 6901 has them, then
/// [`shown_text`].
fn pointer_step(key: &str) -> String {
    let escaped = key.replace('~', "~0").replace('/', "~1");
    format!("/{}", shown_text(&escaped, MAX_SHOWN_ID))
}

/// The whole document, read and checked to its end.
fn read<'de, R: serde_json::de::Read<'de>>(
    deserializer: &mut serde_json::Deserializer<R>,
) -> Result<Value, JsonError> {
    let mut repeated = None;
    let value = UniqueKeys {
        repeated: &mut repeated,
    }
    .deserialize(&mut *deserializer);
    match value {
        Ok(value) => {
            deserializer.end()?;
            Ok(value)
        }
        Err(error) => Err(match repeated {
            Some(found) => JsonError::RepeatedKey(RepeatedKey {
                found: found.finish(),
                line: error.line(),
                column: error.column(),
            }),
            None => JsonError::Malformed(error),
        }),
    }
}

/// Reads a [`Value`] as serde_json does, but refuses a key that an object already has;
/// the key goes to `repeated` (and the error out of each object and array it is in adds
/// the step that led there).
struct UniqueKeys<'a> {
    repeated: &'a mut Option<Found>,
}

impl UniqueKeys<'_> {
    fn inner(&mut self) -> UniqueKeys<'_> {
        UniqueKeys {
            repeated: &mut *self.repeated,
        }
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        Value::deserialize(de::value::I128Deserializer::new(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        Value::deserialize(de::value::U128Deserializer::new(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // As serde_json: a number no `Number` holds (not finite) is null.
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::new();
        loop {
            match seq.next_element_seed(self.inner()) {
                Ok(Some(value)) => values.push(value),
                Ok(None) => return Ok(Value::Array(values)),
                Err(error) => {
                    if let Some(found) = self.repeated.as_mut() {
                        found.steps.push(format!("/{}", values.len()));
                    }
                    return Err(error);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // The one lookup that places the key also finds it there already.
            let entry = match object.entry(key) {
                Entry::Vacant(entry) => entry,
                Entry::Occupied(entry) => {
                    *self.repeated = Some(Found::new(entry.key()));
                    return Err(de::Error::custom("an object names a key twice"));
                }
            };
            match map.next_value_seed(self.inner()) {
                Ok(value) => {
                    entry.insert(value);
                }
                Err(error) => {
                    if let Some(found) = self.repeated.as_mut() {
                        found.steps.push(pointer_step(entry.key()));
                    }
                    return Err(error);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn repeated(text: &str) -> RepeatedKey {
        match from_str(text) {
            Err(JsonError::RepeatedKey(repeated)) => repeated,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_document_without_repeated_keys_reads_as_serde_json_reads_it() {
        let texts = [
            "null",
            " true ",
            "0",
            "-0",
            "18446744073709551615",
            "-9223372036854775808",
            "1.8446744073709552e19",
            "1.5e300",
            "0.1",
            "2.2250738585072014e-308",
            r#""a \"quoted\" \u00e9 \ud83d\ude00 string""#,
            "[]",
            "{}",
            r#"{"b": 1, "a": [1, 2.5, "x", null, {"c": {"d": []}}], "A": {}, "": 0}"#,
            r#"{"$serde_json::private::Number": 5}"#,
            r#"[{"k": 1}, {"k": 1}, {"k": {"k": 1}}]"#,
        ];
        for text in texts {
            let expected: Value = serde_json::from_str(text).unwrap();
            assert_eq!(from_str(text).unwrap(), expected, "{text}");
            assert_eq!(from_slice(text.as_bytes()).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn a_repeated_key_is_refused_naming_the_key_and_its_object() {
        let found = repeated(r#"{"path": "/etc/passwd", "path": "/tmp/x"}"#);
        assert_eq!((found.key(), found.pointer()), ("path", ""));
        assert_eq!(
            found.to_string(),
            "the key `path` appears twice in the top-level object: send each key once"
        );
        let found =
            repeated(r#"{"arguments": {"options": [1, {"mode": "r", "deep": {"x": 1, "x": 1}}]}}"#);
        assert_eq!(found.pointer(), "/arguments/options/1/deep");
        assert_eq!(
            found.to_string(),
            "the key `x` appears twice in the object at `/arguments/options/1/deep`: send each key once"
        );
    }

    #[test]
    fn keys_equal_once_unescaped_are_the_same_key() {
        let found = repeated(r#"{"p\u0061th": 1, "path": 2}"#);
        assert_eq!(found.key(), "path");
    }

    #[test]
    fn a_repeated_key_is_told_where_in_the_text_it_is() {
        let found = repeated("{\n  \"a\": 1,\n  \"a\": 2\n}");
        assert_eq!((found.line(), found.column()), (3, 5));
    }

    #[test]
    fn a_hostile_key_is_shown_cut_and_escaped() {
        let long = "k".repeat(10_000);
        let text = format!(
            r#"{{"{long}/~": {{"x\nINFO forged\u001b[2J\u202e": 1, "x\nINFO forged\u001b[2J\u202e": 2}}}}"#
        );
        let found = repeated(&text);
        assert_eq!(found.key(), "x\\nINFO forged\\u{1b}[2J\\u{202e}");
        assert_eq!(found.pointer(), format!("/{}…", "k".repeat(MAX_SHOWN_ID)));
        let shown = found.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(shown.chars().count() < 300, "{shown}");
        let text = format!(r#"{{"a{long}": {{"~/": {{"b": 1, "b": 2}}}}}}"#);
        assert_eq!(
            repeated(&text).pointer(),
            format!("/a{}…/~0~1", "k".repeat(MAX_SHOWN_ID - 1))
        );
        let deep = format!(
            "{}{{\"b\": 1, \"b\": 2}}{}",
            format!("{{\"{}\": ", "d".repeat(60)).repeat(10),
            "}".repeat(10)
        );
        let pointer = repeated(&deep).pointer().to_owned();
        assert_eq!(pointer.chars().count(), MAX_SHOWN_POINTER + 1, "{pointer}");
        assert!(pointer.ends_with("d…"), "{pointer}");
        let text = r#"{"a/b~c": {"b": 1, "b": 2}}"#;
        assert_eq!(repeated(text).pointer(), "/a~1b~0c");
    }

    #[test]
    fn a_whole_number_past_the_exact_range_is_refused_where_it_is() {
        for (text, number, column) in [
            ("18446744073709551616", "18446744073709551616", 1),
            ("[-9223372036854775809]", "-9223372036854775809", 2),
            (
                "{\"a\": [1, 2, 100000000000000000000000]}",
                "100000000000000000000000",
                14,
            ),
        ] {
            let Err(JsonError::InexactNumber(found)) = from_str(text) else {
                panic!("{text}")
            };
            assert_eq!(
                (found.number(), found.line(), found.column()),
                (number, 1, column)
            );
            assert!(found.to_string().contains("send it as a string"), "{found}");
        }
        let long = format!(
            "{{\n  \"x\": \"1234567890123456789012\",\n  \"y\": {}}}",
            "9".repeat(100)
        );
        let Err(JsonError::InexactNumber(found)) = from_slice(long.as_bytes()) else {
            panic!()
        };
        assert_eq!((found.line(), found.column()), (3, 8));
        assert_eq!(found.number(), format!("{}…", "9".repeat(64)));
    }

    #[test]
    fn numbers_kept_exactly_and_digits_in_strings_pass() {
        for text in [
            "[18446744073709551615, -9223372036854775808, 9223372036854775807, 0, -0]",
            r#"{"card": "4111111111111111111111", "esc": "\"12345678901234567890\""}"#,
            "[1.8446744073709552e19, 123456789012345678901.5, 1e300, 12345678901234567890e-5]",
        ] {
            assert!(from_str(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn other_errors_are_serde_jsons_with_their_position() {
        for text in ["", "{", "[1,]", "{\"a\" 1}", "1 2", "nul"] {
            let Err(JsonError::Malformed(error)) = from_str(text) else {
                panic!("{text}")
            };
            let expected = serde_json::from_str::<Value>(text).unwrap_err();
            assert_eq!(error.to_string(), expected.to_string(), "{text}");
        }
    }

    #[test]
    fn nesting_is_limited_as_serde_json_limits_it() {
        let within = format!("{}{}", "[".repeat(127), "]".repeat(127));
        assert!(from_str(&within).is_ok());
        let deeper = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let Err(JsonError::Malformed(error)) = from_str(&deeper) else {
            panic!()
        };
        assert!(
            error.to_string().starts_with("recursion limit exceeded"),
            "{error}"
        );
    }

    #[test]
    fn a_value_field_refuses_a_repeated_key_in_a_buffered_enum() {
        #[derive(Deserialize, Debug)]
        #[serde(tag = "decision", rename_all = "snake_case")]
        enum Decision {
            Complete {
                #[serde(deserialize_with = "unique_keys")]
                output: Value,
            },
        }
        let read: Decision =
            serde_json::from_value(json!({"decision": "complete", "output": {"a": [1]}})).unwrap();
        let Decision::Complete { output } = read;
        assert_eq!(output, json!({"a": [1]}));
        let err = serde_json::from_str::<Decision>(
            r#"{"decision": "complete", "output": {"a": 1, "a": 2}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the key `a` appears twice in one object: send each key once"
        );
    }
}

#[cfg(test)]
mod properties;
