//! Differential properties of [`read`]: for JSON-RPC-shaped messages — `tools/call`
//! requests with every kind of `id`, name, arguments and `_meta`, other requests,
//! notifications, responses, wrong versions, missing, extra and repeated keys — and for
//! those messages with a few bytes changed, its outcome is rmcp's own
//! (`serde_json::from_slice::<ClientJsonRpcMessage>`): the same message or the same error,
//! except for a key named twice or a number past the exact range, which `toolgate_core::json`
//! must find in the text for the refusal to count as justified.
//!
//! Each property runs proptest's default number of cases (256), about a second in a debug
//! build. For a long run, proptest reads `PROPTEST_CASES` from the environment:
//! `PROPTEST_CASES=200000 cargo test --release -p toolgate-mcp --lib message::properties`.

use proptest::prelude::*;
use rmcp::model::ClientJsonRpcMessage;
use toolgate_core::json::JsonError;

use super::read;
use super::tests::meta_of;

/// JSON as it is written: an object may name a key twice, a key or string may be written
/// with every character escaped, a number or literal is the text given.
#[derive(Clone, Debug)]
enum Doc {
    Raw(String),
    Text(String, bool),
    Array(Vec<Doc>),
    Object(Vec<(String, bool, Doc)>),
}

fn write_text(text: &str, escaped: bool, out: &mut String) {
    if !escaped {
        out.push_str(&serde_json::to_string(text).unwrap());
        return;
    }
    out.push('"');
    for unit in text.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
}

impl Doc {
    fn text(&self, space: &str) -> String {
        let mut out = String::new();
        self.write(space, &mut out);
        out
    }

    fn write(&self, space: &str, out: &mut String) {
        match self {
            Doc::Raw(raw) => out.push_str(raw),
            Doc::Text(text, escaped) => write_text(text, *escaped, out),
            Doc::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    out.push_str(space);
                    item.write(space, out);
                }
                out.push(']');
            }
            Doc::Object(entries) => {
                out.push('{');
                for (at, (key, escaped, value)) in entries.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    out.push_str(space);
                    write_text(key, *escaped, out);
                    out.push(':');
                    out.push_str(space);
                    value.write(space, out);
                }
                out.push_str(space);
                out.push('}');
            }
        }
    }
}

fn raw(texts: Vec<&'static str>) -> impl Strategy<Value = Doc> {
    prop::sample::select(texts).prop_map(|raw| Doc::Raw(raw.to_owned()))
}

fn text(texts: Vec<&'static str>) -> impl Strategy<Value = Doc> {
    (prop::sample::select(texts), prop::bool::weighted(0.1))
        .prop_map(|(text, escaped)| Doc::Text(text.to_owned(), escaped))
}

/// An object key: mostly one of a few, so that keys collide.
fn key() -> impl Strategy<Value = (String, bool)> {
    (
        prop_oneof![
            4 => prop::sample::select(vec!["a", "b", "path", "_meta", "progressToken", "name", "id", ""])
                .prop_map(str::to_owned),
            1 => any::<String>(),
        ],
        prop::bool::weighted(0.1),
    )
}

/// Numbers: the edges of `i64` and `u64` and past them, floats, exponents.
fn number() -> impl Strategy<Value = Doc> {
    prop_oneof![
        any::<i64>().prop_map(|n| Doc::Raw(n.to_string())),
        any::<u64>().prop_map(|n| Doc::Raw(n.to_string())),
        raw(vec![
            "0",
            "-0",
            "1.0",
            "1.5",
            "-2e3",
            "1e400",
            "9007199254740993.0",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
        ]),
    ]
}

/// Any JSON value.
fn value() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        raw(vec!["null", "true", "false"]),
        number(),
        (any::<String>(), prop::bool::weighted(0.1)).prop_map(|(t, e)| Doc::Text(t, e)),
        text(vec!["tools/call", "2.0", "a\"b\\c", "\u{0}\n"]),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Doc::Array),
            object(inner),
        ]
    })
}

