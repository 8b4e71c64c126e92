//! The [`Budget`] hook at `will_acquire_quota` / `did_release_quota`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use toolgate_core::hook::HookFuture;
use toolgate_core::suspension::ResumeDecision;
use toolgate_core::{Hook, HookResult, ToolError, ToolInvokeContext, hook};

use super::window::utc_time;
use super::{
    BudgetBackend, BudgetBackendError, BudgetDecision, BudgetRequest, BudgetState, Cost,
    InMemoryBudget, LimitReport, LimitState, Window,
};
use crate::now_and_then::{NowAndThen, backend_failed};
use crate::partition::Partition;
use crate::quota::OnBackendError;
use toolgate_core::error::grouped;

/// A cost per call charged against an allowance per [`Partition`] key and [`Window`], at
/// `will_acquire_quota` — after authorization, so a refused call costs nothing.
///
/// * The cost of a call comes from [`Cost`]: per tool, or the default (1 unit).
/// * A call that costs more than is left is refused: code `budget_exhausted`, HTTP 429,
///   a retry-after until the window ends, and a message that says what is left, of what,
///   until when, and what the call costs.
/// * A cost the tool reports ([`Cost::Reported`]) is reconciled at `did_release_quota`:
///   the difference to the estimate is charged or given back, in the window that was
///   charged — or in the present window, when a reload that changed the window's length
///   carried that window's spending there (the report then names the present window).
/// * A budget meters what the tool spends, so a call whose tool never ran costs nothing:
///   its charge is given back at `did_release_quota`. That is a call answered from the
///   [result cache](crate::cache::ResultCache) (a stored answer is not charged again, nor
///   the cost it reported), a call refused after the charge (`forbidden`: a policy on its
///   arguments, decided at the input stages; invalid input; a later limit), and a call
///   that waits for approval.
/// * A call that waits for approval holds none of the budget while it waits. Resumed with
///   an approval, it is charged again as its policies are checked again (at
///   `will_check_feature_flags`), and refused there when the budget no longer has room;
///   rejected, completed by a person or refused on resume, it costs nothing.
/// * The charge stands when the tool ran, whether or not the call then failed.
/// * When the backend fails, [`OnBackendError`] decides (fail closed by default:
///   `budget_unavailable`, HTTP 503).
///
/// # Examples
///
/// ```
/// use toolgate_hooks::budget::{Budget, Cost, Window};
/// use toolgate_hooks::partition::Partition;
///
/// // 1,000 units a day per tenant; an export costs one unit per 100 rows, plus one.
/// let budget = Budget::builder(1000, Window::day())
///     .name("tenant-daily")
///     .partition(Partition::custom(|ctx| ctx.user().tenant.clone().unwrap_or_default()))
///     .tool_cost("export", Cost::Argument { pointer: "/rows".into(), per_unit: 1, base: 1 })
///     .build();
/// # let _ = budget;
/// ```
pub struct Budget {
    name: String,
    limit: u64,
    window: Window,
    partition: Partition,
    partition_label: Option<PartitionLabel>,
    default_cost: Cost,
    costs: HashMap<String, Cost>,
    backend: Arc<dyn BudgetBackend>,
    on_backend_error: OnBackendError,
    /// Its backend's failures, told now and then.
    failures: NowAndThen,
}

/// How a refusal names the caller's budget, decided per call.
type PartitionLabel = Arc<dyn Fn(&ToolInvokeContext) -> String + Send + Sync>;

/// Builds a [`Budget`] hook.
pub struct BudgetBuilder {
    budget: Budget,
}

/// What a call was charged, held until `did_release_quota` (or, for a resumed call, which
/// does not reach that stage, `will_finalize_invoke`) for the reconciliation.
struct Charge {
    key: String,
    charged: u64,
    window_end_ms: u64,
}

/// The cost a tool reported, read from its output as it came back (at `did_execute`):
/// before redaction, validation and limits change the output or fail the call. `None`
/// when the output holds no cost.
struct Reported(Option<u64>);

