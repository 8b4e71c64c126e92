//! Budgets that read a call's cost from its output (`reported: /usage/units`) at a place
//! the tool's output can never have: what `toolgate check` warns of, and the gateway logs
//! when it starts or reloads. Such a budget charges every call its estimate, silently.
//!
//! The output a budget reads is the output as the pipeline sees it: for a tool imported
//! from an MCP upstream, the upstream's whole result, `{"structuredContent": ...,
//! "content": [...]}`, so a pointer into the upstream's own output starts with
//! `/structuredContent`. The tool's output schema (an imported tool's describes that
//! result) rules out the rest: a name not among `properties` when `additionalProperties`
//! is false, a step into a value that is neither an object nor a list.

use std::fmt;

use serde_json::Value;
use toolgate_core::error::shown_text;
use toolgate_core::registry::ToolRegistry;
use toolgate_core::tool::{ToolDefinition, ToolSource};

use crate::config::{BudgetPolicy, CostSpec};

/// The keys of an imported tool's output: the upstream's result.
const RESULT_KEYS: [&str; 3] = ["structuredContent", "content", "_meta"];

/// A budget's `reported` pointer that no output of its tool can hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnreadableCost {
    /// The budget's name.
    budget: String,
    /// Where the cost is written: `policies.budgets[0].tools.add`.
    field: String,
    /// The tool charged.
    tool: String,
    /// The pointer written.
    pointer: String,
    /// What every call is charged instead.
    estimate: u64,
    /// Why the output cannot hold it.
    why: String,
    /// A pointer that would read it, when one is known.
    instead: Option<String>,
}

impl fmt::Display for UnreadableCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            budget,
            field,
            tool,
            pointer,
            estimate,
            why,
            instead,
        } = self;
        write!(
            f,
            "budget `{budget}` reads what a call of `{tool}` costs at `{pointer}` (`{field}`), but the tool's output never has a value there: {why}; every call is charged the estimate, {estimate}, and nothing more. "
        )?;
        match instead {
            Some(instead) => write!(f, "Write `reported: {instead}` in `{field}`"),
            None => write!(
                f,
                "Point `reported` in `{field}` at the number in the tool's output"
            ),
        }
    }
}

/// Every budget's `reported` cost that cannot be read from the output of a tool in
/// `registry` (a budget's `cost` counts for each tool it does not list).
pub(crate) fn unreadable_costs(
    budgets: &[BudgetPolicy],
    registry: &ToolRegistry,
) -> Vec<UnreadableCost> {
    let mut found = Vec::new();
    for (index, budget) in budgets.iter().enumerate() {
        for definition in registry.definitions() {
            let (field, spec) = match budget.tools.get(&definition.name) {
                Some(spec) => (
                    format!("policies.budgets[{index}].tools.{}", definition.name),
                    spec,
                ),
                None => (format!("policies.budgets[{index}].cost"), &budget.cost),
            };
            let CostSpec::Reported { reported, estimate } = spec else {
                continue;
            };
            if let Some((why, instead)) = unreadable(definition, reported) {
                found.push(UnreadableCost {
                    budget: budget.name.clone(),
                    field,
                    tool: definition.name.clone(),
                    pointer: reported.clone(),
                    estimate: *estimate,
                    why,
                    instead,
                });
            }
        }
    }
    found
}

/// Why no output of `definition`'s tool has a value at `pointer`, and the pointer that
/// would read it if one is known; `None` when the output may have one.
fn unreadable(definition: &ToolDefinition, pointer: &str) -> Option<(String, Option<String>)> {
    let schema = definition.output_schema.as_ref();
    if matches!(definition.source, ToolSource::Mcp { .. }) {
        let first = tokens(pointer).next().unwrap_or_default();
        if !RESULT_KEYS.contains(&first.as_str()) {
            let wrapped = format!("/structuredContent{pointer}");
            let instead = match schema {
                Some(schema) if never(schema, &wrapped).is_some() => None,
                _ => Some(wrapped),
            };
            return Some((
                "the output of a tool from an MCP upstream is the upstream's whole result, \
                 `{\"structuredContent\": {...}, \"content\": [...]}`, and what the upstream \
                 returns is under `/structuredContent`"
                    .to_owned(),
                instead,
            ));
        }
    }
    never(schema?, pointer).map(|why| (why, None))
}

