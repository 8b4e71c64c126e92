//! What is wrong with the parameters of a request rmcp could not read.
//!
//! rmcp reads a client's request as an untagged enum: a request whose parameters do not
//! fit its method's type is not refused there, it falls through to a custom request, as
//! if its method were one rmcp does not know. Such a request of a method this server
//! serves is answered here `-32602` (invalid params), naming in plain words what is wrong
//! (`` `uri` must be a string ``) — never serde's wording, which names Rust types.

use rmcp::model::ErrorData;
use serde_json::{Map, Value};
use toolgate_core::error::shown_id;

use super::message::kind_of;

/// The methods this server serves whose parameters are checked here, with what each takes.
/// `tools/call` and `tools/list` are answered with their own hints (connection.rs).
fn fields_of(method: &str) -> Option<&'static [Field]> {
    const PAGE: &[Field] = &[Field::optional("cursor", Shape::String)];
    const URI: &[Field] = &[Field::required("uri", Shape::String)];
    const READ: &[Field] = &[
        Field::required("uri", Shape::String),
        Field::optional("inputResponses", Shape::Object),
        Field::optional("requestState", Shape::String),
    ];
    const PROMPT: &[Field] = &[
        Field::required("name", Shape::String),
        Field::optional("arguments", Shape::Object),
        Field::optional("inputResponses", Shape::Object),
        Field::optional("requestState", Shape::String),
    ];
    const COMPLETE: &[Field] = &[
        Field::required("ref", Shape::Reference),
        Field::required("argument", Shape::Argument),
        Field::optional("context", Shape::Context),
    ];
    const LEVEL: &[Field] = &[Field::required("level", Shape::Level)];
    const TASK: &[Field] = &[Field::required("taskId", Shape::String)];
    const TASK_UPDATE: &[Field] = &[
        Field::required("taskId", Shape::String),
        Field::required("inputResponses", Shape::Object),
    ];
    Some(match method {
        "prompts/list" | "resources/list" | "resources/templates/list" => PAGE,
        "resources/subscribe" | "resources/unsubscribe" => URI,
        "resources/read" => READ,
        "prompts/get" => PROMPT,
        "completion/complete" => COMPLETE,
        "logging/setLevel" => LEVEL,
        "tasks/get" | "tasks/cancel" => TASK,
        "tasks/update" => TASK_UPDATE,
        _ => return None,
    })
}