impl BudgetBuilder {
    /// The policy's name, which namespaces its keys and names it in messages and headers
    /// (default `budget`). Give each budget that shares a backend its own name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.budget.name = name.into();
        self
    }

    /// How calls split into budgets (default: per user).
    #[must_use]
    pub fn partition(mut self, partition: Partition) -> Self {
        self.budget.partition = partition;
        self
    }

    /// How messages name one budget of the partition: `this tenant` gives `… left until
    /// 00:00 UTC for this tenant` (default: the partition's own words, `this user`, or
    /// `this key` for a custom partition).
    #[must_use]
    pub fn partition_label(self, label: impl Into<String>) -> Self {
        let label = label.into();
        self.partition_label_with(move |_| label.clone())
    }

    /// How messages name the caller's budget, decided per call: for a partition whose key
    /// falls back to something else for some callers — a tenant partition that gives a
    /// caller without a tenant a budget of their own — the words follow the key.
    ///
    /// ```
    /// use toolgate_hooks::budget::{Budget, Window};
    /// use toolgate_hooks::partition::Partition;
    ///
    /// let budget = Budget::builder(1000, Window::day())
    ///     .partition(Partition::custom(|ctx| match &ctx.user().tenant {
    ///         Some(tenant) => format!("tenant:{tenant}"),
    ///         None => format!("user:{}", ctx.user().id),
    ///     }))
    ///     .partition_label_with(|ctx| match ctx.user().tenant {
    ///         Some(_) => "this tenant".to_owned(),
    ///         None => "this user, who has no tenant".to_owned(),
    ///     })
    ///     .build();
    /// # let _ = budget;
    /// ```
    #[must_use]
    pub fn partition_label_with(
        mut self,
        label: impl Fn(&ToolInvokeContext) -> String + Send + Sync + 'static,
    ) -> Self {
        self.budget.partition_label = Some(Arc::new(label));
        self
    }

    /// The cost of a tool without a cost of its own (default 1 unit).
    #[must_use]
    pub fn default_cost(mut self, cost: Cost) -> Self {
        self.budget.default_cost = cost;
        self
    }

    /// The cost of `tool`.
    #[must_use]
    pub fn tool_cost(mut self, tool: impl Into<String>, cost: Cost) -> Self {
        self.budget.costs.insert(tool.into(), cost);
        self
    }

    /// Where the spending lives (default: a fresh [`InMemoryBudget`]).
    #[must_use]
    pub fn backend(mut self, backend: Arc<dyn BudgetBackend>) -> Self {
        self.budget.backend = backend;
        self
    }

    /// What a backend failure means (default: fail closed).
    #[must_use]
    pub fn on_backend_error(mut self, mode: OnBackendError) -> Self {
        self.budget.on_backend_error = mode;
        self
    }

    /// The hook.
    pub fn build(self) -> Budget {
        self.budget
    }
}

impl Budget {
    /// A builder for `limit` units per `window`, per user, each call costing 1, in memory.
    pub fn builder(limit: u64, window: Window) -> BudgetBuilder {
        BudgetBuilder {
            budget: Budget {
                name: "budget".to_owned(),
                limit,
                window,
                partition: Partition::User,
                partition_label: None,
                default_cost: Cost::Fixed(1),
                costs: HashMap::new(),
                backend: Arc::new(InMemoryBudget::default()),
                on_backend_error: OnBackendError::default(),
                failures: NowAndThen::default(),
            },
        }
    }

    /// The allowance per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// What a call of `tool` costs.
    pub fn cost_of(&self, tool: &str) -> &Cost {
        self.costs.get(tool).unwrap_or(&self.default_cost)
    }

    fn report(&self, ctx: &ToolInvokeContext, state: &BudgetState) {
        LimitReport::record_in(ctx, || LimitState {
            policy: self.name.clone(),
            quota: self.limit,
            window: self.window.length(),
            remaining: Some(state.remaining(self.limit)),
            resets_in: Some(state.resets_in),
        });
    }

    /// ``budget `name`: 12 of 1,000 units left until 00:00 UTC for this key; this call
    /// costs 30; make a cheaper call`` (the error adds `, retry after … ms`). The time is
    /// read on the backend's clock. A call that costs more than the whole budget is told
    /// so, without a time to retry at: no window will ever fit it.
    fn refusal(&self, ctx: &ToolInvokeContext, state: &BudgetState, cost: u64) -> ToolError {
        if cost > self.limit {
            return ToolError::abort(
                format!(
                    "budget `{}`: this call costs {}, more than the whole budget of {} units a window: it can never run; make a cheaper call",
                    self.name,
                    grouped(cost),
                    grouped(self.limit),
                ),
                "budget_exhausted",
                429,
            );
        }
        let now_ms = state
            .window_end_ms
            .saturating_sub(u64::try_from(state.resets_in.as_millis()).unwrap_or(u64::MAX));
        let reason = format!(
            "budget `{}`: {} of {} units left until {} for {}; this call costs {}; make a cheaper call",
            self.name,
            grouped(state.remaining(self.limit)),
            grouped(self.limit),
            utc_time(state.window_end_ms, now_ms),
            self.partition_label.as_ref().map_or_else(
                || Cow::Borrowed(self.partition.describe()),
                |label| Cow::Owned(label(ctx))
            ),
            grouped(cost),
        );
        ToolError::RetryAfter {
            delay: state.resets_in,
            reason,
            code: Cow::Borrowed("budget_exhausted"),
            status: 429,
        }
    }

    fn unavailable(&self, error: &BudgetBackendError) -> ToolError {
        ToolError::RetryAfter {
            delay: crate::BACKEND_RETRY_AFTER,
            reason: format!(
                "the budget store could not decide ({error}); the call was not run: try again in a moment"
            ),
            code: "budget_unavailable".into(),
            status: 503,
        }
    }
}

