//! The MCP conformance suite's server fixtures written as toolgate tools, served by
//! toolgate's own MCP server (`McpServer`) over streamable HTTP: what the suite's server
//! scenarios call by name (`test_simple_text`, `test://static-text`,
//! `test_prompt_with_arguments`, the multi-round `test_input_required_result_*` …), each a
//! tool of a pipeline. `crates/toolgate-gateway/tests/conformance/run.sh` runs the suite
//! against it, beside the gateway runs.
//!
//! It shows how a tool written for MCP clients uses toolgate:
//! - content of every type: a tool tagged [`MCP_RESULT_TAG`] returns an MCP result in its
//!   JSON form, answered as it is;
//! - talking back to the caller during the call (progress, log messages, sampling and
//!   elicitation requests): the caller's connection is a request-scope provider
//!   ([`CallerKey`]);
//! - multi-round calls (2026-07-28): a tool returns [`ToolError::InputRequired`] and reads
//!   the caller's answers on the retry ([`CallerRequest::round`]); the server seals its
//!   state;
//! - prompts and resources: tools tagged [`PROMPT_TAG`] and [`RESOURCES_TAG`].
//!
//! ```sh
//! cargo run -p toolgate-mcp --example conformance_fixture -- 0   # prints "server listening on URL"
//! ```

// Logging and sampling are deprecated from 2026-07-28 on; the 2025-11-25 scenarios use them.
#![allow(deprecated)]

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{ClientResult, CreateMessageRequest, ElicitRequest, LoggingLevel, ServerRequest};
use rmcp::transport::StreamableHttpServerConfig;
use serde_json::{Value, json};
use toolgate_core::error::InputViolations;
use toolgate_core::{JsonTool, Pipeline, ToolError, ToolInvokeContext};
use toolgate_mcp::result::MCP_RESULT_TAG;
use toolgate_mcp::{CallerKey, CallerRequest, McpServer, PROMPT_TAG, RESOURCES_TAG};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

type Handler =
    for<'a> fn(&'a Value, &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>>;

fn text(value: &str) -> Value {
    json!({ "type": "text", "text": value })
}

fn result(content: Vec<Value>) -> Result<Value, ToolError> {
    Ok(json!({ "content": content }))
}

/// The MCP caller of the call (every call here comes over MCP).
fn caller(ctx: &ToolInvokeContext) -> Result<Arc<CallerRequest>, ToolError> {
    ctx.try_get::<CallerKey>()
        .ok_or_else(|| ToolError::execution("this tool talks to its MCP caller: call it over MCP"))
}

fn tool(
    name: &str,
    description: &str,
    schema: Value,
    tags: &[&str],
    run: Handler,
) -> JsonTool<Handler> {
    let mut tool = JsonTool::new(name, description, schema, run);
    tool.definition_mut()
        .tags
        .extend(tags.iter().map(|t| (*t).to_owned()));
    tool
}

fn titled(mut tool: JsonTool<Handler>, title: &str) -> JsonTool<Handler> {
    tool.definition_mut().title = Some(title.to_owned());
    tool
}

fn empty() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn strings(properties: &[(&str, &str)]) -> Value {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, description)| {
            (
                (*name).to_owned(),
                json!({ "type": "string", "description": description }),
            )
        })
        .collect();
    let required: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
    json!({ "type": "object", "properties": props, "required": required })
}

// ----- tools: content -----

fn simple_text<'a>(
    _: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async { result(vec![text("This is a simple text response for testing.")]) })
}

fn image<'a>(_: &'a Value, _: &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        result(vec![
            json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
        ])
    })
}

fn audio<'a>(_: &'a Value, _: &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        result(vec![
            json!({"type": "audio", "data": WAV, "mimeType": "audio/wav"}),
        ])
    })
}

fn embedded<'a>(_: &'a Value, _: &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        result(vec![json!({"type": "resource", "resource": {
            "uri": "test://embedded-resource",
            "mimeType": "text/plain",
            "text": "This is an embedded resource content.",
        }})])
    })
}

