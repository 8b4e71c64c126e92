//! The schema-guided walk that repairs values.

use serde_json::Value;
use toolgate_core::pipeline::InputLimits;

/// One kind of repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RepairKind {
    /// `"5"` → `5` where the schema wants a number or integer.
    StringToNumber,
    /// `"true"` → `true` where the schema wants a boolean.
    StringToBoolean,
    /// `"{\"a\":1}"` → `{"a":1}` where the schema wants an object.
    JsonStringToObject,
    /// `"[1,2]"` → `[1,2]` where the schema wants an array.
    JsonStringToArray,
    /// `"x"` → `["x"]` where the schema wants an array.
    WrappedInArray,
    /// A missing property got its schema `default` (at `will_normalize_input`).
    DefaultFilled,
}

/// A repair made to the input: where, and what kind. Never the value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Repair {
    /// Where in the input, in the core's path style (`items[0].limit`; empty for the root).
    pub path: String,
    /// What was repaired.
    pub kind: RepairKind,
}

/// The schema to follow and the one type it allows, if it allows exactly one (ignoring
/// `null`, which only makes a field optional).
pub(super) fn resolve(schema: &Value) -> Option<(&Value, &str)> {
    match schema.get("type") {
        Some(Value::String(ty)) => return Some((schema, ty)),
        Some(Value::Array(types)) => {
            let mut real = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null");
            return match (real.next(), real.next()) {
                (Some(ty), None) => Some((schema, ty)),
                _ => None,
            };
        }
        _ => {}
    }
    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(keyword) {
            let mut real = branches
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"));
            return match (real.next(), real.next()) {
                (Some(branch), None) => resolve(branch),
                _ => None,
            };
        }
    }
    None
}

/// `path` with the property `key` added, in the core's path style.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A JSON string the walk would have parsed, but whose value would nest deeper than the
/// input may.
#[derive(Debug)]
pub(crate) struct TooDeep;

/// Parses a string sent where the schema wants an object or array. `Err(Some(TooDeep))`
/// when it nests deeper than parsing allows (128 levels), `Err(None)` when it is not JSON.
fn parse_json(s: &str) -> Result<Value, Option<TooDeep>> {
    serde_json::from_str(s).map_err(|e| {
        // The same test as the core's input parser: serde names no category for it.
        e.to_string()
            .starts_with("recursion limit exceeded")
            .then_some(TooDeep)
    })
}

/// The repair `value` needs where the schema wants `ty`, if one is unambiguous: its kind
/// and the repaired value, or [`TooDeep`] for a JSON string too deep to parse.
pub(super) fn repair_node(value: &Value, ty: &str) -> Option<(RepairKind, Result<Value, TooDeep>)> {
    match (ty, value) {
        ("integer" | "number", Value::String(s)) => {
            serde_json::from_str::<serde_json::Number>(s.trim())
                .ok()
                .filter(|n| ty == "number" || n.is_i64() || n.is_u64())
                .map(|n| (RepairKind::StringToNumber, Ok(Value::Number(n))))
        }
        ("boolean", Value::String(s)) => match s.trim() {
            "true" => Some((RepairKind::StringToBoolean, Ok(Value::Bool(true)))),
            "false" => Some((RepairKind::StringToBoolean, Ok(Value::Bool(false)))),
            _ => None,
        },
        ("object", Value::String(s)) => match parse_json(s) {
            Ok(parsed @ Value::Object(_)) => Some((RepairKind::JsonStringToObject, Ok(parsed))),
            Err(Some(too_deep)) => Some((RepairKind::JsonStringToObject, Err(too_deep))),
            _ => None,
        },
        ("array", Value::String(s)) => match parse_json(s) {
            Ok(parsed @ Value::Array(_)) => Some((RepairKind::JsonStringToArray, Ok(parsed))),
            Err(Some(too_deep)) => Some((RepairKind::JsonStringToArray, Err(too_deep))),
            _ => Some((
                RepairKind::WrappedInArray,
                Ok(Value::Array(vec![value.clone()])),
            )),
        },
        ("array", Value::Null | Value::Array(_)) => None,
        ("array", single) => Some((
            RepairKind::WrappedInArray,
            Ok(Value::Array(vec![single.clone()])),
        )),
        _ => None,
    }
}

