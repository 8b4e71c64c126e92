//! The stage list of toolgate, spelled once.
//!
//! `#[hook]` needs it when it expands, and this crate sits below every other, so the list
//! lives here. `toolgate-core` builds its `Stage` enum, `Stage::ALL`, `Stage::name` and the
//! hook trait's forwarding from it through [`__stages!`](crate::__stages) and
//! [`__stage_methods!`](crate::__stage_methods); the test kit's recording hook uses it too.

/// Every stage method, in pipeline order (the order of the `Stage` enum), with the one-line
/// documentation of its `Stage` variant. The variant is the method's name in CamelCase.
pub(crate) const STAGES: [(&str, &str); 32] = [
    (
        "will_create_invoke_context",
        "Phase 1: the context is about to be used; the first stage of every invocation.",
    ),
    (
        "did_create_invoke_context",
        "Phase 1: the context exists with its identity and input.",
    ),
    (
        "will_bind_providers",
        "Phase 2: hooks bind request and session providers.",
    ),
    ("will_authorize", "Phase 3: may this caller call this tool?"),
    (
        "will_check_consent",
        "Phase 3: has a person approved this call where approval is required?",
    ),
    (
        "will_check_feature_flags",
        "Phase 3: is the tool switched on?",
    ),
    (
        "will_acquire_quota",
        "Phase 4: take a quota (rate-limit) unit. Paired with [`Stage::DidReleaseQuota`].",
    ),
    (
        "will_acquire_semaphore",
        "Phase 4: take a concurrency permit. Paired with [`Stage::DidReleaseSemaphore`].",
    ),
    (
        "will_parse_input",
        "Phase 5: the raw input is about to be parsed.",
    ),
    (
        "will_validate_input",
        "Phase 5: check the input; the tool's own checks run right after this stage's hooks.",
    ),
    (
        "will_normalize_input",
        "Phase 5: fill defaults, repair unambiguous mistakes.",
    ),
    (
        "will_redact_input",
        "Phase 5: remove personal data and secrets from the input.",
    ),
    (
        "will_inject_secrets",
        "Phase 5: put the secrets the tool needs into the context's secret slot.",
    ),
    (
        "will_read_cache",
        "Phase 6: look the call up in a cache; a hook that responds here is a cache hit.",
    ),
    (
        "did_cache_hit",
        "Phase 6: a hook at [`Stage::WillReadCache`] responded.",
    ),
    (
        "did_cache_miss",
        "Phase 6: nothing at [`Stage::WillReadCache`] responded.",
    ),
    (
        "around_execute",
        "Phase 7: the `around_execute` wrappers (outermost first).",
    ),
    (
        "on_retry",
        "Phase 7: an attempt after the first is about to start.",
    ),
    (
        "will_execute",
        "Phase 7: the tool is about to run (once per attempt).",
    ),
    ("did_execute", "Phase 7: the tool returned an output."),
    (
        "on_give_up",
        "Phase 7: execution failed after more than one attempt.",
    ),
    (
        "will_write_cache",
        "Phase 8: store a freshly executed output (never after a respond).",
    ),
    (
        "will_redact_output",
        "Phase 8: remove personal data and secrets from the output.",
    ),
    ("will_validate_output", "Phase 8: check the output."),
    (
        "will_transform_output",
        "Phase 8: reshape the output for the caller.",
    ),
    ("will_audit", "Phase 9: write the audit record."),
    ("did_audit", "Phase 9: the audit record was written."),
    ("on_metrics", "Phase 9: record metrics."),
    (
        "did_release_semaphore",
        "Phase 10: give back the concurrency permit.",
    ),
    (
        "did_release_quota",
        "Phase 10: give back (or settle) the quota unit.",
    ),
    (
        "will_finalize_invoke",
        "Phase 11: the last stage of every invocation, exactly once.",
    ),
    (
        "on_error",
        "Error path: the invocation failed; runs before phases 9, 10 and 11.",
    ),
];

/// The stage whose method has its own signature (it takes the rest of the chain).
pub(crate) const AROUND_EXECUTE: &str = "around_execute";

/// The `Hook` methods that are not stages: `#[hook]` passes them through unchanged.
pub(crate) const OTHER_METHODS: [&str; 9] = [
    "stages",
    "synchronous_stages",
    "name",
    "priority",
    "interest",
    "filter",
    "required_providers",
    "provided_providers",
    "wants_stage_durations",
];

/// The `Stage` variant of a stage method's name: the name in CamelCase.
pub(crate) fn variant(method: &str) -> String {
    method
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// The `Stage` variant of the stage method `name`, if it is one.
pub(crate) fn variant_of(name: &str) -> Option<String> {
    STAGES
        .iter()
        .any(|(method, _)| *method == name)
        .then(|| variant(name))
}

/// The stage or `Hook` method closest to a name that is neither, if one is close enough to
/// be what the author meant.
pub(crate) fn closest(name: &str) -> Option<&'static str> {
    STAGES
        .iter()
        .map(|(method, _)| *method)
        .chain(OTHER_METHODS)
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= 3.max(candidate.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_are_the_method_names_in_camel_case() {
        assert_eq!(
            variant("will_create_invoke_context"),
            "WillCreateInvokeContext"
        );
        assert_eq!(variant("on_error"), "OnError");
    }
}
