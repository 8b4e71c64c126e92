//! [`RecordingHook`]: a hook that records every stage it is called at and can be told to
//! produce an outcome at any of them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use toolgate_core::hook::HookFuture;
use toolgate_core::stage::StageSet;
use toolgate_core::{Control, Hook, HookResult, Next, Stage, ToolInvokeContext, hook};

use crate::{Inject, StageLog};

/// What a [`RecordingHook`] does in `around_execute` (after recording the call, and after
/// any outcome injected at [`Stage::AroundExecute`]).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Around {
    /// Call `next` once (the default).
    #[default]
    Once,
    /// Call `next` zero times and respond with this value: a short-circuit.
    Respond(Value),
    /// Call `next` until it succeeds or fails with something other than an error, at most
    /// this many times in all: a retry policy.
    Retry(u32),
    /// Call `next` exactly this many times whatever it returns, and return the last result.
    Repeat(u32),
}

type Filter = Arc<dyn Fn(&ToolInvokeContext) -> bool + Send + Sync>;

/// A hook that appends `(stage, label)` to a [`StageLog`] every time the pipeline calls it,
/// and then does what it was configured to do at that stage: nothing by default, or an
/// [`Inject`]ed outcome.
///
/// By default it takes part in every stage (including `around_execute`, where it calls
/// `next` once), with priority 0 and no filter.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::prelude::*;
/// use toolgate_test::{assert_stages, Inject, RecordingHook, ScriptedTool, StageLog};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let log = StageLog::new();
/// let auth = RecordingHook::new("auth", &log)
///     .with_stages(StageSet::of(&[Stage::WillAuthorize, Stage::OnError, Stage::WillFinalizeInvoke]))
///     .at(Stage::WillAuthorize, Inject::abort("no", "forbidden", 403));
///
/// let pipeline = Pipeline::builder()
///     .tool(ScriptedTool::new("t").into_erased())
///     .hook(auth)
///     .build()
///     .unwrap();
///
/// let err = pipeline.invoke("t", json!({}), InvokeOptions::new()).await.unwrap_err();
/// assert_eq!(err.code(), "forbidden");
/// assert_stages(&log, &[Stage::WillAuthorize, Stage::OnError, Stage::WillFinalizeInvoke]);
/// # }
/// ```
#[derive(Clone)]
pub struct RecordingHook {
    label: Arc<str>,
    log: StageLog,
    priority: i32,
    stages: StageSet,
    filter: Option<Filter>,
    injected: HashMap<Stage, Inject>,
    around: Around,
}

impl RecordingHook {
    /// A hook labelled `label` (also its [`Hook::name`]) that records into `log`.
    pub fn new(label: impl Into<Arc<str>>, log: &StageLog) -> Self {
        RecordingHook {
            label: label.into(),
            log: log.clone(),
            priority: 0,
            stages: StageSet::ALL,
            filter: None,
            injected: HashMap::new(),
            around: Around::Once,
        }
    }

    /// Sets the priority.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Limits the stages the hook takes part in (every stage by default).
    ///
    /// ```
    /// use toolgate_core::prelude::*;
    /// use toolgate_test::{RecordingHook, StageLog};
    ///
    /// let hook = RecordingHook::new("q", &StageLog::new())
    ///     .with_stages(StageSet::of(&[Stage::WillAcquireQuota, Stage::DidReleaseQuota]));
    /// assert!(!hook.stages().contains(Stage::WillAuthorize));
    /// ```
    #[must_use]
    pub fn with_stages(mut self, stages: impl Into<StageSet>) -> Self {
        self.stages = stages.into();
        self
    }

    /// Takes part only in invocations for which `filter` returns `true`.
    ///
    /// ```
    /// use toolgate_test::{RecordingHook, StageLog};
    ///
    /// let admins_only = RecordingHook::new("audit", &StageLog::new())
    ///     .with_filter(|ctx| ctx.user().has_role("admin"));
    /// ```
    #[must_use]
    pub fn with_filter(
        mut self,
        filter: impl Fn(&ToolInvokeContext) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// Produces `outcome` every time the hook is called at `stage` (replacing an earlier
    /// outcome for that stage). The stage must be among the hook's [`stages`](Self::with_stages).
    #[must_use]
    pub fn at(mut self, stage: Stage, outcome: Inject) -> Self {
        self.injected.insert(stage, outcome);
        self
    }

    /// Sets what the hook does in `around_execute`.
    ///
    /// ```
    /// use toolgate_test::{Around, RecordingHook, StageLog};
    ///
    /// let retry = RecordingHook::new("retry", &StageLog::new()).around(Around::Retry(3));
    /// ```
    #[must_use]
    pub fn around(mut self, around: Around) -> Self {
        self.around = around;
        self
    }

    /// The hook's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The log the hook records into.
    pub fn log(&self) -> &StageLog {
        &self.log
    }

    fn on_stage<'a>(&'a self, stage: Stage, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
        self.log.record(stage, Arc::clone(&self.label));
        match self.injected.get(&stage) {
            Some(outcome) => outcome.perform(stage, ctx),
            None => HookFuture::ok(),
        }
    }
}

impl fmt::Debug for RecordingHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingHook")
            .field("label", &self.label)
            .field("priority", &self.priority)
            .field("stages", &self.stages)
            .field("filtered", &self.filter.is_some())
            .field("injected", &self.injected)
            .field("around", &self.around)
            .finish()
    }
}

macro_rules! recording_stage_methods {
    ($($method:ident => $stage:ident,)*) => {
        $(
            fn $method<'a>(&'a self, ctx: &'a mut ToolInvokeContext) -> HookFuture<'a> {
                self.on_stage(Stage::$stage, ctx)
            }
        )*
    };
}

#[hook]
impl Hook for RecordingHook {
    // Hand-written: the set is configured with `with_stages` (every stage by default).
    fn stages(&self) -> StageSet {
        self.stages
    }

    fn name(&self) -> &str {
        &self.label
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn filter(&self, ctx: &ToolInvokeContext) -> bool {
        self.filter.as_ref().is_none_or(|f| f(ctx))
    }

    async fn around_execute(&self, ctx: &mut ToolInvokeContext, next: Next<'_>) -> HookResult {
        self.on_stage(Stage::AroundExecute, ctx).await?;
        match &self.around {
            Around::Once => next.run(ctx).await,
            Around::Respond(value) => ctx.respond(value.clone()),
            Around::Retry(attempts) => {
                let mut result = next.run(ctx).await;
                for _ in 1..*attempts {
                    if !matches!(result, Err(Control::Error(_))) {
                        break;
                    }
                    result = next.run(ctx).await;
                }
                result
            }
            Around::Repeat(times) => {
                let mut result = Ok(());
                for _ in 0..*times {
                    result = next.run(ctx).await;
                }
                result
            }
        }
    }

    // The trait's form, written by a macro (which `#[hook]` leaves alone): an injected
    // outcome is ready at once, and only a delay or a hang is boxed.
    toolgate_core::__stage_methods!(recording_stage_methods);
}
