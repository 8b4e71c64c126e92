//! [`ToolCall`]: one call a model asked for, as parsed from its provider's format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The arguments of a call: JSON, or the text the model sent when it was not JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arguments {
    /// Parsed JSON arguments.
    Json {
        /// The arguments. Read from JSON, an object in them that names a key twice is
        /// refused, as [`Arguments::from_json_str`] refuses it.
        #[serde(deserialize_with = "toolgate_core::json::unique_keys")]
        value: Value,
    },
    /// Arguments that did not parse as JSON, or whose JSON names a key twice in one object,
    /// kept as sent. The call is answered with an `invalid_input` error result quoting
    /// the error, so the model can correct it.
    Unparseable {
        /// The text as the model sent it.
        raw: String,
        /// Why it was refused.
        error: String,
    },
}

impl Arguments {
    /// Parses arguments that arrive as JSON text (OpenAI's `arguments` string). Empty or
    /// blank text means no arguments: `{}`. An object that names a key twice is refused
    /// (serde_json would keep the last value silently, and a policy and the tool could
    /// read different ones): the arguments are [`Unparseable`](Arguments::Unparseable),
    /// saying which key, so that the model sends them again.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_agent::Arguments;
    ///
    /// assert_eq!(Arguments::from_json_str(r#"{"city":"Paris"}"#), Arguments::Json { value: json!({"city": "Paris"}) });
    /// assert!(matches!(Arguments::from_json_str(r#"{"city":"Par"#), Arguments::Unparseable { .. }));
    ///
    /// let Arguments::Unparseable { error, .. } =
    ///     Arguments::from_json_str(r#"{"city":"Paris","city":"Rome"}"#)
    /// else {
    ///     panic!()
    /// };
    /// assert_eq!(error, "the key `city` appears twice in the top-level object: send each key once");
    /// ```
    pub fn from_json_str(text: &str) -> Self {
        if text.trim().is_empty() {
            return Arguments::Json {
                value: Value::Object(serde_json::Map::new()),
            };
        }
        match toolgate_core::json::from_str(text) {
            Ok(value) => Arguments::Json { value },
            Err(e) => Arguments::Unparseable {
                raw: text.to_owned(),
                error: toolgate_core::error::in_json_words(&e.to_string()),
            },
        }
    }

    /// The parsed value, if the arguments are JSON.
    pub fn json(&self) -> Option<&Value> {
        match self {
            Arguments::Json { value } => Some(value),
            Arguments::Unparseable { .. } => None,
        }
    }
}

/// One tool call a model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the result answers it.
    pub id: String,
    /// The tool's name, as the model spelled it.
    pub name: String,
    /// The arguments.
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call with JSON arguments.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_agent::ToolCall;
    ///
    /// let call = ToolCall::new("call_1", "get_weather", json!({"city": "Paris"}));
    /// assert_eq!(call.arguments.json(), Some(&json!({"city": "Paris"})));
    /// ```
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::Json { value: arguments },
        }
    }

    /// A call whose arguments arrive as JSON text (see [`Arguments::from_json_str`]).
    pub fn from_json_str(id: impl Into<String>, name: impl Into<String>, arguments: &str) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::from_json_str(arguments),
        }
    }
}

/// The most bytes a call's id may have, in the agent layer and in the gateway's
/// `/v1/tool-calls` alike.
///
/// Counted in bytes, not characters: the limit bounds what every result, observation and
/// suspension record repeats, and bytes are what that costs (256 characters could be
/// 1 KiB); "characters" would also leave open which ones (code points or what a person
/// sees). Providers' ids are ASCII of about 30 bytes (OpenAI's `call_…`, Anthropic's
/// `toolu_…`), where the two counts agree.
pub const MAX_CALL_ID_BYTES: usize = 256;

/// Why a call's id cannot be used: an id correlates a result with its call, so it must be
/// there, and be no longer than a model's ids are.
///
/// Ids are otherwise opaque: compared byte for byte, never case-folded or normalized, so
/// `call_A` and `call_a`, or an `é` written as one code point and as `e` plus an accent,
/// are different ids.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnusableCallId {
    /// The id is empty.
    #[error(
        "has an empty id, so its result could not be matched to it: send each call with the id the model gave it"
    )]
    Empty,
    /// The id is over [`MAX_CALL_ID_BYTES`].
    #[error(
        "has an id of {bytes} bytes, over the limit of {MAX_CALL_ID_BYTES} bytes (a model's ids are about 30): send each call with the id the model gave it"
    )]
    TooLong {
        /// The id's length in bytes.
        bytes: usize,
    },
}

/// Checks that `id` can answer its call: not empty, at most [`MAX_CALL_ID_BYTES`] bytes.
///
/// ```
/// use toolgate_agent::{UnusableCallId, check_call_id};
///
/// assert_eq!(check_call_id("call_1"), Ok(()));
/// assert_eq!(check_call_id(""), Err(UnusableCallId::Empty));
/// assert_eq!(check_call_id(&"i".repeat(300)), Err(UnusableCallId::TooLong { bytes: 300 }));
/// ```
///
/// # Errors
///
/// [`UnusableCallId`] saying which; its message reads after "the call" or "call 2".
pub fn check_call_id(id: &str) -> Result<(), UnusableCallId> {
    if id.is_empty() {
        return Err(UnusableCallId::Empty);
    }
    if id.len() > MAX_CALL_ID_BYTES {
        return Err(UnusableCallId::TooLong { bytes: id.len() });
    }
    Ok(())
}
