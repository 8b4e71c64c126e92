//! The [`Retry`] hook.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use toolgate_core::hook::Interest;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Control, Hook, HookResult, Next, ToolError, ToolInvokeContext, hook};

use super::RetryBudget;

/// A [`Retry`] policy that cannot work as asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryConfigError {
    /// `max_attempts` is zero.
    #[error(
        "max_attempts counts the first attempt too, so it must be at least 1 (1 = never retry)"
    )]
    ZeroAttempts,
    /// The base delay is longer than the maximum delay.
    #[error(
        "the base delay ({base:?}) is longer than the maximum delay ({max:?}): lower the base or raise the maximum"
    )]
    DelayOrder {
        /// The base delay.
        base: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// The budget's numbers are out of range.
    #[error(
        "a retry budget needs a finite ratio of at least 0 and a maximum of at least the reserve (got ratio {ratio}, reserve {reserve}, max {max})"
    )]
    BadBudget {
        /// The ratio asked for.
        ratio: f64,
        /// The reserve asked for.
        reserve: u32,
        /// The maximum asked for.
        max: u32,
    },
}

/// Retries failed executions of idempotent tools.
///
/// An attempt is retried only when all of these hold:
///
/// * the error is retryable ([`ToolError::is_retryable`]: a transient tool failure, a
///   retry-after, a per-attempt timeout);
/// * the tool is idempotent by its owner's word: annotated `idempotent` or `read_only` by a
///   trusted source ([`ToolSource::is_trusted`](toolgate_core::tool::ToolSource::is_trusted) —
///   annotations reported by a remote MCP server do not count), or named with
///   [`idempotent_tool`](RetryBuilder::idempotent_tool);
/// * attempts are left (`max_attempts` counts the first);
/// * the wait fits before the call's deadline (the call fails at once instead of sleeping
///   into a certain timeout);
/// * a tool's own retry-after is no longer than [`max_retry_after`](RetryBuilder::max_retry_after);
/// * the [`RetryBudget`] has a retry to spend.
///
/// The wait before retry `n` is uniform in `[0, min(max_delay, base_delay × 2ⁿ⁻¹)]` (full
/// jitter), and never shorter than the tool's retry-after.
///
/// Default priority 0: inside a [per-call timeout](crate::timeout::TimeoutScope::Call),
/// outside a [per-attempt one](crate::timeout::TimeoutScope::Attempt).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_hooks::retry::{Retry, RetryBudget};
///
/// let retry = Retry::builder()
///     .max_attempts(4)
///     .base_delay(Duration::from_millis(100))
///     .max_delay(Duration::from_secs(5))
///     .max_retry_after(Duration::from_secs(10))
///     .budget(RetryBudget::new(0.1, 10, 100)?)
///     .idempotent_tool("charge_card_with_idempotency_key")
///     .build()?;
/// # let _ = retry;
/// # Ok::<(), toolgate_hooks::retry::RetryConfigError>(())
/// ```
pub struct Retry {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    budget: RetryBudget,
    idempotent_tools: HashSet<String>,
    rng: Option<Mutex<fastrand::Rng>>,
}

/// Builds a [`Retry`] hook.
#[derive(Debug)]
pub struct RetryBuilder {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    budget: RetryBudget,
    idempotent_tools: HashSet<String>,
    seed: Option<u64>,
}

impl RetryBuilder {
    /// Attempts in all, the first included (default 3).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The backoff's base (default 100 ms).
    #[must_use]
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// The longest backoff (default 10 s).
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The longest retry-after from a tool that is waited out (default 30 s); a longer one
    /// ends the call with the tool's error, delay included, for the caller to schedule.
    #[must_use]
    pub fn max_retry_after(mut self, delay: Duration) -> Self {
        self.max_retry_after = delay;
        self
    }

