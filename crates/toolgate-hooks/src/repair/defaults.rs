//! Schema defaults filled in for missing properties (at `will_normalize_input`).

use serde_json::{Map, Value};

use super::walk::{Repair, RepairKind, join, resolve};

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
