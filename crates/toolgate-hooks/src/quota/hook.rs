//! The [`Quota`] hook at `will_acquire_quota` / `did_release_quota`.

use std::sync::Arc;

use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::{
    InMemoryQuota, QuotaBackend, QuotaBackendError, QuotaDecision, QuotaLease, QuotaRequest, Rate,
};
use crate::budget::{LimitReport, LimitState};
use crate::now_and_then::{NowAndThen, backend_failed};
use crate::partition::Partition;

/// What a policy does when its backend cannot decide (unreachable, or full).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnBackendError {
    /// Refuse the call (the default): a broken limiter never lets a flood through.
    #[default]
    FailClosed,
    /// Let the call through and log: a broken limiter never takes the service down.
    FailOpen,
}

/// Rate limiting at `will_acquire_quota`: GCRA over a [`Rate`], one budget per
/// [`Partition`] key.
///
/// * One invocation takes one unit, however many attempts a retry policy makes (retries
///   happen inside execution, after this stage).
/// * Over the limit, the call fails with a retry-after (`rate_limited`, HTTP 429) carrying
///   the exact wait.
/// * The lease is kept in the context and given back at `did_release_quota`, or when the
///   context is dropped: it never leaks.
/// * When the backend fails, [`OnBackendError`] decides (fail closed by default: code
///   `quota_unavailable`, HTTP 503).
///
/// # Examples
///
/// ```
/// use toolgate_hooks::partition::Partition;
/// use toolgate_hooks::quota::{Quota, Rate};
///
/// // 60 calls a minute per user, at most 10 at once.
/// let quota = Quota::builder(Rate::per_minute(60)?.with_burst(10)?)
///     .partition(Partition::User)
///     .name("per-user")
///     .build();
/// # let _ = quota;
/// # Ok::<(), toolgate_hooks::quota::RateError>(())
/// ```
pub struct Quota {
    name: String,
    rate: Rate,
    partition: Partition,
    backend: Arc<dyn QuotaBackend>,
    on_backend_error: OnBackendError,
    /// Its backend's failures, told now and then.
    failures: NowAndThen,
}

/// Builds a [`Quota`] hook.
pub struct QuotaBuilder {
    name: String,
    rate: Rate,
    partition: Partition,
    backend: Option<Arc<dyn QuotaBackend>>,
    on_backend_error: OnBackendError,
}

impl QuotaBuilder {
    /// How calls split into budgets (default: per user and tool).
    #[must_use]
    pub fn partition(mut self, partition: Partition) -> Self {
        self.partition = partition;
        self
    }

    /// The policy's name, which namespaces its keys in the backend (default `quota`). Give
    /// each policy that shares a backend its own name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where the state lives (default: a fresh [`InMemoryQuota`]).
    #[must_use]
    pub fn backend(mut self, backend: Arc<dyn QuotaBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// What a backend failure means (default: fail closed).
    #[must_use]
    pub fn on_backend_error(mut self, mode: OnBackendError) -> Self {
        self.on_backend_error = mode;
        self
    }

    /// The rate the hook will allow (for a backend that decides in its place).
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The hook.
    pub fn build(self) -> Quota {
        Quota {
            name: self.name,
            rate: self.rate,
            partition: self.partition,
            backend: self
                .backend
                .unwrap_or_else(|| Arc::new(InMemoryQuota::default())),
            on_backend_error: self.on_backend_error,
            failures: NowAndThen::default(),
        }
    }
}

impl Quota {
    /// A builder for a quota at `rate`, per user and tool, in memory.
    pub fn builder(rate: Rate) -> QuotaBuilder {
        QuotaBuilder {
            name: "quota".to_owned(),
            rate,
            partition: Partition::default(),
            backend: None,
            on_backend_error: OnBackendError::default(),
        }
    }

    /// The rate this hook enforces.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// What a call learnt of this limit: its shape, and when refused, that nothing is
    /// left until `retry_after` (a GCRA grant does not tell how much is left).
    fn report(&self, ctx: &ToolInvokeContext, retry_after: Option<std::time::Duration>) {
        LimitReport::record_in(ctx, || LimitState {
            policy: self.name.clone(),
            quota: u64::from(self.rate.count()),
            window: self.rate.period(),
            remaining: retry_after.map(|_| 0),
            resets_in: retry_after,
        });
    }

    fn refused(&self, error: &QuotaBackendError) -> ToolError {
        ToolError::RetryAfter {
            delay: crate::BACKEND_RETRY_AFTER,
            reason: format!(
                "the rate limiter could not decide ({error}); the call was not run: try again in a moment"
            ),
            code: "quota_unavailable".into(),
            status: 503,
        }
    }
}

#[hook]
impl Hook for Quota {
    fn name(&self) -> &str {
        &self.name
    }

    async fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let key = self.partition.key(&self.name, ctx);
        let request = QuotaRequest {
            key: &key,
            rate: self.rate,
        };
        match self.backend.acquire(request).await {
            Ok(QuotaDecision::Granted(lease)) => {
                self.report(ctx, None);
                ctx.hold(self, lease);
                Ok(())
            }
            Ok(QuotaDecision::Limited { retry_after }) => {
                self.report(ctx, Some(retry_after));
                ctx.retry_after(
                    retry_after,
                    format!(
                        "rate limited: {} allows {} for {}",
                        self.name,
                        self.rate,
                        self.partition.describe()
                    ),
                )
            }
            Err(error) => match self.on_backend_error {
                OnBackendError::FailClosed => {
                    backend_failed(&self.failures, &self.name, "quota backend", &error, true);
                    Err(self.refused(&error).into())
                }
                OnBackendError::FailOpen => {
                    backend_failed(&self.failures, &self.name, "quota backend", &error, false);
                    Ok(())
                }
            },
        }
    }

    fn did_release_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        // Dropping the lease releases it.
        ctx.release::<QuotaLease>(self);
        Ok(())
    }
}
