//! The [`ToolResult`] contract: what one tool call of a batch ends with.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate_core::ToolError;
use toolgate_core::error::InputViolation;

use crate::{ExecutionMode, Truncation};

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The call produced an output.
    Success,
    /// The call failed; [`ToolResult::error`] says why.
    Error,
    /// The call waits for a person; resume it with [`ResultMetadata::suspension_id`].
    Suspended,
}

impl ToolStatus {
    /// `success`, `error` or `suspended`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Success => "success",
            ToolStatus::Error => "error",
            ToolStatus::Suspended => "suspended",
        }
    }
}

/// Why a call failed: a stable machine code and a message a model can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultError {
    /// A stable machine code such as `invalid_input`, `tool_disabled` or `rate_limited`.
    pub code: String,
    /// What went wrong and what to do, written for the model.
    pub message: String,
    /// For retry-afters: how long to wait, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// For invalid input: every failing field with its path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<InputViolation>,
    /// The HTTP status a gateway answers this error with: the error's own, except that a
    /// refusal or retry-after whose hook chose a status that is not an error's (a 200,
    /// 204 or 302, say) is answered 500, so that no client takes a refused call for a
    /// successful one. Not serialized: models and batch results never see it, and an
    /// error read back from JSON has none.
    #[serde(skip)]
    pub status: Option<u16>,
}

/// The status `error` is answered with: its own, or 500 for a refusal or retry-after whose
/// hook chose one that is not a client's or a server's error (or no HTTP status at all).
fn answered_status(error: &ToolError) -> u16 {
    let status = error.status();
    let chosen = matches!(
        error,
        ToolError::Aborted { .. } | ToolError::RetryAfter { .. }
    );
    if chosen && !(400..=599).contains(&status) {
        500
    } else {
        status
    }
}

/// The error as its caller is told it: its message at most
/// [`MAX_ERROR_CHARS`](toolgate_core::error::MAX_ERROR_CHARS) characters long. An
/// invalid input's message over it keeps the first violations that fit whole and says
/// how many it leaves out, and its list keeps the same ones. Its
/// [`status`](ResultError::status) is the one its call is answered with (500 for a
/// refusal whose hook chose a status that is not an error's).
impl From<&ToolError> for ResultError {
    fn from(error: &ToolError) -> Self {
        let mut result = ResultError::whole(error);
        if !result.violations.is_empty() {
            crate::limit::cut_error(&mut result, toolgate_core::error::MAX_ERROR_CHARS);
        }
        result
    }
}

impl ResultError {
    /// The error with its message whole: an invalid input's lists every violation, each
    /// cut and escaped as in its words (a caller's key of a megabyte is cut in both). The
    /// caller cuts the whole to its limit ([`crate::limit::cut_error`]), so that the
    /// truncation tells the original size.
    pub(crate) fn whole(error: &ToolError) -> Self {
        let (message, violations) = match error {
            ToolError::InvalidInput(v) => (
                error.to_string(),
                v.0.iter().map(InputViolation::cut).collect(),
            ),
            _ => (error.caller_message(), Vec::new()),
        };
        ResultError {
            code: error.code().to_owned(),
            message,
            retry_after_ms: error
                .retry_after_delay()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            violations,
            status: Some(answered_status(error)),
        }
    }
}

/// What travels with a result besides its output.
///
/// Hooks write into the invocation's metadata (`ctx.metadata_mut()`); the keys `repairs`
/// and `sources` land in their own fields here, every other key in [`extra`](Self::extra).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultMetadata {
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// How many times the tool ran (0 when the call ended before execution or was
    /// completed by a person).
    pub attempts: u32,
    /// The tool's execution mode.
    pub mode: ExecutionMode,
    /// The trace id of the batch the call belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Repairs a hook made to the arguments before the call ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<Value>,
    /// Where the output came from (documents, URLs), for citations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Value>,
    /// Set when the output (or the error message) was cut to the result size limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncation: Option<Truncation>,
    /// The id to resume a suspended call with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension_id: Option<String>,
    /// What a suspended call waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension_reason: Option<String>,
    /// The arguments exactly as the model sent them, when they were not valid JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
    /// Every other metadata key hooks set.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ResultMetadata {
    /// Moves the invocation's metadata in: `repairs` and `sources` to their fields (a single
    /// value becomes a one-element list), `trace_id` to its field unless already set,
    /// everything else to `extra`.
    pub fn absorb(&mut self, metadata: Map<String, Value>) {
        for (key, value) in metadata {
            match key.as_str() {
                "repairs" => self.repairs.extend(into_list(value)),
                "sources" => self.sources.extend(into_list(value)),
                "trace_id" if value.is_string() && self.trace_id.is_none() => {
                    self.trace_id = value.as_str().map(str::to_owned);
                }
                _ => {
                    self.extra.insert(key, value);
                }
            }
        }
    }
}

