//! Differential properties of the reader: what [`from_slice`] reads is what
//! `serde_json::from_slice::<Value>` reads, except for its two refusals, and each refusal is
//! checked to be justified — by a second, independent look at the text.
//!
//! Each property runs proptest's default number of cases (256), about a second in a debug
//! build. For a long run, proptest reads `PROPTEST_CASES` from the environment:
//! `PROPTEST_CASES=200000 cargo test --release -p toolgate-core --lib json::properties`.

use std::cell::Cell;

use proptest::prelude::*;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::*;

/// A JSON document as it is written: an object may name a key twice, a number is the text
/// given, a string may be written with every character escaped.
#[derive(Clone, Debug)]
enum Doc {
    Literal(&'static str),
    Number(String),
    Text(Text),
    Array(Vec<Doc>),
    Object(Vec<(Text, Doc)>),
}

/// A string, and whether it is written with every character as a `\u` escape.
#[derive(Clone, Debug)]
struct Text(String, bool);

impl Text {
    fn write(&self, out: &mut String) {
        if !self.1 {
            out.push_str(&serde_json::to_string(&self.0).unwrap());
            return;
        }
        out.push('"');
        for unit in self.0.encode_utf16() {
            out.push_str(&format!("\\u{unit:04x}"));
        }
        out.push('"');
    }
}

impl Doc {
    /// The text, with `space` between tokens.
    fn text(&self, space: &str) -> String {
        let mut out = String::new();
        self.write(space, &mut out);
        out
    }

    fn write(&self, space: &str, out: &mut String) {
        match self {
            Doc::Literal(literal) => out.push_str(literal),
            Doc::Number(number) => out.push_str(number),
            Doc::Text(text) => text.write(out),
            Doc::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    out.push_str(space);
                    item.write(space, out);
                }
                out.push_str(space);
                out.push(']');
            }
            Doc::Object(entries) => {
                out.push('{');
                for (at, (key, value)) in entries.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    out.push_str(space);
                    key.write(out);
                    out.push_str(space);
                    out.push(':');
                    out.push_str(space);
                    value.write(space, out);
                }
                out.push_str(space);
                out.push('}');
            }
        }
    }

    /// The first key named twice in one object, in the order the text is read, and the
    /// pointer of its object (unescaped steps, before [`shown_text`]).
    fn first_repeat(&self, pointer: &str) -> Option<(String, String)> {
        match self {
            Doc::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(at, item)| item.first_repeat(&format!("{pointer}/{at}"))),
            Doc::Object(entries) => {
                let mut seen: Vec<&str> = Vec::new();
                for (key, value) in entries {
                    if seen.contains(&key.0.as_str()) {
                        return Some((key.0.clone(), pointer.to_owned()));
                    }
                    seen.push(&key.0);
                    let step = key.0.replace('~', "~0").replace('/', "~1");
                    if let Some(found) = value.first_repeat(&format!("{pointer}/{step}")) {
                        return Some(found);
                    }
                }
                None
            }
            _ => None,
        }
    }

    /// The first number written as a whole number past the range of `i64` and `u64`.
    fn first_inexact(&self) -> Option<&str> {
        match self {
            Doc::Number(number) => {
                let whole = number.bytes().all(|b| b == b'-' || b.is_ascii_digit());
                let fits = number.parse::<i64>().is_ok() || number.parse::<u64>().is_ok();
                (whole && !fits).then_some(number.as_str())
            }
            Doc::Array(items) => items.iter().find_map(Doc::first_inexact),
            Doc::Object(entries) => entries.iter().find_map(|(_, value)| value.first_inexact()),
            _ => None,
        }
    }
}

/// Strings that escape, break lines, pair surrogates, or collide as keys.
fn text() -> impl Strategy<Value = Text> {
    let content = prop_oneof![
        3 => prop::sample::select(vec!["a", "b", "", "a/b~c", "é", "\u{1F600}", "\"", "\\", "\n\u{0}\u{1f}", "\u{202e}"])
            .prop_map(str::to_owned),
        1 => any::<String>(),
        1 => "[a-c\\\\\"/\u{0}-\u{1f}\u{7f}-\u{a0}\u{fffd}\u{10000}]{0,6}",
    ];
    (content, any::<bool>()).prop_map(|(text, escaped)| Text(text, escaped))
}