fn mixed<'a>(_: &'a Value, _: &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        result(vec![
            text("Multiple content types test:"),
            json!({"type": "image", "data": PNG, "mimeType": "image/png"}),
            json!({"type": "resource", "resource": {
                "uri": "test://mixed-content-resource",
                "mimeType": "application/json",
                "text": "{\"test\":\"data\",\"value\":123}",
            }}),
        ])
    })
}

fn failing<'a>(_: &'a Value, _: &'a ToolInvokeContext) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        Err(ToolError::execution(
            "This tool intentionally returns an error for testing",
        ))
    })
}

fn schema_2020_12<'a>(
    input: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move { result(vec![text(&format!("called with {input}"))]) })
}

// ----- tools: talking back to the caller -----

/// Sends a log message to the caller: at 2025-11-25 unless it set a higher level, at
/// 2026-07-28 only when the request asked for logs.
async fn log(caller: &CallerRequest, message: &str) {
    let wanted = if caller.input_required_results || caller.log_level.is_some() {
        caller.wants_log(LoggingLevel::Info)
    } else {
        true
    };
    if !wanted {
        return;
    }
    if let Ok(params) = serde_json::from_value(json!({
        "level": "info", "logger": "toolgate-fixture", "data": message,
    })) {
        let _ = caller.peer.notify_logging_message(params).await;
    }
}

fn with_logging<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        for (step, message) in [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ]
        .into_iter()
        .enumerate()
        {
            if step > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            log(&caller, message).await;
        }
        result(vec![text("Tool with logging executed successfully")])
    })
}

fn with_progress<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        let Some(token) = caller.progress_token.clone() else {
            return result(vec![text("no progress token: nothing reported")]);
        };
        for (step, progress) in [0, 50, 100].into_iter().enumerate() {
            if step > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let params = serde_json::from_value(json!({
                "progressToken": token, "progress": progress, "total": 100,
                "message": format!("Completed step {progress} of 100"),
            }))
            .map_err(|e| ToolError::internal(e.to_string()))?;
            let _ = caller.peer.notify_progress(params).await;
        }
        result(vec![text(&format!(
            "reported progress to token {}",
            json!(token)
        ))])
    })
}

/// Sends `request` to the caller and waits for its answer, as JSON.
async fn ask(caller: &CallerRequest, request: ServerRequest) -> Result<Value, ToolError> {
    let answer = caller
        .peer
        .send_request(request)
        .await
        .map_err(|e| ToolError::execution(format!("the client did not answer: {e}")))?;
    match answer {
        ClientResult::CreateMessageResult(r) => serde_json::to_value(r),
        ClientResult::ElicitResult(r) => serde_json::to_value(r),
        other => serde_json::to_value(other),
    }
    .map_err(|e| ToolError::internal(e.to_string()))
}

fn sampling<'a>(
    input: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        let prompt = input["prompt"].as_str().unwrap_or_default();
        let params = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": text(prompt)}], "maxTokens": 100,
        }))
        .map_err(|e| ToolError::internal(e.to_string()))?;
        let answer = ask(
            &caller,
            ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params)),
        )
        .await?;
        let said = answer["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        result(vec![text(&format!("LLM response: {said}"))])
    })
}

async fn elicit(ctx: &ToolInvokeContext, message: &str, schema: Value) -> Result<Value, ToolError> {
    let caller = caller(ctx)?;
    let params = serde_json::from_value(json!({ "message": message, "requestedSchema": schema }))
        .map_err(|e| ToolError::internal(e.to_string()))?;
    let answer = ask(
        &caller,
        ServerRequest::ElicitRequest(ElicitRequest::new(params)),
    )
    .await?;
    let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
    result(vec![text(&format!(
        "Elicitation completed: action={}, content={content}",
        answer["action"].as_str().unwrap_or_default()
    ))])
}

fn elicitation<'a>(
    input: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let message = input["message"].as_str().unwrap_or_default().to_owned();
        elicit(ctx, &message, strings(&[("response", "User's response")])).await
    })
}

fn elicitation_defaults<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "description": "User status",
                    "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "description": "Verification status", "default": true},
            },
            "required": [],
        });
        elicit(
            ctx,
            "Please review and update the form fields with defaults",
            schema,
        )
        .await
    })
}

