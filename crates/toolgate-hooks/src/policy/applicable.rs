//! [`CedarPolicies::applicable`]: which policies could decide a tool's calls, for
//! `toolgate check` and for authors reading their rules against the tools.

use cedar_policy::{Effect, PolicyId};
use toolgate_core::tool::ToolDefinition;

use super::hook::CedarPolicies;

/// A policy that could apply to some call of a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicablePolicy {
    /// The policy's id (its `@id`, else `FILE#N`).
    pub id: String,
    /// The file (the source's name) it came from.
    pub source: String,
    /// `true` for a `permit`, `false` for a `forbid`.
    pub permit: bool,
    /// Whether it is a shadow policy (`@mode("shadow")`): evaluated, not applied.
    pub shadow: bool,
    /// Whether it applies to every call of the tool, whoever calls and with whatever
    /// arguments (no condition left once the tool is known).
    pub always: bool,
}

impl CedarPolicies {
    /// The policies, enforced and shadow, that could apply to a call of `tool` by some
    /// caller with some arguments, at some time, on some transport, in file order: Cedar's
    /// partial evaluation with everything but the tool unknown leaves out each policy
    /// whose scope or conditions rule the tool out (another action, another resource, a
    /// tag the tool lacks), and keeps every other. A tool registered after the policies
    /// were loaded has none: its calls are denied.
    pub fn applicable(&self, tool: &ToolDefinition) -> Vec<ApplicablePolicy> {
        let inner = &*self.inner;
        let Some(model) = inner.model.tools.get(&tool.name) else {
            return Vec::new();
        };
        let Ok((request, entities)) = inner.model.any_call(model) else {
            // Nothing could be evaluated: say every policy could apply rather than none.
            return self.all_policies(|_| false);
        };
        let response = inner.on_enough_stack(|| {
            (inner.authorizer).is_authorized_partial(&request, &inner.all, &entities)
        });
        let always: Vec<String> = response
            .definitely_satisfied()
            .map(|p| p.id().to_string())
            .collect();
        let mut possible: Vec<String> = response
            .nontrivial_residuals()
            .map(|p| p.id().to_string())
            .chain(response.definitely_errored().map(ToString::to_string))
            .collect();
        possible.extend(always.iter().cloned());
        let mut applicable = self.all_policies(|id| always.iter().any(|a| a == id));
        applicable.retain(|p| possible.contains(&p.id));
        applicable
    }

    /// Every policy, in file order, `always` saying which apply unconditionally.
    fn all_policies(&self, always: impl Fn(&str) -> bool) -> Vec<ApplicablePolicy> {
        let inner = &*self.inner;
        inner
            .origins
            .iter()
            .filter_map(|(id, source)| {
                let policy = inner.all.policy(&PolicyId::new(id.clone()))?;
                Some(ApplicablePolicy {
                    id: id.clone(),
                    source: source.clone(),
                    permit: policy.effect() == Effect::Permit,
                    shadow: inner.shadow.contains(id),
                    always: always(id),
                })
            })
            .collect()
    }
}
