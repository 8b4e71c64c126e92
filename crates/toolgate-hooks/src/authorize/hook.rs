//! The [`Authorize`] hook and its [`Authorizer`] trait.

use std::sync::Arc;

use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, ToolInvokeContext, User, hook};

/// What an [`Authorizer`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The call may go on.
    Allow,
    /// The call is refused, with a reason for the caller.
    Deny {
        /// Why, written for the caller.
        reason: String,
    },
}

impl Verdict {
    /// A denial with this reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Verdict::Deny {
            reason: reason.into(),
        }
    }
}

/// An authorizer could not decide (a policy store was unreachable, a rule was malformed).
/// The [`Authorize`] hook denies when it sees one: it fails closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("authorization could not be evaluated: {0}")]
pub struct AuthorizeError(pub String);

/// Decides whether a user may call a tool. [`Rules`](super::Rules) is the built-in one; a
/// closure `Fn(&User, &ToolDefinition) -> Result<Verdict, AuthorizeError>` is one too.
///
/// Called on the hot path and for every tool of a listing: keep it fast, and cache whatever
/// it fetches from elsewhere.
pub trait Authorizer: Send + Sync + 'static {
    /// The verdict for `user` calling `tool`.
    ///
    /// # Errors
    ///
    /// [`AuthorizeError`] when it cannot decide; the call is then denied.
    fn authorize(&self, user: &User, tool: &ToolDefinition) -> Result<Verdict, AuthorizeError>;
}

impl<F> Authorizer for F
where
    F: Fn(&User, &ToolDefinition) -> Result<Verdict, AuthorizeError> + Send + Sync + 'static,
{
    fn authorize(&self, user: &User, tool: &ToolDefinition) -> Result<Verdict, AuthorizeError> {
        self(user, tool)
    }
}

/// Authorization at `will_authorize`, and the same decision for tool listings.
///
/// A denial aborts the call with code `forbidden`, HTTP 403. An authorizer error denies too
/// (fail closed), with a message that does not leak the error's details to the caller (they
/// are logged). Clones share the authorizer, so keep one to filter listings.
///
/// A suspended call is authorized again when it resumes (the pipeline runs
/// `will_authorize` again): one whose caller lost access while it waited is refused with a
/// message that says the caller may no longer call the tool, and the tool does not run.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
/// use toolgate_hooks::authorize::{Authorize, Effect, Rule, Rules};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let auth = Authorize::new(Rules::new(Effect::Deny).rule(Rule::allow().role("staff")));
/// let pipeline = Pipeline::builder()
///     .tool(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))
///     .hook(auth.clone())
///     .build()?;
///
/// let guest = User::new("guest");
/// assert!(auth.visible_tools(&guest, pipeline.definitions()).is_empty());
/// let err = pipeline.invoke("ping", json!(null), InvokeOptions::new().user(guest)).await.unwrap_err();
/// assert_eq!((err.code(), err.status()), ("forbidden", 403));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Authorize {
    authorizer: Arc<dyn Authorizer>,
}

impl Authorize {
    /// Authorization by `authorizer`.
    pub fn new(authorizer: impl Authorizer) -> Self {
        Authorize {
            authorizer: Arc::new(authorizer),
        }
    }

    /// The verdict for `user` calling `tool`, failing closed: an authorizer error is a
    /// denial.
    pub fn verdict(&self, user: &User, tool: &ToolDefinition) -> Verdict {
        match self.authorizer.authorize(user, tool) {
            Ok(verdict) => verdict,
            Err(error) => {
                tracing::error!(user = %user.id, tool = %tool.name, %error, "authorizer failed; denying (fail closed)");
                Verdict::deny(format!(
                    "access to `{}` could not be checked, so it is denied: try again later",
                    tool.name
                ))
            }
        }
    }

    /// Whether `user` may call `tool` (an authorizer error means no).
    pub fn can_call(&self, user: &User, tool: &ToolDefinition) -> bool {
        self.verdict(user, tool) == Verdict::Allow
    }

    /// The tools of a listing that `user` may call, in order: a caller never sees a tool it
    /// cannot call.
    pub fn visible_tools<'t>(
        &self,
        user: &User,
        tools: impl IntoIterator<Item = &'t ToolDefinition>,
    ) -> Vec<&'t ToolDefinition> {
        tools
            .into_iter()
            .filter(|t| self.can_call(user, t))
            .collect()
    }
}

#[hook]
impl Hook for Authorize {
    fn name(&self) -> &str {
        "authorize"
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        match self.verdict(ctx.user(), ctx.tool()) {
            Verdict::Allow => Ok(()),
            Verdict::Deny { reason } if ctx.resumed().is_some() => {
                let reason = format!(
                    "user {} may no longer call `{}`: access changed while the call waited for approval, so it did not run ({reason})",
                    ctx.user().named(),
                    ctx.tool_name()
                );
                ctx.abort(reason, "forbidden", 403)
            }
            Verdict::Deny { reason } => ctx.abort(reason, "forbidden", 403),
        }
    }
}
