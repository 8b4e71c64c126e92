//! The schema-guided walk that repairs values and fills defaults.

use serde_json::{Map, Value};

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
fn resolve(schema: &Value) -> Option<(&Value, &str)> {
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

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Repairs `value` in place where `schema` makes the repair unambiguous, pushing each
/// repair made (only kinds that `allowed` accepts) to `out`.
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
    let Some((schema, ty)) = resolve(schema) else {
        return;
    };
    let repaired = match (ty, &*value) {
        ("integer" | "number", Value::String(s)) => {
            serde_json::from_str::<serde_json::Number>(s.trim())
                .ok()
                .filter(|n| ty == "number" || n.is_i64() || n.is_u64())
                .map(|n| (RepairKind::StringToNumber, Value::Number(n)))
        }
        ("boolean", Value::String(s)) => match s.trim() {
            "true" => Some((RepairKind::StringToBoolean, Value::Bool(true))),
            "false" => Some((RepairKind::StringToBoolean, Value::Bool(false))),
            _ => None,
        },
        ("object", Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(parsed @ Value::Object(_)) => Some((RepairKind::JsonStringToObject, parsed)),
            _ => None,
        },
        ("array", Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(parsed @ Value::Array(_)) => Some((RepairKind::JsonStringToArray, parsed)),
            _ => Some((
                RepairKind::WrappedInArray,
                Value::Array(vec![value.clone()]),
            )),
        },
        ("array", Value::Null | Value::Array(_)) => None,
        ("array", single) => Some((
            RepairKind::WrappedInArray,
            Value::Array(vec![single.clone()]),
        )),
        _ => None,
    };
    if let Some((kind, new)) = repaired.filter(|(kind, _)| allowed(*kind)) {
        *value = new;
        out.push(Repair {
            path: path.to_owned(),
            kind,
        });
    }
    match value {
        Value::Object(map) if ty == "object" => {
            if let Some(Value::Object(properties)) = schema.get("properties") {
                for (key, sub) in properties {
                    if let Some(v) = map.get_mut(key) {
                        repair(v, sub, &join(path, key), allowed, out);
                    }
                }
            }
        }
        Value::Array(items) if ty == "array" => {
            if let Some(sub) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    repair(item, sub, &format!("{path}[{i}]"), allowed, out);
                }
            }
        }
        _ => {}
    }
}

/// Fills missing properties that have a schema `default`, recursively through present
/// objects, pushing a [`RepairKind::DefaultFilled`] for each.
///
/// ```
/// use serde_json::json;
/// use toolgate_hooks::repair::fill_defaults;
/// let schema = json!({"type": "object", "properties": {"unit": {"type": "string", "default": "metric"}}});
/// let mut input = json!({});
/// let mut made = Vec::new();
/// fill_defaults(&mut input, &schema, "", &mut made);
/// assert_eq!(input, json!({"unit": "metric"}));
/// ```
pub fn fill_defaults(value: &mut Value, schema: &Value, path: &str, out: &mut Vec<Repair>) {
    let Some((schema, "object")) = resolve(schema) else {
        return;
    };
    let (Value::Object(map), Some(Value::Object(properties))) = (value, schema.get("properties"))
    else {
        return;
    };
    fill_object(map, properties, path, out);
}

fn fill_object(
    map: &mut Map<String, Value>,
    properties: &Map<String, Value>,
    path: &str,
    out: &mut Vec<Repair>,
) {
    for (key, sub) in properties {
        let here = join(path, key);
        match map.get_mut(key) {
            Some(present) => fill_defaults(present, sub, &here, out),
            None => {
                if let Some(default) = sub.get("default") {
                    map.insert(key.clone(), default.clone());
                    out.push(Repair {
                        path: here,
                        kind: RepairKind::DefaultFilled,
                    });
                }
            }
        }
    }
}
