//! `policies.budgets:` — a cost per call, charged against an allowance per window; made
//! into a [`BudgetBuilder`], to which the gateway adds the budget backend of its shared
//! state, and described for `toolgate check`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use toolgate_core::ToolInvokeContext;
use toolgate_hooks::budget::{Budget, BudgetBuilder, Cost, Window};
use toolgate_hooks::partition::Partition;

use super::{OnBackendErrorName, checked_duration, redis_deadline, whole_number};
use crate::config::ConfigError;

/// The largest limit or cost: numbers stay exact in Redis's Lua (below 2^53).
pub const MAX_UNITS: u64 = toolgate_hooks::budget::MAX_UNITS;

/// One budget.
///
/// ```yaml
/// budgets:
///   - name: tenant-daily
///     limit: 1000
///     window: 1d
///     partition: tenant
///     cost: 1
///     tools:
///       search: 3
///       export: { argument: /rows, per_unit: 1, base: 1 }
///       complete: { reported: /usage/units, estimate: 10 }
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetPolicy {
    /// The budget's name: it namespaces its spending, and names it in messages and in the
    /// `RateLimit` header fields.
    pub name: String,
    /// The units allowed per window: from 1 to [`MAX_UNITS`].
    #[serde(deserialize_with = "limit")]
    pub limit: u64,
    /// How long an allowance lasts, aligned on UTC (`1h`, `1d`; default `1d`, from 00:00
    /// UTC): whole seconds, at least one.
    #[serde(default = "a_day", deserialize_with = "window")]
    pub window: Duration,
    /// How calls split into budgets (default `user`).
    #[serde(default)]
    pub partition: BudgetPartition,
    /// What a call of a tool not in `tools` costs (default 1; 0 leaves those tools free).
    #[serde(default = "one_unit")]
    pub cost: CostSpec,
    /// Costs per tool.
    #[serde(default)]
    pub tools: BTreeMap<String, CostSpec>,
    /// What happens when the state backend fails (default `fail_closed`; `local_fallback`
    /// is taken as `fail_closed`).
    #[serde(default)]
    pub on_backend_error: OnBackendErrorName,
    /// The deadline of this budget's Redis calls, in place of `state.deadline`.
    #[serde(default, with = "redis_deadline")]
    pub redis_deadline: Option<Duration>,
}

fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_number(
        d,
        "u64",
        1..=MAX_UNITS,
        &format!("a budget's limit is from 1 to {MAX_UNITS} units"),
    )
}

fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked_duration(d, |window| {
        if window.subsec_nanos() != 0 || window.as_secs() == 0 {
            Err("a budget window is whole seconds, at least one: write e.g. `1h` or `1d`")
        } else {
            Ok(())
        }
    })
}

fn a_day() -> Duration {
    Duration::from_secs(86_400)
}

fn one_unit() -> CostSpec {
    CostSpec::Units(1)
}

/// How calls split into budgets: `user`, `tenant`, `global`, `tool`, `user_tool`, or
/// `attribute:<name>` (a user attribute, such as one mapped from a token claim). A caller
/// without a tenant or without the attribute has a budget of their own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BudgetPartition {
    /// One budget per user (the default).
    #[default]
    User,
    /// One per tenant.
    Tenant,
    /// One for everyone.
    Global,
    /// One per tool.
    Tool,
    /// One per user and tool.
    UserTool,
    /// One per value of a user attribute.
    Attribute(String),
}

impl<'de> Deserialize<'de> for BudgetPartition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(match text.as_str() {
            "user" => BudgetPartition::User,
            "tenant" => BudgetPartition::Tenant,
            "global" => BudgetPartition::Global,
            "tool" => BudgetPartition::Tool,
            "user_tool" => BudgetPartition::UserTool,
            other => match other.strip_prefix("attribute:").map(str::trim) {
                Some(name) if !name.is_empty() => BudgetPartition::Attribute(name.to_owned()),
                _ => {
                    return Err(D::Error::custom(format!(
                        "unknown partition `{other}`: use user, tenant, global, tool, user_tool or attribute:<name>"
                    )));
                }
            },
        })
    }
}

