//! Prompts and resources served from the pipeline's prompt and resources tools (see
//! [`crate::client`]'s `features`): what they answer, as MCP results and errors.

use rmcp::model::{
    CacheScope, CompleteResult, ErrorCode, ErrorData, GetPromptResult, Prompt, PromptArgument,
    ReadResourceResult, ResultType,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use toolgate_core::ToolError;
use toolgate_core::error::{MAX_SHOWN_ID, shown_text};
use toolgate_core::tool::ToolDefinition;

use crate::caller::MISSING_CAPABILITY;
use crate::client::PROMPT_PREFIX;

/// A prompt tool as MCP lists the prompt: its name without the tool prefix, and its
/// arguments from the tool's input schema.
pub(crate) fn prompt_of(definition: &ToolDefinition) -> Prompt {
    let schema = &definition.input_schema;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let arguments: Vec<PromptArgument> = schema["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let mut argument = PromptArgument::new(name.clone());
                    argument.description = property["description"].as_str().map(str::to_owned);
                    argument.required = Some(required.contains(&name.as_str()));
                    argument
                })
                .collect()
        })
        .unwrap_or_default();
    let name = definition
        .name
        .strip_prefix(PROMPT_PREFIX)
        .unwrap_or(&definition.name);
    let description = (!definition.description.is_empty()).then(|| definition.description.clone());
    let mut prompt = Prompt::new(
        name,
        description,
        (!arguments.is_empty()).then_some(arguments),
    );
    prompt.title = definition.title.clone();
    prompt
}

fn answer<T: DeserializeOwned>(output: Value, what: &str) -> Result<T, ErrorData> {
    serde_json::from_value(output).map_err(|e| {
        ErrorData::internal_error(
            format!("the {what} was changed into something MCP cannot carry ({e})"),
            None,
        )
    })
}

/// A prompt tool's output as the prompt's result.
pub(crate) fn prompt_result(output: Value) -> Result<GetPromptResult, ErrorData> {
    let mut result: GetPromptResult = answer(output, "prompt")?;
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result)
}

/// A prompt or resources tool's completions as `completion/complete`'s result.
pub(crate) fn completion_result(output: Value) -> Result<CompleteResult, ErrorData> {
    let mut result: CompleteResult = answer(output, "completion")?;
    // As the constructors do; rmcp clears it for clients before 2026-07-28.
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result)
}

/// A resources tool's output as a read's result.
///
/// Its `cacheScope` is `private` whatever the upstream said: toolgate decides per caller
/// who may read a resource (and redacts per policy), so a shared cache must not hand one
/// caller's answer to another.
pub(crate) fn resource_result(output: Value) -> Result<ReadResourceResult, ErrorData> {
    let mut result: ReadResourceResult = answer(output, "resource")?;
    result.result_type = Some(ResultType::COMPLETE);
    result.cache_scope = Some(CacheScope::Private);
    Ok(result)
}

/// Listed items, each kept when MCP can read it.
pub(crate) fn items<T: DeserializeOwned>(listed: Vec<Value>) -> Vec<T> {
    listed
        .into_iter()
        .filter_map(|item| serde_json::from_value(item).ok())
        .collect()
}

/// A prompt the caller cannot see or that does not exist.
pub(crate) fn unknown_prompt(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "unknown prompt `{}`: list the prompts you may use with prompts/list",
            shown_text(name, MAX_SHOWN_ID)
        ),
        None,
    )
}

/// The most characters of a URI a message repeats: URIs are longer than ids; `data.uri`
/// carries the whole one.
const SHOWN_URI_CHARS: usize = 256;

/// A resource no upstream the caller may read from has.
pub(crate) fn resource_not_found(uri: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!("resource not found: `{}`", shown_text(uri, SHOWN_URI_CHARS)),
        Some(json!({ "uri": uri })),
    )
}

/// A resource no upstream that takes subscriptions has, among those the caller may read
/// from: there is nowhere to subscribe to it.
pub(crate) fn not_subscribable(uri: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!(
            "resource `{uri}` cannot be subscribed to: no server here that supports resource subscriptions has it (a server that does not support them may serve it: read it again to see changes)"
        ),
        Some(json!({ "uri": uri, "code": "not_subscribable" })),
    )
}

