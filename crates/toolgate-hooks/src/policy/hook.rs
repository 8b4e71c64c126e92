//! The [`CedarPolicies`] hook: Cedar policies evaluated for every call, enforced or in
//! shadow.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use cedar_policy::{
    ActionConstraint, Authorizer, Decision, Effect, EntityUid, PolicyId, PolicySet, Response,
    RestrictedExpression,
};
use serde_json::Value;
use toolgate_core::external::TypeMapKey;
use toolgate_core::tool::ToolDefinition;
use toolgate_core::{Hook, HookResult, Stage, ToolInvokeContext, User, hook};

use super::decision::{PolicyDecision, ShadowDecision, Verdict};
use super::depth::evaluation_stack;
use super::load::{self, PolicyLoadError, PolicySource};
use super::model::Model;

/// The request provider that tells policies how a call came in (`context.transport`):
/// bind it per call (`http`, `mcp`, `agent`…) and policies can tell calls apart by it.
pub struct CallTransport;

impl TypeMapKey for CallTransport {
    type Value = String;
}

/// The metric counting, per policy, the calls it determined:
/// `toolgate_policy_decisions_total{policy, mode, decision}` (`mode` is `enforce` or
/// `shadow`; for a shadow policy, `decision` is the one it would have made).
pub const DECISIONS_METRIC: &str = "toolgate_policy_decisions_total";

/// The metric counting calls whose shadow decision differs from the one applied:
/// `toolgate_policy_shadow_disagreements_total{hook, decision, shadow_decision}`.
pub const DISAGREEMENTS_METRIC: &str = "toolgate_policy_shadow_disagreements_total";

/// Builds [`CedarPolicies`].
#[derive(Default)]
pub struct CedarPoliciesBuilder {
    sources: Vec<PolicySource>,
    groups: Vec<(String, String)>,
    name: Option<String>,
    completion: Option<Completion>,
}

/// Which inputs are completion requests: an object with the single key `key`, sent to a
/// tool with one of `tags`.
struct Completion {
    key: String,
    tags: Vec<String>,
}