/// What a call costs: a number of units, `{argument: /rows, per_unit: 1, base: 0}` (priced
/// by a number in the arguments), or `{reported: /usage/units, estimate: 10}` (the tool's
/// own figure, after the estimate was charged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostSpec {
    /// A fixed number of units.
    Units(u64),
    /// `base + per_unit × the number at the JSON Pointer `argument``.
    Argument {
        /// JSON Pointer into the arguments.
        argument: String,
        /// Units per unit of the argument.
        per_unit: u64,
        /// Units on top.
        base: u64,
    },
    /// The number the tool reports at the JSON Pointer `reported` of its output.
    Reported {
        /// JSON Pointer into the output.
        reported: String,
        /// Charged before the call.
        estimate: u64,
    },
}

const COST_FORMS: &str = "write a number of units, `{argument: /rows, per_unit: 1, base: 0}` or `{reported: /usage/units, estimate: 10}`";

impl<'de> Deserialize<'de> for CostSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A number past 64 bits is not a JSON value's: said as the bound it is past.
        let value = Value::deserialize(d).map_err(|error| {
            if error.to_string().contains("number out of range") {
                D::Error::custom(format!("a cost is at most {MAX_UNITS} units"))
            } else {
                error
            }
        })?;
        CostSpec::from_value(&value).map_err(D::Error::custom)
    }
}

impl CostSpec {
    fn from_value(value: &Value) -> Result<CostSpec, String> {
        let units = |v: Option<&Value>, field: &str, default: Option<u64>| match v {
            None => default.ok_or(format!("`{field}` is missing: {COST_FORMS}")),
            Some(v) => match v.as_u64() {
                Some(n) if n > MAX_UNITS => Err(format!("a cost is at most {MAX_UNITS} units")),
                Some(n) => Ok(n),
                None => Err(format!("`{field}` must be a whole number of zero or more")),
            },
        };
        let pointer = |v: &Value, field: &str| match v.as_str() {
            Some(p) if p.starts_with('/') => Ok(p.to_owned()),
            _ => Err(format!(
                "`{field}` is a JSON Pointer into the {}: write e.g. `/rows`",
                if field == "argument" {
                    "arguments"
                } else {
                    "output"
                }
            )),
        };
        let Some(map) = value.as_object() else {
            return match value.as_u64() {
                Some(n) if n > MAX_UNITS => Err(format!("a cost is at most {MAX_UNITS} units")),
                Some(n) => Ok(CostSpec::Units(n)),
                None => Err(format!(
                    "a cost must be a whole number of zero or more, or a map: {COST_FORMS}"
                )),
            };
        };
        let known = |allowed: &[&str]| match map.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(format!("unknown field `{k}`: {COST_FORMS}")),
            None => Ok(()),
        };
        if let Some(argument) = map.get("argument") {
            known(&["argument", "per_unit", "base"])?;
            return Ok(CostSpec::Argument {
                argument: pointer(argument, "argument")?,
                per_unit: units(map.get("per_unit"), "per_unit", Some(1))?,
                base: units(map.get("base"), "base", Some(0))?,
            });
        }
        if let Some(reported) = map.get("reported") {
            known(&["reported", "estimate"])?;
            return Ok(CostSpec::Reported {
                reported: pointer(reported, "reported")?,
                estimate: units(map.get("estimate"), "estimate", None)?,
            });
        }
        Err(format!(
            "a cost map names `argument` or `reported`: {COST_FORMS}"
        ))
    }
}

impl From<&CostSpec> for Cost {
    fn from(spec: &CostSpec) -> Self {
        match spec {
            CostSpec::Units(units) => Cost::Fixed(*units),
            CostSpec::Argument {
                argument,
                per_unit,
                base,
            } => Cost::Argument {
                pointer: argument.clone(),
                per_unit: *per_unit,
                base: *base,
            },
            CostSpec::Reported { reported, estimate } => Cost::Reported {
                pointer: reported.clone(),
                estimate: *estimate,
            },
        }
    }
}