/// Numbers as written: the edges of `i64` and `u64` and just past them, long runs of digits,
/// fractions and exponents (some too large for a float).
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "-0",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "1000000000000000000",
            "-1000000000000000000",
            "99999999999999999999",
            "1e400",
            "-1e400",
            "1e-400",
            "18446744073709551616.0",
            "18446744073709551616e0",
        ])
        .prop_map(str::to_owned),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
    ]
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        prop::sample::select(vec!["null", "true", "false"]).prop_map(Doc::Literal),
        number().prop_map(Doc::Number),
        text().prop_map(Doc::Text),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            prop::collection::vec((text(), inner), 0..6).prop_map(Doc::Object),
        ]
    })
}

fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " ", "\n  ", "\t\r\n"])
}

/// Any `Value`: the edges of each kind of number, floats, strings of any characters.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![i64::MIN, i64::MAX, -1, 0]).prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            1e300,
            -1e-300,
            0.1,
            1.8446744073709552e19,
            -0.0,
            5e-324
        ])
        .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        text().prop_map(|text| Value::String(text.0)),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..6).prop_map(|entries| Value::Object(
                entries.into_iter().map(|(k, v)| (k.0, v)).collect()
            )),
        ]
    })
}

/// A byte a mutation puts in: mostly one that means something to JSON.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(b"{}[]\":,\\/0123456789-+.eEuU \n\ttrufalsn".to_vec()),
        1 => any::<u8>(),
    ]
}

/// How a text is changed: at a place (taken modulo its length), a byte replaced, put in, or
/// taken out.
fn mutations() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    prop::collection::vec((any::<usize>(), 0..3u8, byte()), 1..4)
}

fn mutate(mut bytes: Vec<u8>, mutations: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, kind, byte) in mutations {
        let at = at % (bytes.len() + 1);
        match kind {
            0 if at < bytes.len() => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.push(byte),
        }
    }
    bytes
}

/// Whether an object in `bytes` names a key twice before anything stops serde_json's reading:
/// a second look, with a list of keys per object instead of the reader's map.
fn names_a_key_twice(bytes: &[u8]) -> bool {
    struct Repeats<'a>(&'a Cell<bool>);

    impl<'de> DeserializeSeed<'de> for Repeats<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Repeats<'_> {
        type Value = ();

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("JSON")
        }

        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }

        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }

        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }

        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }

        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }

        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Repeats(self.0))?.is_some() {}
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys: Vec<String> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                if keys.contains(&key) {
                    self.0.set(true);
                    // Stop here: what follows may be what serde_json refuses.
                    return Err(de::Error::custom("repeated"));
                }
                keys.push(key);
                map.next_value_seed(Repeats(self.0))?;
            }
            Ok(())
        }
    }

    let found = Cell::new(false);
    let _ = Repeats(&found).deserialize(&mut serde_json::Deserializer::from_slice(bytes));
    found.get()
}

/// Whether `value` holds a number read as a float that is `number`, a whole number past the
/// exact range: what serde_json makes of such a number.
fn holds_inexact(value: &Value, number: f64) -> bool {
    match value {
        Value::Number(n) => !n.is_i64() && !n.is_u64() && n.as_f64() == Some(number),
        Value::Array(items) => items.iter().any(|item| holds_inexact(item, number)),
        Value::Object(entries) => entries.values().any(|item| holds_inexact(item, number)),
        _ => false,
    }
}

/// What any bytes must give: serde_json's value or its very error, or a refusal the text
/// justifies.
fn agrees_with_serde_json(bytes: &[u8]) -> Result<(), TestCaseError> {
    let shown = String::from_utf8_lossy(bytes);
    let ours = from_slice(bytes);
    let theirs = serde_json::from_slice::<Value>(bytes);
    let repeats = names_a_key_twice(bytes);
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            prop_assert!(!repeats, "{shown}: a repeated key is read");
            prop_assert_eq!(ours, theirs, "{}", shown);
        }
        (Err(JsonError::Malformed(ours)), Err(theirs)) => {
            prop_assert!(!repeats, "{shown}: {ours}");
            prop_assert_eq!(ours.to_string(), theirs.to_string(), "{}", shown);
        }
        (Err(JsonError::RepeatedKey(found)), _) => {
            prop_assert!(repeats, "{shown}: refused for {found}, yet no key repeats");
        }
        (Err(JsonError::InexactNumber(found)), Ok(theirs)) => {
            prop_assert!(!repeats, "{shown}: {found}");
            let number = found.number();
            prop_assert!(!number.ends_with('…'), "{shown}: {found}");
            let as_float: f64 = number.parse().unwrap();
            prop_assert!(holds_inexact(&theirs, as_float), "{shown}: {found}");
        }
        (ours, theirs) => {
            prop_assert!(false, "{shown}: ours {ours:?}, serde_json's {theirs:?}");
        }
    }
    Ok(())
}