impl CedarPoliciesBuilder {
    /// Treats an input that is an object with the single key `key` (`{"complete": {…}}`,
    /// as toolgate-mcp sends MCP `completion/complete` to a prompt's tool), sent to a tool
    /// with one of `tags`, as a completion request: it carries none of the tool's
    /// arguments, so it is allowed exactly when some policy could permit the caller to call
    /// the tool, as the listing shows it.
    ///
    /// Only the tools of `tags` — those that answer such an input with completions — are
    /// decided so: any other tool would run with `{"complete": {…}}` as its arguments, so
    /// there it is an ordinary call, decided on those arguments (a caller cannot step
    /// around a policy on the arguments by sending this shape).
    #[must_use]
    pub fn completion_requests<T: Into<String>>(
        mut self,
        key: impl Into<String>,
        tags: impl IntoIterator<Item = T>,
    ) -> Self {
        self.completion = Some(Completion {
            key: key.into(),
            tags: tags.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Adds the policies of `source`.
    #[must_use]
    pub fn source(mut self, source: PolicySource) -> Self {
        self.sources.push(source);
        self
    }

    /// Puts the action of every tool tagged `tag` in the action group `group` as well as
    /// in `Action::"call"`: `.action_group("prompt", "mcp-prompt")` lets a policy say
    /// `action in Action::"prompt"` of every imported prompt.
    ///
    /// A group follows a tag, never a name: an upstream chooses its tools' names, and a
    /// plain tool it names `prompt.anything` must not join the group a policy grants
    /// prompts through. The tag is given by whoever made the tool (toolgate-mcp tags the
    /// prompts and resources it imports).
    #[must_use]
    pub fn action_group(mut self, group: impl Into<String>, tag: impl Into<String>) -> Self {
        self.groups.push((group.into(), tag.into()));
        self
    }

    /// The hook's name in decision traces and audit records (default `policy`).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The hook, for calls of `tools`: their input schemas type `context.arguments`, and
    /// every policy is validated against the schema they make.
    ///
    /// # Errors
    ///
    /// [`PolicyLoadError`] with every problem, each at its file, line and column: a syntax
    /// error, an attribute no schema has (`context.arguments.amout`), a type error, an
    /// optional value used without `has`, a duplicate `@id`, a `@mode` other than
    /// `enforce` or `shadow`.
    pub fn build<'t>(
        self,
        tools: impl IntoIterator<Item = &'t ToolDefinition>,
    ) -> Result<CedarPolicies, PolicyLoadError> {
        let model = Model::new(tools, &self.groups)?;
        let loaded = load::load(&self.sources, &model.schema)?;
        let by_tool = model
            .tools
            .iter()
            .filter_map(|(name, tool)| {
                let policies = ToolPolicies {
                    enforced: narrowed(&loaded.enforced, &tool.action)?,
                    all: narrowed(&loaded.all, &tool.action)?,
                };
                Some((name.clone(), policies))
            })
            .collect();
        Ok(CedarPolicies {
            inner: Arc::new(Inner {
                name: self.name.unwrap_or_else(|| "policy".to_owned()),
                completion: self.completion,
                model,
                reasons: loaded.reasons.into_iter().collect(),
                origins: loaded.origins,
                warnings: loaded.warnings,
                has_shadow: !loaded.shadow.is_empty(),
                shadow: loaded.shadow,
                enforced: loaded.enforced,
                all: loaded.all,
                by_tool,
                evaluation_stack: evaluation_stack(loaded.evaluation_levels),
                authorizer: Authorizer::new(),
            }),
        })
    }
}

pub(super) struct Inner {
    name: String,
    completion: Option<Completion>,
    pub(super) model: Model,
    enforced: PolicySet,
    pub(super) all: PolicySet,
    /// For each tool, the policies that can apply to its calls.
    by_tool: HashMap<String, ToolPolicies>,
    pub(super) shadow: BTreeSet<String>,
    has_shadow: bool,
    reasons: HashMap<String, String>,
    /// Each policy's id and the file it came from, in file order.
    pub(super) origins: Vec<(String, String)>,
    /// What the operator should know of the policies, which load.
    warnings: Vec<String>,
    pub(super) authorizer: Authorizer,
    /// The stack a decision over these policies needs ([`evaluation_stack`]).
    evaluation_stack: usize,
}

/// Which policies a decision is over: the enforced ones, or all (the shadow ones too).
#[derive(Clone, Copy)]
enum Over {
    Enforced,
    All,
}

/// The policies that can apply to one tool's calls: those whose action scope is any
/// action, a group (`in`), or this tool's action. Cedar evaluates every policy of the set
/// it is given, scope and condition, so a call is decided over these only — the same
/// decision, since a policy scoped to another tool's action is never satisfied and never
/// fails (its scope is false before its condition is read).
struct ToolPolicies {
    enforced: PolicySet,
    all: PolicySet,
}

/// The policies of `set` that can apply to calls of `action`; `None` keeps the whole set
/// (a set with templates, which are not narrowed).
fn narrowed(set: &PolicySet, action: &EntityUid) -> Option<PolicySet> {
    if set.templates().next().is_some() {
        return None;
    }
    let mut narrowed = PolicySet::new();
    for policy in set.policies() {
        let may_apply = match policy.action_constraint() {
            ActionConstraint::Eq(only) => &only == action,
            ActionConstraint::Any | ActionConstraint::In(_) => true,
        };
        if may_apply {
            narrowed.add(policy.clone()).ok()?;
        }
    }
    Some(narrowed)
}

impl Inner {
    /// Runs `decide`, a decision over these policies, where the stack has room for their
    /// deepest expression: in place when the thread has that much left (policies as
    /// people write them, on a runtime worker), else on a stack made for it. Cedar's
    /// evaluator fails a policy, where a permit then denies, rather than go below 100 KiB.
    pub(super) fn on_enough_stack<R>(&self, decide: impl FnOnce() -> R) -> R {
        stacker::maybe_grow(self.evaluation_stack, 2 * self.evaluation_stack, decide)
    }

    /// The policies `over` that can apply to calls of `tool`.
    fn policies(&self, tool: &str, over: Over) -> &PolicySet {
        match (self.by_tool.get(tool), over) {
            (Some(tool), Over::Enforced) => &tool.enforced,
            (Some(tool), Over::All) => &tool.all,
            (None, Over::Enforced) => &self.enforced,
            (None, Over::All) => &self.all,
        }
    }
}

/// Authorization by Cedar policies, at `will_authorize` and `will_normalize_input`, and the
/// same decision for tool listings.
///
/// A call is evaluated over its principal (the user), its action and resource (the tool)
/// and its context (the typed arguments, the time, the transport). What does not depend on
/// the arguments is decided at `will_authorize`, before any capacity is charged: a call
/// that no policy could permit, whatever its arguments, is refused there. The rest is
/// decided at `will_normalize_input`, where the arguments have been repaired and
/// validated (by [`Validation`](crate::validation::Validation) or the tool's own types):
/// a call refused for its arguments has taken its rate-limit unit, as a call refused for
/// invalid arguments has. A resumed call is decided again at `will_authorize`, over the
/// arguments it waited with.
///
/// Policies annotated `@mode("shadow")` are evaluated but not applied: each call records
/// what would have been decided had they been enforced ([`PolicyDecision::shadow`]).
/// Every decision goes to the call's scratchpad for the audit record, to a
/// `policy_decision` span (target `toolgate::otel`) and to the metrics
/// [`DECISIONS_METRIC`] and [`DISAGREEMENTS_METRIC`].
///
/// A refusal aborts with `forbidden`, 403. It tells the caller the `@reason("…")` of the
/// `forbid` that refused it when there is one, and never a policy's id. The hook fails
/// closed: arguments that do not fit the schema, an evaluation error in a `forbid`, a tool
/// registered after the policies were loaded — each denies.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use toolgate_core::registry::ToolRegistry;
/// use toolgate_core::{tool_fn, InvokeOptions, Pipeline, ToolError, User};
/// use toolgate_hooks::policy::{CedarPolicies, PolicySource};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut registry = ToolRegistry::new();
/// registry.register(tool_fn("ping", "Answers pong.", |_: ()| async { Ok::<_, ToolError>("pong") }))?;
/// let policies = CedarPolicies::builder()
///     .source(PolicySource::new(
///         "staff.cedar",
///         r#"permit(principal, action, resource) when { principal.roles.contains("staff") };"#,
///     ))
///     .build(registry.definitions())?;
/// let pipeline = Pipeline::builder().registry(registry).hook(policies.clone()).build()?;
///
/// let guest = User::new("guest");
/// assert!(policies.visible_tools(&guest, pipeline.definitions()).is_empty());
/// let err = pipeline.invoke("ping", json!(null), InvokeOptions::new().user(guest)).await.unwrap_err();
/// assert_eq!((err.code(), err.status()), ("forbidden", 403));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CedarPolicies {
    pub(super) inner: Arc<Inner>,
}

/// How an evaluation went, before it is recorded.
struct Evaluated {
    decision: Verdict,
    determining: Vec<String>,
    errored: Vec<String>,
    /// Why the call could not be evaluated at all (it is denied).
    failure: Option<String>,
}

impl Evaluated {
    /// Denied because the `forbid`s `failed` could not be evaluated (they determine it).
    fn forbid_failed(failed: Vec<String>, errored: Vec<String>) -> Self {
        Evaluated {
            decision: Verdict::Deny,
            determining: failed,
            errored,
            failure: Some("a policy that may forbid it failed to evaluate".to_owned()),
        }
    }

