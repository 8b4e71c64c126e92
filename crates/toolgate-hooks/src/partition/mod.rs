//! [`Partition`]: how a limit splits callers into separate budgets (per user, per tool…).

use std::fmt;
use std::sync::Arc;

use toolgate_core::ToolInvokeContext;

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
    /// One budget per user id.
    User,
    /// One budget per tool.
    Tool,
    /// One budget per user and tool pair (the default).
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
    /// does not occur in tool names, so `a` + `b:c` and `a:b` + `c` stay distinct.
    pub fn key(&self, namespace: &str, ctx: &ToolInvokeContext) -> String {
        const SEP: char = '\u{1f}';
        match self {
            Partition::Global => format!("{namespace}{SEP}*"),
            Partition::User => format!("{namespace}{SEP}u{SEP}{}", ctx.user().id),
            Partition::Tool => format!("{namespace}{SEP}t{SEP}{}", ctx.tool_name()),
            Partition::UserTool => {
                format!(
                    "{namespace}{SEP}ut{SEP}{}{SEP}{}",
                    ctx.tool_name(),
                    ctx.user().id
                )
            }
            Partition::Custom(f) => format!("{namespace}{SEP}c{SEP}{}", f(ctx)),
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
