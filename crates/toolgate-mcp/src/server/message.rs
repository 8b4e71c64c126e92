//! A client's JSON-RPC message, read from a request's body.
//!
//! rmcp reads a message as an untagged enum: serde buffers the whole message, checks its
//! shape, then tries each kind of message and, for a request, each of rmcp's request types
//! in turn until one takes it — `tools/call` is the fourteenth, after thirteen attempts
//! that each walk the buffered message again; and even rmcp's own type for a `tools/call`
//! request buffers it twice more, for the two layers it flattens (the request in the
//! message, the parameters beside `_meta`). The busiest message of an MCP endpoint, a
//! `tools/call` request, is read here in one pass straight into its parts ([`WireCall`]).
//! Anything else, and a `tools/call` that does not read as one, is read as rmcp reads it,
//! so the outcome — the message or the error — is rmcp's own.
//!
//! Two refusals are toolgate's, each an error of serde's data kind, so that it is answered
//! `-32600` with the message's `id`. A message that names a key twice in one object,
//! anywhere in it, is refused saying which key and where: serde_json, and so rmcp, would
//! keep the last value silently, and a policy and the tool could read different ones. A
//! whole number a value would not hold exactly (past 64 bits) is refused naming it, where
//! serde_json would read it as a float, rounded. Property tests (`properties`) hold this
//! reading to rmcp's on generated and mutated messages. The repeated key is found by the
//! lookup that places each key in its object anyway: [`WireCall`]'s
//! objects are read by `toolgate_core::json`, its named keys are serde's (which refuses
//! one given twice), and any other key sends the message to the other reading; that one
//! reads the message with `toolgate_core::json` into the value rmcp's types are read from.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequest, CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage,
    ClientRequest, InputResponses, JsonObject, JsonRpcRequest, JsonRpcVersion2_0, RequestId,
    RequestMetaObject,
};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _, IgnoredAny};
use serde_json::Value;
use toolgate_core::json::{JsonError, RepeatedKey};

/// The JSON-RPC message `bytes` holds, as rmcp would read it. Other messages are told from
/// a `tools/call` by a search for the method's name, which costs them next to nothing.
pub(crate) fn read(bytes: &[u8]) -> Result<ClientJsonRpcMessage, serde_json::Error> {
    if memchr::memmem::find(bytes, b"\"tools/call\"").is_some()
        && let Some(call) = WireCall::read(bytes)
    {
        // A number the value would not hold exactly is refused, as below.
        return match toolgate_core::json::check_whole_numbers(bytes) {
            Ok(()) => Ok(call.into_message()),
            Err(inexact) => Err(serde_json::Error::custom(inexact)),
        };
    }
    match toolgate_core::json::from_slice(bytes) {
        // rmcp's types read from the value as from the text; should one not, the text is
        // read again, for rmcp's own outcome.
        Ok(value) => {
            ClientJsonRpcMessage::deserialize(value).or_else(|_| serde_json::from_slice(bytes))
        }
        Err(JsonError::RepeatedKey(repeated)) => Err(serde_json::Error::custom(repeated)),
        Err(JsonError::InexactNumber(inexact)) => Err(serde_json::Error::custom(inexact)),
        // Not JSON: rmcp's reading says how, in its words.
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// The key `bytes` names twice in one object, when it is why [`read`] refused it; for
/// the answer to say so, with no id when the key is the request's `id`.
pub(crate) fn repeated_key(bytes: &[u8]) -> Option<RepeatedKey> {
    match toolgate_core::json::from_slice(bytes) {
        Err(JsonError::RepeatedKey(repeated)) => Some(repeated),
        _ => None,
    }
}

/// Whether `repeated` is the request's own `id`, named twice: then the request has no id
/// an answer could carry.
pub(crate) fn is_id(repeated: &RepeatedKey) -> bool {
    repeated.key() == "id" && repeated.pointer().is_empty()
}

/// A `tools/call` request as it is written: what rmcp reads into a
/// `JsonRpcRequest<CallToolRequest>`, without the flattened layers that make serde buffer
/// it. A key it does not name, or one given twice, fails it: the other reading then has
/// the message (and refuses a key given twice).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireCall {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    // Checked only: the one value it takes is "tools/call".
    #[allow(dead_code)]
    method: CallToolRequestMethod,
    params: WireParams,
    /// A request has neither: rmcp refuses a message with a method and either of them,
    /// whatever its value (`null` too).
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

/// Whether a field is in the message, whatever its value: `null` is there too, where an
/// `Option` would read it as absent.
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Present(true))
    }
}

