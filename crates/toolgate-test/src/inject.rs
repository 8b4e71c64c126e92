//! [`Inject`]: an outcome a test hook produces at a stage instead of doing nothing.

use std::time::Duration;

use serde_json::Value;
use toolgate_core::hook::HookFuture;
use toolgate_core::{Control, Stage, ToolError, ToolInvokeContext};

/// The text every injected panic carries, so a test can check it never reaches the caller.
pub const PANIC_PAYLOAD: &str = "toolgate-test injected panic";

/// An outcome to produce at a stage: what a [`RecordingHook`](crate::RecordingHook) does
/// there after recording the call.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use serde_json::json;
/// use toolgate_core::{Stage, ToolError};
/// use toolgate_test::{Inject, RecordingHook, StageLog};
///
/// let log = StageLog::new();
/// let hook = RecordingHook::new("policy", &log)
///     .at(Stage::WillAuthorize, Inject::abort("not today", "forbidden", 403))
///     .at(Stage::WillAcquireQuota, Inject::RetryAfter(Duration::from_millis(1200)))
///     .at(Stage::WillReadCache, Inject::Respond(json!("cached")))
///     .at(Stage::WillAudit, Inject::Fail(ToolError::internal("audit log is down")));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Inject {
    /// `ctx.respond(value)`.
    Respond(Value),
    /// `ctx.abort(reason, code, status)`.
    Abort {
        /// Why.
        reason: String,
        /// The machine code.
        code: String,
        /// The HTTP status.
        status: u16,
    },
    /// `ctx.retry_after(delay, "injected retry-after")`.
    RetryAfter(Duration),
    /// `ctx.suspend(reason)`.
    Suspend(String),
    /// Fail with this error (a failure of the hook, unless the error is a decision).
    Fail(ToolError),
    /// Panic with a message containing [`PANIC_PAYLOAD`].
    Panic,
    /// Never finish (the future stays pending until it is dropped).
    Hang,
    /// Sleep on the tokio clock, then let the pipeline go on.
    Delay(Duration),
}

impl Inject {
    /// An abort with this reason, code and status.
    pub fn abort(reason: impl Into<String>, code: impl Into<String>, status: u16) -> Self {
        Inject::Abort {
            reason: reason.into(),
            code: code.into(),
            status,
        }
    }

    /// A suspension with this reason.
    pub fn suspend(reason: impl Into<String>) -> Self {
        Inject::Suspend(reason.into())
    }

    /// Produces the outcome at `stage`.
    ///
    /// # Panics
    ///
    /// For [`Inject::Panic`], by design.
    pub fn perform<'a>(&'a self, stage: Stage, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        match self {
            Inject::Respond(value) => ctx.respond(value.clone()).into(),
            Inject::Abort {
                reason,
                code,
                status,
            } => ctx.abort(reason.clone(), code.clone(), *status).into(),
            Inject::RetryAfter(delay) => ctx.retry_after(*delay, "injected retry-after").into(),
            Inject::Suspend(reason) => ctx.suspend(reason.clone()).into(),
            Inject::Fail(error) => HookFuture::ready(Err(Control::Error(error.clone()))),
            Inject::Panic => panic!("{PANIC_PAYLOAD} at `{stage}`"),
            Inject::Hang => HookFuture::new(std::future::pending()),
            Inject::Delay(delay) => {
                let delay = *delay;
                HookFuture::new(async move {
                    tokio::time::sleep(delay).await;
                    Ok(())
                })
            }
        }
    }
}
