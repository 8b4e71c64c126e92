//! The lifecycle stages of one invocation, in pipeline order.

use std::fmt;

// Declares `Stage` from the stage list (`toolgate_macros::__stages!`, the one place the
// stages are spelled): the enum, `Stage::ALL`, `Stage::name` and `Stage::is_did`.
macro_rules! declare_stages {
    ($($method:ident => $variant:ident: $doc:literal,)*) => {
        /// One lifecycle stage of an invocation.
        ///
        /// The variants are declared in the order the pipeline reaches them on the success
        /// path (DESIGN.md §2), with [`Stage::OnError`] last: it only runs on the error
        /// path, before the record, release and end phases. Comparing two stages compares
        /// that order.
        ///
        /// Hook methods are named after the stages ([`Stage::name`] gives the snake_case
        /// name). The list is spelled once, in `toolgate-macros`, which `#[hook]` reads
        /// too: this enum, its names and the hook trait's forwarding are built from it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum Stage {
            $(#[doc = $doc] $variant,)*
        }

        /// How many stages there are.
        pub const STAGE_COUNT: usize = [$(Stage::$variant),*].len();

        impl Stage {
            /// Every stage, in the order of the enum.
            pub const ALL: [Stage; STAGE_COUNT] = [$(Stage::$variant),*];

            /// The snake_case name, the same as the [`Hook`](crate::Hook) method for this
            /// stage.
            ///
            /// ```
            /// use toolgate_core::Stage;
            /// assert_eq!(Stage::WillAcquireQuota.name(), "will_acquire_quota");
            /// ```
            pub const fn name(self) -> &'static str {
                match self {
                    $(Stage::$variant => stringify!($method),)*
                }
            }

            /// `did_*` stages run hooks in reverse priority order, so that acquire and
            /// release nest like brackets.
            ///
            /// ```
            /// use toolgate_core::Stage;
            /// assert!(Stage::DidReleaseQuota.is_did());
            /// assert!(!Stage::WillAcquireQuota.is_did());
            /// ```
            pub const fn is_did(self) -> bool {
                matches!(self.name().as_bytes(), [b'd', b'i', b'd', b'_', ..])
            }
        }
    };
}

toolgate_macros::__stages!(declare_stages);

impl Stage {
    /// The stage with this snake_case name, if there is one.
    pub fn from_name(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The position of this stage in [`Stage::ALL`].
    pub const fn index(self) -> usize {
        self as usize
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

    /// The set as bits (bit `stage.index()` for each stage in it), for the plan's atomic
    /// word of synchronous stages.
    pub(crate) const fn bits(self) -> u64 {
        self.0
    }

    /// The set whose bits are `bits`, as [`bits`](Self::bits) gives them.
    pub(crate) const fn from_bits(bits: u64) -> StageSet {
        StageSet(bits)
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
    fn did_stages_are_those_named_did() {
        let did: Vec<Stage> = Stage::ALL.into_iter().filter(|s| s.is_did()).collect();
        assert_eq!(
            did,
            [
                Stage::DidCreateInvokeContext,
                Stage::DidCacheHit,
                Stage::DidCacheMiss,
                Stage::DidExecute,
                Stage::DidAudit,
                Stage::DidReleaseSemaphore,
                Stage::DidReleaseQuota,
            ]
        );
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