/// The parameters of a `tools/call`, `_meta` among them: rmcp keeps `_meta` in the
/// request's extensions, not in the parameters.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WireParams {
    #[serde(rename = "_meta", default, deserialize_with = "unique_object")]
    meta: Option<JsonObject>,
    name: Cow<'static, str>,
    #[serde(default, deserialize_with = "unique_object")]
    arguments: Option<JsonObject>,
    #[serde(default, deserialize_with = "unique_object")]
    input_responses: Option<JsonObject>,
    request_state: Option<String>,
}

/// An object (or null), read refusing a key it names twice; anything else fails the read,
/// for the other reading to say what is wrong.
fn unique_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<JsonObject>, D::Error> {
    match toolgate_core::json::unique_keys(deserializer)? {
        Value::Object(object) => Ok(Some(object)),
        Value::Null => Ok(None),
        _ => Err(D::Error::custom("not an object")),
    }
}

impl WireCall {
    /// The `tools/call` request `bytes` holds, when it reads as one.
    fn read(bytes: &[u8]) -> Option<WireCall> {
        serde_json::from_slice::<WireCall>(bytes)
            .ok()
            .filter(|call| !call.result.0 && !call.error.0)
    }

    /// The message rmcp would have read.
    fn into_message(self) -> ClientJsonRpcMessage {
        let WireParams {
            meta,
            name,
            arguments,
            input_responses,
            request_state,
        } = self.params;
        let mut params = CallToolRequestParams::new(name);
        params.arguments = arguments;
        params.input_responses =
            input_responses.map(|responses| responses.into_iter().collect::<InputResponses>());
        params.request_state = request_state;
        let mut request = CallToolRequest::new(params);
        if let Some(meta) = meta {
            request.extensions.insert(RequestMetaObject::from(meta));
        }
        ClientJsonRpcMessage::Request(JsonRpcRequest {
            jsonrpc: self.jsonrpc,
            id: self.id,
            request: ClientRequest::from(request),
        })
    }
}

/// Whether `id` is an `id` rmcp reads: a string or an integer.
pub(crate) fn is_request_id(id: &Value) -> bool {
    id.is_string() || id.is_i64()
}

/// What is wrong with `message`, JSON that rmcp does not read as a JSON-RPC message, in
/// plain words. `one_at_a_time` tells a client that sent a batch how to send its messages
/// instead (one per line, one per request).
pub(crate) fn what_is_wrong(message: &Value, one_at_a_time: &str) -> String {
    let fields = match message {
        Value::Object(fields) => fields,
        Value::Array(_) => return format!("batches are not supported: {one_at_a_time}"),
        other => {
            return format!("a message must be a JSON object, not {}", kind_of(other));
        }
    };
    match fields.get("jsonrpc") {
        None => return "`jsonrpc` is missing: it must be \"2.0\"".into(),
        Some(version) if version != "2.0" => return "`jsonrpc` must be \"2.0\"".into(),
        Some(_) => {}
    }
    if let Some(id) = fields.get("id")
        && !is_request_id(id)
    {
        return match id {
            Value::Number(number) if is_whole(number) => {
                "`id` is a number out of range: a numeric `id` must be a whole number from -9223372036854775808 to 9223372036854775807; send a smaller one, or a string".into()
            }
            _ => format!("`id` must be a string or a whole number, not {}", kind_of(id)),
        };
    }
    let (result, error) = (fields.get("result"), fields.get("error"));
    if let Some(method) = fields.get("method") {
        if result.is_some() || error.is_some() {
            return "a request or notification (with a `method`) cannot have a `result` or an `error`".into();
        }
        if !method.is_string() {
            return format!("`method` must be a string, not {}", kind_of(method));
        }
        match fields.get("params") {
            None | Some(Value::Object(_)) => {}
            Some(params) => {
                return format!("`params` must be an object, not {}", kind_of(params));
            }
        }
        if let Some(meta) = fields.get("params").and_then(|params| params.get("_meta"))
            && !meta.is_object()
        {
            return format!("`params._meta` must be an object, not {}", kind_of(meta));
        }
        return "the message does not read as a JSON-RPC request or notification".into();
    }
    match (result, error) {
        (Some(_), Some(_)) => "a response cannot have both a `result` and an `error`".into(),
        (None, None) => {
            "the message has no `method` (a request or notification) and no `result` or `error` (a response)".into()
        }
        _ if !fields.contains_key("id") => "a response must have the `id` of its request".into(),
        (None, Some(error))
            if !error.get("code").is_some_and(Value::is_i64)
                || !error.get("message").is_some_and(Value::is_string) =>
        {
            "`error` must be an object with an integer `code` and a string `message`".into()
        }
        _ => "the message does not read as a JSON-RPC response".into(),
    }
}

