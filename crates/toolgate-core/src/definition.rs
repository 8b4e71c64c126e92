//! What the registry knows of a tool: its [`ToolDefinition`], with the
//! [`ToolAnnotations`] that drive safe defaults and the [`ToolSource`] it comes from.

use serde_json::Value;

/// Hints about what a tool does. They drive safe defaults: only idempotent tools are
/// retried and only read-only tools are cached, unless their owner says otherwise — and
/// only when the hints come from the tool's owner (see [`ToolSource::is_trusted`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ToolAnnotations {
    /// The tool changes nothing.
    pub read_only: bool,
    /// Calling it twice with the same input has the effect of calling it once.
    pub idempotent: bool,
    /// It may destroy data.
    pub destructive: bool,
    /// It reaches the world outside (network, other systems).
    pub open_world: bool,
}

impl ToolAnnotations {
    /// Read-only (and so idempotent).
    pub const READ_ONLY: ToolAnnotations = ToolAnnotations {
        read_only: true,
        idempotent: true,
        destructive: false,
        open_world: false,
    };
}

/// Where a tool comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolSource {
    /// Compiled into this program.
    #[default]
    Local,
    /// Imported from an MCP server.
    Mcp {
        /// The server's configured name.
        server: String,
    },
}

impl ToolSource {
    /// Whether the tool's annotations come from its owner. Annotations reported by a remote
    /// server are not trusted for the retry and cache defaults.
    pub fn is_trusted(&self) -> bool {
        matches!(self, ToolSource::Local)
    }
}

/// What the registry lists for a tool: enough to advertise it to a model or an MCP client.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolDefinition {
    /// The unique name callers use; also the tool's id.
    pub name: String,
    /// A human-friendly title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    pub description: String,
    /// The tool's version; part of cache keys.
    pub version: String,
    /// The JSON Schema of the input.
    pub input_schema: Value,
    /// The JSON Schema of the output, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Hints about what the tool does.
    #[serde(default)]
    pub annotations: ToolAnnotations,
    /// Free labels for policies (`destructive`, `billing`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Where the tool comes from.
    #[serde(default)]
    pub source: ToolSource,
}

impl ToolDefinition {
    /// Whether the tool carries this tag.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Whether the input schema says the input is a JSON object.
    pub fn wants_object_input(&self) -> bool {
        self.input_schema.get("type").and_then(Value::as_str) == Some("object")
    }
}
