//! [`ToolCall`]: one call a model asked for, as parsed from its provider's format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The arguments of a call: JSON, or the text the model sent when it was not JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arguments {
    /// Parsed JSON arguments.
    Json {
        /// The arguments.
        value: Value,
    },
    /// Arguments that did not parse as JSON, kept as sent. The call is answered with an
    /// `invalid_input` error result quoting the parse error, so the model can correct it.
    Unparseable {
        /// The text as the model sent it.
        raw: String,
        /// Why it is not JSON.
        error: String,
    },
}

impl Arguments {
    /// Parses arguments that arrive as JSON text (OpenAI's `arguments` string). Empty or
    /// blank text means no arguments: `{}`.
    ///
    /// ```
    /// use serde_json::json;
    /// use toolgate_agent::Arguments;
    ///
    /// assert_eq!(Arguments::from_json_str(r#"{"city":"Paris"}"#), Arguments::Json { value: json!({"city": "Paris"}) });
    /// assert!(matches!(Arguments::from_json_str(r#"{"city":"Par"#), Arguments::Unparseable { .. }));
    /// ```
    pub fn from_json_str(text: &str) -> Self {
        if text.trim().is_empty() {
            return Arguments::Json {
                value: Value::Object(serde_json::Map::new()),
            };
        }
        match serde_json::from_str(text) {
            Ok(value) => Arguments::Json { value },
            Err(e) => Arguments::Unparseable {
                raw: text.to_owned(),
                error: e.to_string(),
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