    fn failed(why: String) -> Self {
        Evaluated {
            decision: Verdict::Deny,
            determining: Vec::new(),
            errored: Vec::new(),
            failure: Some(why),
        }
    }
}

impl CedarPolicies {
    /// A builder.
    pub fn builder() -> CedarPoliciesBuilder {
        CedarPoliciesBuilder::default()
    }

    /// The Cedar schema the policies are validated against, in Cedar's JSON schema
    /// format: what a policy author may refer to.
    pub fn schema_json(&self) -> &Value {
        &self.inner.model.schema_json
    }

    /// What the operator should know of policies that loaded (none of them is enforced,
    /// say): logged when they load, and printed by `toolgate check`.
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// The ids of the shadow policies.
    pub fn shadow_policies(&self) -> impl Iterator<Item = &str> {
        self.inner.shadow.iter().map(String::as_str)
    }

    /// Whether some policy could permit `user` to call `tool`, with some arguments: the
    /// listing filter. `false` only when the enforced policies deny whatever the arguments.
    pub fn could_allow(&self, user: &User, tool: &ToolDefinition) -> bool {
        // A listing is not a call: how the caller will call is not known either.
        let transport = Some(RestrictedExpression::new_unknown("transport"));
        self.without_arguments(user, &tool.name, Over::Enforced, transport)
            .is_ok_and(|decided| decided.is_none_or(|e| e.decision == Verdict::Allow))
    }

