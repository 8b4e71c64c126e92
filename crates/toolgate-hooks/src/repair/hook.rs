//! The [`ArgumentRepair`] hook and its builder.

use std::collections::HashSet;

use serde_json::Value;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::defaults::fill_defaults;
use super::walk::{Repair, RepairKind, repair_within};

/// The metadata key under which repairs are listed.
pub const REPAIRS_METADATA_KEY: &str = "argument_repairs";

/// Repairs unambiguous argument mistakes at `will_parse_input` and fills schema defaults
/// at `will_normalize_input`. See the [module docs](super).
#[derive(Debug, Default)]
pub struct ArgumentRepair {
    disabled: HashSet<RepairKind>,
}

/// Builds an [`ArgumentRepair`]. By default every kind of repair is on.
#[derive(Clone, Debug, Default)]
pub struct ArgumentRepairBuilder {
    disabled: HashSet<RepairKind>,
}

impl ArgumentRepairBuilder {
    /// Turns one kind of repair off (for example [`RepairKind::WrappedInArray`] when a
    /// single value should stay an error).
    #[must_use]
    pub fn disable(mut self, kind: RepairKind) -> Self {
        self.disabled.insert(kind);
        self
    }

    /// The hook.
    pub fn build(self) -> ArgumentRepair {
        ArgumentRepair {
            disabled: self.disabled,
        }
    }
}

impl ArgumentRepair {
    /// The hook with every repair on.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder.
    pub fn builder() -> ArgumentRepairBuilder {
        ArgumentRepairBuilder::default()
    }

    fn record(ctx: &mut ToolInvokeContext, made: Vec<Repair>) {
        let list = ctx
            .metadata_mut()
            .entry(REPAIRS_METADATA_KEY)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.extend(
                made.into_iter()
                    .filter_map(|r| serde_json::to_value(r).ok()),
            );
        }
    }
}

#[hook]
impl Hook for ArgumentRepair {
    fn name(&self) -> &str {
        "argument_repair"
    }

    fn will_parse_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let mut input = ctx.input().clone();
        let mut made = Vec::new();
        let allowed =
            |kind: RepairKind| kind != RepairKind::DefaultFilled && !self.disabled.contains(&kind);
        // A JSON string can hold more nesting than the input the pipeline checked: what a
        // repair makes stays within the pipeline's limits too.
        let max_depth = ctx.input_limits().max_depth;
        let within = repair_within(
            &mut input,
            &ctx.tool().input_schema,
            max_depth,
            &allowed,
            &mut made,
        );
        if within.is_err() {
            // The same refusal as for the same nesting sent directly.
            return Err(ToolError::InputTooDeep { limit: max_depth }.into());
        }
        if !made.is_empty() {
            tracing::debug!(repairs = made.len(), "arguments repaired");
            ctx.set_input(input);
            Self::record(ctx, made);
        }
        Ok(())
    }

    fn will_normalize_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if self.disabled.contains(&RepairKind::DefaultFilled) {
            return Ok(());
        }
        let mut input = ctx.input().clone();
        let mut made = Vec::new();
        fill_defaults(&mut input, &ctx.tool().input_schema, "", &mut made);
        if !made.is_empty() {
            ctx.set_input(input);
            Self::record(ctx, made);
        }
        Ok(())
    }
}
