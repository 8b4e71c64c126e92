//! `toolgate policy test FILE`: a table of calls — who, which tool, which arguments — and
//! the decision expected for each, run through the gateway's own pipeline so that policy
//! authors test their rules like code (docs/policies.md, "Testing policies").
//!
//! Each case is a real invocation of the configured pipeline: the `authorization` rules,
//! the Cedar policies of `policies.cedar` (with the call's transport), OAuth tool scopes,
//! your own hooks ([`Extensions`]), the tool's own check of its arguments against its
//! schema — up to the cache stage, where the call is answered without running the tool.
//! What does not decide *whether* a call is allowed is left out of the pipeline the table
//! runs against: rate limits, budgets, concurrency caps, the result cache, audit, statistics,
//! webhooks and shared state (in memory, so nothing is charged or written anywhere).

mod table;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use toolgate_core::hook::HookRegistration;
use toolgate_core::{Hook, HookResult, InvokeOptions, ToolError, ToolInvokeContext, hook};
use toolgate_hooks::policy::{CallTransport, PolicyDecision, Verdict};

pub use table::{PolicyCase, PolicyTable, TableError};

use crate::config::{ConfigError, StateConfig, load_file};
use crate::extensions::Extensions;
use crate::gateway::{BuildOn, Gateway, GatewayError};
use crate::identity::KeyCache;
use crate::state::SharedState;

/// A table could not be run: nothing was decided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyTestError {
    /// The table could not be read.
    #[error(transparent)]
    Table(#[from] TableError),
    /// Neither `--config` nor the table names a configuration.
    #[error(
        "{0}: name the gateway configuration the cases run against: `--config FILE`, or `config: FILE` in the table"
    )]
    NoConfig(String),
    /// The configuration could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gateway could not be built from the configuration.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
}

/// How one case went.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's number in the table, from 1.
    pub number: usize,
    /// Its name (or who calls which tool).
    pub name: String,
    /// Whether every expectation held.
    pub passed: bool,
    /// What was decided and why, or what differs from the expectation.
    pub detail: String,
}

/// How a table went: one report per case, in order.
#[derive(Clone, Debug)]
pub struct TableReport {
    /// The table's file.
    pub file: String,
    /// The cases.
    pub cases: Vec<CaseReport>,
}

impl TableReport {
    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed).count()
    }
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            let mark = if case.passed { "PASS" } else { "FAIL" };
            writeln!(
                f,
                "{mark}  {:>3}  {}: {}",
                case.number, case.name, case.detail
            )?;
        }
        let failed = self.failed();
        write!(
            f,
            "{}: {} cases, {} passed, {failed} failed",
            self.file,
            self.cases.len(),
            self.cases.len() - failed
        )
    }
}

/// Runs the table at `table` against the configuration `config` (or the one the table
/// names), with your own hooks `extensions` beside the configured policies.
///
/// # Errors
///
/// [`PolicyTestError`] when the table or the configuration cannot be used; a case whose
/// expectation does not hold is not an error, it is a failed case in the report.
pub async fn run_table(
    table: &Path,
    config: Option<&Path>,
    extensions: &Extensions,
) -> Result<TableReport, PolicyTestError> {
    let parsed = PolicyTable::load(table)?;
    let config: PathBuf = match (config, &parsed.config) {
        (Some(config), _) => config.to_owned(),
        (None, Some(config)) => config.clone(),
        (None, None) => return Err(PolicyTestError::NoConfig(table.display().to_string())),
    };
    let mut file = load_file(&config)?;
    // Only what decides whether a call is allowed: nothing charged, cached, written or
    // sent.
    file.state = StateConfig::default();
    file.policies.rate_limits.clear();
    // A budget decides how much, not whether: spent by one case, it would end the next
    // ones `budget_exhausted`, undecided, whatever the policies say.
    file.policies.budgets.clear();
    file.policies.concurrency.clear();
    file.policies.cache = None;
    if let Some(approval) = &mut file.policies.approval {
        approval.webhooks.clear();
    }
    file.audit = None;
    file.stats = None;
    file.telemetry = None;
    file.console = None;
    let shared = SharedState::new(&file)
        .await
        .map_err(|e| GatewayError::from(e).in_file(&config))?;
    let dry_run = Arc::new(DryRun::default());
    let extensions = extensions
        .clone()
        .hook(HookRegistration::shared(dry_run.clone()));
    let keys = KeyCache::default();
    let on = BuildOn {
        shared: &shared,
        keys: &keys,
        extensions: &extensions,
    };
    let gateway = Gateway::build(file, &on)
        .await
        .map_err(|e| e.in_file(&config))?;
    let mut cases = Vec::with_capacity(parsed.cases.len());
    for (i, case) in parsed.cases.iter().enumerate() {
        cases.push(run_case(&gateway, &dry_run, i + 1, case).await);
    }
    Ok(TableReport {
        file: table.display().to_string(),
        cases,
    })
}