    /// The tools of a listing that some policy could permit `user` to call, in order.
    pub fn visible_tools<'t>(
        &self,
        user: &User,
        tools: impl IntoIterator<Item = &'t ToolDefinition>,
    ) -> Vec<&'t ToolDefinition> {
        tools
            .into_iter()
            .filter(|t| self.could_allow(user, t))
            .collect()
    }

    /// The decision of `set` with the arguments unknown: `None` when it depends on them.
    fn without_arguments(
        &self,
        user: &User,
        tool: &str,
        over: Over,
        transport: Option<RestrictedExpression>,
    ) -> Result<Option<Evaluated>, String> {
        let inner = &*self.inner;
        let set = inner.policies(tool, over);
        let tool = inner
            .model
            .tools
            .get(tool)
            .ok_or_else(|| not_covered(tool))?;
        let principal = Model::principal(user)?;
        let uid = principal.uid();
        let entities = inner.model.entities(principal, tool)?;
        let context = Model::context(RestrictedExpression::new_unknown("arguments"), transport)?;
        let request = Model::partial_request(uid, tool, context);
        let response = inner
            .on_enough_stack(|| (inner.authorizer).is_authorized_partial(&request, set, &entities));
        let mut errored: Vec<String> = response
            .definitely_errored()
            .map(ToString::to_string)
            .collect();
        errored.sort();
        // A `forbid` that fails whatever the arguments denies whatever the arguments.
        let failed = failed_forbids(&errored, set);
        if !failed.is_empty() {
            return Ok(Some(Evaluated::forbid_failed(failed, errored)));
        }
        let Some(decision) = response.decision() else {
            return Ok(None);
        };
        let (decision, effect) = match decision {
            Decision::Allow => (Verdict::Allow, Effect::Permit),
            Decision::Deny => (Verdict::Deny, Effect::Forbid),
        };
        let mut determining: Vec<String> = response
            .definitely_satisfied()
            .filter(|p| p.effect() == effect)
            .map(|p| p.id().to_string())
            .collect();
        determining.sort();
        Ok(Some(Evaluated {
            decision,
            determining,
            errored,
            failure: None,
        }))
    }

    /// Whether the call is a completion request
    /// ([`CedarPoliciesBuilder::completion_requests`]): the shape, sent to a tool that
    /// answers completions.
    fn is_completion(&self, ctx: &ToolInvokeContext) -> bool {
        let Some(completion) = &self.inner.completion else {
            return false;
        };
        let answers = ctx
            .tool()
            .tags
            .iter()
            .any(|tag| completion.tags.contains(tag));
        answers
            && ctx.input().as_object().is_some_and(|o| {
                o.len() == 1 && o.get(&completion.key).is_some_and(Value::is_object)
            })
    }

    /// A completion request's decision: that of the listing.
    fn evaluate_completion(&self, ctx: &ToolInvokeContext) -> (Evaluated, Option<Evaluated>) {
        let inner = &*self.inner;
        let decide = |over: Over| match self.without_arguments(
            ctx.user(),
            ctx.tool_name(),
            over,
            transport_of(ctx),
        ) {
            Ok(Some(decided)) => decided,
            Ok(None) => Evaluated {
                decision: Verdict::Allow,
                determining: Vec::new(),
                errored: Vec::new(),
                failure: None,
            },
            Err(why) => Evaluated::failed(why),
        };
        (
            decide(Over::Enforced),
            inner.has_shadow.then(|| decide(Over::All)),
        )
    }

    /// Evaluates the call fully, enforced and (with shadow policies) all policies.
    fn evaluate(&self, ctx: &ToolInvokeContext) -> (Evaluated, Option<Evaluated>) {
        let inner = &*self.inner;
        if self.is_completion(ctx) {
            return self.evaluate_completion(ctx);
        }
        let run = || -> Result<(Response, Option<Response>), String> {
            let tool = inner
                .model
                .tools
                .get(ctx.tool_name())
                .ok_or_else(|| not_covered(ctx.tool_name()))?;
            let arguments = tool.arguments.convert(ctx.input())?;
            let principal = Model::principal(ctx.user())?;
            let uid = principal.uid();
            let entities = inner.model.entities(principal, tool)?;
            let context = Model::context(arguments, transport_of(ctx))?;
            let request = inner.model.request(uid, tool, context)?;
            let name = ctx.tool_name();
            Ok(inner.on_enough_stack(|| {
                let enforced = inner.authorizer.is_authorized(
                    &request,
                    inner.policies(name, Over::Enforced),
                    &entities,
                );
                let all = inner.has_shadow.then(|| {
                    let all = inner.policies(name, Over::All);
                    inner.authorizer.is_authorized(&request, all, &entities)
                });
                (enforced, all)
            }))
        };
        match run() {
            Ok((enforced, all)) => (
                self.summarize(&enforced, &inner.enforced),
                all.map(|all| self.summarize(&all, &inner.all)),
            ),
            Err(why) => (
                Evaluated::failed(why.clone()),
                inner.has_shadow.then(|| Evaluated::failed(why)),
            ),
        }
    }

    /// A response as a decision: an errored `forbid` denies (fail closed).
    fn summarize(&self, response: &Response, set: &PolicySet) -> Evaluated {
        let ids = |ids: &mut dyn Iterator<Item = &PolicyId>| -> Vec<String> {
            let mut ids: Vec<String> = ids.map(ToString::to_string).collect();
            ids.sort();
            ids
        };
        let diagnostics = response.diagnostics();
        let errored = ids(&mut diagnostics.errors().map(|e| match e {
            cedar_policy::AuthorizationError::PolicyEvaluationError(e) => e.policy_id(),
        }));
        for error in diagnostics.errors() {
            tracing::warn!(hook = %self.inner.name, %error, "a policy failed to evaluate");
        }
        let failed = failed_forbids(&errored, set);
        let decision = match response.decision() {
            // Allowed but for a `forbid` that could not say: denied by it (fail closed).
            Decision::Allow if !failed.is_empty() => {
                return Evaluated::forbid_failed(failed, errored);
            }
            Decision::Allow => Verdict::Allow,
            Decision::Deny => Verdict::Deny,
        };
        Evaluated {
            decision,
            determining: ids(&mut diagnostics.reason()),
            errored,
            failure: None,
        }
    }

    /// Records the decision (scratchpad, span, metrics) and applies the enforced one.
    fn apply(
        &self,
        ctx: &mut ToolInvokeContext,
        stage: Stage,
        enforced: Evaluated,
        all: Option<Evaluated>,
    ) -> HookResult {
        let inner = &*self.inner;
        let shadow = all.map(|all| ShadowDecision {
            disagrees: all.decision != enforced.decision,
            decision: all.decision,
            determining: all
                .determining
                .into_iter()
                .filter(|id| inner.shadow.contains(id))
                .collect(),
        });
        let record = PolicyDecision {
            hook: inner.name.clone(),
            stage,
            decision: enforced.decision,
            determining: enforced.determining,
            errored: enforced.errored,
            shadow,
        };
        observe(&record);
        let refusal =
            (record.decision == Verdict::Deny).then(|| self.reason(ctx, &record, enforced.failure));
        record.record(ctx);
        match refusal {
            None => Ok(()),
            Some(reason) => ctx.abort(reason, "forbidden", 403),
        }
    }

    /// What a refused caller is told: a `forbid`'s `@reason` if one refused it; never a
    /// policy id.
    fn reason(
        &self,
        ctx: &ToolInvokeContext,
        record: &PolicyDecision,
        failure: Option<String>,
    ) -> String {
        let user = ctx.user();
        let tool = ctx.tool_name();
        let why = if let Some(failure) = failure {
            tracing::warn!(hook = %self.inner.name, user = %user.id, %tool, %failure, "the policies could not be evaluated; denying (fail closed)");
            format!("access could not be checked ({failure}), so it is denied")
        } else if let Some(reason) = record
            .determining
            .iter()
            .find_map(|id| self.inner.reasons.get(id))
        {
            reason.clone()
        } else if record.determining.is_empty() {
            "no policy permits it; ask an administrator for access".to_owned()
        } else if record.stage == Stage::WillNormalizeInput {
            "a policy forbids it with these arguments".to_owned()
        } else {
            "a policy forbids it".to_owned()
        };
        let user = user.named();
        if ctx.resumed().is_some() {
            format!(
                "user {user} may no longer call `{tool}`: access changed while the call waited for approval, so it did not run ({why})"
            )
        } else {
            format!("user {user} may not call `{tool}`: {why}")
        }
    }
}