proptest! {
    /// A value serde_json writes, compact or pretty, reads as serde_json reads it back, and
    /// `text_len` is the length of its compact text.
    #[test]
    fn a_written_value_reads_as_serde_json_reads_it(value in value()) {
        let compact = serde_json::to_string(&value).unwrap();
        prop_assert_eq!(text_len(&value), compact.len());
        for text in [compact, serde_json::to_string_pretty(&value).unwrap()] {
            let theirs = serde_json::from_str::<Value>(&text).unwrap();
            prop_assert_eq!(&from_slice(text.as_bytes()).unwrap(), &theirs, "{}", text);
            prop_assert_eq!(&from_str(&text).unwrap(), &theirs, "{}", text);
        }
    }

    /// A document as written (keys given twice, numbers past the range, keys escaped) gives
    /// exactly the outcome its shape calls for: the first repeated key and its object, else
    /// the first inexact number, else serde_json's value; serde_json's refusal is a refusal.
    #[test]
    fn a_document_is_refused_exactly_for_its_repeated_key_or_inexact_number(
        doc in doc(),
        space in space(),
    ) {
        let text = doc.text(space);
        let ours = from_str(&text);
        prop_assert_eq!(
            from_slice(text.as_bytes()).map_err(|e| e.to_string()),
            ours.as_ref().cloned().map_err(ToString::to_string)
        );
        match (serde_json::from_str::<Value>(&text), ours) {
            (Err(theirs), Err(JsonError::Malformed(ours))) => {
                prop_assert_eq!(ours.to_string(), theirs.to_string(), "{}", text);
            }
            (Err(_), Err(JsonError::RepeatedKey(_))) => {
                prop_assert!(doc.first_repeat("").is_some(), "{}", text);
            }
            (Err(theirs), ours) => {
                prop_assert!(false, "{text}: serde_json's {theirs}, ours {ours:?}");
            }
            (Ok(theirs), ours) => match (doc.first_repeat(""), doc.first_inexact()) {
                (Some((key, pointer)), _) => {
                    let Err(JsonError::RepeatedKey(found)) = ours else {
                        return Err(TestCaseError::fail(format!("{text}: {ours:?}")));
                    };
                    prop_assert_eq!(found.key(), shown_text(&key, MAX_SHOWN_ID), "{}", text);
                    if pointer.chars().count() <= MAX_SHOWN_ID {
                        prop_assert_eq!(found.pointer(), shown_text(&pointer, usize::MAX), "{}", text);
                    }
                }
                (None, Some(number)) => {
                    let Err(JsonError::InexactNumber(found)) = ours else {
                        return Err(TestCaseError::fail(format!("{text}: {ours:?}")));
                    };
                    prop_assert_eq!(found.number(), number, "{}", text);
                }
                (None, None) => {
                    prop_assert_eq!(ours.map_err(|e| e.to_string()), Ok(theirs), "{}", text);
                }
            },
        }
    }

    /// A document with a few bytes changed, put in or taken out never panics the reader,
    /// and reads or fails as serde_json has it but for a justified refusal.
    #[test]
    fn a_mutated_document_reads_or_fails_as_serde_json_has_it(
        doc in doc(),
        space in space(),
        mutations in mutations(),
    ) {
        agrees_with_serde_json(&mutate(doc.text(space).into_bytes(), &mutations))?;
    }

    /// Any bytes at all: as above.
    #[test]
    fn any_bytes_read_or_fail_as_serde_json_has_them(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            prop::collection::vec(byte(), 0..64),
        ],
    ) {
        agrees_with_serde_json(&bytes)?;
    }
}