/// The methods of 2025-11-25 that 2026-07-28 removed: a caller of that revision is
/// answered method not found for them, whatever their parameters.
pub(crate) const REMOVED_IN_2026_07_28: [&str; 3] = [
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The levels `logging/setLevel` takes, in order.
const LEVELS: &str = "debug, info, notice, warning, error, critical, alert, emergency";

/// What is wrong with `value` as the logging level `name`, the levels it may be named:
/// `logging/setLevel`'s `level`, or the level a 2026-07-28 request asks in its `_meta`.
pub(crate) fn level_problem(name: &str, value: &Value) -> Option<String> {
    Shape::Level.problem(name, value)
}

/// The answer to a request of `method` that rmcp read as no method it knows, when
/// `method` is one this server serves (its parameters do not fit): `-32602`, saying what
/// is wrong. `None` for a method this server does not serve.
pub(crate) fn malformed(method: &str, params: Option<&Value>) -> Option<ErrorData> {
    let fields = fields_of(method)?;
    let problem = problem(fields, params).unwrap_or_else(|| {
        "its `params` do not fit the method: see the MCP specification for what it takes".to_owned()
    });
    Some(ErrorData::invalid_params(
        format!("malformed `{method}` request: {problem}"),
        None,
    ))
}

/// The first thing wrong with `params` for a method that takes `fields`.
fn problem(fields: &[Field], params: Option<&Value>) -> Option<String> {
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    let params = match params {
        Some(Value::Object(params)) => params,
        // No parameters read as an empty object: only a method that needs some fails.
        None | Some(Value::Null) if required.is_empty() => return None,
        None | Some(Value::Null) => {
            return Some(format!("`params` are missing: give {}", listed(&required)));
        }
        Some(other) => {
            return Some(format!(
                "`params` must be an object, not {}",
                kind_of(other)
            ));
        }
    };
    if let Some(meta) = params.get("_meta")
        && !meta.is_object()
        && !meta.is_null()
    {
        return Some(format!("`_meta` must be an object, not {}", kind_of(meta)));
    }
    fields
        .iter()
        .find_map(|field| match params.get(field.name) {
            None | Some(Value::Null) if field.required => Some(format!(
                "`{}` is missing: give {}",
                field.name,
                field.shape.described()
            )),
            None | Some(Value::Null) => None,
            Some(value) => field.shape.problem(field.name, value),
        })
}

/// A parameter a method takes.
struct Field {
    name: &'static str,
    required: bool,
    shape: Shape,
}

impl Field {
    const fn required(name: &'static str, shape: Shape) -> Field {
        Field {
            name,
            required: true,
            shape,
        }
    }

    const fn optional(name: &'static str, shape: Shape) -> Field {
        Field {
            name,
            required: false,
            shape,
        }
    }
}

/// What a parameter's value is.
#[derive(Clone, Copy)]
enum Shape {
    String,
    Object,
    /// A logging level.
    Level,
    /// A completion's reference: a prompt or a resource template.
    Reference,
    /// The argument a completion is for.
    Argument,
    /// A completion's context.
    Context,
}

impl Shape {
    /// The value of this shape, in words.
    fn described(self) -> String {
        match self {
            Shape::String => "a string".to_owned(),
            Shape::Object => "an object".to_owned(),
            Shape::Level => format!("one of {LEVELS}"),
            Shape::Reference => r#"an object, {"type": "ref/prompt", "name": "…"} or {"type": "ref/resource", "uri": "…"}"#.to_owned(),
            Shape::Argument => r#"an object, {"name": "…", "value": "…"}"#.to_owned(),
            Shape::Context => r#"an object, {"arguments": {"name": "value", …}}"#.to_owned(),
        }
    }

    /// What is wrong with `value` as the parameter `name` of this shape.
    fn problem(self, name: &str, value: &Value) -> Option<String> {
        let wrong = || {
            Some(format!(
                "`{name}` must be {}, not {}",
                self.described(),
                kind_of(value)
            ))
        };
        match (self, value) {
            (Shape::String, Value::String(_)) | (Shape::Object, Value::Object(_)) => None,
            (Shape::Level, Value::String(level)) => {
                let known = LEVELS.split(", ").any(|l| l == level);
                // The caller's value is repeated cut and escaped, as toolgate repeats an id.
                (!known).then(|| {
                    format!(
                        "`{name}` must be one of {LEVELS}, not \"{}\"",
                        shown_id(level)
                    )
                })
            }
            (Shape::Reference, Value::Object(reference)) => reference_problem(name, reference),
            (Shape::Argument, Value::Object(argument)) => ["name", "value"]
                .into_iter()
                .find_map(|key| string_problem(name, key, argument.get(key))),
            (Shape::Context, Value::Object(context)) => match context.get("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(arguments)) => arguments
                    .iter()
                    .find(|(_, v)| !v.is_string())
                    .map(|(key, v)| {
                        format!(
                            "`{name}.arguments.{}` must be a string, not {}",
                            shown_id(key),
                            kind_of(v)
                        )
                    }),
                Some(other) => Some(format!(
                    "`{name}.arguments` must be an object of strings, not {}",
                    kind_of(other)
                )),
            },
            _ => wrong(),
        }
    }
}

/// What is wrong with a completion's reference.
fn reference_problem(name: &str, reference: &Map<String, Value>) -> Option<String> {
    match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => string_problem(name, "name", reference.get("name")),
        Some("ref/resource") => string_problem(name, "uri", reference.get("uri")),
        _ => Some(format!(
            "`{name}.type` must be \"ref/prompt\" (with the prompt's `name`) or \"ref/resource\" (with the template's `uri`)"
        )),
    }
}

/// What is wrong with `value` as the string `outer.key`.
fn string_problem(outer: &str, key: &str, value: Option<&Value>) -> Option<String> {
    match value {
        Some(Value::String(_)) => None,
        None | Some(Value::Null) => Some(format!("`{outer}.{key}` is missing: give a string")),
        Some(other) => Some(format!(
            "`{outer}.{key}` must be a string, not {}",
            kind_of(other)
        )),
    }
}