impl From<&BudgetPartition> for Partition {
    fn from(partition: &BudgetPartition) -> Self {
        // A caller without the tenant or attribute gets a budget of their own: the key
        // says which kind it is, so a user id never meets a tenant of the same name.
        match partition {
            BudgetPartition::User => Partition::User,
            BudgetPartition::Global => Partition::Global,
            BudgetPartition::Tool => Partition::Tool,
            BudgetPartition::UserTool => Partition::UserTool,
            BudgetPartition::Tenant => Partition::custom(|ctx| match &ctx.user().tenant {
                Some(tenant) => format!("tenant\u{1f}{tenant}"),
                // Only a caller without a tenant comes here: its key is its id.
                None => format!("user\u{1f}{}", ctx.user().caller_key()),
            }),
            BudgetPartition::Attribute(name) => {
                let name = name.clone();
                Partition::custom(move |ctx| {
                    let user = ctx.user();
                    let value = match user.attributes.get(&name) {
                        Some(serde_json::Value::String(value)) => value.clone(),
                        Some(value) if !value.is_null() => value.to_string(),
                        _ => return format!("user\u{1f}{}", user.caller_key()),
                    };
                    // A value is the tenant's own: team `web` of acme is not globex's. A
                    // tenant's key starts with a digit after `attr`'s separator, so a value
                    // without a tenant that holds the separator (`4:acme<US>web`) is set
                    // apart by a second one: it never reads as acme's `web`, and every
                    // other value keeps the key it had.
                    match &user.tenant {
                        None if value.contains('\u{1f}') => format!("attr\u{1f}\u{1f}{value}"),
                        None => format!("attr\u{1f}{value}"),
                        Some(tenant) => format!("attr\u{1f}{}:{tenant}\u{1f}{value}", tenant.len()),
                    }
                })
            }
        }
    }
}

impl BudgetPartition {
    /// How a refusal names the caller's budget: `this tenant`, `this `team``; a caller
    /// without the tenant or attribute, who has a budget of their own (above), is told
    /// so.
    fn label(&self) -> impl Fn(&ToolInvokeContext) -> String + Send + Sync + 'static {
        let partition = self.clone();
        move |ctx| match &partition {
            BudgetPartition::User => "this user".to_owned(),
            BudgetPartition::Tenant => match ctx.user().tenant {
                Some(_) => "this tenant".to_owned(),
                None => "this user, who has no tenant".to_owned(),
            },
            BudgetPartition::Global => "all callers".to_owned(),
            BudgetPartition::Tool => "this tool".to_owned(),
            BudgetPartition::UserTool => "this user and tool".to_owned(),
            BudgetPartition::Attribute(name) => match ctx.user().attributes.get(name) {
                Some(value) if !value.is_null() => format!("this `{name}`"),
                _ => format!("this user, who has no `{name}`"),
            },
        }
    }
}

impl TryFrom<&BudgetPolicy> for BudgetBuilder {
    type Error = ConfigError;

    /// The hook's builder, without its backend. A cost for the outcome tool is refused:
    /// every budget leaves it free (it reads the state of a waiting call and spends
    /// nothing), and a cost written for it would be silently overridden.
    fn try_from(policy: &BudgetPolicy) -> Result<Self, ConfigError> {
        let outcome_tool = crate::outcomes::OUTCOME_TOOL;
        if policy
            .tools
            .get(outcome_tool)
            .is_some_and(|cost| Cost::from(cost) != Cost::Fixed(0))
        {
            return Err(ConfigError::invalid(
                format!("tools.{outcome_tool}"),
                format!(
                    "`{outcome_tool}` costs nothing in every budget: it reads the state of a call that waits for approval and spends nothing, so that a caller polling their call is never refused it; remove it from `tools`"
                ),
            ));
        }
        let window = Window::new(policy.window)
            .map_err(|e| ConfigError::invalid("window", e.to_string()))?;
        let budget = Budget::builder(policy.limit, window)
            .name(policy.name.clone())
            .partition((&policy.partition).into())
            .partition_label_with(policy.partition.label())
            .default_cost((&policy.cost).into())
            .on_backend_error(policy.on_backend_error.into());
        Ok((policy.tools.iter()).fold(budget, |builder, (tool, cost)| {
            builder.tool_cost(tool.clone(), cost.into())
        }))
    }
}