fn elicitation_enums<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let titled = |prefix: &str| {
            json!([
                {"const": "value1", "title": format!("First {prefix}")},
                {"const": "value2", "title": format!("Second {prefix}")},
                {"const": "value3", "title": format!("Third {prefix}")},
            ])
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "description": "Pick one",
                    "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "description": "Pick one, with titles",
                    "oneOf": titled("Option")},
                "legacyEnum": {"type": "string", "description": "Pick one (legacy enumNames)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "description": "Pick some", "minItems": 1,
                    "maxItems": 3, "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "description": "Pick some, with titles",
                    "minItems": 1, "maxItems": 3, "items": {"anyOf": titled("Choice")}},
            },
            "required": [],
        });
        elicit(ctx, "Please select options from the enum fields", schema).await
    })
}

// ----- tools: multi-round calls (2026-07-28) -----

fn elicitation_request(message: &str, field: &str) -> Value {
    json!({"method": "elicitation/create", "params": {
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]},
    }})
}

fn sampling_request(prompt: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": text(prompt)}], "maxTokens": max_tokens,
    }})
}

/// The caller's answer to `key` in this round, if it sent one.
fn answered(ctx: &ToolInvokeContext, key: &str) -> Option<Value> {
    let caller = ctx.try_get::<CallerKey>()?;
    caller.round.as_ref()?.responses.get(key).cloned()
}

/// The state this call sent with its last round, as JSON (`{}` without one).
fn state(ctx: &ToolInvokeContext) -> Value {
    ctx.try_get::<CallerKey>()
        .and_then(|c| c.round.as_ref()?.state.clone())
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| json!({}))
}

fn input_required(requests: Value, state: Option<Value>) -> Result<Value, ToolError> {
    Err(ToolError::InputRequired {
        requests,
        state: state.map(|s| s.to_string()),
    })
}

fn ir_elicitation<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        match answered(ctx, "user_name") {
            Some(answer) => result(vec![text(&format!(
                "Hello, {}!",
                answer["content"]["name"].as_str().unwrap_or("?")
            ))]),
            None => input_required(
                json!({"user_name": elicitation_request("What is your name?", "name")}),
                None,
            ),
        }
    })
}

fn ir_sampling<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        match answered(ctx, "sample_request") {
            Some(answer) => result(vec![text(&format!(
                "Sampling result: {}",
                answer["content"]["text"].as_str().unwrap_or("?")
            ))]),
            None => input_required(
                json!({"sample_request": sampling_request("What is the capital of France?", 100)}),
                None,
            ),
        }
    })
}

fn ir_roots<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        match answered(ctx, "roots_request") {
            Some(answer) => {
                let count = answer["roots"].as_array().map_or(0, Vec::len);
                result(vec![text(&format!("Found {count} root(s)"))])
            }
            None => input_required(
                json!({"roots_request": {"method": "roots/list", "params": {}}}),
                None,
            ),
        }
    })
}

fn ir_request_state<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let confirmed = answered(ctx, "confirm").is_some_and(|a| a["content"]["ok"] == json!(true));
        if state(ctx)["kind"] == "request-state" && confirmed {
            return result(vec![text("state-ok: requestState validated")]);
        }
        let request = json!({"method": "elicitation/create", "params": {"message": "Please confirm",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}});
        input_required(
            json!({"confirm": request}),
            Some(json!({"kind": "request-state"})),
        )
    })
}

fn ir_tampered<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        // The server opened the state before the call: a changed one never gets here.
        if state(ctx)["kind"] == "tamper-test" && answered(ctx, "confirm").is_some() {
            return result(vec![text("integrity-ok: state verified")]);
        }
        let request = json!({"method": "elicitation/create", "params": {"message": "Please confirm",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}});
        input_required(
            json!({"confirm": request}),
            Some(json!({"kind": "tamper-test"})),
        )
    })
}

