//! `caller_token_cannot_wait`: a call that can be made only with its caller's access token
//! (an upstream `as_caller.token_exchange`) is refused when it would wait for approval,
//! instead of being parked.
//!
//! A waiting call keeps nothing of its caller's token — the suspension store never holds a
//! bearer token — and the call resumes in the approver's request, so when it is approved
//! there is no token to exchange: it could only fail then, after a person spent their
//! attention on it. Refused at once, its caller learns why while they are still there, and
//! nothing waits for an approval that could never let it run. A call that was parked all
//! the same (before a reload made its upstream exchange tokens, or by a hook of your own
//! that suspends) fails cleanly when it resumes: [`MissingCredential::Waited`].

use std::collections::BTreeMap;
use std::sync::Arc;

use toolgate_core::hook::HookRegistration;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};
use toolgate_hooks::Consent;
use toolgate_mcp::per_caller::MissingCredential;

/// Refuses, at `will_check_consent` and before `consent`, the calls of one upstream's tool
/// that need the caller's token ([`CallerCredentials::needs_caller_token`]) and would
/// wait for approval: a 403 `upstream_credential_missing` ([`MissingCredential::WouldWait`]).
///
/// [`CallerCredentials::needs_caller_token`]: toolgate_mcp::CallerCredentials::needs_caller_token
#[derive(Debug)]
pub struct CallerTokenCannotWait {
    upstream: String,
}

impl CallerTokenCannotWait {
    /// For the tools of the upstream named `upstream`.
    pub fn new(upstream: impl Into<String>) -> Self {
        CallerTokenCannotWait {
            upstream: upstream.into(),
        }
    }

    /// The tools of `needs_caller_token` (tool → its upstream) that `consent` makes wait
    /// for approval, with their upstreams: the tools whose calls are refused.
    pub fn refused(
        needs_caller_token: &BTreeMap<String, String>,
        registry: &ToolRegistry,
        consent: &Consent,
    ) -> BTreeMap<String, String> {
        let refused: BTreeMap<String, String> = needs_caller_token
            .iter()
            .filter(|(tool, _)| {
                registry
                    .get(tool)
                    .is_some_and(|t| consent.requires_approval(&t.definition))
            })
            .map(|(tool, upstream)| (tool.clone(), upstream.clone()))
            .collect();
        if !refused.is_empty() {
            let tools: Vec<&str> = refused.keys().map(String::as_str).collect();
            tracing::warn!(
                tools = %tools.join(", "),
                "these tools need approval (`policies.approval`) and are called as each caller with the caller's token exchanged (`as_caller.token_exchange`): a waiting call keeps no token, so their calls are refused with upstream_credential_missing; exempt them from approval or give their upstream fixed per-user credentials (`as_caller.credentials`, or `as_caller.tenant_credentials` for callers of a tenant)"
            );
        }
        refused
    }

    /// One registration per tool of `refused` (tool → its upstream), each for that tool
    /// alone.
    pub fn registrations(refused: &BTreeMap<String, String>) -> Vec<HookRegistration> {
        refused
            .iter()
            .map(|(tool, upstream)| {
                HookRegistration::shared(Arc::new(CallerTokenCannotWait::new(upstream.clone())))
                    .for_tool(tool.clone())
            })
            .collect()
    }
}

#[hook]
impl Hook for CallerTokenCannotWait {
    fn name(&self) -> &str {
        "caller_token_cannot_wait"
    }

    /// Before `consent` (priority 0), which would ask the call to wait.
    fn priority(&self) -> i32 {
        1
    }

    fn will_check_consent(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let refused = MissingCredential::WouldWait {
            tool: ctx.tool_name().to_owned(),
            upstream: self.upstream.clone(),
        };
        Err(ToolError::from(refused).into())
    }
}