/// The policies of `errored` that are `forbid`s of `set`.
fn failed_forbids(errored: &[String], set: &PolicySet) -> Vec<String> {
    errored
        .iter()
        .filter(|id| {
            set.policy(&PolicyId::new((*id).clone()))
                .is_some_and(|p| p.effect() == Effect::Forbid)
        })
        .cloned()
        .collect()
}

/// The call's `context.transport`, when the host bound [`CallTransport`].
fn transport_of(ctx: &ToolInvokeContext) -> Option<RestrictedExpression> {
    ctx.try_get::<CallTransport>()
        .map(|t| RestrictedExpression::new_string(t.as_str().to_owned()))
}

fn not_covered(tool: &str) -> String {
    format!("`{tool}` was registered after the policies were loaded, and no policy covers it")
}

/// The decision as a span and as metrics.
fn observe(record: &PolicyDecision) {
    let shadow = record.shadow.as_ref();
    let span = tracing::trace_span!(
        target: "toolgate::otel",
        "policy_decision",
        toolgate.policy.hook = %record.hook,
        toolgate.policy.decision = record.decision.as_str(),
        toolgate.policy.determining = %record.determining.join(","),
        toolgate.policy.shadow_decision = shadow.map_or("", |s| s.decision.as_str()),
        toolgate.policy.shadow_determining = %shadow.map_or_else(String::new, |s| s.determining.join(",")),
    );
    drop(span);
    for id in &record.determining {
        metrics::counter!(DECISIONS_METRIC, "policy" => id.clone(), "mode" => "enforce", "decision" => record.decision.as_str())
            .increment(1);
    }
    if let Some(shadow) = shadow {
        for id in &shadow.determining {
            metrics::counter!(DECISIONS_METRIC, "policy" => id.clone(), "mode" => "shadow", "decision" => shadow.decision.as_str())
                .increment(1);
        }
        if shadow.disagrees {
            metrics::counter!(DISAGREEMENTS_METRIC, "hook" => record.hook.clone(), "decision" => record.decision.as_str(), "shadow_decision" => shadow.decision.as_str())
                .increment(1);
        }
    }
}