    /// The retry budget (default: [`RetryBudget::default`]). Pass a clone of one budget to
    /// several hooks to share it.
    #[must_use]
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Declares a tool idempotent (as its owner), whatever its annotations say.
    #[must_use]
    pub fn idempotent_tool(mut self, name: impl Into<String>) -> Self {
        self.idempotent_tools.insert(name.into());
        self
    }

    /// Seeds the jitter, for reproducible runs (default: a random seed per thread).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The hook.
    ///
    /// # Errors
    ///
    /// [`RetryConfigError`] for zero attempts or a base delay above the maximum.
    pub fn build(self) -> Result<Retry, RetryConfigError> {
        if self.max_attempts == 0 {
            return Err(RetryConfigError::ZeroAttempts);
        }
        if self.base_delay > self.max_delay {
            return Err(RetryConfigError::DelayOrder {
                base: self.base_delay,
                max: self.max_delay,
            });
        }
        Ok(Retry {
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            max_retry_after: self.max_retry_after,
            budget: self.budget,
            idempotent_tools: self.idempotent_tools,
            rng: self.seed.map(|s| Mutex::new(fastrand::Rng::with_seed(s))),
        })
    }
}

impl Retry {
    /// A builder with the defaults: 3 attempts, 100 ms base, 10 s cap, retry-after honoured
    /// up to 30 s, the default budget.
    pub fn builder() -> RetryBuilder {
        RetryBuilder {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(30),
            budget: RetryBudget::default(),
            idempotent_tools: HashSet::new(),
            seed: None,
        }
    }

    /// The budget this hook spends.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Whether this policy may run `tool` more than once.
    pub fn may_retry(&self, tool: &ToolDefinition) -> bool {
        self.idempotent_tools.contains(&tool.name)
            || (tool.source.is_trusted()
                && (tool.annotations.idempotent || tool.annotations.read_only))
    }

    /// The full-jitter backoff before retry number `retry` (1 for the first retry).
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        let cap = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let nanos = match &self.rng {
            Some(rng) => rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .u64(0..=cap_nanos),
            None => fastrand::u64(0..=cap_nanos),
        };
        Duration::from_nanos(nanos)
    }

    /// How long to wait before retrying after `error`, or `None` to give up.
    fn wait_before(
        &self,
        ctx: &ToolInvokeContext,
        error: &ToolError,
        retry: u32,
    ) -> Option<Duration> {
        if !error.is_retryable() {
            return None;
        }
        let mut delay = self.backoff(retry);
        if let Some(asked) = error.retry_after_delay() {
            if asked > self.max_retry_after {
                tracing::debug!(
                    tool = ctx.tool_name(),
                    asked_ms = asked.as_millis() as u64,
                    "retry-after longer than the policy waits; giving up"
                );
                return None;
            }
            delay = delay.max(asked);
        }
        if ctx.remaining().is_some_and(|left| delay >= left) {
            tracing::debug!(
                tool = ctx.tool_name(),
                "the next attempt would start past the deadline; giving up"
            );
            return None;
        }
        if !self.budget.withdraw() {
            tracing::warn!(tool = ctx.tool_name(), "retry budget spent; giving up");
            return None;
        }
        Some(delay)
    }
}

#[hook]
impl Hook for Retry {
    fn name(&self) -> &str {
        "retry"
    }

    /// Only tools this policy may run more than once, and only when it retries at all: a
    /// tool it never retries does not have it in its plan.
    fn interest(&self, tool: &ToolDefinition) -> Interest {
        Interest::when(self.max_attempts > 1 && self.may_retry(tool))
    }

    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        self.budget.deposit();
        let mut attempts = 1;
        loop {
            let error = match next.run(ctx).await {
                Err(Control::Error(error)) => error,
                other => break other,
            };
            if attempts >= self.max_attempts {
                break Err(error.into());
            }
            let Some(delay) = self.wait_before(ctx, &error, attempts) else {
                break Err(error.into());
            };
            tracing::debug!(
                tool = ctx.tool_name(),
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                code = error.code(),
                "retrying"
            );
            tokio::time::sleep(delay).await;
            attempts += 1;
        }
    }
}
