//! What the upstream sends back, without its credentials.

use serde_json::Value;
use toolgate_core::ToolError;
use toolgate_core::tool::ToolDefinition;

use super::Link;

impl Link {
    /// `text` without the upstream's credentials: for log lines and error messages.
    pub fn scrubbed(&self, mut text: String) -> String {
        self.scrubber.scrub_string(&mut text);
        text
    }

    /// What the upstream sent (an error's message) for a log line or an error message:
    /// [`scrubbed`](Self::scrubbed), and with what could forge a line or disguise the text
    /// escaped ([`escaped_text`](toolgate_core::error::escaped_text)).
    pub fn scrubbed_sent(&self, text: String) -> String {
        let text = self.scrubbed(text);
        match toolgate_core::error::escaped_text(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(escaped) => escaped,
        }
    }

    /// A call's result without the upstream's credentials, before the pipeline sees it:
    /// an upstream that echoes its token or the start of it (or leaks it in an error), in
    /// the forms [`Scrubber`](toolgate_hooks::secrets::Scrubber) finds, does not get it to
    /// the caller, a cache entry, an audit record or a log line.
    pub fn scrub(&self, result: Result<Value, ToolError>) -> Result<Value, ToolError> {
        if self.scrubber.is_empty() {
            return result;
        }
        match result {
            Ok(mut output) => {
                if self.scrubber.scrub_value(&mut output) > 0 {
                    tracing::warn!(server = %self.config.name, "the MCP server's answer contained its own credential; it was scrubbed");
                }
                Ok(output)
            }
            Err(mut error) => {
                self.scrubber.scrub_error(&mut error);
                Err(error)
            }
        }
    }

    /// A discovered tool's definition without the upstream's credentials.
    pub fn scrub_definition(&self, mut definition: ToolDefinition) -> ToolDefinition {
        if self.scrubber.is_empty() {
            return definition;
        }
        self.scrubber.scrub_string(&mut definition.description);
        if let Some(title) = &mut definition.title {
            self.scrubber.scrub_string(title);
        }
        self.scrubber.scrub_value(&mut definition.input_schema);
        if let Some(schema) = &mut definition.output_schema {
            self.scrubber.scrub_value(schema);
        }
        definition
    }
}
