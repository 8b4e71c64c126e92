//! The [`Consent`] hook at `will_check_consent`.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use toolgate_core::control::SuspendRequest;
use toolgate_core::hook::Interest;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Control, Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::taken::{Claim, TakenOnces};
use super::{ApprovalStore, Approvals, Grant, InMemoryApprovals};

/// Requires a person's approval before some tools run.
///
/// A tool needs approval when it is named with [`tool`](ConsentBuilder::tool), carries a
/// tag given with [`tag`](ConsentBuilder::tag), or — with
/// [`destructive_tools`](ConsentBuilder::destructive_tools) — is annotated destructive
/// (whatever its source: for consent, a remote server's word that a tool is destructive is
/// reason enough to ask).
///
/// For such a tool the hook uses a recorded approval for this caller and tool (a one-shot
/// approval is consumed, an "always" one stays). A one-shot approval is spent only by a
/// call that goes on to run the tool, or that ends answered or waiting: a call refused
/// before the tool ran — over its rate limit, with invalid input, cancelled — gives it
/// back at `will_finalize_invoke`, so that its caller need not be approved again. (Between
/// the two, the approval is taken: another call of the same caller to the same tool at
/// that moment is asked to wait, and a [revoke](Approvals::revoke) through
/// [`approvals`](Self::approvals) takes it for good.) A caller is a user id in its tenant: an
/// approval of `ann` of `acme` is not one of `ann` of `globex`. With none, the call asks to
/// wait: the pipeline lets it go on through the capacity and input stages first — it takes
/// its quota unit, and its input is checked and redacted — and suspends it at the end of
/// `will_redact_input`, so that what waits is the call the tool would run. A call over its
/// rate limit or with invalid input fails then instead of waiting. The caller gets
/// [`ToolError::Suspended`] with a `suspension_id`, and [`Approvals::approve`] or
/// [`Approvals::reject`] settles it. A resumed call is authorized again, then continues
/// after the input stages. When the store fails, the call is refused (fail closed): code
/// `consent_unavailable`, HTTP 503.
///
/// The suspension's payload shows the approver `{"tool", "user"}`; the input to decide on
/// is the suspension's own [`input`](toolgate_core::suspension::SuspendedInvocation::input), the
/// validated and redacted one (the input at this stage has not been redacted yet, so it
/// is not copied into the payload).
///
/// # Examples
///
/// ```
/// use toolgate_hooks::consent::Consent;
///
/// let consent = Consent::builder().tag("destructive").tool("send_email").build();
/// let approvals = consent.approvals(); // keep it to approve and reject
/// # let _ = approvals;
/// ```
#[derive(Clone)]
pub struct Consent {
    tools: HashSet<String>,
    tags: HashSet<String>,
    destructive: bool,
    store: Arc<dyn ApprovalStore>,
    taken: Arc<TakenOnces>,
}

/// Builds a [`Consent`] hook.
pub struct ConsentBuilder {
    tools: HashSet<String>,
    tags: HashSet<String>,
    destructive: bool,
    store: Option<Arc<dyn ApprovalStore>>,
}

impl ConsentBuilder {
    /// This tool needs approval.
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tools.insert(name.into());
        self
    }

    /// Tools with this tag need approval.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.insert(tag.into());
        self
    }

    /// Tools annotated destructive need approval (default: no).
    #[must_use]
    pub fn destructive_tools(mut self, on: bool) -> Self {
        self.destructive = on;
        self
    }

    /// Where approvals live (default: a fresh [`InMemoryApprovals`]).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn ApprovalStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The hook.
    pub fn build(self) -> Consent {
        Consent {
            tools: self.tools,
            tags: self.tags,
            destructive: self.destructive,
            store: self
                .store
                .unwrap_or_else(|| Arc::new(InMemoryApprovals::default())),
            taken: Arc::default(),
        }
    }
}

