//! The lifecycle stages of one invocation, in pipeline order.

use std::fmt;

/// One lifecycle stage of an invocation.
///
/// The variants are declared in the order the pipeline reaches them on the success path
/// (DESIGN.md §2), with [`Stage::OnError`] last: it only runs on the error path, before
/// the record, release and end phases. Comparing two stages compares that order.
///
/// Hook methods are named after the stages ([`Stage::name`] gives the snake_case name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
#[non_exhaustive]
pub enum Stage {
    /// Phase 1: the context is about to be used; the first stage of every invocation.
    WillCreateInvokeContext,
    /// Phase 1: the context exists with its identity and input.
    DidCreateInvokeContext,
    /// Phase 2: hooks bind request and session providers.
    WillBindProviders,
    /// Phase 3: may this caller call this tool?
    WillAuthorize,
    /// Phase 3: has a person approved this call where approval is required?
    WillCheckConsent,
    /// Phase 3: is the tool switched on?
    WillCheckFeatureFlags,
    /// Phase 4: take a quota (rate-limit) unit. Paired with [`Stage::DidReleaseQuota`].
    WillAcquireQuota,
    /// Phase 4: take a concurrency permit. Paired with [`Stage::DidReleaseSemaphore`].
    WillAcquireSemaphore,
    /// Phase 5: the raw input is about to be parsed.
    WillParseInput,
    /// Phase 5: check the input; the tool's own checks run right after this stage's hooks.
    WillValidateInput,
    /// Phase 5: fill defaults, repair unambiguous mistakes.
    WillNormalizeInput,
    /// Phase 5: remove personal data and secrets from the input.
    WillRedactInput,
    /// Phase 5: put the secrets the tool needs into the context's secret slot.
    WillInjectSecrets,
    /// Phase 6: look the call up in a cache; a hook that responds here is a cache hit.
    WillReadCache,
    /// Phase 6: a hook at [`Stage::WillReadCache`] responded.
    DidCacheHit,
    /// Phase 6: nothing at [`Stage::WillReadCache`] responded.
    DidCacheMiss,
    /// Phase 7: the `around_execute` wrappers (outermost first).
    AroundExecute,
    /// Phase 7: an attempt after the first is about to start.
    OnRetry,
    /// Phase 7: the tool is about to run (once per attempt).
    WillExecute,
    /// Phase 7: the tool returned an output.
    DidExecute,
    /// Phase 7: execution failed after more than one attempt.
    OnGiveUp,
    /// Phase 8: store a freshly executed output (never after a respond).
    WillWriteCache,
    /// Phase 8: remove personal data and secrets from the output.
    WillRedactOutput,
    /// Phase 8: check the output.
    WillValidateOutput,
    /// Phase 8: reshape the output for the caller.
    WillTransformOutput,
    /// Phase 9: write the audit record.
    WillAudit,
    /// Phase 9: the audit record was written.
    DidAudit,
    /// Phase 9: record metrics.
    OnMetrics,
    /// Phase 10: give back the concurrency permit.
    DidReleaseSemaphore,
    /// Phase 10: give back (or settle) the quota unit.
    DidReleaseQuota,
    /// Phase 11: the last stage of every invocation, exactly once.
    WillFinalizeInvoke,
    /// Error path: the invocation failed; runs before phases 9, 10 and 11.
    OnError,
}

/// How many stages there are.
pub const STAGE_COUNT: usize = Stage::ALL.len();

