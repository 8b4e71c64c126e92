//! [`Partition`]: how a limit splits callers into separate budgets (per user, per tool…).

use std::fmt;
use std::sync::Arc;

use toolgate_core::{ToolInvokeContext, User};

/// How a limit (a [quota](crate::quota) or a [concurrency](crate::concurrency) cap) splits
/// calls into separate budgets. Each distinct key gets its own budget.
///
/// ```
/// use toolgate_hooks::partition::Partition;
///
/// // One budget per tenant, read from the caller.
/// let by_tenant = Partition::custom(|ctx| ctx.user().tenant.clone().unwrap_or_default());
/// # let _ = by_tenant;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Partition {
    /// One budget shared by every call the hook sees.
    Global,
    /// One budget per caller: a user id in its tenant (`ann` of `acme` and `ann` of
    /// `globex` have one each).
    User,
    /// One budget per tool.
    Tool,
    /// One budget per caller (as [`User`](Partition::User)) and tool pair (the default).
    #[default]
    UserTool,
    /// One budget per key this function returns.
    Custom(Arc<dyn Fn(&ToolInvokeContext) -> String + Send + Sync>),
}

impl Partition {
    /// A partition by a key computed from the context.
    pub fn custom(key: impl Fn(&ToolInvokeContext) -> String + Send + Sync + 'static) -> Self {
        Partition::Custom(Arc::new(key))
    }

    /// The key of this call, prefixed with `namespace` so that two policies sharing a
    /// backend never share a budget. Parts are separated by a unit separator (U+001F), which
    /// does not occur in tool names, so `a` + `b:c` and `a:b` + `c` stay distinct. The
    /// caller, always the last part, is its [`caller_key`](User::caller_key): the user id
    /// for a caller without a tenant, as keys were before tenants counted.
    pub fn key(&self, namespace: &str, ctx: &ToolInvokeContext) -> String {
        match self {
            Partition::Global => joined(&[namespace, "*"], None),
            Partition::User => joined(&[namespace, "u"], Some(ctx.user())),
            Partition::Tool => joined(&[namespace, "t", ctx.tool_name()], None),
            Partition::UserTool => joined(&[namespace, "ut", ctx.tool_name()], Some(ctx.user())),
            Partition::Custom(f) => joined(&[namespace, "c", &f(ctx)], None),
        }
    }

    /// A short word for messages: `global`, `user`, `tool`, `user and tool`, `key`.
    pub fn describe(&self) -> &'static str {
        match self {
            Partition::Global => "all callers",
            Partition::User => "this user",
            Partition::Tool => "this tool",
            Partition::UserTool => "this user and tool",
            Partition::Custom(_) => "this key",
        }
    }
}

/// `parts`, then the caller's key if there is one, separated by U+001F, built in one
/// allocation (this runs on every limited call).
fn joined(parts: &[&str], caller: Option<&User>) -> String {
    const SEP: char = '\u{1f}';
    let caller_len = caller.map_or(0, |user| SEP.len_utf8() + user.caller_key_len());
    let mut key =
        String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + caller_len);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push(SEP);
        }
        key.push_str(part);
    }
    if let Some(user) = caller {
        key.push(SEP);
        user.push_caller_key(&mut key);
    }
    key
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partition::Global => f.write_str("Global"),
            Partition::User => f.write_str("User"),
            Partition::Tool => f.write_str("Tool"),
            Partition::UserTool => f.write_str("UserTool"),
            Partition::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}