/// What a call came to.
enum Outcome {
    /// Allowed: it would run (or wait for approval, `waits`).
    Allowed { waits: bool },
    /// Refused before it ran: by a policy, or for its arguments.
    Refused(ToolError),
    /// Neither: the pipeline failed before deciding.
    Undecided(ToolError),
}

async fn run_case(
    gateway: &Gateway,
    dry_run: &DryRun,
    number: usize,
    case: &PolicyCase,
) -> CaseReport {
    let name = case
        .name
        .clone()
        .unwrap_or_else(|| format!("{} calls {}", case.principal.id(), case.tool));
    let fail = |detail: String| CaseReport {
        number,
        name: name.clone(),
        passed: false,
        detail,
    };
    let user = match case.principal.user(&gateway.config) {
        Ok(user) => user,
        Err(why) => return fail(why),
    };
    let Some(tool) = gateway.pipeline().registry().get(&case.tool) else {
        let mut known: Vec<String> = gateway
            .pipeline()
            .definitions()
            .map(|d| d.name.clone())
            .collect();
        known.sort();
        return fail(format!(
            "no tool `{}` in the configuration (it has: {})",
            case.tool,
            known.join(", ")
        ));
    };
    let outcome = if crate::pins::is_served(&tool.definition) {
        let request_id = format!("policy-test-{number}");
        let options = InvokeOptions::new()
            .user(user)
            .request_id(request_id.clone())
            .provide::<CallTransport>(case.transport.as_str().to_owned());
        let result = gateway
            .pipeline()
            .invoke(&case.tool, case.arguments.clone(), options)
            .await;
        match result {
            Ok(_) => Outcome::Allowed { waits: false },
            Err(ToolError::Suspended { .. }) => Outcome::Allowed { waits: true },
            Err(
                e @ (ToolError::Aborted { .. }
                | ToolError::InvalidInput(_)
                | ToolError::InputTooLarge { .. }
                | ToolError::InputTooDeep { .. }),
            ) => Outcome::Refused(e),
            Err(e) => Outcome::Undecided(e),
        }
    } else {
        Outcome::Refused(ToolError::abort(
            format!(
                "the definition of `{}` changed at its MCP server since it was pinned, so it is not served until an admin accepts it",
                case.tool
            ),
            "definition_changed",
            409,
        ))
    };
    let cedar = dry_run
        .take(&format!("policy-test-{number}"))
        .and_then(|mut decisions| decisions.pop());
    let (decision, mut detail, refusal) = match &outcome {
        Outcome::Allowed { waits } => (
            Verdict::Allow,
            if *waits {
                "allow (the call waits for approval)".to_owned()
            } else {
                "allow".to_owned()
            },
            None,
        ),
        Outcome::Refused(error) => {
            let what = if error.code() == "invalid_input" {
                "deny (invalid arguments)"
            } else {
                "deny"
            };
            (
                Verdict::Deny,
                what.to_owned(),
                Some(error.bounded_message()),
            )
        }
        Outcome::Undecided(error) => {
            return fail(format!(
                "not decided: the call failed with `{}` before a decision ({})",
                error.code(),
                error.bounded_message()
            ));
        }
    };
    if let Some(cedar) = &cedar {
        detail.push_str(&format!(" — {}", determined(cedar)));
    }
    if let Some(refusal) = &refusal {
        detail.push_str(&format!(" — {refusal}"));
    }
    let mismatches = mismatches(case, decision, refusal.as_deref(), cedar.as_ref());
    if mismatches.is_empty() {
        CaseReport {
            number,
            name,
            passed: true,
            detail,
        }
    } else {
        CaseReport {
            number,
            name,
            passed: false,
            detail: format!("{}; got {detail}", mismatches.join("; ")),
        }
    }
}

