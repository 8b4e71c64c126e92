//! The [`Timeout`] hook: an `around_execute` wrapper.

use std::collections::HashMap;
use std::time::Duration;

use toolgate_core::hook::Interest;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, Next, ToolError, ToolInvokeContext, hook};

/// What a [`Timeout`] bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutScope {
    /// The whole execution, every attempt and the waits between them. Runs outside a retry
    /// policy (priority 100) and narrows the call's deadline, so the retry policy never
    /// sleeps past it.
    Call,
    /// Each attempt on its own. Runs inside a retry policy (priority -100), so a timed-out
    /// attempt of an idempotent tool can be retried.
    Attempt,
}

/// A per-tool limit on execution time, for the whole call or for each attempt.
///
/// Past the limit the attempt's cancellation token fires (the tool sees it through
/// [`ToolInvokeContext::cancellation`]) and the call fails with
/// [`ToolError::Timeout`] (`timeout`, HTTP 504). A per-attempt timeout gives each attempt a
/// child of the call's token, so a retry starts with a fresh token while the caller's
/// cancellation still reaches it.
///
/// Register both scopes to bound attempts and the call:
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::timeout::Timeout;
///
/// let per_call = Timeout::per_call(Duration::from_secs(30));
/// let per_attempt = Timeout::per_attempt(Duration::from_secs(5)).tool("search", Duration::from_secs(10));
/// # let _ = (per_call, per_attempt);
/// ```
#[derive(Clone, Debug)]
pub struct Timeout {
    scope: TimeoutScope,
    default: Option<Duration>,
    per_tool: HashMap<String, Duration>,
}

impl Timeout {
    /// Bounds each call's whole execution by `limit` (tools without their own limit).
    pub fn per_call(limit: Duration) -> Self {
        Timeout {
            scope: TimeoutScope::Call,
            default: Some(limit),
            per_tool: HashMap::new(),
        }
    }

    /// Bounds each attempt by `limit` (tools without their own limit).
    pub fn per_attempt(limit: Duration) -> Self {
        Timeout {
            scope: TimeoutScope::Attempt,
            default: Some(limit),
            per_tool: HashMap::new(),
        }
    }

    /// Only the tools given with [`tool`](Self::tool) are bounded; others run unbounded.
    pub fn only_listed(scope: TimeoutScope) -> Self {
        Timeout {
            scope,
            default: None,
            per_tool: HashMap::new(),
        }
    }

    /// The limit for one tool, instead of the default.
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>, limit: Duration) -> Self {
        self.per_tool.insert(name.into(), limit);
        self
    }

    /// What this hook bounds.
    pub fn scope(&self) -> TimeoutScope {
        self.scope
    }

    /// The limit for `tool`, if it has one.
    pub fn limit_for(&self, tool: &str) -> Option<Duration> {
        self.per_tool.get(tool).copied().or(self.default)
    }
}

#[hook]
impl Hook for Timeout {
    fn name(&self) -> &str {
        match self.scope {
            TimeoutScope::Call => "timeout(call)",
            TimeoutScope::Attempt => "timeout(attempt)",
        }
    }

    fn priority(&self) -> i32 {
        match self.scope {
            TimeoutScope::Call => 100,
            TimeoutScope::Attempt => -100,
        }
    }

    /// Only tools with a limit have this hook in their plan.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(self.limit_for(&tool.name).is_some())
    }

    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        // `interest` keeps this hook off tools without a limit; this guards direct calls.
        let Some(limit) = self.limit_for(ctx.tool_name()) else {
            return next.run(ctx).await;
        };
        // A limit too long for the clock to add (`Duration::MAX`) is no limit.
        let Some(expires) = tokio::time::Instant::now().checked_add(limit) else {
            return next.run(ctx).await;
        };
        if self.scope == TimeoutScope::Call {
            ctx.narrow_deadline(expires);
        }
        let token = ctx.cancellation().child_token();
        let parent = ctx.replace_cancellation(token.clone());
        let result = tokio::time::timeout_at(expires, next.run(ctx)).await;
        ctx.replace_cancellation(parent);
        match result {
            Ok(result) => result,
            Err(_) => {
                token.cancel();
                tracing::debug!(tool = ctx.tool_name(), limit_ms = limit.as_millis() as u64, scope = ?self.scope, "execution timed out");
                Err(ToolError::Timeout { after: limit }.into())
            }
        }
    }
}