/// The end of a `subscriptions/listen` request whose access to a resource it watched a
/// new configuration withdrew.
pub(crate) fn access_withdrawn() -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        "subscription ended: your access to a resource it watched was withdrawn by a configuration change; listen again to the resources you may still read",
        Some(json!({ "code": "access_withdrawn", "status": 403 })),
    )
}

/// A failed prompt or resource request as a JSON-RPC error, with its code, HTTP status
/// and retry delay in `data` (as tool errors carry them in `_meta`). The JSON-RPC code
/// says whose the failure is: the caller's mistake (400) as invalid parameters; any other
/// refusal of the caller (not allowed, over a rate limit or a bound: a 4xx status) as an
/// invalid request, as `too_many_listens` is; only a failure of the server or an upstream
/// as an internal error.
pub(crate) fn request_error(error: &ToolError) -> ErrorData {
    if error.code() == MISSING_CAPABILITY {
        return ErrorData::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            error.caller_message(),
            None,
        );
    }
    let mut data = json!({ "code": error.code(), "status": error.status() });
    if let Some(delay) = error.retry_after_delay() {
        data["retryAfterMs"] = json!(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    }
    let code = match error.status() {
        400 => ErrorCode::INVALID_PARAMS,
        401..=499 => ErrorCode::INVALID_REQUEST,
        _ => ErrorCode::INTERNAL_ERROR,
    };
    ErrorData::new(code, error.caller_message(), Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_name_is_repeated_cut_and_with_its_hiding_characters_escaped() {
        let turned = unknown_prompt("a\u{202e}b\r\n");
        assert!(
            turned
                .message
                .starts_with(r"unknown prompt `a\u{202e}b\r\n`: "),
            "{}",
            turned.message
        );
        let long = unknown_prompt(&"p".repeat(10_000));
        assert!(
            long.message
                .starts_with(&format!("unknown prompt `{}…`: ", "p".repeat(64))),
            "{}",
            long.message
        );
    }

    #[test]
    fn a_resource_uri_is_repeated_cut_in_the_message_and_whole_in_its_data() {
        let uri = format!("file:///\u{1b}[2J{}", "d".repeat(1000));
        let missing = resource_not_found(&uri);
        assert!(
            missing
                .message
                .starts_with(r"resource not found: `file:///\u{1b}[2Jddd"),
            "{}",
            missing.message
        );
        assert!(missing.message.ends_with("…`"), "{}", missing.message);
        assert!(missing.message.chars().count() < 300, "{}", missing.message);
        assert_eq!(missing.data, Some(json!({ "uri": uri })));
    }

    #[test]
    fn a_refusal_of_the_caller_is_not_an_internal_error() {
        let crowded = ToolError::abort("subscribed to 64 already", "too_many_subscriptions", 429);
        let answer = request_error(&crowded);
        assert_eq!(answer.code, ErrorCode::INVALID_REQUEST);
        assert_eq!(
            answer.data,
            Some(json!({"code": "too_many_subscriptions", "status": 429}))
        );
        let forbidden = ToolError::abort("not yours", "forbidden", 403);
        assert_eq!(request_error(&forbidden).code, ErrorCode::INVALID_REQUEST);
        let limited = ToolError::retry_after(std::time::Duration::from_millis(1500), "slow down");
        let answer = request_error(&limited);
        assert_eq!(answer.code, ErrorCode::INVALID_REQUEST);
        assert_eq!(answer.data.as_ref().unwrap()["retryAfterMs"], 1500);
        let malformed = ToolError::abort("no such argument", "invalid_input", 400);
        assert_eq!(request_error(&malformed).code, ErrorCode::INVALID_PARAMS);
        let upstream = ToolError::abort("the upstream failed", "upstream_error", 502);
        assert_eq!(request_error(&upstream).code, ErrorCode::INTERNAL_ERROR);
    }
}