impl Stage {
    /// Every stage, in the order of the enum.
    pub const ALL: [Stage; 32] = [
        Stage::WillCreateInvokeContext,
        Stage::DidCreateInvokeContext,
        Stage::WillBindProviders,
        Stage::WillAuthorize,
        Stage::WillCheckConsent,
        Stage::WillCheckFeatureFlags,
        Stage::WillAcquireQuota,
        Stage::WillAcquireSemaphore,
        Stage::WillParseInput,
        Stage::WillValidateInput,
        Stage::WillNormalizeInput,
        Stage::WillRedactInput,
        Stage::WillInjectSecrets,
        Stage::WillReadCache,
        Stage::DidCacheHit,
        Stage::DidCacheMiss,
        Stage::AroundExecute,
        Stage::OnRetry,
        Stage::WillExecute,
        Stage::DidExecute,
        Stage::OnGiveUp,
        Stage::WillWriteCache,
        Stage::WillRedactOutput,
        Stage::WillValidateOutput,
        Stage::WillTransformOutput,
        Stage::WillAudit,
        Stage::DidAudit,
        Stage::OnMetrics,
        Stage::DidReleaseSemaphore,
        Stage::DidReleaseQuota,
        Stage::WillFinalizeInvoke,
        Stage::OnError,
    ];

    /// The snake_case name, the same as the [`Hook`](crate::Hook) method for this stage.
    ///
    /// ```
    /// use toolgate_core::Stage;
    /// assert_eq!(Stage::WillAcquireQuota.name(), "will_acquire_quota");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Stage::WillCreateInvokeContext => "will_create_invoke_context",
            Stage::DidCreateInvokeContext => "did_create_invoke_context",
            Stage::WillBindProviders => "will_bind_providers",
            Stage::WillAuthorize => "will_authorize",
            Stage::WillCheckConsent => "will_check_consent",
            Stage::WillCheckFeatureFlags => "will_check_feature_flags",
            Stage::WillAcquireQuota => "will_acquire_quota",
            Stage::WillAcquireSemaphore => "will_acquire_semaphore",
            Stage::WillParseInput => "will_parse_input",
            Stage::WillValidateInput => "will_validate_input",
            Stage::WillNormalizeInput => "will_normalize_input",
            Stage::WillRedactInput => "will_redact_input",
            Stage::WillInjectSecrets => "will_inject_secrets",
            Stage::WillReadCache => "will_read_cache",
            Stage::DidCacheHit => "did_cache_hit",
            Stage::DidCacheMiss => "did_cache_miss",
            Stage::AroundExecute => "around_execute",
            Stage::OnRetry => "on_retry",
            Stage::WillExecute => "will_execute",
            Stage::DidExecute => "did_execute",
            Stage::OnGiveUp => "on_give_up",
            Stage::WillWriteCache => "will_write_cache",
            Stage::WillRedactOutput => "will_redact_output",
            Stage::WillValidateOutput => "will_validate_output",
            Stage::WillTransformOutput => "will_transform_output",
            Stage::WillAudit => "will_audit",
            Stage::DidAudit => "did_audit",
            Stage::OnMetrics => "on_metrics",
            Stage::DidReleaseSemaphore => "did_release_semaphore",
            Stage::DidReleaseQuota => "did_release_quota",
            Stage::WillFinalizeInvoke => "will_finalize_invoke",
            Stage::OnError => "on_error",
        }
    }

    /// The stage with this snake_case name, if there is one.
    pub fn from_name(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The position of this stage in [`Stage::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// `did_*` stages run hooks in reverse priority order, so that acquire and release nest
    /// like brackets.
    pub const fn is_did(self) -> bool {
        matches!(
            self,
            Stage::DidCreateInvokeContext
                | Stage::DidCacheHit
                | Stage::DidCacheMiss
                | Stage::DidExecute
                | Stage::DidAudit
                | Stage::DidReleaseSemaphore
                | Stage::DidReleaseQuota
        )
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Stage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Stage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Stage::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format_args!("unknown stage `{name}`")))
    }
}

/// A set of stages: what a hook implements, or what a plan has hooks for.
///
/// ```
/// use toolgate_core::stage::{Stage, StageSet};
/// let set = StageSet::of(&[Stage::WillAcquireQuota, Stage::DidReleaseQuota]);
/// assert!(set.contains(Stage::DidReleaseQuota));
/// assert!(!set.contains(Stage::WillAuthorize));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StageSet(u64);

impl StageSet {
    /// No stage.
    pub const EMPTY: StageSet = StageSet(0);
    /// Every stage.
    pub const ALL: StageSet = StageSet((1u64 << STAGE_COUNT) - 1);

    /// The set of the given stages.
    pub const fn of(stages: &[Stage]) -> StageSet {
        let mut bits = 0u64;
        let mut i = 0;
        while i < stages.len() {
            bits |= 1 << stages[i] as u8;
            i += 1;
        }
        StageSet(bits)
    }

    /// This set with `stage` added.
    #[must_use]
    pub const fn with(self, stage: Stage) -> StageSet {
        StageSet(self.0 | 1 << stage as u8)
    }

    /// Whether `stage` is in the set.
    pub const fn contains(self, stage: Stage) -> bool {
        self.0 & (1 << stage as u8) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The stages in both sets.
    #[must_use]
    pub const fn intersection(self, other: StageSet) -> StageSet {
        StageSet(self.0 & other.0)
    }

    /// The stages in either set.
    #[must_use]
    pub const fn union(self, other: StageSet) -> StageSet {
        StageSet(self.0 | other.0)
    }

    /// The stages of this set that are not in `other`.
    ///
    /// ```
    /// use toolgate_core::Stage;
    /// use toolgate_core::stage::StageSet;
    ///
    /// let set = StageSet::of(&[Stage::WillAuthorize, Stage::WillAudit]);
    /// let rest = set.difference(StageSet::of(&[Stage::WillAudit]));
    /// assert_eq!(rest, StageSet::of(&[Stage::WillAuthorize]));
    /// ```
    #[must_use]
    pub const fn difference(self, other: StageSet) -> StageSet {
        StageSet(self.0 & !other.0)
    }

    /// Every stage that comes before `stage` in pipeline order.
    pub(crate) const fn before(stage: Stage) -> StageSet {
        StageSet((1 << stage as u8) - 1)
    }

    /// The stages of the set, in pipeline order.
    pub fn iter(self) -> impl Iterator<Item = Stage> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let index = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(Stage::ALL[index])
        })
    }
}