impl Consent {
    /// A builder: no tool needs approval until one is named.
    pub fn builder() -> ConsentBuilder {
        ConsentBuilder {
            tools: HashSet::new(),
            tags: HashSet::new(),
            destructive: false,
            store: None,
        }
    }

    /// The approval API over this hook's store; its [`revoke`](Approvals::revoke) also
    /// reaches a one-shot approval that a call in flight took.
    pub fn approvals(&self) -> Approvals {
        Approvals::of_hook(Arc::clone(&self.store), Arc::clone(&self.taken))
    }

    /// Whether calls of `tool` need approval.
    pub fn requires_approval(&self, tool: &ToolDefinition) -> bool {
        self.tools.contains(&tool.name)
            || tool.tags.iter().any(|t| self.tags.contains(t))
            || (self.destructive && tool.annotations.destructive)
    }
}

/// The one-shot approval this call used, held until `will_finalize_invoke`.
struct UsedOnce {
    caller: String,
    claim: Claim,
}

#[hook]
impl Hook for Consent {
    fn name(&self) -> &str {
        "consent"
    }

    /// Only tools that need approval have this hook in their plan.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(self.requires_approval(tool))
    }

    async fn will_check_consent(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let caller = ctx.user().caller_key();
        // Claimed before it is taken, so that no revoke misses it while the store answers.
        let claim = self.taken.take(&caller, ctx.tool_name());
        match self.store.consume(&caller, ctx.tool_name()).await {
            Ok(Some(Grant::Once)) => {
                claim.holds_once();
                let caller = caller.into_owned();
                ctx.hold(self, UsedOnce { caller, claim });
                Ok(())
            }
            Ok(Some(Grant::Always)) => Ok(()),
            Ok(None) => {
                let request = SuspendRequest::new(format!(
                    "`{}` needs a person's approval before it runs for user `{}`",
                    ctx.tool_name(),
                    ctx.user().id
                ))
                .with_payload(json!({
                    "tool": ctx.tool_name(),
                    "user": ctx.user().id,
                }));
                Err(Control::Suspend(request))
            }
            Err(error) => {
                tracing::error!(tool = ctx.tool_name(), user = %ctx.user().id, %error, "approval store failed; refusing (fail closed)");
                Err(ToolError::abort(
                    format!(
                        "approval for `{}` could not be checked, so the call was not run: try again later",
                        ctx.tool_name()
                    ),
                    "consent_unavailable",
                    503,
                )
                .into())
            }
        }
    }

    /// A call that used a one-shot approval and failed before the tool ran gives it back,
    /// unless it was revoked meanwhile. A call that waits keeps it: when it is resumed,
    /// consent is not asked again.
    async fn will_finalize_invoke(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let Some(used) = ctx.held::<UsedOnce>(self) else {
            return Ok(());
        };
        let refused = ctx.runs() == 0 && ctx.error().is_some_and(|e| !e.is_waiting());
        if !refused || !used.claim.stands() {
            ctx.release::<UsedOnce>(self);
            return Ok(());
        }
        let caller = used.caller.clone();
        let given_back = self
            .store
            .grant(&caller, ctx.tool_name(), Grant::Once)
            .await;
        // A revoke that came while it was given back may have found the store empty: it is
        // revoked here in its stead.
        let revoked = ctx
            .held::<UsedOnce>(self)
            .is_some_and(|used| !used.claim.stands());
        ctx.release::<UsedOnce>(self);
        match given_back {
            Err(error) => {
                tracing::warn!(tool = ctx.tool_name(), user = %ctx.user().id, %error, "a one-shot approval of a call that did not run could not be given back; the caller must be approved again");
            }
            Ok(()) if revoked => {
                if let Err(error) = self.store.revoke(&caller, ctx.tool_name()).await {
                    tracing::warn!(tool = ctx.tool_name(), user = %ctx.user().id, %error, "a one-shot approval revoked while it was given back could not be revoked again");
                }
            }
            Ok(()) => {}
        }
        Ok(())
    }
}