fn ir_multiple<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let (name, greeting, roots) = (
            answered(ctx, "user_name"),
            answered(ctx, "greeting"),
            answered(ctx, "client_roots"),
        );
        if let (Some(name), Some(greeting), Some(roots), "multiple-inputs") = (
            name,
            greeting,
            roots,
            state(ctx)["kind"].as_str().unwrap_or_default(),
        ) {
            return result(vec![text(&format!(
                "Name: {}; Greeting: {}; Roots: {}",
                name["content"]["name"].as_str().unwrap_or("?"),
                greeting["content"]["text"].as_str().unwrap_or("?"),
                roots["roots"].as_array().map_or(0, Vec::len)
            ))]);
        }
        input_required(
            json!({
                "user_name": elicitation_request("What is your name?", "name"),
                "greeting": sampling_request("Generate a greeting", 50),
                "client_roots": {"method": "roots/list", "params": {}},
            }),
            Some(json!({"kind": "multiple-inputs"})),
        )
    })
}

fn ir_multi_round<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let state = state(ctx);
        if state["round"] == 1
            && let Some(step1) = answered(ctx, "step1")
        {
            let name = step1["content"]["name"].clone();
            return input_required(
                json!({"step2": elicitation_request("Step 2: What is your favorite color?", "color")}),
                Some(json!({"round": 2, "name": name})),
            );
        }
        if state["round"] == 2
            && let Some(step2) = answered(ctx, "step2")
        {
            return result(vec![text(&format!(
                "Multi-round complete for {} who likes {}",
                state["name"].as_str().unwrap_or("?"),
                step2["content"]["color"].as_str().unwrap_or("?")
            ))]);
        }
        input_required(
            json!({"step1": elicitation_request("Step 1: What is your name?", "name")}),
            Some(json!({"round": 1})),
        )
    })
}

fn ir_capabilities<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        if let Some(round) = caller.round.as_ref().filter(|r| !r.responses.is_empty()) {
            let keys: Vec<&str> = round.responses.keys().map(String::as_str).collect();
            return result(vec![text(&format!(
                "capabilities-ok: received {}",
                keys.join(",")
            ))]);
        }
        let mut requests = serde_json::Map::new();
        if caller.can_elicit() {
            requests.insert(
                "elicit_input".into(),
                elicitation_request("Elicitation input", "value"),
            );
        }
        if caller.can_sample() {
            requests.insert(
                "sample_input".into(),
                sampling_request("Sample request", 50),
            );
        }
        if requests.is_empty() {
            return result(vec![text("No supported capabilities declared")]);
        }
        input_required(
            Value::Object(requests),
            Some(json!({"kind": "capabilities-test"})),
        )
    })
}

// ----- diagnostics of 2026-07-28's stateless requests -----

fn needs(capability: &str) -> rmcp::model::ClientCapabilities {
    serde_json::from_value(json!({ capability: {} })).unwrap_or_default()
}

fn missing_capability<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        if !caller.can_sample() {
            return Err(caller.missing_capability(needs("sampling")));
        }
        result(vec![text("the client declared sampling")])
    })
}

fn streaming_elicitation<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        if !caller.can_elicit() {
            return Err(caller.missing_capability(needs("elicitation")));
        }
        if answered(ctx, "confirm").is_some() {
            return result(vec![text("Streaming complete")]);
        }
        let request = json!({"method": "elicitation/create", "params": {"message": "Continue?",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}});
        input_required(json!({ "confirm": request }), None)
    })
}

fn logging_tool<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let caller = caller(ctx)?;
        log(&caller, "Diagnostic trace logging activated").await;
        result(vec![text("Logging evaluated")])
    })
}

// ----- prompts -----

fn user(content: Value) -> Value {
    json!({ "role": "user", "content": content })
}

fn argument(input: &Value, name: &str) -> Result<String, ToolError> {
    input[name].as_str().map(str::to_owned).ok_or_else(|| {
        ToolError::InvalidInput(InputViolations::one(
            name,
            "a required prompt argument is missing",
        ))
    })
}

fn simple_prompt<'a>(
    _: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        Ok(json!({"messages": [user(text("This is a simple prompt for testing."))]}))
    })
}