impl Budget {
    /// Keeps the cost the output reports, for a call charged an estimate.
    fn read_reported(&self, ctx: &mut ToolInvokeContext) {
        if ctx.held::<Charge>(self).is_none() {
            return;
        }
        let reported = ctx
            .output()
            .and_then(|output| self.cost_of(ctx.tool_name()).reported(output));
        ctx.release::<Reported>(self);
        ctx.hold(self, Reported(reported));
    }
}

#[hook]
impl Hook for Budget {
    fn name(&self) -> &str {
        &self.name
    }

    async fn will_acquire_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.charge(ctx).await
    }

    /// A call resumed with an approval is charged again here, with the policies that are
    /// checked again as it resumes: it gave its charge back when it began to wait. A call
    /// whose output is already there (it waited after the tool ran, and kept its charge)
    /// or was given by a person is not charged.
    fn will_check_feature_flags<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        let resumed = matches!(ctx.resumed(), Some(ResumeDecision::Approve));
        if !resumed || ctx.output().is_some() || ctx.held::<Charge>(self).is_some() {
            return HookFuture::ok();
        }
        HookFuture::new(self.charge(ctx))
    }

    /// The tool ran: what it reported is read now, from the output as it returned it. A
    /// transform later (an output limit that truncates it into text, a redaction that
    /// refuses it) must not make the call cost only its estimate.
    fn did_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.read_reported(ctx);
        Ok(())
    }

    async fn did_release_quota(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        self.settle(ctx).await
    }

    /// A resumed call does not reach `did_release_quota` (its quota was taken before it
    /// waited): the charge it took as it resumed is settled here, the last stage of every
    /// call.
    fn will_finalize_invoke<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        if ctx.held::<Charge>(self).is_none() {
            return HookFuture::ok();
        }
        HookFuture::new(self.settle(ctx))
    }
}

impl Budget {
    /// Charges the call what it costs before it runs, and holds the charge until it is
    /// settled.
    async fn charge(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let cost = match self
            .cost_of(ctx.tool_name())
            .before_repaired_call(ctx.input(), &ctx.tool().input_schema)
        {
            Ok(cost) => cost,
            Err(error) => {
                return ctx.abort(
                    format!("budget `{}`: {error}", self.name),
                    "invalid_cost_argument",
                    422,
                );
            }
        };
        if cost == 0 && !matches!(self.cost_of(ctx.tool_name()), Cost::Reported { .. }) {
            // A free call: nothing to charge, nothing to reconcile.
            return Ok(());
        }
        let key = self.partition.key(&self.name, ctx);
        let request = BudgetRequest {
            key: &key,
            cost,
            limit: self.limit,
            window: self.window,
        };
        match self.backend.charge(request).await {
            Ok(BudgetDecision::Charged(state)) => {
                self.report(ctx, &state);
                ctx.hold(
                    self,
                    Charge {
                        key,
                        charged: cost,
                        window_end_ms: state.window_end_ms,
                    },
                );
                Ok(())
            }
            Ok(BudgetDecision::Refused(state)) => {
                self.report(ctx, &state);
                Err(self.refusal(ctx, &state, cost).into())
            }
            Err(error) => match self.on_backend_error {
                OnBackendError::FailClosed => {
                    backend_failed(&self.failures, &self.name, "budget store", &error, true);
                    Err(self.unavailable(&error).into())
                }
                OnBackendError::FailOpen => {
                    backend_failed(&self.failures, &self.name, "budget store", &error, false);
                    Ok(())
                }
            },
        }
    }

    /// Settles the charge the call holds: given back whole when the tool never ran,
    /// reconciled with the cost it reported when it did.
    async fn settle(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let Some(charge) = ctx.held::<Charge>(self) else {
            return Ok(());
        };
        let reported = ctx.held::<Reported>(self).and_then(|r| r.0);
        let (key, charged, window_end_ms) =
            (charge.key.clone(), charge.charged, charge.window_end_ms);
        ctx.release::<Charge>(self);
        ctx.release::<Reported>(self);
        // The tool never ran — answered from the cache, refused after the charge, waiting
        // for approval, completed by a person: it spent nothing, so all of it comes back.
        let actual = match reported {
            _ if ctx.runs() == 0 => 0,
            Some(actual) => actual,
            None => return Ok(()),
        };
        // A cost past what any count keeps exactly is "all of it".
        let actual = actual.min(super::MAX_UNITS);
        let delta = i64::try_from(actual)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(charged).unwrap_or(i64::MAX));
        if delta == 0 {
            return Ok(());
        }
        match self.backend.adjust(&key, window_end_ms, delta).await {
            // The state names the window the spending counts in now: after a reload carried
            // it, the present window, not the one that was charged.
            Ok(Some(state)) => self.report(ctx, &state),
            Ok(None) => {}
            // The call is over: a failed reconciliation is logged, never the call's outcome.
            Err(error) => {
                tracing::warn!(policy = %self.name, %error, delta, "the budget's correction of this call's charge got no answer in time; a store that sends it again (Redis does, in the background) may still make it, else the charged estimate stands");
            }
        }
        Ok(())
    }
}