/// Which Cedar policies determined the decision, and what the shadow ones would have done.
fn determined(cedar: &PolicyDecision) -> String {
    let mut text = if cedar.determining.is_empty() {
        match cedar.decision {
            Verdict::Allow => "cedar: allowed by no policy".to_owned(),
            Verdict::Deny => "cedar: no policy permits it".to_owned(),
        }
    } else {
        format!("cedar: {}", cedar.determining.join(", "))
    };
    if !cedar.errored.is_empty() {
        text.push_str(&format!(
            " (failed to evaluate: {})",
            cedar.errored.join(", ")
        ));
    }
    // The shadow policies are worth a mention where they would change something.
    if let Some(shadow) = cedar
        .shadow
        .as_ref()
        .filter(|s| s.disagrees || !s.determining.is_empty())
    {
        text.push_str(&format!("; shadow: {}", shadow.decision.as_str()));
        if !shadow.determining.is_empty() {
            text.push_str(&format!(" ({})", shadow.determining.join(", ")));
        }
    }
    text
}

/// What differs from the case's expectations.
fn mismatches(
    case: &PolicyCase,
    decision: Verdict,
    refusal: Option<&str>,
    cedar: Option<&PolicyDecision>,
) -> Vec<String> {
    let mut differ = Vec::new();
    if decision != case.expect {
        differ.push(format!("expected {}", case.expect.as_str()));
    }
    if let (Some(expected), Some(refusal)) = (&case.reason, refusal)
        && !refusal.contains(expected.as_str())
    {
        differ.push(format!("expected a refusal saying \"{expected}\""));
    }
    if let Some(expected) = &case.policies {
        let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
        match cedar {
            None => differ.push(format!(
                "expected the Cedar policies [{}] to decide, but no Cedar policy decided (the call was decided before them, or `policies.cedar` is not configured)",
                join(&expected)
            )),
            Some(cedar) => {
                let got: BTreeSet<&str> = cedar.determining.iter().map(String::as_str).collect();
                if got != expected {
                    differ.push(format!(
                        "expected the determining policies [{}], not [{}]",
                        join(&expected),
                        join(&got)
                    ));
                }
            }
        }
    }
    if let Some(expected) = case.shadow {
        match cedar.and_then(|c| c.shadow.as_ref()) {
            Some(shadow) if shadow.decision == expected => {}
            Some(shadow) => differ.push(format!(
                "expected the shadow decision {}, not {}",
                expected.as_str(),
                shadow.decision.as_str()
            )),
            None => differ.push(format!(
                "expected the shadow decision {}, but no shadow policy was evaluated",
                expected.as_str()
            )),
        }
    }
    differ
}

fn join(ids: &BTreeSet<&str>) -> String {
    ids.iter().copied().collect::<Vec<_>>().join(", ")
}

/// Ends every call at the cache stage with an empty answer, so that no tool runs, and
/// keeps each call's policy decisions for its case.
#[derive(Default)]
struct DryRun {
    decisions: Mutex<HashMap<String, Vec<PolicyDecision>>>,
}

impl DryRun {
    fn take(&self, request_id: &str) -> Option<Vec<PolicyDecision>> {
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(request_id)
    }
}

#[hook]
impl Hook for DryRun {
    fn name(&self) -> &str {
        "policy_test"
    }

    /// After every other hook of a stage.
    fn priority(&self) -> i32 {
        i32::MIN
    }

    fn will_read_cache(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.respond(Value::Null)
    }

    fn will_finalize_invoke(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        let decisions = PolicyDecision::of(ctx).to_vec();
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(ctx.request_id().to_string(), decisions);
        Ok(())
    }
}

/// The lines `toolgate check` prints for `tool`'s Cedar policies: those that could
/// decide its calls (see [`CedarPolicies::applicable`](toolgate_hooks::policy::CedarPolicies::applicable)),
/// or nothing without `policies.cedar`.
pub fn check_lines(gateway: &Gateway, tool: &str) -> String {
    let Some(cedar) = gateway.cedar_policies() else {
        return String::new();
    };
    let Some(definition) = gateway
        .pipeline()
        .registry()
        .get(tool)
        .map(|t| t.definition.clone())
    else {
        return String::new();
    };
    let applicable = cedar.applicable(&definition);
    let mut out = String::from("  cedar policies that could apply:\n");
    if !applicable.iter().any(|p| p.permit && !p.shadow) {
        out.push_str("    (no enforced permit: every call is denied)\n");
    }
    for policy in &applicable {
        let effect = if policy.permit { "permit" } else { "forbid" };
        let mut notes = Vec::new();
        if policy.shadow {
            notes.push("shadow");
        }
        if policy.always {
            notes.push("every call");
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join(", "))
        };
        out.push_str(&format!(
            "    {effect} {}{notes}  [{}]\n",
            policy.id, policy.source
        ));
    }
    out
}
