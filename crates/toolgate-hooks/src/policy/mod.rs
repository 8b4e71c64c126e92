//! Authorization by policies written in [Cedar](https://www.cedarpolicy.com/): evaluated
//! in-process over the caller, the tool and the call's typed arguments, validated when
//! loaded against a schema made from the registered tools, enforced or in shadow per
//! policy. See docs/policies.md, "Policies in Cedar".
//!
//! * [`CedarPolicies`] — the hook (feature `cedar`); [`CedarPolicies::visible_tools`]
//!   filters listings with the same decision; [`CedarPolicies::applicable`] says which
//!   policies could decide a tool's calls.
//! * [`PolicySource`] — a policy file's text; [`PolicyLoadError`] lists what is wrong with
//!   them, each at its file, line and column.
//! * [`PolicyDecision`] — what was decided for a call, as the audit record keeps it (always
//!   compiled, so that audit records read the same with or without the feature).

mod decision;

pub use decision::{PolicyDecision, PolicyDecisions, ShadowDecision, Verdict};

#[cfg(feature = "cedar")]
mod applicable;
#[cfg(feature = "cedar")]
mod arguments;
#[cfg(feature = "cedar")]
mod depth;
#[cfg(feature = "cedar")]
mod hook;
#[cfg(feature = "cedar")]
mod load;
#[cfg(feature = "cedar")]
mod model;

#[cfg(feature = "cedar")]
pub use applicable::ApplicablePolicy;
#[cfg(feature = "cedar")]
pub use depth::MAX_DEPTH;
#[cfg(feature = "cedar")]
pub use hook::{
    CallTransport, CedarPolicies, CedarPoliciesBuilder, DECISIONS_METRIC, DISAGREEMENTS_METRIC,
};
#[cfg(feature = "cedar")]
pub use load::{Location, PolicyLoadError, PolicySource, Problem};
