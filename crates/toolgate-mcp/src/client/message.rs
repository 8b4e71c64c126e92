//! An upstream's JSON-RPC message, read from an event of a call's stream.
//!
//! rmcp reads a server's message as an untagged enum, and a response's result as another:
//! serde buffers the whole message, tries each kind of message, and for a response tries
//! each of rmcp's result types in turn until one takes it. `CallToolResult` is the
//! sixteenth, after fifteen attempts that each walk the buffered result again, skipping
//! the tool's whole output field by field. The answer to a `tools/call` — the message every
//! relayed call waits for — is read here straight into its own type, after one pass over
//! the message's keys and its result's that allocates nothing. Anything else, and an answer
//! that does not read as one, is read as rmcp reads it, so the outcome — the message or the
//! error — is rmcp's own.

use rmcp::model::{
    CallToolResult, JsonRpcMessage, JsonRpcResponse, ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The JSON-RPC message `text` holds, as rmcp would read it.
pub(crate) fn read(text: &str) -> Result<ServerJsonRpcMessage, serde_json::Error> {
    if is_tool_answer(text)
        && let Ok(answer) = serde_json::from_str::<JsonRpcResponse<CallToolResult>>(text)
    {
        return Ok(JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: answer.jsonrpc,
            id: answer.id,
            result: ServerResult::CallToolResult(answer.result),
        }));
    }
    serde_json::from_str(text)
}

/// Whether `text` is an object with an `id` and a `result`, without a `method` or an
/// `error`, whose result has `content` and no key but a tool result's: the shape rmcp
/// reads as a response carrying a [`CallToolResult`], and no earlier kind of result (the
/// tests hold every combination of those keys to rmcp's reading).
fn is_tool_answer(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Keys {
        id: Option<IgnoredAny>,
        method: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
        result: Option<ResultKeys>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ResultKeys {
        content: Option<IgnoredAny>,
        #[serde(rename = "structuredContent")]
        _structured_content: Option<IgnoredAny>,
        #[serde(rename = "isError")]
        _is_error: Option<IgnoredAny>,
        #[serde(rename = "_meta")]
        _meta: Option<IgnoredAny>,
        #[serde(rename = "resultType")]
        _result_type: Option<IgnoredAny>,
    }
    serde_json::from_str::<Keys>(text).is_ok_and(|keys| {
        keys.id.is_some()
            && keys.method.is_none()
            && keys.error.is_none()
            && keys.result.is_some_and(|result| result.content.is_some())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// What `read` gives for `text` and what rmcp's own reading gives, as JSON (or the
    /// error's text), and whether each read a tool result.
    fn both(text: &str) -> [(Result<Value, String>, bool); 2] {
        let seen = |read: Result<ServerJsonRpcMessage, serde_json::Error>| {
            let tool_result = matches!(
                &read,
                Ok(JsonRpcMessage::Response(JsonRpcResponse {
                    result: ServerResult::CallToolResult(_),
                    ..
                }))
            );
            let read = read
                .map(|m| serde_json::to_value(m).unwrap())
                .map_err(|e| e.to_string());
            (read, tool_result)
        };
        [
            seen(read(text)),
            seen(serde_json::from_str::<ServerJsonRpcMessage>(text)),
        ]
    }

    #[test]
    fn a_tool_answer_reads_as_rmcp_reads_it() {
        let answers = [
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "hi"}], "isError": false}}),
            serde_json::json!({"jsonrpc": "2.0", "id": "a-1", "result": {"content": [], "structuredContent": {"n": 1},
                "_meta": {"k": [1, 2]}, "resultType": "complete"}}),
            serde_json::json!({"result": {"content": [{"type": "text", "text": "x"}]}, "id": 7, "jsonrpc": "2.0", "extra": true}),
        ];
        for answer in answers {
            let text = answer.to_string();
            assert!(is_tool_answer(&text), "{text}");
            let [fast, rmcp] = both(&text);
            assert!(fast.1, "{text}: {fast:?}");
            assert_eq!(fast, rmcp, "{text}");
        }
    }

    /// Every combination of a tool result's keys, each with values of several shapes,
    /// reads as rmcp reads it: the same message of the same kind, or the same error.
    #[test]
    fn every_combination_of_a_tool_results_keys_reads_as_rmcp_reads_it() {
        let values: [(&str, Vec<Value>); 5] = [
            (
                "content",
                vec![
                    serde_json::json!([]),
                    serde_json::json!([{"type": "text", "text": "t"}]),
                    serde_json::json!(null),
                    serde_json::json!("text"),
                    serde_json::json!([{"type": "nope"}]),
                ],
            ),
            (
                "structuredContent",
                vec![
                    serde_json::json!({"a": 1}),
                    serde_json::json!(null),
                    serde_json::json!([1]),
                ],
            ),
            (
                "isError",
                vec![serde_json::json!(true), serde_json::json!("yes")],
            ),
            (
                "_meta",
                vec![serde_json::json!({"m": 1}), serde_json::json!(3)],
            ),
            (
                "resultType",
                vec![
                    serde_json::json!("complete"),
                    serde_json::json!("input_required"),
                    serde_json::json!(5),
                ],
            ),
        ];
        let mut checked = 0;
        for keys in 0u32..(1 << values.len()) {
            // Each chosen key's value shapes, taken in turn (one combination per shape of
            // the key with the most).
            for shape in 0..5 {
                let mut result = serde_json::Map::new();
                for (index, (key, shapes)) in values.iter().enumerate() {
                    if keys & (1 << index) != 0 {
                        result.insert((*key).into(), shapes[shape % shapes.len()].clone());
                    }
                }
                let text =
                    serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": result}).to_string();
                let [fast, rmcp] = both(&text);
                assert_eq!(fast, rmcp, "{text}");
                checked += 1;
            }
        }
        assert_eq!(checked, 32 * 5);
    }

    #[test]
    fn anything_else_reads_or_fails_as_rmcp_has_it() {
        let others = [
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "tools": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"contents": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            // Shapes rmcp refuses, and answers that do not read as answers.
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {"content": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}, "error": {"code": 1, "message": "m"}}),
            serde_json::json!({"jsonrpc": "2.0", "result": {"content": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": null, "result": {"content": []}}),
            serde_json::json!({"jsonrpc": "1.0", "id": 1, "result": {"content": []}}),
            serde_json::json!({"id": 1, "result": {"content": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": [1]}),
            serde_json::json!([1, 2]),
            serde_json::json!("content"),
        ];
        for other in others {
            let text = other.to_string();
            let [fast, rmcp] = both(&text);
            assert_eq!(fast, rmcp, "{text}");
        }
    }

    #[test]
    fn escaped_keys_and_a_key_given_twice_read_as_rmcp_reads_them() {
        let texts = [
            r#"{"jsonrpc":"2.0","id":2,"result":{"cont\u0065nt":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a\"b"}]}}"#,
        ];
        for text in texts {
            let [fast, rmcp] = both(text);
            assert_eq!(fast, rmcp, "{text}");
        }
    }
}