fn object(values: impl Strategy<Value = Doc>) -> impl Strategy<Value = Doc> {
    prop::collection::vec((key(), values), 0..5).prop_map(|entries| {
        Doc::Object(
            entries
                .into_iter()
                .map(|((key, escaped), value)| (key, escaped, value))
                .collect(),
        )
    })
}

/// An object from fields that may be absent, in any order, with one perhaps given twice,
/// its keys now and then written escaped.
fn fields(fields: Vec<BoxedStrategy<Option<(&'static str, Doc)>>>) -> impl Strategy<Value = Doc> {
    let chosen = (
        fields,
        prop::option::weighted(0.05, (any::<prop::sample::Index>(), value())),
    )
        .prop_map(|(fields, twice)| {
            let mut fields: Vec<_> = fields.into_iter().flatten().collect();
            if let Some((at, value)) = twice
                && !fields.is_empty()
            {
                let key = fields[at.index(fields.len())].0;
                fields.push((key, value));
            }
            fields
        })
        .prop_shuffle();
    (chosen, prop::bool::weighted(0.05)).prop_map(|(fields, escaped)| {
        Doc::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key.to_owned(), escaped, value))
                .collect(),
        )
    })
}

fn field(
    key: &'static str,
    present: f64,
    values: impl Strategy<Value = Doc> + 'static,
) -> BoxedStrategy<Option<(&'static str, Doc)>> {
    prop::option::weighted(present, values.prop_map(move |value| (key, value))).boxed()
}

fn id() -> impl Strategy<Value = Doc> {
    prop_oneof![
        4 => number(),
        2 => (any::<String>(), prop::bool::weighted(0.1)).prop_map(|(t, e)| Doc::Text(t, e)),
        1 => raw(vec!["null", "true", "{}", "[1]"]),
    ]
}

fn name() -> impl Strategy<Value = Doc> {
    prop_oneof![
        4 => text(vec!["echo", "a \"quoted\" tool", "", "fs/read", "\u{202e}x"]),
        2 => (any::<String>(), prop::bool::weighted(0.1)).prop_map(|(t, e)| Doc::Text(t, e)),
        1 => raw(vec!["null", "5", "[]"]),
    ]
}

/// The parameters of a `tools/call`, right or wrong.
fn call_params() -> impl Strategy<Value = Doc> {
    let meta = prop_oneof![
        4 => fields(vec![
            field("progressToken", 0.5, prop_oneof![number(), text(vec!["p", ""])]),
            field("x", 0.3, value()),
        ]),
        1 => object(value()),
        1 => raw(vec!["null", "5", "[]", "\"m\""]),
    ];
    let input_responses = prop_oneof![
        3 => fields(vec![
            field("ask-1", 0.8, fields(vec![field("action", 0.9, text(vec!["accept", "decline"])), field("content", 0.3, value())])),
        ]),
        1 => value(),
    ];
    prop_oneof![
        8 => fields(vec![
            field("name", 0.95, name()),
            field("arguments", 0.7, prop_oneof![4 => object(value()), 1 => value()]),
            field("_meta", 0.4, meta),
            field("inputResponses", 0.1, input_responses),
            field("requestState", 0.1, prop_oneof![text(vec!["opaque", ""]), raw(vec!["null", "5"])]),
            field("task", 0.03, value()),
            field("unknown", 0.03, value()),
        ]),
        1 => value(),
    ]
}