fn prompt_with_arguments<'a>(
    input: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let (arg1, arg2) = (argument(input, "arg1")?, argument(input, "arg2")?);
        Ok(
            json!({"messages": [user(text(&format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")))]}),
        )
    })
}

fn prompt_with_resource<'a>(
    input: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let uri = argument(input, "resourceUri")?;
        Ok(json!({"messages": [
            user(json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain",
                "text": "Embedded resource content for testing."}})),
            user(text("Please process the embedded resource above.")),
        ]}))
    })
}

fn prompt_with_image<'a>(
    _: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async {
        Ok(json!({"messages": [
            user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
            user(text("Please analyze the image above.")),
        ]}))
    })
}

fn prompt_input_required<'a>(
    _: &'a Value,
    ctx: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        match answered(ctx, "user_context") {
            Some(answer) => Ok(json!({"messages": [user(text(&format!(
                "Prompt with context: {}",
                answer["content"]["context"].as_str().unwrap_or("?")
            )))]})),
            None => input_required(
                json!({"user_context": elicitation_request("What context should the prompt use?", "context")}),
                None,
            ),
        }
    })
}

// ----- resources -----

fn resources<'a>(
    input: &'a Value,
    _: &'a ToolInvokeContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        if input.get("subscribe").is_some() || input.get("unsubscribe").is_some() {
            return Ok(json!({}));
        }
        match input["list"].as_str() {
            Some("resources") => {
                return Ok(json!({"resources": [
                    {"uri": "test://static-text", "name": "static-text", "title": "Static Text Resource", "mimeType": "text/plain"},
                    {"uri": "test://static-binary", "name": "static-binary", "title": "Static Binary Resource (a PNG)", "mimeType": "image/png"},
                    {"uri": "test://watched-resource", "name": "watched-resource", "title": "Watched Resource", "mimeType": "text/plain"},
                ]}));
            }
            Some(_) => {
                return Ok(json!({"resourceTemplates": [{
                    "uriTemplate": "test://template/{id}/data", "name": "template",
                    "title": "Resource Template", "description": "JSON data for the id in the URI",
                    "mimeType": "application/json",
                }]}));
            }
            None => {}
        }
        let uri = input["uri"].as_str().unwrap_or_default();
        let contents = match uri {
            "test://static-text" => json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."}),
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"})
            }
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => {
                    let data = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    json!({"uri": uri, "mimeType": "application/json", "text": data.to_string()})
                }
                None => {
                    return Err(ToolError::abort(
                        format!("no resource {uri}"),
                        "resource_not_found",
                        404,
                    ));
                }
            },
        };
        Ok(json!({ "contents": [contents] }))
    })
}

