//! The [`OutputLimit`] hook.

use std::collections::HashMap;

use serde_json::{Value, json};
use toolgate_core::json::text_len;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, hook};

/// The metadata key of the truncation note.
pub const TRUNCATION_METADATA_KEY: &str = "output_truncated";

/// The priority of [`OutputLimit`]: low, so it measures what other transforms produced.
pub const OUTPUT_LIMIT_PRIORITY: i32 = -100;

/// What happens to an output over the limit: `truncate` or `fail` in a configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Overflow {
    /// Cut it, with a marker saying how much was cut. The default.
    #[default]
    Truncate,
    /// Fail the call with code `output_too_large`.
    Fail,
}

/// Limits the size of outputs. See the [module docs](super).
///
/// A plain value configured with consuming setters, like tower's layers: the defaults
/// (64 KiB, truncate) from [`new`](Self::new), then any of
/// [`max_bytes`](Self::max_bytes), [`tool_max_bytes`](Self::tool_max_bytes) and
/// [`on_overflow`](Self::on_overflow). No setting can be wrong, so there is nothing to
/// build.
///
/// ```
/// use toolgate_hooks::output_limit::{OutputLimit, Overflow};
///
/// let limit = OutputLimit::new()
///     .max_bytes(16 * 1024)
///     .tool_max_bytes("export", 1024 * 1024)
///     .on_overflow(Overflow::Fail);
/// # let _ = limit;
/// ```
#[derive(Clone, Debug)]
pub struct OutputLimit {
    max_bytes: usize,
    per_tool: HashMap<String, usize>,
    overflow: Overflow,
}

impl Default for OutputLimit {
    fn default() -> Self {
        OutputLimit {
            max_bytes: 64 * 1024,
            per_tool: HashMap::new(),
            overflow: Overflow::Truncate,
        }
    }
}

impl OutputLimit {
    /// The hook with its defaults: 64 KiB for every tool, truncate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes of JSON an output may have.
    #[must_use]
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// A limit for one tool, instead of [`max_bytes`](Self::max_bytes).
    #[must_use]
    pub fn tool_max_bytes(mut self, tool: impl Into<String>, max_bytes: usize) -> Self {
        self.per_tool.insert(tool.into(), max_bytes);
        self
    }

    /// What happens over the limit.
    #[must_use]
    pub fn on_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }
}

/// `text` cut to at most `max` bytes including the marker, on a character boundary.
fn truncate(text: &str, max: usize) -> String {
    let mut keep = text.len().min(max);
    loop {
        // The marker's own length depends on how much is cut; settle it by iterating.
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        let marker = format!(" [truncated {} bytes]", text.len() - keep);
        if keep + marker.len() <= max || keep == 0 {
            return format!("{}{marker}", &text[..keep]);
        }
        keep = max.saturating_sub(marker.len()).min(keep - 1);
    }
}

#[hook]
impl Hook for OutputLimit {
    fn name(&self) -> &str {
        "output_limit"
    }

    fn priority(&self) -> i32 {
        OUTPUT_LIMIT_PRIORITY
    }

    fn will_transform_output(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let max = self
            .per_tool
            .get(ctx.tool_name())
            .copied()
            .unwrap_or(self.max_bytes);
        let Some(output) = ctx.output() else {
            return Ok(());
        };
        let size = text_len(output);
        if size <= max {
            return Ok(());
        }
        if self.overflow == Overflow::Fail {
            return ctx
                .abort(
                    format!("the output is {size} bytes, over the limit of {max} bytes: ask for less (narrow the query or page through the results)"),
                    "output_too_large",
                    502,
                );
        }
        let text = match output {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // A string's JSON form has two quotes (and escapes) more than its text: measure the
        // text against the limit, as the caller reads the text.
        let cut = truncate(&text, max);
        let note = json!({ "original_bytes": size, "returned_bytes": cut.len() });
        ctx.metadata_mut()
            .insert(TRUNCATION_METADATA_KEY.to_owned(), note);
        ctx.set_output(Value::String(cut));
        Ok(())
    }
}
