//! The stage methods of `Hook`, by name: what `#[hook]` recognises in an impl block.
//!
//! `toolgate-core` checks in a test (through `__stage_names!`) that this list is exactly
//! its `Stage::ALL`, so the two cannot drift apart.

/// Every stage method, in pipeline order, with its `Stage` variant.
pub(crate) const STAGES: [(&str, &str); 32] = [
    ("will_create_invoke_context", "WillCreateInvokeContext"),
    ("did_create_invoke_context", "DidCreateInvokeContext"),
    ("will_bind_providers", "WillBindProviders"),
    ("will_authorize", "WillAuthorize"),
    ("will_check_consent", "WillCheckConsent"),
    ("will_check_feature_flags", "WillCheckFeatureFlags"),
    ("will_acquire_quota", "WillAcquireQuota"),
    ("will_acquire_semaphore", "WillAcquireSemaphore"),
    ("will_parse_input", "WillParseInput"),
    ("will_validate_input", "WillValidateInput"),
    ("will_normalize_input", "WillNormalizeInput"),
    ("will_redact_input", "WillRedactInput"),
    ("will_inject_secrets", "WillInjectSecrets"),
    ("will_read_cache", "WillReadCache"),
    ("did_cache_hit", "DidCacheHit"),
    ("did_cache_miss", "DidCacheMiss"),
    ("around_execute", "AroundExecute"),
    ("on_retry", "OnRetry"),
    ("will_execute", "WillExecute"),
    ("did_execute", "DidExecute"),
    ("on_give_up", "OnGiveUp"),
    ("will_write_cache", "WillWriteCache"),
    ("will_redact_output", "WillRedactOutput"),
    ("will_validate_output", "WillValidateOutput"),
    ("will_transform_output", "WillTransformOutput"),
    ("will_audit", "WillAudit"),
    ("did_audit", "DidAudit"),
    ("on_metrics", "OnMetrics"),
    ("did_release_semaphore", "DidReleaseSemaphore"),
    ("did_release_quota", "DidReleaseQuota"),
    ("will_finalize_invoke", "WillFinalizeInvoke"),
    ("on_error", "OnError"),
];

/// The `Hook` methods that are not stages: `#[hook]` passes them through unchanged.
pub(crate) const OTHER_METHODS: [&str; 8] = [
    "stages",
    "synchronous_stages",
    "name",
    "priority",
    "filter",
    "required_providers",
    "provided_providers",
    "wants_stage_durations",
];

/// The `Stage` variant of the stage method `name`.
pub(crate) fn variant_of(name: &str) -> Option<&'static str> {
    STAGES
        .iter()
        .find(|(method, _)| *method == name)
        .map(|(_, variant)| *variant)
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
