//! Provider formats against golden files of real-shaped payloads.
//!
//! Each provider directory under `tests/golden/` holds the provider's answer as it arrives
//! (`response.json`, or `request.json` for MCP) and the golden files this crate must
//! produce: the tool definitions, the parsed calls, and the rendered results. To accept
//! an intended change, run with `UPDATE_GOLDEN=1` and review the diff.

use std::path::PathBuf;
use std::sync::Arc;

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_agent::format::{FormatError, anthropic, gemini, mcp, openai};
use toolgate_agent::{
    Arguments, ExecuteOptions, InMemoryStateManager, ThreadConfig, ToolCall, ToolResult, ToolSystem,
};
use toolgate_core::tool::{ToolAnnotations, ToolDefinition};
use toolgate_core::{JsonTool, Pipeline, ToolError, tool_fn};

#[derive(Deserialize, Serialize, Validate, JsonSchema)]
/// A forecast request.
struct Forecast {
    /// The city, e.g. `Paris`.
    #[garde(length(min = 1, max = 40))]
    city: String,
    /// How many days ahead.
    #[garde(range(min = 1, max = 14))]
    days: u8,
    /// `celsius` or `fahrenheit`.
    #[garde(skip)]
    unit: Option<String>,
}

fn system() -> ToolSystem {
    let pipeline = Pipeline::builder().tool(
        tool_fn(
            "get_weather",
            "Weather forecast for a city.",
            |f: Forecast| async move {
                Ok::<_, ToolError>(json!({ "city": f.city, "days": f.days, "temp_c": 21 }))
            },
        )
        .annotations(ToolAnnotations::READ_ONLY),
    );
    let mut search = JsonTool::new(
        "search",
        "Searches the web. Returns titles and URLs.",
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "What to look for." },
                "limit": { "type": "integer", "minimum": 1, "maximum": 10 }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        |input, _ctx| {
            Box::pin(async move {
                let limit = input["limit"].as_u64().unwrap_or(1) as usize;
                let hits: Vec<Value> = ["Parapluie & Co", "Rain Goods"]
                    .iter()
                    .take(limit)
                    .map(|t| json!({ "title": t, "url": format!("https://example.org/{}", t.len()) }))
                    .collect();
                Ok::<_, ToolError>(json!({ "hits": hits }))
            })
        },
    );
    search.definition_mut().title = Some("Web search".into());
    search.definition_mut().annotations = ToolAnnotations {
        read_only: true,
        open_world: true,
        ..Default::default()
    };
    let pipeline = pipeline.tool(search);
    let state = Arc::new(InMemoryStateManager::new());
    state.set_config("t", ThreadConfig::enabling(["get_weather", "search"]));
    ToolSystem::builder(pipeline, state).build().unwrap()
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(golden_path(name)).unwrap()).unwrap()
}

#[track_caller]
fn assert_golden(name: &str, actual: &Value) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(actual).unwrap() + "\n").unwrap();
        return;
    }
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "golden file {} is missing ({e}): run with UPDATE_GOLDEN=1 and review it",
                path.display()
            )
        }))
        .unwrap();
    assert_eq!(
        actual,
        &expected,
        "{} differs; if the change is intended, run with UPDATE_GOLDEN=1 and review the diff",
        path.display()
    );
}

async fn run(system: &ToolSystem, calls: Vec<ToolCall>) -> Vec<ToolResult> {
    system
        .execute_tools("t", calls, ExecuteOptions::new())
        .await
}

fn definitions(system: &ToolSystem) -> Vec<ToolDefinition> {
    system.definitions()
}

#[tokio::test]
async fn openai_chat_completions_round_trip_matches_golden_files() {
    let system = system();
    assert_golden(
        "openai_chat/tools.json",
        &openai::chat_tools(&definitions(&system)),
    );
    let calls = openai::parse_chat_tool_calls(&fixture("openai_chat/response.json")).unwrap();
    assert_golden(
        "openai_chat/calls.json",
        &serde_json::to_value(&calls).unwrap(),
    );
    assert!(
        matches!(calls[1].arguments, Arguments::Unparseable { ref raw, .. } if raw == "{\"query\": \"umbrella shops")
    );
    let results = run(&system, calls).await;
    let messages: Vec<Value> = results.iter().map(openai::chat_tool_message).collect();
    assert_golden("openai_chat/tool_messages.json", &Value::Array(messages));
}

