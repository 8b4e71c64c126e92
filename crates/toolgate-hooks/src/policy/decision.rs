//! [`PolicyDecision`]: what a policy hook decided for one call, as the audit record keeps
//! it.

use toolgate_core::{Stage, ToolInvokeContext};

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Some policy permits the call and none forbids it.
    Allow,
    /// A policy forbids the call, or none permits it.
    Deny,
}

impl Verdict {
    /// `allow` or `deny`, as in metric labels and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

/// What the shadow policies would have decided: the decision of every policy, enforced
/// and shadow alike, had the shadow ones been enforced.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShadowDecision {
    /// The decision with the shadow policies enforced too.
    pub decision: Verdict,
    /// The shadow policies among those that determined it.
    pub determining: Vec<String>,
    /// Whether it differs from the decision that was applied.
    pub disagrees: bool,
}

/// One evaluation of a set of policies for one call: the decision applied, the policies
/// that determined it (the satisfied `forbid`s of a denial, the satisfied `permit`s of an
/// allow; none for a denial because nothing permits), and what the shadow policies would
/// have changed. Kept in the call's scratchpad for the audit record
/// ([`AuditRecord::policies`](crate::audit::AuditRecord::policies)).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyDecision {
    /// The hook that decided (`policy` unless renamed).
    pub hook: String,
    /// The stage it decided at: `will_authorize` when the decision did not depend on the
    /// arguments (or on resume), `will_normalize_input` when it did.
    pub stage: Stage,
    /// The decision applied.
    pub decision: Verdict,
    /// The enforced policies that determined it, by id.
    pub determining: Vec<String>,
    /// Policies whose evaluation failed (they count as not satisfied, and a failed
    /// `forbid` denies), by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errored: Vec<String>,
    /// What the shadow policies would have decided, when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowDecision>,
}

/// The scratchpad key of the decisions made for a call, in the order they were made (one
/// per policy hook that decided).
pub struct PolicyDecisions;

impl toolgate_core::external::TypeMapKey for PolicyDecisions {
    type Value = Vec<PolicyDecision>;
}

impl PolicyDecision {
    /// The decisions made for the call `ctx` describes.
    pub fn of(ctx: &ToolInvokeContext) -> &[PolicyDecision] {
        ctx.scratch()
            .get::<PolicyDecisions>()
            .map_or(&[], Vec::as_slice)
    }

    /// Keeps this decision with the call.
    pub fn record(self, ctx: &mut ToolInvokeContext) {
        ctx.scratch_mut()
            .entry::<PolicyDecisions>()
            .or_default()
            .push(self);
    }
}