/// A JSON-RPC message, most often a `tools/call` request.
fn message() -> impl Strategy<Value = Doc> {
    let jsonrpc = prop_oneof![
        12 => text(vec!["2.0"]),
        1 => text(vec!["1.0", "2.0 ", ""]),
        1 => raw(vec!["2", "null", "2.0"]),
    ];
    let method = prop_oneof![
        10 => text(vec!["tools/call"]),
        3 => text(vec!["tools/list", "notifications/initialized", "ping", "notifications/cancelled", "initialize", "tools/calls", "resources/read"]),
        1 => raw(vec!["5", "null"]),
    ];
    let params = prop_oneof![
        8 => call_params(),
        1 => fields(vec![field("cursor", 0.5, value()), field("_meta", 0.3, value())]),
        1 => raw(vec!["null", "[]", "{}"]),
    ];
    let result = prop_oneof![
        2 => raw(vec!["null", "{}"]),
        1 => fields(vec![field("content", 0.8, value()), field("isError", 0.3, raw(vec!["true", "false"]))]),
        1 => value(),
    ];
    let error = prop_oneof![
        2 => fields(vec![field("code", 0.9, number()), field("message", 0.9, text(vec!["no", ""])), field("data", 0.2, value())]),
        1 => value(),
    ];
    prop_oneof![
        12 => fields(vec![
            field("jsonrpc", 0.95, jsonrpc),
            field("id", 0.9, id()),
            field("method", 0.95, method),
            field("params", 0.9, params),
            field("result", 0.05, result),
            field("error", 0.05, error),
            field("extra", 0.03, value()),
        ]),
        1 => value(),
    ]
}

fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", " ", "\n\t"])
}

/// How a text is changed: at a place (taken modulo its length), a byte replaced, put in, or
/// taken out.
fn mutations() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    let byte = prop_oneof![
        3 => prop::sample::select(b"{}[]\":,\\/0123456789-+.eEu \nnul".to_vec()),
        1 => any::<u8>(),
    ];
    prop::collection::vec((any::<usize>(), 0..3u8, byte), 1..4)
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

/// What [`read`] must give for `bytes`: rmcp's message or rmcp's error, or a refusal that
/// `toolgate_core::json` finds in the text, in its words and of serde's data kind.
fn agrees_with_rmcp(bytes: &[u8]) -> Result<(), TestCaseError> {
    let shown = String::from_utf8_lossy(bytes);
    let ours = read(bytes);
    let theirs = serde_json::from_slice::<ClientJsonRpcMessage>(bytes);
    let refusal = match toolgate_core::json::from_slice(bytes) {
        Err(JsonError::RepeatedKey(repeated)) => Some(repeated.to_string()),
        Err(JsonError::InexactNumber(inexact)) => Some(inexact.to_string()),
        _ => None,
    };
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            prop_assert_eq!(refusal, None, "{}", shown);
            prop_assert_eq!(
                serde_json::to_value(&ours).unwrap(),
                serde_json::to_value(&theirs).unwrap(),
                "{}",
                shown
            );
            prop_assert_eq!(meta_of(&ours), meta_of(&theirs), "{}", shown);
        }
        (Err(ours), theirs) => match refusal {
            Some(refusal) => {
                prop_assert!(ours.is_data(), "{shown}: {ours}");
                prop_assert_eq!(ours.to_string(), refusal, "{}", shown);
            }
            None => {
                let theirs = theirs.map(|_| ()).map_err(|e| e.to_string());
                prop_assert_eq!(Err(ours.to_string()), theirs, "{}", shown);
            }
        },
        (Ok(ours), Err(theirs)) => {
            prop_assert!(
                false,
                "{shown}: read as {ours:?}, rmcp refuses it: {theirs}"
            );
        }
    }
    Ok(())
}

proptest! {
    /// A JSON-RPC-shaped message reads as rmcp reads it, or is refused for a key it names
    /// twice or a number past the exact range.
    #[test]
    fn a_message_reads_or_fails_as_rmcp_has_it(message in message(), space in space()) {
        agrees_with_rmcp(message.text(space).as_bytes())?;
    }

    /// As above, with a few bytes of the message changed, put in or taken out.
    #[test]
    fn a_mutated_message_reads_or_fails_as_rmcp_has_it(
        message in message(),
        space in space(),
        mutations in mutations(),
    ) {
        agrees_with_rmcp(&mutate(message.text(space).into_bytes(), &mutations))?;
    }
}