#[tokio::test]
async fn openai_responses_round_trip_matches_golden_files() {
    let system = system();
    assert_golden(
        "openai_responses/tools.json",
        &openai::responses_tools(&definitions(&system)),
    );
    let calls = openai::parse_responses_output(&fixture("openai_responses/response.json")).unwrap();
    assert_golden(
        "openai_responses/calls.json",
        &serde_json::to_value(&calls).unwrap(),
    );
    let results = run(&system, calls).await;
    let items: Vec<Value> = results.iter().map(openai::responses_tool_output).collect();
    assert_golden(
        "openai_responses/function_call_outputs.json",
        &Value::Array(items),
    );
}

#[tokio::test]
async fn anthropic_round_trip_matches_golden_files() {
    let system = system();
    assert_golden(
        "anthropic/tools.json",
        &anthropic::tools(&definitions(&system)),
    );
    let calls = anthropic::parse_tool_uses(&fixture("anthropic/response.json")).unwrap();
    assert_golden(
        "anthropic/calls.json",
        &serde_json::to_value(&calls).unwrap(),
    );
    let results = run(&system, calls).await;
    assert_golden(
        "anthropic/tool_results.json",
        &anthropic::tool_results_message(&results),
    );
}

#[tokio::test]
async fn gemini_round_trip_matches_golden_files() {
    let system = system();
    let tools = gemini::tools(&definitions(&system));
    assert_golden("gemini/tools.json", &tools);
    assert!(
        !tools.to_string().contains("additionalProperties")
            && !tools.to_string().contains("$schema")
    );
    let calls = gemini::parse_function_calls(&fixture("gemini/response.json")).unwrap();
    assert_golden("gemini/calls.json", &serde_json::to_value(&calls).unwrap());
    let results = run(&system, calls).await;
    assert_golden(
        "gemini/function_responses.json",
        &gemini::function_responses_content(&results),
    );
}

#[tokio::test]
async fn mcp_round_trip_matches_golden_files() {
    let system = system();
    assert_golden(
        "mcp/tools_list.json",
        &mcp::tools_list(&definitions(&system)),
    );
    let request = mcp::parse_call_request(&fixture("mcp/request.json")).unwrap();
    assert_eq!(request.jsonrpc_id, json!(7));
    assert_golden(
        "mcp/call.json",
        &serde_json::to_value(&request.call).unwrap(),
    );
    let results = run(&system, vec![request.call.clone()]).await;
    assert_golden(
        "mcp/response.json",
        &mcp::call_response(&request, &results[0]),
    );
}

