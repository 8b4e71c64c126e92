//! The [`Validation`] hook and its builder.

use toolgate_core::pipeline::InputLimits;
use toolgate_core::tool::ToolSource;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::schema::{SchemaCache, into_result, violations_for};

/// Which tools have their input checked against their JSON Schema.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaCheck {
    /// Every tool (typed tools are then checked twice: by the schema here and by garde in
    /// the core; the schema of a typed tool is derived from the same attributes).
    #[default]
    All,
    /// Only tools that do not come from this program (imported MCP tools), whose only
    /// contract is their schema.
    Remote,
    /// No schema check of the input.
    Off,
}

/// Checks input limits, the input against the tool's JSON Schema, and the output against
/// its output schema. See the [module docs](super) for the stages.
pub struct Validation {
    limits: Option<InputLimits>,
    input: SchemaCheck,
    output: bool,
    schemas: SchemaCache,
}

/// Builds a [`Validation`]. Defaults: no extra limits (the pipeline's own apply), every
/// tool's input checked against its schema, outputs checked where a schema is declared.
#[derive(Clone, Debug, Default)]
pub struct ValidationBuilder {
    limits: Option<InputLimits>,
    input: SchemaCheck,
    skip_output: bool,
}

impl ValidationBuilder {
    /// Size and depth limits for this hook's tools, checked at `will_parse_input`.
    #[must_use]
    pub fn limits(mut self, limits: InputLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Which tools have their input checked against their schema.
    #[must_use]
    pub fn schema_check(mut self, check: SchemaCheck) -> Self {
        self.input = check;
        self
    }

    /// Whether outputs are checked against the declared output schema (on by default).
    #[must_use]
    pub fn check_output(mut self, on: bool) -> Self {
        self.skip_output = !on;
        self
    }

    /// The hook.
    pub fn build(self) -> Validation {
        Validation {
            limits: self.limits,
            input: self.input,
            output: !self.skip_output,
            schemas: SchemaCache::default(),
        }
    }
}

impl Default for Validation {
    fn default() -> Self {
        ValidationBuilder::default().build()
    }
}

impl Validation {
    /// The hook with its defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> ValidationBuilder {
        ValidationBuilder::default()
    }

    /// The compiled schemas (for inspection and tests).
    pub fn schemas(&self) -> &SchemaCache {
        &self.schemas
    }

    fn checks_input_of(&self, ctx: &ToolInvokeContext) -> bool {
        match self.input {
            SchemaCheck::All => true,
            SchemaCheck::Remote => !matches!(ctx.tool().source, ToolSource::Local),
            SchemaCheck::Off => false,
        }
    }
}

#[hook]
impl Hook for Validation {
    fn name(&self) -> &str {
        "validation"
    }

    fn will_parse_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        match &self.limits {
            Some(limits) => limits.check(ctx.input()).map_err(Into::into),
            None => Ok(()),
        }
    }

    fn will_validate_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if !self.checks_input_of(ctx) {
            return Ok(());
        }
        let tool = ctx.tool();
        let result = self
            .schemas
            .get(&tool.name, &tool.version, false, &tool.input_schema)
            .and_then(|validator| into_result(violations_for(&validator, ctx.input())));
        result.map_err(Into::into)
    }

    fn will_validate_output(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let tool = ctx.tool();
        let (Some(schema), Some(output), true) = (&tool.output_schema, ctx.output(), self.output)
        else {
            return Ok(());
        };
        let validator = self.schemas.get(&tool.name, &tool.version, true, schema)?;
        let violations = violations_for(&validator, output);
        if violations.is_empty() {
            return Ok(());
        }
        let detail = toolgate_core::error::InputViolations(violations).to_string();
        Err(ToolError::abort(
            format!("the tool returned output that does not fit its declared output schema ({detail}): the tool or an output hook is at fault, not the arguments"),
            "invalid_output",
            502,
        )
        .into())
    }
}