#[hook]
impl Hook for CedarPolicies {
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// After the hooks that normalize input at the default priority (defaults filled in).
    fn priority(&self) -> i32 {
        -100
    }

    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.resumed().is_some() {
            // The input is the one the call waited with, validated: decide fully now.
            let (enforced, all) = self.evaluate(ctx);
            return self.apply(ctx, Stage::WillAuthorize, enforced, all);
        }
        let inner = &*self.inner;
        match self.without_arguments(
            ctx.user(),
            ctx.tool_name(),
            Over::Enforced,
            transport_of(ctx),
        ) {
            Err(why) => self.apply(ctx, Stage::WillAuthorize, Evaluated::failed(why), None),
            // Whatever the arguments, the call is denied: refuse it before capacity.
            Ok(Some(enforced)) if enforced.decision == Verdict::Deny => {
                let all = if inner.has_shadow {
                    self.without_arguments(
                        ctx.user(),
                        ctx.tool_name(),
                        Over::All,
                        transport_of(ctx),
                    )
                    .ok()
                    .flatten()
                } else {
                    None
                };
                self.apply(ctx, Stage::WillAuthorize, enforced, all)
            }
            // Allowed whatever the arguments, or depending on them: decided, and
            // recorded, once they are validated.
            Ok(_) => Ok(()),
        }
    }

    fn will_normalize_input(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let (enforced, all) = self.evaluate(ctx);
        self.apply(ctx, Stage::WillNormalizeInput, enforced, all)
    }
}
