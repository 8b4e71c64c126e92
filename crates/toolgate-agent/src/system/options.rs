//! The options of a batch and of a resume.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolgate_core::User;

/// How the calls of a batch run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// One after the other, in call order.
    Sequential,
    /// At most this many at once (at least 1); results still come back in call order.
    Parallel(usize),
}

/// The options of one batch.
#[derive(Clone, Debug)]
pub struct ExecuteOptions {
    pub(crate) user: Option<Arc<User>>,
    pub(crate) trace_id: Option<String>,
    pub(crate) concurrency: Option<Concurrency>,
    pub(crate) result_max_chars: Option<usize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancellation: Option<CancellationToken>,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ExecuteOptions {
    /// The anonymous user, a generated trace id, the system's concurrency, limit and
    /// timeout.
    pub fn new() -> Self {
        ExecuteOptions {
            user: None,
            trace_id: None,
            concurrency: None,
            result_max_chars: None,
            timeout: None,
            cancellation: None,
        }
    }

    /// Who the calls run for.
    #[must_use]
    pub fn user(mut self, user: impl Into<Arc<User>>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The trace id of the batch (generated when not given).
    #[must_use]
    pub fn trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }

    /// How the calls run (overrides the system's default).
    #[must_use]
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// The result size limit for these calls; wins over the thread's and the system's.
    #[must_use]
    pub fn result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = Some(max_chars);
        self
    }

    /// How long each call may take (overrides the system's default).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Cancelling this token cancels the calls of the batch: each one still running ends
    /// with [`ToolError::Cancelled`](toolgate_core::ToolError::Cancelled) after its tail
    /// (`on_error`, audit, releases), and its result says so. Each call's tool sees a
    /// child of the token, so a tool that cancels its own call does not cancel the others.
    #[must_use]
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }
}

/// The options of a resume.
#[derive(Clone, Debug, Default)]
pub struct ResumeOptions {
    pub(crate) result_max_chars: Option<usize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancellation: Option<CancellationToken>,
}

impl ResumeOptions {
    /// The thread's limit and the system's timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The result size limit; wins over the thread's and the system's.
    #[must_use]
    pub fn result_max_chars(mut self, max_chars: usize) -> Self {
        self.result_max_chars = Some(max_chars);
        self
    }

    /// How long the rest of the call may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Cancelling this token cancels the resumed call: it ends with
    /// [`ToolError::Cancelled`](toolgate_core::ToolError::Cancelled) after its tail
    /// (`on_error`, audit, releases).
    #[must_use]
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }
}