/// What kind of JSON value `value` is, in words.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "a number",
        Value::Number(_) => "a number with a fractional part",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether `number` is a whole number (one too large for an `i64` is read as a `u64`, or
/// as a float without a fractional part).
fn is_whole(number: &serde_json::Number) -> bool {
    number.is_u64() || number.as_f64().is_some_and(|f| f.fract() == 0.0)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// What `read` gives for `message`, and what rmcp's own reading gives, as JSON (or the
    /// error's text).
    fn both(message: &Value) -> (Result<Value, String>, Result<Value, String>) {
        let bytes = serde_json::to_vec(message).unwrap();
        let as_json = |read: Result<ClientJsonRpcMessage, serde_json::Error>| {
            read.map(|m| serde_json::to_value(m).unwrap())
                .map_err(|e| e.to_string())
        };
        (
            as_json(read(&bytes)),
            as_json(serde_json::from_slice::<ClientJsonRpcMessage>(&bytes)),
        )
    }

    /// Where each reading keeps a call's `_meta`: in the request's extensions (rmcp's
    /// place) or in its parameters. The property tests compare readings by it too.
    pub(super) fn meta_of(
        message: &ClientJsonRpcMessage,
    ) -> Option<(Option<Value>, Option<Value>)> {
        let ClientJsonRpcMessage::Request(JsonRpcRequest {
            request: ClientRequest::CallToolRequest(call),
            ..
        }) = message
        else {
            return None;
        };
        let json =
            |meta: Option<&RequestMetaObject>| meta.map(|m| serde_json::to_value(m).unwrap());
        Some((
            json(call.extensions.get::<RequestMetaObject>()),
            json(call.params.meta.as_ref()),
        ))
    }

    #[test]
    fn a_tool_call_reads_as_rmcp_reads_it() {
        // Whether toolgate's own reading takes it: a key it does not name sends a call to
        // rmcp's reading.
        let calls = [
            (
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}}}),
                true,
            ),
            (
                serde_json::json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/call",
                "params": {"name": "echo", "_meta": {"progressToken": "p", "x": [1, 2]}}}),
                true,
            ),
            (
                serde_json::json!({"params": {"name": "n"}, "method": "tools/call", "id": 7, "jsonrpc": "2.0",
                "extra": true}),
                false,
            ),
            (
                serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "a \"quoted\" tool", "_meta": null, "unknown": {"deep": [null]},
                    "arguments": {"big": 18446744073709551615u64, "neg": -9007199254740993i64,
                        "float": 1.5e300, "nested": {"a": [1, "two", false, null]}},
                    "inputResponses": {"ask-1": {"action": "accept"}},
                    "requestState": "opaque"}}),
                false,
            ),
            (
                serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "a \"quoted\" tool", "_meta": null,
                    "arguments": {"big": 18446744073709551615u64, "neg": -9007199254740993i64,
                        "float": 1.5e300, "nested": {"a": [1, "two", false, null]}},
                    "inputResponses": {"ask-1": {"action": "accept"}},
                    "requestState": "opaque"}}),
                true,
            ),
            (
                serde_json::json!({"jsonrpc": "2.0", "id": -3, "method": "tools/call",
                "params": {"name": "", "arguments": {}, "_meta": {}}}),
                true,
            ),
        ];
        for (call, own) in calls {
            let (fast, rmcp) = both(&call);
            assert!(fast.is_ok(), "{call}: {fast:?}");
            assert_eq!(fast, rmcp, "{call}");
            let bytes = serde_json::to_vec(&call).unwrap();
            let (fast, rmcp) = (
                read(&bytes).unwrap(),
                serde_json::from_slice::<ClientJsonRpcMessage>(&bytes).unwrap(),
            );
            assert_eq!(
                WireCall::read(&bytes).is_some(),
                own,
                "{call} is read by toolgate's own reading: {own}"
            );
            assert!(meta_of(&fast).is_some(), "{call}");
            assert_eq!(meta_of(&fast), meta_of(&rmcp), "{call}");
        }
        let bytes = serde_json::to_vec(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo"}}),
        )
        .unwrap();
        assert!(matches!(
            read(&bytes),
            Ok(ClientJsonRpcMessage::Request(JsonRpcRequest {
                request: ClientRequest::CallToolRequest(_),
                ..
            }))
        ));
    }

    #[test]
    fn a_tool_call_of_the_wrong_shape_fails_as_rmcp_has_it() {
        let calls = [
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": null}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "e", "arguments": [1]}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "e", "_meta": 5}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "e", "requestState": 5}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "e", "inputResponses": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/call",
                "params": {"name": "e"}}),
            serde_json::json!({"jsonrpc": 2, "id": 1, "method": "tools/call",
                "params": {"name": "e"}}),
        ];
        for call in calls {
            let (fast, rmcp) = both(&call);
            assert_eq!(fast, rmcp, "{call}");
        }
    }

    #[test]
    fn anything_else_reads_or_fails_as_rmcp_has_it() {
        let others = [
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}),
            // Shapes rmcp refuses, and calls that do not read as calls.
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "result": {}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "e"}}),
            serde_json::json!({"jsonrpc": "2.0", "id": null, "method": "tools/call", "params": {"name": "e"}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}),
            serde_json::json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "e"}}),
            serde_json::json!({"id": 1, "method": "tools/call", "params": {"name": "e"}}),
            serde_json::json!([1, 2]),
            serde_json::json!("tools/call"),
        ];
        for other in others {
            let (fast, rmcp) = both(&other);
            assert_eq!(fast, rmcp, "{other}");
        }
    }

    #[test]
    fn a_tool_call_with_a_null_result_or_error_fails_as_rmcp_has_it() {
        // rmcp refuses a message with a `method` and a `result` or `error` key, whatever
        // its value: `null` too.
        for text in [
            br#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo"},"result":null}"#
                .as_slice(),
            br#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo"},"error":null}"#,
        ] {
            let shown = String::from_utf8_lossy(text);
            let rmcp = serde_json::from_slice::<ClientJsonRpcMessage>(text);
            assert!(rmcp.is_err(), "{shown}");
            let fast = read(text);
            assert!(fast.is_err(), "{shown} is read: {fast:?}");
            assert_eq!(
                fast.unwrap_err().to_string(),
                rmcp.unwrap_err().to_string(),
                "{shown}"
            );
        }
    }

    #[test]
    fn escaped_keys_read_as_rmcp_reads_them() {
        let texts: [&[u8]; 2] = [
            br#"{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"e"}}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","par\u0061ms":{"n\u0061me":"e","_met\u0061":{"k":1}}}"#,
        ];
        for text in texts {
            let fast = read(text).map(|m| serde_json::to_value(m).unwrap());
            let rmcp = serde_json::from_slice::<ClientJsonRpcMessage>(text)
                .map(|m| serde_json::to_value(m).unwrap());
            assert!(fast.is_ok(), "{}", String::from_utf8_lossy(text));
            assert_eq!(
                fast.map_err(|e| e.to_string()),
                rmcp.map_err(|e| e.to_string()),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn a_key_given_twice_anywhere_in_a_message_is_refused_naming_it_and_its_object() {
        let cases: [(&[u8], &str, &str); 12] = [
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"path":"/etc/passwd","path":"/tmp/x"}}}"#,
                "path",
                "in the object at `/params/arguments`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"o":{"a":[{},{"b":1,"b":2}]}}}}"#,
                "b",
                "in the object at `/params/arguments/o/a/1`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","_meta":{"progressToken":1,"progressToken":2}}}"#,
                "progressToken",
                "in the object at `/params/_meta`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","inputResponses":{"ask":{},"ask":{}}}}"#,
                "ask",
                "in the object at `/params/inputResponses`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
                "name",
                "in the object at `/params`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"e"}}"#,
                "method",
                "in the top-level object",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"e"}}"#,
                "id",
                "in the top-level object",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"},"x":1,"x":2}"#,
                "x",
                "in the top-level object",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","other":{"k":1,"k":1}}}"#,
                "k",
                "in the object at `/params/other`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"a","cursor":"b"}}"#,
                "cursor",
                "in the object at `/params`",
            ),
            (
                br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":{"a":1,"a":1}}}"#,
                "a",
                "in the object at `/params/_meta`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"content":[]}}"#,
                "content",
                "in the object at `/result`",
            ),
        ];
        for (text, key, place) in cases {
            let shown = String::from_utf8_lossy(text);
            let Err(error) = read(text) else {
                panic!("{shown} is read")
            };
            // Answered `-32600` with the message's id, not `-32700`.
            assert!(error.is_data(), "{shown}: {error}");
            assert_eq!(
                error.to_string(),
                format!("the key `{key}` appears twice {place}: send each key once"),
                "{shown}"
            );
        }
    }
}

// A path of its own: `benches/message.rs` compiles this file in too, from another place.
#[cfg(test)]
#[path = "message/properties.rs"]
mod properties;
