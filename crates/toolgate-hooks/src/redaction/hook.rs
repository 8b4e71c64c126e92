//! The [`Redaction`] hook and its builder.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use toolgate_core::external::TypeMapKey;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::redactor::{Blocked, Findings, Redactor, parse_path};
use super::{Detector, RedactionMode};

/// The metadata key under which counts of redacted values are kept:
/// `{"input": {"email": 1}, "output": {"card": 2}}` — counts only, never values.
pub const REDACTIONS_METADATA_KEY: &str = "redactions";

/// The priority of [`Redaction`]: above the result cache (0), so at `will_write_cache`
/// the output is redacted before it is stored.
pub const REDACTION_PRIORITY: i32 = 100;

/// Redacts personal data and credentials from the input (`will_redact_input`) and from
/// the output before it is cached (`will_write_cache`) and before it leaves
/// (`will_redact_output`). See the [module docs](super).
#[derive(Debug)]
pub struct Redaction {
    redactor: Redactor,
    input: bool,
    output: bool,
}

/// Builds a [`Redaction`]. Defaults: the [built-in detectors](Detector::builtins),
/// [`RedactionMode::Redact`], input and output both redacted, no JSON paths.
#[derive(Debug)]
pub struct RedactionBuilder {
    detectors: Vec<Detector>,
    modes: BTreeMap<String, RedactionMode>,
    default_mode: RedactionMode,
    paths: Vec<Vec<String>>,
    input: bool,
    output: bool,
}

impl Default for RedactionBuilder {
    fn default() -> Self {
        RedactionBuilder {
            detectors: Detector::builtins(),
            modes: BTreeMap::new(),
            default_mode: RedactionMode::Redact,
            paths: Vec::new(),
            input: true,
            output: true,
        }
    }
}

impl RedactionBuilder {
    /// Replaces the detectors (start from an empty list, e.g. to use only your own).
    #[must_use]
    pub fn detectors(mut self, detectors: Vec<Detector>) -> Self {
        self.detectors = detectors;
        self
    }

    /// Adds a detector (built-in or [`Detector::pattern`]); it runs after the others.
    #[must_use]
    pub fn detect(mut self, detector: Detector) -> Self {
        self.detectors.push(detector);
        self
    }

    /// The mode for every detector without its own.
    #[must_use]
    pub fn mode(mut self, mode: RedactionMode) -> Self {
        self.default_mode = mode;
        self
    }

    /// The mode for one detector, by name (`"card"`; `"path"` for JSON paths).
    #[must_use]
    pub fn mode_for(mut self, detector: impl Into<String>, mode: RedactionMode) -> Self {
        self.modes.insert(detector.into(), mode);
        self
    }

    /// A JSON path whose whole value is always redacted, whatever it holds:
    /// `user.ssn`, `items[*].card`, `items.0.card`. `*` matches every key or index.
    #[must_use]
    pub fn path(mut self, path: &str) -> Self {
        self.paths.push(parse_path(path));
        self
    }

    /// Whether the input is redacted (on by default).
    #[must_use]
    pub fn input(mut self, on: bool) -> Self {
        self.input = on;
        self
    }

    /// Whether the output is redacted (on by default).
    #[must_use]
    pub fn output(mut self, on: bool) -> Self {
        self.output = on;
        self
    }

    /// The hook.
    pub fn build(self) -> Redaction {
        Redaction {
            redactor: Redactor::new(self.detectors, self.modes, self.default_mode, self.paths),
            input: self.input,
            output: self.output,
        }
    }
}

/// Where in the output history the output was last redacted, so that an output
/// redacted before it was cached is not scanned again at `will_redact_output`.
struct RedactedAt;

impl TypeMapKey for RedactedAt {
    type Value = usize;
}

/// Where in the input history the input was redacted.
struct InputRedactedAt;

impl TypeMapKey for InputRedactedAt {
    type Value = usize;
}

/// Whether the current input of `ctx` went through a [`Redaction`] hook: redacted at
/// `will_redact_input` and not replaced since, or restored from a suspension (a call
/// waits only once its input is redacted).
pub(crate) fn input_redacted(ctx: &ToolInvokeContext) -> bool {
    let at = ctx.input_history().len();
    ctx.scratch().get::<InputRedactedAt>() == Some(&at) || (ctx.resumed().is_some() && at == 0)
}

/// Whether the current output of `ctx` went through a [`Redaction`] hook.
pub(crate) fn output_redacted(ctx: &ToolInvokeContext) -> bool {
    ctx.scratch().get::<RedactedAt>() == Some(&ctx.output_history().len())
}

impl Default for Redaction {
    fn default() -> Self {
        RedactionBuilder::default().build()
    }
}

impl Redaction {
    /// The hook with its defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> RedactionBuilder {
        RedactionBuilder::default()
    }

    /// The redactor, to apply the same rules outside a pipeline.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    fn blocked(side: &str, blocked: Blocked) -> HookResult {
        let at = if blocked.path.is_empty() {
            String::new()
        } else {
            format!(" at `{}`", blocked.path)
        };
        Err(ToolError::abort(
            format!(
                "the {side} contains sensitive data ({}){at}: remove it and call again",
                blocked.detector
            ),
            "sensitive_data",
            422,
        )
        .into())
    }

    fn record(ctx: &mut ToolInvokeContext, side: &str, findings: Findings) {
        let entry = ctx
            .metadata_mut()
            .entry(REDACTIONS_METADATA_KEY)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(sides) = entry {
            let counts = sides
                .entry(side)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(counts) = counts {
                for (detector, n) in findings {
                    let before = counts.get(&detector).and_then(Value::as_u64).unwrap_or(0);
                    counts.insert(detector, Value::from(before + n));
                }
            }
        }
    }

    fn redact_output(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let Some(output) = ctx.output() else {
            return Ok(());
        };
        if !self.redactor.may_redact(output) {
            let at = ctx.output_history().len();
            ctx.scratch_mut().insert::<RedactedAt>(at);
            return Ok(());
        }
        let mut output = output.clone();
        let findings = match self.redactor.redact_value(&mut output) {
            Ok(findings) => findings,
            Err(blocked) => return Self::blocked("output", blocked),
        };
        if !findings.is_empty() {
            ctx.set_output(output);
            Self::record(ctx, "output", findings);
        }
        let at = ctx.output_history().len();
        ctx.scratch_mut().insert::<RedactedAt>(at);
        Ok(())
    }
}

#[hook]
impl Hook for Redaction {
    fn name(&self) -> &str {
        "redaction"
    }

    fn priority(&self) -> i32 {
        REDACTION_PRIORITY
    }

    fn will_redact_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !self.input {
            return Ok(());
        }
        if self.redactor.may_redact(ctx.input()) {
            let mut input = ctx.input().clone();
            match self.redactor.redact_value(&mut input) {
                Ok(findings) if findings.is_empty() => {}
                Ok(findings) => {
                    ctx.set_input(input);
                    Self::record(ctx, "input", findings);
                }
                Err(blocked) => return Self::blocked("input", blocked),
            }
        }
        let at = ctx.input_history().len();
        ctx.scratch_mut().insert::<InputRedactedAt>(at);
        Ok(())
    }

    fn will_write_cache(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !self.output {
            return Ok(());
        }
        self.redact_output(ctx)
    }

    fn will_redact_output(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !self.output {
            return Ok(());
        }
        if output_redacted(ctx) {
            return Ok(());
        }
        self.redact_output(ctx)
    }
}
