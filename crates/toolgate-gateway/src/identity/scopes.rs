//! `tool_scopes`: the scopes a caller's token needs to call a tool
//! (`identity.oauth.required_scopes.tools`), held at `will_authorize` so that every route
//! — `/v1`, a batch, `/mcp` — applies them alike, and the same decision for listings.

use std::collections::BTreeMap;

use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, User, hook};

/// The machine code of a call refused for a missing scope.
pub const INSUFFICIENT_SCOPE: &str = "insufficient_scope";

/// Refuses calls whose caller came with a token that lacks a tool's required scopes.
#[derive(Debug)]
pub struct ToolScopes {
    required: BTreeMap<String, Vec<String>>,
}

impl ToolScopes {
    /// The scopes each tool requires.
    pub fn new(required: BTreeMap<String, Vec<String>>) -> Self {
        ToolScopes { required }
    }

    /// The scopes `tool` requires (none when it is not listed).
    pub fn required(&self, tool: &str) -> &[String] {
        self.required.get(tool).map_or(&[], Vec::as_slice)
    }

    /// The scopes of `tool` that `user` lacks: none for a caller without a token (API
    /// keys are governed by authorization rules).
    pub fn missing<'s>(&'s self, user: &User, tool: &str) -> Vec<&'s str> {
        let required = self.required(tool);
        if required.is_empty()
            || user.attributes.get("auth").and_then(|v| v.as_str()) != Some("oauth")
        {
            return Vec::new();
        }
        let granted = user.attributes.get("scopes").and_then(|v| v.as_array());
        required
            .iter()
            .filter(|scope| {
                !granted.is_some_and(|g| g.iter().any(|s| s.as_str() == Some(scope.as_str())))
            })
            .map(String::as_str)
            .collect()
    }

    /// Whether `user` may call `tool` as far as scopes go.
    pub fn allows(&self, user: &User, tool: &ToolDefinition) -> bool {
        self.missing(user, &tool.name).is_empty()
    }
}

/// What a caller whose token lacks `missing` to call `tool` is told.
pub fn lacks_scope(missing: &[&str], tool: &str) -> String {
    format!(
        "the token lacks the scope `{}` needed to call `{tool}`: ask the issuer for a token with it",
        missing.join(" ")
    )
}

#[hook]
impl Hook for ToolScopes {
    fn name(&self) -> &str {
        "tool_scopes"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let missing = self.missing(ctx.user(), ctx.tool_name());
        if missing.is_empty() {
            return Ok(());
        }
        let reason = lacks_scope(&missing, ctx.tool_name());
        ctx.abort(reason, INSUFFICIENT_SCOPE, 403)
    }
}