/// The schema of the child that `step` (one JSON Pointer token with its `/`) names in
/// `value`, when the walk goes into it: the walk follows `properties` of an object and
/// `items` of an array, and nothing else.
pub(super) fn child_schema<'s>(
    schema: &'s Value,
    ty: &str,
    value: &Value,
    step: &str,
) -> Option<&'s Value> {
    match (ty, value) {
        ("object", Value::Object(_)) => schema
            .get("properties")
            .filter(|p| p.is_object())?
            .pointer(step),
        ("array", Value::Array(_)) => schema.get("items").filter(|s| s.is_object()),
        _ => None,
    }
}

/// Repairs `value` in place where `schema` makes the repair unambiguous, pushing each
/// repair made (only kinds that `allowed` accepts) to `out`.
///
/// A JSON string nested deeper than parsing allows (128 levels) is left as it was sent;
/// the [`ArgumentRepair`](super::ArgumentRepair) hook also keeps a repaired value within
/// the input depth limit.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::repair::{repair, RepairKind};
/// let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}, "m": {"type": "integer"}}});
/// let mut input = json!({"n": "7", "m": "7.5"});
/// let mut made = Vec::new();
/// repair(&mut input, &schema, "", &|_| true, &mut made);
/// assert_eq!(input, json!({"n": 7, "m": "7.5"}));
/// assert_eq!((made[0].path.as_str(), made[0].kind), ("n", RepairKind::StringToNumber));
/// ```
pub fn repair(
    value: &mut Value,
    schema: &Value,
    path: &str,
    allowed: &dyn Fn(RepairKind) -> bool,
    out: &mut Vec<Repair>,
) {
    let mut walk = Walk {
        allowed,
        max_depth: None,
        out,
        too_deep: false,
    };
    walk.repair(value, schema, path, 0);
}

/// Repairs the whole input like [`repair`], keeping every repaired value within
/// `max_depth` levels of nesting counted from the root, as the pipeline counts them.
///
/// # Errors
///
/// [`TooDeep`] when a repair would nest deeper (the other repairs are made).
pub(crate) fn repair_within(
    input: &mut Value,
    schema: &Value,
    max_depth: usize,
    allowed: &dyn Fn(RepairKind) -> bool,
    out: &mut Vec<Repair>,
) -> Result<(), TooDeep> {
    let mut walk = Walk {
        allowed,
        max_depth: Some(max_depth),
        out,
        too_deep: false,
    };
    walk.repair(input, schema, "", 0);
    if walk.too_deep { Err(TooDeep) } else { Ok(()) }
}

/// One walk of the input: what it may repair, how deep, and what it did.
struct Walk<'a> {
    allowed: &'a dyn Fn(RepairKind) -> bool,
    max_depth: Option<usize>,
    out: &'a mut Vec<Repair>,
    too_deep: bool,
}

impl Walk<'_> {
    /// Whether `new`, put where `depth` containers enclose it, stays within the depth limit.
    /// A parsed string, or a value wrapped in an array, can nest deeper than the input the
    /// pipeline checked.
    fn fits(&self, new: &Value, depth: usize) -> bool {
        let Some(max_depth) = self.max_depth else {
            return true;
        };
        if !(new.is_array() || new.is_object()) {
            return true;
        }
        // The pipeline's own check, from this position down. The size was counted when the
        // input came in: a string holds the same bytes once it is parsed.
        InputLimits {
            max_bytes: usize::MAX,
            max_depth: max_depth.saturating_sub(depth),
        }
        .check(new)
        .is_ok()
    }

    /// `depth` is how many arrays and objects enclose `value`.
    fn repair(&mut self, value: &mut Value, schema: &Value, path: &str, depth: usize) {
        let Some((schema, ty)) = resolve(schema) else {
            return;
        };
        if let Some((kind, new)) = repair_node(value, ty)
            && (self.allowed)(kind)
        {
            match new {
                Ok(new) if self.fits(&new, depth) => {
                    *value = new;
                    self.out.push(Repair {
                        path: path.to_owned(),
                        kind,
                    });
                }
                _ => self.too_deep = true,
            }
        }
        match value {
            Value::Object(map) if ty == "object" => {
                if let Some(Value::Object(properties)) = schema.get("properties") {
                    for (key, sub) in properties {
                        if let Some(v) = map.get_mut(key) {
                            self.repair(v, sub, &join(path, key), depth + 1);
                        }
                    }
                }
            }
            Value::Array(items) if ty == "array" => {
                if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                    for (i, item) in items.iter_mut().enumerate() {
                        self.repair(item, sub, &format!("{path}[{i}]"), depth + 1);
                    }
                }
            }
            _ => {}
        }
    }
}
