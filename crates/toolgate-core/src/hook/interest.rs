//! [`Interest`]: whether a hook takes part in the calls of a tool, asked once per tool.

use std::fmt;

/// A hook's answer to [`Hook::interest`](super::Hook::interest): whether it takes part in
/// the calls of one tool, decided once, when the tool's plan is built.
///
/// Modelled on tracing's `Interest` (a layer's answer for a callsite):
///
/// * [`never`](Interest::never) — the hook is left out of the tool's plan: it never runs
///   for that tool, costs its calls nothing, and is not listed in
///   [`Pipeline::plan`](crate::Pipeline::plan);
/// * [`always`](Interest::always) — the hook runs at its stages for every call of the tool,
///   and the pipeline does not ask its [`filter`](super::Hook::filter);
/// * [`sometimes`](Interest::sometimes) — the hook is in the plan and its `filter` decides
///   per call, before each of its stages. The default.
///
/// ```
/// use toolgate_core::hook::Interest;
///
/// assert!(Interest::never().is_never());
/// assert!(Interest::always().is_always());
/// assert_eq!(Interest::default(), Interest::sometimes());
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Interest(Kind);

#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
enum Kind {
    Never,
    #[default]
    Sometimes,
    Always,
}

impl Interest {
    /// The hook never takes part in the tool's calls: it is left out of its plan.
    pub const fn never() -> Self {
        Interest(Kind::Never)
    }

    /// The hook's [`filter`](super::Hook::filter) decides, call by call.
    pub const fn sometimes() -> Self {
        Interest(Kind::Sometimes)
    }

    /// The hook takes part in every call of the tool; its filter is not asked.
    pub const fn always() -> Self {
        Interest(Kind::Always)
    }

    /// [`always`](Self::always) when `applies`, [`never`](Self::never) otherwise: the
    /// answer of a hook whose relevance depends on the tool alone.
    ///
    /// ```
    /// use toolgate_core::hook::Interest;
    ///
    /// assert_eq!(Interest::when(true), Interest::always());
    /// assert_eq!(Interest::when(false), Interest::never());
    /// ```
    pub const fn when(applies: bool) -> Self {
        if applies {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    /// Whether this is [`never`](Self::never).
    pub const fn is_never(self) -> bool {
        matches!(self.0, Kind::Never)
    }

    /// Whether this is [`sometimes`](Self::sometimes).
    pub const fn is_sometimes(self) -> bool {
        matches!(self.0, Kind::Sometimes)
    }

    /// Whether this is [`always`](Self::always).
    pub const fn is_always(self) -> bool {
        matches!(self.0, Kind::Always)
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Never => "Interest::never()",
            Kind::Sometimes => "Interest::sometimes()",
            Kind::Always => "Interest::always()",
        })
    }
}
