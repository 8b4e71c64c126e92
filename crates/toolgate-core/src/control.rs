//! Control outcomes: the values that short-circuit the pipeline.

use serde_json::Value;

use crate::error::ToolError;
use crate::provider::ProviderError;

/// What a stage method returns: `Ok(())` to let the pipeline continue, or a [`Control`].
pub type HookResult = Result<(), Control>;

/// A control outcome. Hooks return it as the error of a [`HookResult`], so it travels
/// through `?` and stops the stage: no later hook at that stage sees or swallows it.
///
/// What the pipeline does with each outcome is the contract of DESIGN.md §2:
///
/// * [`Control::Respond`] — the value becomes the output; the pipeline continues at the
///   output phase (without `will_write_cache`), so the value is still redacted, validated,
///   transformed, audited and measured. From an output stage, it replaces the output and
///   the next output stage runs.
/// * [`Control::Error`] — the invocation fails with this error (an abort, a retry-after, a
///   failure): `on_error`, then the record, release and end phases.
/// * [`Control::Suspend`] — the invocation waits for a person: capacity is released, the
///   state is stored, and the caller gets [`ToolError::Suspended`] with an id to resume.
///   Asked before the input is checked and redacted, it takes effect once that is done.
///
/// The helpers on [`ToolInvokeContext`](crate::ToolInvokeContext) (`respond`, `abort`,
/// `retry_after`, `suspend`) build these and read well at the end of a hook:
/// `return ctx.abort("…", "forbidden", 403);`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Control {
    /// Short-circuit with this output.
    Respond(Value),
    /// Fail the invocation with this error.
    Error(ToolError),
    /// Suspend the invocation until it is resumed.
    Suspend(SuspendRequest),
}

impl Control {
    /// A short line for logs and decision traces: `respond`, `suspend`, or the error code.
    pub fn label(&self) -> &str {
        match self {
            Control::Respond(_) => "respond",
            Control::Suspend(_) => "suspend",
            Control::Error(e) => e.code(),
        }
    }

    /// Whether this is a policy decision rather than a failure of the hook.
    pub fn is_decision(&self) -> bool {
        match self {
            Control::Respond(_) | Control::Suspend(_) => true,
            Control::Error(e) => e.is_decision(),
        }
    }
}

impl From<ToolError> for Control {
    fn from(e: ToolError) -> Self {
        Control::Error(e)
    }
}

impl From<ProviderError> for Control {
    fn from(e: ProviderError) -> Self {
        Control::Error(ToolError::Provider(e))
    }
}

/// A hook's request to suspend the invocation until a person decides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SuspendRequest {
    /// What the call waits for, shown to the person and the caller.
    pub reason: String,
    /// Anything the person needs to decide (kept with the suspension).
    pub payload: Value,
}

impl SuspendRequest {
    /// A request with a reason and no payload.
    pub fn new(reason: impl Into<String>) -> Self {
        SuspendRequest {
            reason: reason.into(),
            payload: Value::Null,
        }
    }

    /// The same request with a payload.
    #[must_use]
    pub fn with_payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }
}