fn pipeline() -> Pipeline {
    let content = &[MCP_RESULT_TAG];
    let prompt = &[PROMPT_TAG];
    let tools = [
        tool(
            "test_simple_text",
            "Returns one text block.",
            empty(),
            content,
            simple_text,
        ),
        tool(
            "test_image_content",
            "Returns one image block (a 1x1 PNG).",
            empty(),
            content,
            image,
        ),
        tool(
            "test_audio_content",
            "Returns one audio block (a minimal WAV).",
            empty(),
            content,
            audio,
        ),
        tool(
            "test_embedded_resource",
            "Returns one embedded text resource.",
            empty(),
            content,
            embedded,
        ),
        tool(
            "test_multiple_content_types",
            "Returns a text, an image and an embedded resource block.",
            empty(),
            content,
            mixed,
        ),
        tool(
            "test_error_handling",
            "Always fails: a tool result with isError.",
            empty(),
            content,
            failing,
        ),
        tool(
            "test_tool_with_logging",
            "Sends three info log messages, 50 ms apart, while it runs.",
            empty(),
            content,
            with_logging,
        ),
        tool(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100 against the caller's progress token.",
            empty(),
            content,
            with_progress,
        ),
        tool(
            "test_sampling",
            "Asks the client's model to answer `prompt` (sampling/createMessage).",
            strings(&[("prompt", "The prompt to send to the LLM")]),
            content,
            sampling,
        ),
        tool(
            "test_elicitation",
            "Asks the user to answer `message` (elicitation/create).",
            strings(&[("message", "The message to show the user")]),
            content,
            elicitation,
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicits a form whose fields of every primitive type carry defaults (SEP-1034).",
            empty(),
            content,
            elicitation_defaults,
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicits a form with the five enum shapes of SEP-1330.",
            empty(),
            content,
            elicitation_enums,
        ),
        tool(
            "json_schema_2020_12_tool",
            "Takes an input schema that uses JSON Schema 2020-12 keywords.",
            json_schema_2020_12(),
            content,
            schema_2020_12,
        ),
        tool(
            "test_input_required_result_elicitation",
            "MRTR: asks for the user's name by elicitation, then greets them.",
            empty(),
            content,
            ir_elicitation,
        ),
        tool(
            "test_input_required_result_sampling",
            "MRTR: asks the client's model a question by sampling.",
            empty(),
            content,
            ir_sampling,
        ),
        tool(
            "test_input_required_result_list_roots",
            "MRTR: asks for the client's roots.",
            empty(),
            content,
            ir_roots,
        ),
        tool(
            "test_input_required_result_request_state",
            "MRTR: asks for a confirmation and carries requestState to the retry.",
            empty(),
            content,
            ir_request_state,
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "MRTR: asks for an elicitation, a sampling and the roots in one round.",
            empty(),
            content,
            ir_multiple,
        ),
        tool(
            "test_input_required_result_multi_round",
            "MRTR: two rounds, a name and then a colour.",
            empty(),
            content,
            ir_multi_round,
        ),
        tool(
            "test_input_required_result_tampered_state",
            "MRTR: requestState is sealed, so a tampered one is refused.",
            empty(),
            content,
            ir_tampered,
        ),
        tool(
            "test_input_required_result_capabilities",
            "MRTR: asks only for what the client declared it can answer.",
            empty(),
            content,
            ir_capabilities,
        ),
        tool(
            "test_missing_capability",
            "Needs the sampling capability; without it, error -32021.",
            empty(),
            content,
            missing_capability,
        ),
        tool(
            "test_streaming_elicitation",
            "Asks for a confirmation as an input-required result.",
            empty(),
            content,
            streaming_elicitation,
        ),
        tool(
            "test_logging_tool",
            "Logs one info message, which reaches the client only if the request set a log level.",
            empty(),
            content,
            logging_tool,
        ),
        titled(
            tool(
                "prompt.test_simple_prompt",
                "A prompt without arguments",
                empty(),
                prompt,
                simple_prompt,
            ),
            "Simple Test Prompt",
        ),
        titled(
            tool(
                "prompt.test_prompt_with_arguments",
                "A prompt with two required arguments",
                strings(&[
                    ("arg1", "First test argument"),
                    ("arg2", "Second test argument"),
                ]),
                prompt,
                prompt_with_arguments,
            ),
            "Prompt With Arguments",
        ),
        titled(
            tool(
                "prompt.test_prompt_with_embedded_resource",
                "A prompt that embeds the resource it is given",
                strings(&[("resourceUri", "URI of the resource to embed")]),
                prompt,
                prompt_with_resource,
            ),
            "Prompt With Embedded Resource",
        ),
        titled(
            tool(
                "prompt.test_prompt_with_image",
                "A prompt with an image",
                empty(),
                prompt,
                prompt_with_image,
            ),
            "Prompt With Image",
        ),
        tool(
            "prompt.test_input_required_result_prompt",
            "MRTR: asks for context by elicitation first",
            empty(),
            prompt,
            prompt_input_required,
        ),
        tool(
            "resources.fixture",
            "The fixture's resources.",
            json!({"type": "object"}),
            &[RESOURCES_TAG],
            resources,
        ),
    ];
    tools
        .into_iter()
        .fold(Pipeline::builder(), |b, tool| b.tool(tool))
        .build()
        .expect("the fixture's tools have distinct, valid names, and it has no hooks")
}

fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(raw) => raw.parse().map_err(|_| {
            format!(
                "usage: conformance_fixture PORT (a whole number; 0 picks a free port), not {raw:?}"
            )
        })?,
    };
    let server = McpServer::new(pipeline()).server_info("toolgate-conformance-fixture", "1.0.0");
    let app = axum::Router::new().nest_service(
        "/mcp",
        server.http_service(StreamableHttpServerConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("server listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