impl From<Stage> for StageSet {
    fn from(stage: Stage) -> Self {
        StageSet::EMPTY.with(stage)
    }
}

impl FromIterator<Stage> for StageSet {
    fn from_iter<I: IntoIterator<Item = Stage>>(iter: I) -> Self {
        iter.into_iter().fold(StageSet::EMPTY, StageSet::with)
    }
}

impl fmt::Debug for StageSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Stage::name)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_declaration_order_and_names_round_trip() {
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(stage.index(), i);
            assert_eq!(Stage::from_name(stage.name()), Some(stage));
        }
        assert_eq!(StageSet::ALL.iter().count(), STAGE_COUNT);
    }

    #[test]
    fn the_hook_attribute_knows_exactly_these_stages() {
        let known: [&str; STAGE_COUNT] = toolgate_macros::__stage_names!();
        assert_eq!(known, Stage::ALL.map(Stage::name));
    }

    #[test]
    fn set_operations_keep_pipeline_order() {
        let a = StageSet::of(&[Stage::WillFinalizeInvoke, Stage::WillAuthorize]);
        let b = StageSet::of(&[Stage::WillAuthorize, Stage::WillExecute]);
        assert_eq!(
            a.union(b).iter().collect::<Vec<_>>(),
            [
                Stage::WillAuthorize,
                Stage::WillExecute,
                Stage::WillFinalizeInvoke
            ]
        );
        assert_eq!(
            a.intersection(b).iter().collect::<Vec<_>>(),
            [Stage::WillAuthorize]
        );
        let before = StageSet::before(Stage::WillExecute);
        assert!(before.contains(Stage::WillAuthorize));
        assert!(!before.contains(Stage::WillExecute));
        assert!(StageSet::before(Stage::WillCreateInvokeContext).is_empty());
    }
}