/// `names` in words: `` `a` `` or `` `a` and `b` ``.
fn listed(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(" and ")
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, JsonRpcRequest};
    use serde_json::json;

    use super::*;

    /// The message of the error `params` of `method` get, having been read as rmcp reads
    /// them: as a custom request.
    fn refused(method: &str, params: Option<Value>) -> String {
        let mut message = json!({"jsonrpc": "2.0", "id": 1, "method": method});
        if let Some(params) = &params {
            message["params"] = params.clone();
        }
        let read: ClientJsonRpcMessage = serde_json::from_value(message).unwrap();
        let ClientJsonRpcMessage::Request(JsonRpcRequest {
            request: ClientRequest::CustomRequest(custom),
            ..
        }) = read
        else {
            panic!("{method} {params:?} is read as its method's request");
        };
        let error = malformed(&custom.method, custom.params.as_ref()).expect("a known method");
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        error.message.into_owned()
    }

    #[test]
    fn malformed_params_of_a_served_method_are_named_in_plain_words() {
        let cases = [
            (
                "logging/setLevel",
                Some(json!({"level": "loud"})),
                "`level` must be one of debug, info, notice, warning, error, critical, alert, emergency, not \"loud\"",
            ),
            (
                "logging/setLevel",
                None,
                "`params` are missing: give `level`",
            ),
            (
                "resources/read",
                Some(json!({})),
                "`uri` is missing: give a string",
            ),
            (
                "resources/read",
                Some(json!({"uri": 5})),
                "`uri` must be a string, not a number",
            ),
            (
                "prompts/get",
                Some(json!({})),
                "`name` is missing: give a string",
            ),
            (
                "prompts/get",
                Some(json!({"name": "x", "arguments": [1]})),
                "`arguments` must be an object, not an array",
            ),
            (
                "completion/complete",
                Some(json!({"argument": {"name": "a", "value": "b"}})),
                "`ref` is missing",
            ),
            (
                "completion/complete",
                Some(
                    json!({"ref": {"type": "ref/prompt"}, "argument": {"name": "a", "value": "b"}}),
                ),
                "`ref.name` is missing: give a string",
            ),
            (
                "completion/complete",
                Some(
                    json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a"}}),
                ),
                "`argument.value` is missing: give a string",
            ),
            (
                "resources/subscribe",
                Some(json!({"uri": ["a"]})),
                "`uri` must be a string, not an array",
            ),
            (
                "tasks/get",
                Some(json!({"taskId": 5})),
                "`taskId` must be a string, not a number",
            ),
        ];
        for (method, params, expected) in cases {
            let message = refused(method, params.clone());
            assert!(
                message.starts_with(&format!("malformed `{method}` request: ")),
                "{method} {params:?}: {message}"
            );
            assert!(message.contains(expected), "{method} {params:?}: {message}");
            for rust in ["invalid type", "expected", "map", "struct", "variant"] {
                assert!(!message.contains(rust), "{method} {params:?}: {message}");
            }
        }
    }

    #[test]
    fn a_method_this_server_does_not_serve_is_left_alone() {
        assert!(malformed("skills/list", Some(&json!({"cursor": 5}))).is_none());
        assert!(malformed("no/such", None).is_none());
    }

    #[test]
    fn a_level_or_argument_key_the_caller_sent_is_repeated_cut_and_escaped() {
        let hostile = format!("\u{202e}\u{1b}[2J\n{}", "Z".repeat(900_000));
        let level = refused("logging/setLevel", Some(json!({"level": hostile})));
        assert!(level.len() < 400, "{} bytes", level.len());
        assert!(level.contains("not \"\\u{202e}\\u{1b}[2J\\nZZZ"), "{level}");
        assert!(level.ends_with("…\""), "{level}");

        let arguments = json!({ hostile.clone(): 5 });
        let key = refused(
            "completion/complete",
            Some(json!({
                "ref": {"type": "ref/prompt", "name": "p"},
                "argument": {"name": "a", "value": "b"},
                "context": {"arguments": arguments},
            })),
        );
        assert!(key.len() < 400, "{} bytes", key.len());
        assert!(key.contains("`context.arguments.\\u{202e}"), "{key}");
        assert!(!key.contains('\u{202e}'), "{key}");
    }
}