fn into_list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// The result of one tool call: the contract between the tool system and the agent.
///
/// `call_id` and `tool_name` are always those of the request, whatever happened. Exactly
/// one of `output` (status `success`) or `error` (status `error`) is present; a
/// `suspended` result has neither and carries `metadata.suspension_id`.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_agent::{ToolResult, ToolStatus};
///
/// let result = ToolResult::success("call_1", "get_weather", json!({"temp_c": 21}));
/// assert_eq!(result.status, ToolStatus::Success);
/// let wire = serde_json::to_value(&result)?;
/// assert_eq!(wire["status"], "success");
/// assert_eq!(wire["output"]["temp_c"], 21);
/// assert_eq!(wire["metadata"]["mode"], "functional");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers, as the model sent it.
    pub call_id: String,
    /// The tool the model asked for, as it spelled it.
    pub tool_name: String,
    /// How the call ended.
    pub status: ToolStatus,
    /// The output, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why the call failed, on error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResultError>,
    /// Duration, attempts, mode, repairs, sources, truncation, suspension id.
    #[serde(default)]
    pub metadata: ResultMetadata,
}

impl ToolResult {
    /// A successful result.
    pub fn success(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        output: Value,
    ) -> Self {
        ToolResult {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            status: ToolStatus::Success,
            output: Some(output),
            error: None,
            metadata: ResultMetadata::default(),
        }
    }

    /// An error result. A [`ToolError::Suspended`] becomes a suspended result instead.
    pub fn error(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        error: &ToolError,
    ) -> Self {
        if let ToolError::Suspended {
            suspension_id,
            reason,
        } = error
        {
            return ToolResult::suspended(call_id, tool_name, suspension_id, reason);
        }
        ToolResult {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            status: ToolStatus::Error,
            output: None,
            error: Some(ResultError::from(error)),
            metadata: ResultMetadata::default(),
        }
    }

    /// A suspended result.
    pub fn suspended(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        suspension_id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ToolResult {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            status: ToolStatus::Suspended,
            output: None,
            error: None,
            metadata: ResultMetadata {
                suspension_id: Some(suspension_id.into()),
                suspension_reason: Some(reason.into()),
                ..ResultMetadata::default()
            },
        }
    }

    /// Whether the call produced an output.
    pub fn is_success(&self) -> bool {
        self.status == ToolStatus::Success
    }

    /// The error code, on error.
    pub fn error_code(&self) -> Option<&str> {
        self.error.as_ref().map(|e| e.code.as_str())
    }

    /// The id to resume with, when suspended.
    pub fn suspension_id(&self) -> Option<&str> {
        self.metadata.suspension_id.as_deref()
    }

    /// The text a model reads for this result: the output (strings as they are, other
    /// values as JSON), `error [code]: message`, or what a suspended call waits for.
    pub fn content_text(&self) -> String {
        match self.status {
            ToolStatus::Success => match &self.output {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            ToolStatus::Error => match &self.error {
                Some(e) => format!("error [{}]: {}", e.code, e.message),
                None => "error: the call failed".to_owned(),
            },
            ToolStatus::Suspended => format!(
                "pending: {} (suspension id {})",
                self.metadata
                    .suspension_reason
                    .as_deref()
                    .unwrap_or("waiting for a person"),
                self.metadata.suspension_id.as_deref().unwrap_or("unknown")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use toolgate_core::ToolError;
    use toolgate_core::error::{InputViolations, MAX_ERROR_CHARS};

    use super::ResultError;

    #[test]
    fn a_refusal_whose_hook_chose_a_status_that_is_not_an_error_carries_500() {
        for status in [200, 204, 302, 99, 600] {
            let refused = ToolError::abort("not today", "refused", status);
            assert_eq!(ResultError::from(&refused).status, Some(500), "{status}");
            let waiting = ToolError::RetryAfter {
                delay: std::time::Duration::from_secs(1),
                reason: "later".into(),
                code: "busy".into(),
                status,
            };
            assert_eq!(ResultError::from(&waiting).status, Some(500), "{status}");
        }
        let forbidden = ToolError::abort("no", "forbidden", 403);
        assert_eq!(ResultError::from(&forbidden).status, Some(403));
        let unknown = ToolError::execution("boom");
        assert_eq!(ResultError::from(&unknown).status, Some(502));
    }

    #[test]
    fn a_huge_tool_error_reaches_its_caller_within_the_bound() {
        let error = ToolError::execution("x".repeat(10_000_000));
        let result = ResultError::from(&error);
        assert!(result.message.chars().count() <= MAX_ERROR_CHARS);
        assert!(result.message.starts_with("tool failed: xxx"));
        assert!(
            result
                .message
                .contains("[cut: the message was 10,000,013 characters")
        );
    }

    #[test]
    fn a_huge_invalid_input_keeps_the_violations_that_fit_in_its_message() {
        let violations = (0..20_000)
            .map(|i| toolgate_core::error::InputViolation {
                path: format!("field{i}"),
                message: "must be a string".to_owned(),
            })
            .collect();
        let error = ToolError::InvalidInput(InputViolations(violations));
        let result = ResultError::from(&error);
        assert!(result.message.chars().count() <= MAX_ERROR_CHARS);
        assert!(
            result
                .message
                .starts_with("invalid arguments: argument `field0`")
        );
        let kept = result.violations.len();
        assert!((1..20_000).contains(&kept), "{kept}");
        assert!(result.message.ends_with(&format!(
            "… and {} more",
            toolgate_core::error::grouped((20_000 - kept) as u64)
        )));
    }
}