#[test]
fn malformed_payloads_are_typed_errors_naming_the_field() {
    let err = openai::parse_chat_tool_calls(
        &json!({ "tool_calls": [{ "type": "function", "function": { "name": "x" } }] }),
    )
    .unwrap_err();
    assert_eq!(
        err,
        FormatError::Shape {
            provider: "openai chat completions",
            path: "tool_calls[0].id".into(),
            expected: "a string"
        }
    );
    assert!(anthropic::parse_tool_uses(&json!({ "content": "text" })).is_err());
    assert!(gemini::parse_function_calls(&json!({ "candidates": [] })).is_err());
    assert!(openai::parse_responses_output(&json!({ "status": "failed" })).is_err());
    let not_a_call =
        mcp::parse_call_request(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
            .unwrap_err();
    assert!(not_a_call.to_string().contains("`method`"));
}

#[test]
fn an_openai_payload_that_is_not_a_message_is_refused_naming_what_it_is() {
    for (payload, found) in [
        (json!("hello"), "a string"),
        (json!(42), "a number"),
        (json!(null), "null"),
        (json!(false), "true or false"),
    ] {
        assert_eq!(
            openai::parse_chat_tool_calls(&payload).unwrap_err(),
            FormatError::NotAMessage {
                provider: "openai chat completions",
                found
            }
        );
    }
    let no_message = json!({ "choices": [{ "message": "text" }] });
    assert!(openai::parse_chat_tool_calls(&no_message).is_err());
}

#[test]
fn an_openai_object_that_is_neither_a_message_nor_a_response_is_refused_not_read_as_no_calls() {
    let call = json!({"name": "echo", "arguments": {"text": "a"}});
    for payload in [
        json!({ "calls": [call] }),
        json!({ "tool_call": [call] }),
        json!({ "foo": 1 }),
        json!({}),
    ] {
        let error = openai::parse_chat_tool_calls(&payload).unwrap_err();
        assert!(
            matches!(&error, FormatError::Shape { path, .. } if path == "tool_calls"),
            "{payload}: {error:?}"
        );
        let said = error.to_string();
        assert!(
            said.contains("an assistant message (an object with `role`)")
                && said.contains("a chat completion (an object with `choices`)"),
            "{said}"
        );
    }
    // A message that answers in words, and a response whose message does, have no calls.
    let words = json!({"role": "assistant", "content": "hi"});
    assert_eq!(openai::parse_chat_tool_calls(&words).unwrap(), Vec::new());
    let response = json!({"choices": [{"message": {"role": "assistant", "content": "hi"}}]});
    assert_eq!(
        openai::parse_chat_tool_calls(&response).unwrap(),
        Vec::new()
    );
    let null_calls = json!({"role": "assistant", "content": "hi", "tool_calls": null});
    assert_eq!(
        openai::parse_chat_tool_calls(&null_calls).unwrap(),
        Vec::new()
    );
}

#[test]
fn an_openai_tool_calls_array_on_its_own_is_read_as_the_messages_calls() {
    let calls = json!([
        { "id": "a", "type": "function", "function": { "name": "ping", "arguments": "{}" } },
        { "id": "b", "type": "function", "function": { "name": "pong" } },
    ]);
    let parsed = openai::parse_chat_tool_calls(&calls).unwrap();
    let ids: Vec<_> = parsed
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(ids, [("a", "ping"), ("b", "pong")]);
    assert!(
        openai::parse_chat_tool_calls(&json!([]))
            .unwrap()
            .is_empty()
    );
    // Each item is still checked.
    assert_eq!(
        openai::parse_chat_tool_calls(&json!([{ "type": "function" }])).unwrap_err(),
        FormatError::Shape {
            provider: "openai chat completions",
            path: "tool_calls[0].id".into(),
            expected: "a string"
        }
    );
}

#[test]
fn calls_in_another_providers_shape_are_refused_by_openai_not_read_as_none() {
    let anthropic = json!({ "role": "assistant", "content": [
        { "type": "text", "text": "…" },
        { "type": "tool_use", "id": "t", "name": "ping", "input": {} },
    ] });
    let gemini_content =
        json!({ "role": "model", "parts": [{ "functionCall": { "name": "ping" } }] });
    let gemini_response = json!({ "candidates": [{ "content": gemini_content.clone() }] });
    for (payload, format) in [
        (anthropic, "anthropic"),
        (gemini_content, "gemini"),
        (gemini_response, "gemini"),
    ] {
        let error = openai::parse_chat_tool_calls(&payload).unwrap_err();
        assert_eq!(
            error,
            FormatError::OtherFormat {
                provider: "openai chat completions",
                format
            }
        );
        assert!(
            error.to_string().contains(&format!("?format={format}")),
            "{error}"
        );
    }
    // Content blocks without calls are a message with no calls.
    let text_blocks = json!({ "role": "assistant", "content": [{ "type": "text", "text": "hi" }] });
    assert!(
        openai::parse_chat_tool_calls(&text_blocks)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_message_without_tool_calls_has_no_calls() {
    let message = json!({ "role": "assistant", "content": "Done.", "tool_calls": null });
    assert!(openai::parse_chat_tool_calls(&message).unwrap().is_empty());
    let empty_args = json!({ "tool_calls": [{ "id": "c", "type": "function", "function": { "name": "ping", "arguments": "" } }] });
    assert_eq!(
        openai::parse_chat_tool_calls(&empty_args).unwrap()[0]
            .arguments
            .json(),
        Some(&json!({}))
    );
}

#[test]
fn mcp_lists_output_schemas_only_when_they_describe_objects() {
    let mut definition = system().definitions().remove(0);
    definition.output_schema = Some(json!({ "type": "string" }));
    assert!(mcp::tool(&definition).get("outputSchema").is_none());
    definition.output_schema = Some(json!({ "type": "object" }));
    assert_eq!(
        mcp::tool(&definition)["outputSchema"],
        json!({ "type": "object" })
    );
}

#[test]
fn a_tool_without_arguments_is_listed_with_an_empty_object_schema_in_every_format() {
    let pipeline = Pipeline::builder()
        .tool(tool_fn("ping", "Answers pong.", |_: ()| async {
            Ok::<_, ToolError>("pong")
        }))
        .build()
        .unwrap();
    let defs: Vec<ToolDefinition> = pipeline.definitions().cloned().collect();
    let empty = json!({ "type": "object", "properties": {} });
    assert_eq!(
        openai::chat_tools(&defs)[0]["function"]["parameters"],
        empty
    );
    assert_eq!(openai::responses_tools(&defs)[0]["parameters"], empty);
    assert_eq!(anthropic::tools(&defs)[0]["input_schema"], empty);
    assert_eq!(
        gemini::tools(&defs)[0]["functionDeclarations"][0]["parameters"]["type"],
        "object"
    );
    assert_eq!(mcp::tools_list(&defs)["tools"][0]["inputSchema"], empty);
}

/// A chat completions message, a Responses API response and a Gemini content, each
/// holding one call of `ping`: what a caller holds when they pick the wrong parser.
fn one_call_in_each_format() -> [(&'static str, Value); 4] {
    [
        (
            "openai",
            json!({ "role": "assistant",
                    "content": [{ "type": "text", "text": "Let me check." }],
                    "tool_calls": [{ "id": "c1", "type": "function",
                                     "function": { "name": "ping", "arguments": "{}" } }] }),
        ),
        (
            "openai responses",
            json!({ "object": "response", "output": [
                { "type": "message", "role": "assistant", "content": [] },
                { "type": "function_call", "id": "fc_1", "call_id": "c1", "name": "ping", "arguments": "{}" },
            ] }),
        ),
        (
            "anthropic",
            json!({ "role": "assistant", "content": [
                { "type": "tool_use", "id": "toolu_1", "name": "ping", "input": {} },
            ] }),
        ),
        (
            "gemini",
            json!({ "candidates": [{ "content": { "role": "model",
                    "parts": [{ "functionCall": { "name": "ping", "args": {} } }] } }] }),
        ),
    ]
}

#[test]
fn calls_in_another_providers_shape_are_refused_by_anthropic_not_read_as_none() {
    for (format, payload) in one_call_in_each_format() {
        if format == "anthropic" {
            continue;
        }
        assert_eq!(
            anthropic::parse_tool_uses(&payload).unwrap_err(),
            FormatError::OtherFormat {
                provider: "anthropic messages",
                format
            },
            "{payload}"
        );
    }
    assert_eq!(
        anthropic::parse_tool_uses(&json!("hello")).unwrap_err(),
        FormatError::NotAMessage {
            provider: "anthropic messages",
            found: "a string"
        }
    );
}

#[test]
fn an_anthropic_content_block_without_a_type_is_refused_not_skipped() {
    // Bedrock's Converse API: a block holds its call under `toolUse`, with no `type`.
    let bedrock = json!({ "role": "assistant", "content": [
        { "text": "Let me check." },
        { "toolUse": { "toolUseId": "t1", "name": "ping", "input": {} } },
    ] });
    assert_eq!(
        anthropic::parse_tool_uses(&bedrock).unwrap_err(),
        FormatError::Shape {
            provider: "anthropic messages",
            path: "content[0].type".into(),
            expected: "a string"
        }
    );
}

#[test]
fn calls_in_another_providers_shape_are_refused_by_gemini_not_read_as_none() {
    for (format, payload) in one_call_in_each_format() {
        if format == "gemini" {
            continue;
        }
        assert_eq!(
            gemini::parse_function_calls(&payload).unwrap_err(),
            FormatError::OtherFormat {
                provider: "gemini",
                format
            },
            "{payload}"
        );
    }
    assert_eq!(
        gemini::parse_function_calls(&json!(42)).unwrap_err(),
        FormatError::NotAMessage {
            provider: "gemini",
            found: "a number"
        }
    );
}

#[test]
fn gemini_reads_a_function_call_under_its_protocol_buffer_field_name_too() {
    // As Google's Python SDKs write a response out as a dictionary: snake_case names, and
    // every field of a part, `null` when unset.
    let dumped = json!({ "candidates": [{ "content": { "role": "model", "parts": [
        { "text": "Let me check.", "function_call": null, "functionCall": null },
        { "text": null, "function_call": { "id": "c1", "name": "ping", "args": { "n": 1 } } },
    ] } }] });
    let calls = gemini::parse_function_calls(&dumped).unwrap();
    assert_eq!(calls, [ToolCall::new("c1", "ping", json!({ "n": 1 }))]);

    let both = json!({ "parts": [{
        "functionCall": { "name": "ping" },
        "function_call": { "name": "transfer" },
    }] });
    assert!(matches!(
        gemini::parse_function_calls(&both).unwrap_err(),
        FormatError::Shape { path, .. } if path == "parts[0]"
    ));
}

#[test]
fn calls_in_another_providers_shape_are_refused_by_openai_responses_not_read_as_none() {
    for (format, payload) in one_call_in_each_format() {
        if format == "openai responses" {
            continue;
        }
        assert_eq!(
            openai::parse_responses_output(&payload).unwrap_err(),
            FormatError::OtherFormat {
                provider: "openai responses",
                format
            },
            "{payload}"
        );
    }
    // A chat completions `tool_calls` array on its own is no `output` array either.
    let tool_calls = one_call_in_each_format()[0].1["tool_calls"].clone();
    assert_eq!(
        openai::parse_responses_output(&tool_calls).unwrap_err(),
        FormatError::OtherFormat {
            provider: "openai responses",
            format: "openai"
        }
    );
    // Output without function calls has no calls.
    let message_only =
        json!({ "output": [{ "type": "message", "role": "assistant", "content": [] }] });
    assert!(
        openai::parse_responses_output(&message_only)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_responses_api_response_is_refused_by_openai_chat_not_read_as_none() {
    let (_, response) = one_call_in_each_format()[1].clone();
    let error = openai::parse_chat_tool_calls(&response).unwrap_err();
    assert_eq!(
        error,
        FormatError::OtherFormat {
            provider: "openai chat completions",
            format: "openai responses"
        }
    );
    assert!(
        error.to_string().contains("parse_responses_output"),
        "{error}"
    );
}

#[tokio::test]
async fn a_legacy_function_call_of_chat_completions_is_read_as_one_call_answered_by_name() {
    let message = json!({ "role": "assistant", "content": null, "tool_calls": null,
        "function_call": { "name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":2}" } });
    let calls = openai::parse_chat_tool_calls(&message).unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("openai-call-0", "get_weather")
    );
    assert!(calls[0].id.starts_with(openai::SYNTHETIC_ID_PREFIX));
    assert_eq!(
        calls[0].arguments.json(),
        Some(&json!({ "city": "Paris", "days": 2 }))
    );
    // Read the same from the whole response.
    let response = json!({ "choices": [{ "message": message.clone() }] });
    assert_eq!(openai::parse_chat_tool_calls(&response).unwrap(), calls);

    // It runs, and is answered by name: OpenAI never issued the id.
    let system = system();
    let results = run(&system, calls).await;
    assert!(results[0].is_success(), "{:?}", results[0].error);
    let answer = openai::chat_tool_message(&results[0]);
    assert_eq!(answer["role"], "function");
    assert_eq!(answer["name"], "get_weather");
    assert!(answer.get("tool_call_id").is_none(), "{answer}");
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("\"temp_c\":21"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_legacy_function_call_with_arguments_that_are_not_json_is_refused_as_invalid_input() {
    let text = "{\"city\": \"Paris";
    let legacy = json!({ "role": "assistant",
        "function_call": { "name": "get_weather", "arguments": text } });
    let modern = json!({ "role": "assistant", "tool_calls": [{ "id": "c1", "type": "function",
        "function": { "name": "get_weather", "arguments": text } }] });
    let legacy = openai::parse_chat_tool_calls(&legacy).unwrap();
    let modern = openai::parse_chat_tool_calls(&modern).unwrap();
    assert!(
        matches!(&legacy[0].arguments, Arguments::Unparseable { raw, .. } if raw == text),
        "{:?}",
        legacy[0].arguments
    );
    assert_eq!(legacy[0].arguments, modern[0].arguments);
    let system = system();
    let legacy = run(&system, legacy).await;
    let modern = run(&system, modern).await;
    assert_eq!(legacy[0].error_code(), Some("invalid_input"));
    assert_eq!(legacy[0].error, modern[0].error);
}

#[test]
fn a_chat_message_with_calls_under_both_tool_calls_and_function_call_is_refused() {
    let both = json!({ "role": "assistant",
        "tool_calls": [{ "id": "c1", "type": "function", "function": { "name": "ping", "arguments": "{}" } }],
        "function_call": { "name": "pong", "arguments": "{}" } });
    assert!(matches!(
        openai::parse_chat_tool_calls(&both).unwrap_err(),
        FormatError::Shape { path, .. } if path == "function_call"
    ));
    // A legacy call without its name is refused as a modern one is.
    let nameless = json!({ "role": "assistant", "function_call": { "arguments": "{}" } });
    assert!(matches!(
        openai::parse_chat_tool_calls(&nameless).unwrap_err(),
        FormatError::Shape { path, .. } if path == "function_call.name"
    ));
    // An id in the form toolgate gives the legacy call is refused, not taken for one.
    let reserved = json!([{ "id": "openai-call-0", "type": "function",
        "function": { "name": "ping", "arguments": "{}" } }]);
    assert_eq!(
        openai::parse_chat_tool_calls(&reserved).unwrap_err(),
        FormatError::ReservedId {
            provider: "openai chat completions",
            path: "tool_calls[0].id".into(),
            prefix: openai::SYNTHETIC_ID_PREFIX,
        }
    );
    // Another parser refuses the legacy message as OpenAI's, not as no calls.
    let legacy =
        json!({ "role": "assistant", "function_call": { "name": "ping", "arguments": "{}" } });
    assert_eq!(
        openai::parse_responses_output(&legacy).unwrap_err(),
        FormatError::OtherFormat {
            provider: "openai responses",
            format: "openai"
        }
    );
}

#[test]
fn a_custom_tool_call_is_refused_naming_its_type_not_read_as_no_calls() {
    let custom =
        json!({ "type": "custom_tool_call", "call_id": "c1", "name": "echo", "input": "x" });
    let error = openai::parse_responses_output(&json!({ "output": [custom] })).unwrap_err();
    assert_eq!(
        error,
        FormatError::UnrunnableCall {
            provider: "openai responses",
            path: "output[0]".into(),
            kind: "custom_tool_call",
        }
    );
    let said = error.to_string();
    assert!(
        said.contains("`output[0]` is a `custom_tool_call` item")
            && said.contains("free-form text")
            && said.contains("declare the tool as a function tool"),
        "{said}"
    );
    // Chat completions' custom tool calls too.
    let chat = json!({ "role": "assistant", "tool_calls": [
        { "id": "c1", "type": "custom", "custom": { "name": "echo", "input": "x" } }] });
    assert_eq!(
        openai::parse_chat_tool_calls(&chat).unwrap_err(),
        FormatError::UnrunnableCall {
            provider: "openai chat completions",
            path: "tool_calls[0]".into(),
            kind: "custom",
        }
    );
}

#[test]
fn responses_items_the_application_must_act_on_are_refused_and_openais_own_calls_skipped() {
    let function =
        json!({ "type": "function_call", "call_id": "c1", "name": "ping", "arguments": "{}" });
    for kind in [
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_approval_request",
    ] {
        let item = json!({ "type": kind, "id": "x1", "call_id": "c2" });
        // Refused even beside a function call: it would be left unanswered.
        let output = json!({ "output": [function.clone(), item] });
        let error = openai::parse_responses_output(&output).unwrap_err();
        assert!(
            matches!(&error, FormatError::UnrunnableCall { kind: k, path, .. }
                if *k == kind && path == "output[1]"),
            "{kind}: {error:?}"
        );
        assert!(error.to_string().contains(&format!("`{kind}`")), "{error}");
    }
    // Items that are no calls for the application are skipped.
    let output = json!({ "output": [
        { "type": "reasoning", "id": "r1", "summary": [] },
        { "type": "web_search_call", "id": "ws1", "status": "completed" },
        { "type": "file_search_call", "id": "fs1", "status": "completed", "queries": [] },
        { "type": "mcp_call", "id": "m1", "name": "lookup", "arguments": "{}", "server_label": "s", "output": "ok" },
        { "type": "mcp_list_tools", "id": "ml1", "server_label": "s", "tools": [] },
        { "type": "code_interpreter_call", "id": "ci1", "status": "completed", "container_id": "k" },
        { "type": "image_generation_call", "id": "ig1", "status": "completed", "result": "" },
        { "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "hi" }] },
        function,
    ] });
    let calls = openai::parse_responses_output(&output).unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "c1");
}