/// The reference tokens of a JSON Pointer, unescaped.
fn tokens(pointer: &str) -> impl Iterator<Item = String> + '_ {
    (pointer.split('/').skip(1)).map(|token| token.replace("~1", "/").replace("~0", "~"))
}

/// Why a value valid against `schema` has nothing at `pointer`; `None` when it may. Only
/// what the schema says plainly counts: a step through `$ref`, `anyOf` and the like may
/// lead anywhere.
fn never(schema: &Value, pointer: &str) -> Option<String> {
    let mut node = schema;
    let mut at = String::new();
    for token in tokens(pointer) {
        let map = node.as_object()?;
        if ["$ref", "anyOf", "oneOf", "allOf", "not", "if"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            return None;
        }
        let place = if at.is_empty() {
            "the output".to_owned()
        } else {
            format!("`{at}`")
        };
        let types: Vec<&str> = match map.get("type") {
            Some(Value::String(one)) => vec![one.as_str()],
            Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
            _ => vec!["object", "array"],
        };
        let object = types.contains(&"object");
        let list = types.contains(&"array");
        if !object && !list {
            return Some(format!(
                "the tool's output schema says {place} is {}, which holds no `{token}`",
                shown_text(&types.join(" or "), 64)
            ));
        }
        let index = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        let property = map.get("properties").and_then(|p| p.get(&token));
        node = match (property, object, list && index) {
            (Some(property), true, _) => property,
            (_, _, true) => map.get("items")?,
            (None, true, _) => match map.get("additionalProperties") {
                Some(Value::Bool(false)) if !map.contains_key("patternProperties") => {
                    return Some(format!(
                        "the tool's output schema allows no `{token}` in {place}{}",
                        known_names(map)
                    ));
                }
                Some(extra @ Value::Object(_)) => extra,
                _ => return None,
            },
            _ => {
                return Some(format!(
                    "the tool's output schema says {place} is a list, whose places are numbers, not `{token}`"
                ));
            }
        };
        at.push('/');
        at.push_str(&token.replace('~', "~0").replace('/', "~1"));
    }
    None
}

/// How many of a schema's property names a warning lists.
const NAMES_SHOWN: usize = 8;

/// ` (it has `a`, `b`)`: the names a schema's `properties` lists, if any — an upstream's
/// words, so escaped and cut short, and only the first [`NAMES_SHOWN`] of them.
fn known_names(map: &serde_json::Map<String, Value>) -> String {
    match map.get("properties").and_then(Value::as_object) {
        Some(properties) if !properties.is_empty() => {
            let mut names: Vec<String> = (properties.keys().take(NAMES_SHOWN))
                .map(|k| format!("`{}`", shown_text(k, 64)))
                .collect();
            if properties.len() > NAMES_SHOWN {
                names.push(format!("{} more", properties.len() - NAMES_SHOWN));
            }
            format!(" (it has {})", names.join(", "))
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::never;

    #[test]
    fn a_schema_rules_out_only_what_it_says_plainly() {
        let closed = json!({"type": "object", "additionalProperties": false,
            "properties": {"sum": {"type": "integer"}, "rows": {"type": "array",
            "items": {"type": "object", "properties": {"n": {"type": "number"}}}}}});
        assert_eq!(never(&closed, "/sum"), None);
        assert_eq!(never(&closed, "/rows/0/n"), None);
        assert!(
            never(&closed, "/total")
                .unwrap()
                .contains("no `total` in the output")
        );
        assert!(
            never(&closed, "/sum/units")
                .unwrap()
                .contains("`/sum` is integer")
        );
        assert!(never(&closed, "/rows/first").unwrap().contains("a list"));
        assert_eq!(never(&json!({"type": "object"}), "/total"), None);
        assert_eq!(
            never(&json!({"anyOf": [{"type": "string"}]}), "/total"),
            None
        );
        assert!(never(&json!({"type": "string"}), "/total").is_some());
    }
}