/// One line per budget that charges calls of `tool`: `budget tenant-daily: costs 3 of
/// 1000 units every day, per tenant`. None charges the outcome tool, which every budget
/// leaves free.
pub(crate) fn describe_for_tool(budgets: &[BudgetPolicy], tool: &str) -> Vec<String> {
    budgets
        .iter()
        .filter_map(|b| {
            let spec = b.tools.get(tool).unwrap_or(&b.cost);
            let cost = Cost::from(spec);
            if cost == Cost::Fixed(0) || tool == crate::outcomes::OUTCOME_TOOL {
                return None;
            }
            let window = Window::new(b.window).map_or_else(|e| e.to_string(), |w| w.to_string());
            let partition = match &b.partition {
                BudgetPartition::User => "user".to_owned(),
                BudgetPartition::Tenant => "tenant".to_owned(),
                BudgetPartition::Global => "everyone".to_owned(),
                BudgetPartition::Tool => "tool".to_owned(),
                BudgetPartition::UserTool => "user and tool".to_owned(),
                BudgetPartition::Attribute(name) => format!("attribute `{name}`"),
            };
            Some(format!(
                "budget {}: costs {} of {} units every {window}, per {partition}",
                b.name,
                cost.describe(),
                b.limit
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use serde_json::json;
    use toolgate_core::tool::tool_fn_with_context;
    use toolgate_core::{InvokeOptions, Pipeline, ToolError, ToolInvokeContext, User};
    use toolgate_hooks::budget::BudgetBuilder;
    use toolgate_hooks::partition::Partition;

    use super::BudgetPartition;
    use crate::config::parse;

    /// The key `partition` gives each of `users`' calls.
    async fn keys_of(partition: &BudgetPartition, users: Vec<User>) -> Vec<String> {
        let partition = Arc::new(Partition::from(partition));
        let tool = tool_fn_with_context(
            "key",
            "Answers its call's budget key.",
            move |_: (), ctx: &ToolInvokeContext| -> BoxFuture<'_, Result<String, ToolError>> {
                let key = partition.key("daily", ctx);
                Box::pin(async move { Ok(key) })
            },
        );
        let pipeline = Pipeline::builder().tool(tool).build().unwrap();
        let mut keys = Vec::new();
        for user in users {
            let options = InvokeOptions::new().user(user);
            let key = pipeline.invoke("key", json!(null), options).await.unwrap();
            keys.push(key.as_str().unwrap().to_owned());
        }
        keys
    }

    fn with_team(user: User, team: &str) -> User {
        let mut user = user;
        user.attributes.insert("team".into(), json!(team));
        user
    }

    #[tokio::test]
    async fn an_attribute_budget_is_the_tenants_own_and_one_without_it_the_callers_own() {
        let team = BudgetPartition::Attribute("team".into());
        let keys = keys_of(
            &team,
            vec![
                with_team(User::new("ann").with_tenant("acme"), "web"),
                with_team(User::new("bob").with_tenant("acme"), "web"),
                with_team(User::new("ann").with_tenant("globex"), "web"),
                User::new("ann").with_tenant("acme"),
                User::new("ann").with_tenant("globex"),
                with_team(User::new("carol"), "web"),
                User::new("carol"),
            ],
        )
        .await;
        // One team of acme shares one budget; globex's team of that name has its own.
        assert_eq!(keys[0], keys[1]);
        assert_ne!(keys[0], keys[2]);
        // Without the attribute, ann of acme and ann of globex each spend their own.
        assert_ne!(keys[3], keys[4]);
        // Callers without a tenant keep the keys they had.
        assert_eq!(keys[5], "daily\u{1f}c\u{1f}attr\u{1f}web");
        assert_eq!(keys[6], "daily\u{1f}c\u{1f}user\u{1f}carol");
        // A value without a tenant never reads as a tenant's value.
        let forged = keys_of(
            &team,
            vec![
                with_team(User::new("ann").with_tenant("acme"), "web"),
                with_team(User::new("mallory"), "4:acme\u{1f}web"),
            ],
        )
        .await;
        assert_ne!(forged[0], forged[1]);
        let tenant = keys_of(
            &BudgetPartition::Tenant,
            vec![User::new("carol"), User::new("ann").with_tenant("acme")],
        )
        .await;
        assert_eq!(
            tenant,
            [
                "daily\u{1f}c\u{1f}user\u{1f}carol",
                "daily\u{1f}c\u{1f}tenant\u{1f}acme"
            ]
        );
    }

    #[test]
    fn limits_windows_and_costs_out_of_range_are_refused_where_they_are_written() {
        let budget = |entry: &str| format!("policies:\n  budgets:\n    - {entry}\n");
        for (text, field, says) in [
            (
                budget("{ name: a, limit: 0 }"),
                "policies.budgets[0].limit",
                "a budget's limit is from 1 to 1000000000000000 units",
            ),
            (
                budget("{ name: a, limit: 1000000000000001 }"),
                "policies.budgets[0].limit",
                "a budget's limit is from 1 to 1000000000000000 units",
            ),
            (
                budget("{ name: a, limit: 5, window: 0s }"),
                "policies.budgets[0].window",
                "a budget window is whole seconds, at least one: write e.g. `1h` or `1d`",
            ),
            (
                budget("{ name: a, limit: 5, cost: 1000000000000001 }"),
                "policies.budgets[0].cost",
                "a cost is at most 1000000000000000 units",
            ),
            (
                budget("{ name: a, limit: 5, cost: 99999999999999999999 }"),
                "policies.budgets[0].cost",
                "a cost is at most 1000000000000000 units",
            ),
            (
                budget(
                    "{ name: a, limit: 5, tools: { export: { argument: /rows, per_unit: 1000000000000001 } } }",
                ),
                "policies.budgets[0].tools.export",
                "a cost is at most 1000000000000000 units",
            ),
        ] {
            let error = parse(&text).expect_err(&text);
            assert_eq!(error.field(), field, "{text}");
            assert!(error.to_string().ends_with(says), "{error}");
            assert!(error.to_string().starts_with("<config>:3:"), "{error}");
        }
        let limit = parse(&budget("{ name: a, limit: 0 }")).unwrap_err();
        assert!(limit.to_string().starts_with("<config>:3:25:"), "{limit}");
    }

    #[test]
    fn a_cost_for_the_outcome_tool_is_refused_not_overridden() {
        let text = "policies:\n  budgets:\n    - { name: daily, limit: 5, tools: { toolgate.outcome: 2 } }\n";
        let config = parse(text).expect("parses");
        let policy = &config.policies.budgets[0];
        let error = BudgetBuilder::try_from(policy)
            .map(drop)
            .expect_err("a cost for the outcome tool")
            .within("policies.budgets[0]");
        assert_eq!(error.field(), "policies.budgets[0].tools.toolgate.outcome");
        assert!(
            error.to_string().contains("costs nothing in every budget"),
            "{error}"
        );
        let free = "policies:\n  budgets:\n    - { name: daily, limit: 5, tools: { toolgate.outcome: 0 } }\n";
        let config = parse(free).expect("parses");
        assert!(BudgetBuilder::try_from(&config.policies.budgets[0]).is_ok());
    }
}
