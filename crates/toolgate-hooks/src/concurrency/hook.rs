//! The [`Concurrency`] hook at `will_acquire_semaphore` / `did_release_semaphore`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::{ConcurrencyBackend, InMemoryConcurrency, Permit, PermitRequest};
use crate::now_and_then::{NowAndThen, backend_failed};
use crate::partition::Partition;
use crate::quota::OnBackendError;

/// What a call gets when no permit came free in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// A retry-after with code `overloaded`, HTTP 503, and this delay (the default, 1 s).
    RetryAfter(Duration),
    /// An abort with code `overloaded`, HTTP 503.
    Abort,
}

impl Default for WhenFull {
    fn default() -> Self {
        WhenFull::RetryAfter(Duration::from_secs(1))
    }
}

/// A cap on calls in flight at `will_acquire_semaphore`, per [`Partition`] key.
///
/// * The permit is an RAII guard kept in the context: it comes back at
///   `did_release_semaphore`, or when the context is dropped — on success, error, panic and
///   cancellation alike.
/// * With no permit free, the call waits up to [`wait`](ConcurrencyBuilder::wait) (never
///   past the call's deadline), then fails as [`WhenFull`] says: code `overloaded`, 503.
/// * A suspended call gives its permit back while it waits; it takes one again on resume.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::concurrency::{Concurrency, WhenFull};
/// use toolgate_hooks::partition::Partition;
///
/// // Four calls per tool at once; wait up to 200 ms for a slot, then refuse.
/// let cap = Concurrency::builder(4)?
///     .partition(Partition::Tool)
///     .wait(Duration::from_millis(200))
///     .when_full(WhenFull::Abort)
///     .build();
/// # let _ = cap;
/// # Ok::<(), toolgate_hooks::concurrency::ConcurrencyConfigError>(())
/// ```
pub struct Concurrency {
    name: String,
    limit: u32,
    partition: Partition,
    wait: Duration,
    when_full: WhenFull,
    backend: Arc<dyn ConcurrencyBackend>,
    on_backend_error: OnBackendError,
    /// Its backend's failures, told now and then.
    failures: NowAndThen,
}

/// A [`Concurrency`] limit that cannot be enforced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConcurrencyConfigError {
    /// The limit is zero.
    #[error(
        "a concurrency limit must allow at least 1 call in flight; to refuse every call, use authorization or a feature flag instead"
    )]
    ZeroLimit,
}

/// Builds a [`Concurrency`] hook.
pub struct ConcurrencyBuilder {
    name: String,
    limit: u32,
    partition: Partition,
    wait: Duration,
    when_full: WhenFull,
    backend: Option<Arc<dyn ConcurrencyBackend>>,
    on_backend_error: OnBackendError,
}

impl ConcurrencyBuilder {
    /// How calls split into budgets (default: per tool).
    #[must_use]
    pub fn partition(mut self, partition: Partition) -> Self {
        self.partition = partition;
        self
    }

    /// How long a call may wait for a free permit (default: zero, do not wait).
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// What a call gets when no permit came free (default: retry after 1 s).
    #[must_use]
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// The policy's name, which namespaces its keys (default `concurrency`).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where the counts live (default: a fresh [`InMemoryConcurrency`]).
    #[must_use]
    pub fn backend(mut self, backend: Arc<dyn ConcurrencyBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// What a backend failure means (default: fail closed, code `overloaded`).
    #[must_use]
    pub fn on_backend_error(mut self, mode: OnBackendError) -> Self {
        self.on_backend_error = mode;
        self
    }

    /// The hook.
    pub fn build(self) -> Concurrency {
        Concurrency {
            name: self.name,
            limit: self.limit,
            partition: self.partition,
            wait: self.wait,
            when_full: self.when_full,
            backend: self
                .backend
                .unwrap_or_else(|| Arc::new(InMemoryConcurrency::default())),
            on_backend_error: self.on_backend_error,
            failures: NowAndThen::default(),
        }
    }
}

impl Concurrency {
    /// A builder allowing `limit` calls in flight per tool.
    ///
    /// # Errors
    ///
    /// [`ConcurrencyConfigError::ZeroLimit`] for a zero limit.
    pub fn builder(limit: u32) -> Result<ConcurrencyBuilder, ConcurrencyConfigError> {
        NonZeroU32::new(limit)
            .map(Concurrency::builder_nonzero)
            .ok_or(ConcurrencyConfigError::ZeroLimit)
    }

    /// A builder allowing `limit` calls in flight per tool, for a limit already known to be
    /// at least 1.
    pub fn builder_nonzero(limit: NonZeroU32) -> ConcurrencyBuilder {
        ConcurrencyBuilder {
            name: "concurrency".to_owned(),
            limit: limit.get(),
            partition: Partition::Tool,
            wait: Duration::ZERO,
            when_full: WhenFull::default(),
            backend: None,
            on_backend_error: OnBackendError::default(),
        }
    }

    fn overloaded(&self) -> ToolError {
        let reason = format!(
            "overloaded: {} already has {} calls in flight for {}",
            self.name,
            self.limit,
            self.partition.describe()
        );
        match self.when_full {
            WhenFull::RetryAfter(delay) => ToolError::RetryAfter {
                delay,
                reason,
                code: "overloaded".into(),
                status: 503,
            },
            WhenFull::Abort => {
                ToolError::abort(format!("{reason}: try again later"), "overloaded", 503)
            }
        }
    }
}

#[hook]
impl Hook for Concurrency {
    fn name(&self) -> &str {
        &self.name
    }

    async fn will_acquire_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let key = self.partition.key(&self.name, ctx);
        let wait = ctx
            .remaining()
            .map_or(self.wait, |left| left.min(self.wait));
        let request = PermitRequest {
            key: &key,
            limit: self.limit,
            wait,
        };
        match self.backend.acquire(request).await {
            Ok(Some(permit)) => {
                ctx.hold(self, permit);
                Ok(())
            }
            Ok(None) => Err(self.overloaded().into()),
            Err(error) => match self.on_backend_error {
                OnBackendError::FailClosed => {
                    backend_failed(
                        &self.failures,
                        &self.name,
                        "concurrency backend",
                        &error,
                        true,
                    );
                    Err(ToolError::abort(
                        format!("the concurrency limiter could not decide ({error}); the call was not run: try again later"),
                        "overloaded",
                        503,
                    )
                    .into())
                }
                OnBackendError::FailOpen => {
                    backend_failed(
                        &self.failures,
                        &self.name,
                        "concurrency backend",
                        &error,
                        false,
                    );
                    Ok(())
                }
            },
        }
    }

    fn did_release_semaphore(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        // Dropping the permit gives it back.
        ctx.release::<Permit>(self);
        Ok(())
    }
}
