//! The Cedar type of a tool's arguments, read from its JSON Schema, and the arguments of a
//! call as a Cedar value of that type.

use cedar_policy::RestrictedExpression;
use serde_json::{Map, Value, json};

/// How deep a schema is followed (nesting and `$ref`s together): deeper parts, and
/// recursive types, are left out of the Cedar type.
const MAX_DEPTH: u32 = 16;

/// What Cedar can say of a JSON value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ArgType {
    /// `string`, and enums of strings.
    String,
    /// `integer`: Cedar's `Long` (64 bits).
    Long,
    /// `number`: Cedar's `decimal` (four places after the point).
    Decimal,
    /// `boolean`.
    Bool,
    /// `array` with typed items: a Cedar `Set` (order and repeats are not kept).
    Set(Box<ArgType>),
    /// `object`: the properties Cedar can type, each required or not.
    Record(Vec<Attribute>),
}

/// One property of a record.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Attribute {
    pub name: String,
    pub ty: ArgType,
    pub required: bool,
}

impl ArgType {
    /// The type of a tool's input: a record of what its schema's properties say, empty
    /// for a tool whose input is not an object.
    pub(crate) fn of_input(schema: &Value) -> ArgType {
        match Self::of(schema, schema, 0) {
            Some((record @ ArgType::Record(_), _)) => record,
            _ => ArgType::Record(Vec::new()),
        }
    }

    /// The type `schema` describes within `root`, and whether it admits `null`; `None`
    /// when Cedar cannot type it (a union of kinds, a recursive type, no `type`).
    fn of(schema: &Value, root: &Value, depth: u32) -> Option<(ArgType, bool)> {
        if depth > MAX_DEPTH {
            return None;
        }
        let object = schema.as_object()?;
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            let target = reference.strip_prefix('#').and_then(|p| root.pointer(p))?;
            return Self::of(target, root, depth + 1);
        }
        for combinator in ["allOf", "anyOf", "oneOf"] {
            if let Some(alternatives) = object.get(combinator).and_then(Value::as_array) {
                // A single real alternative, the others only `null`: an optional value.
                let mut nullable = false;
                let mut real = Vec::new();
                for alternative in alternatives {
                    if alternative.get("type").and_then(Value::as_str) == Some("null") {
                        nullable = true;
                    } else {
                        real.push(alternative);
                    }
                }
                let [only] = real.as_slice() else {
                    return None;
                };
                let (ty, inner_nullable) = Self::of(only, root, depth + 1)?;
                return Some((ty, nullable || inner_nullable));
            }
        }
        let (kind, nullable) = match object.get("type") {
            Some(Value::String(kind)) => (kind.as_str(), false),
            Some(Value::Array(kinds)) => {
                let real: Vec<&str> = kinds
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|k| *k != "null")
                    .collect();
                let [only] = real.as_slice() else {
                    return None;
                };
                (*only, real.len() < kinds.len())
            }
            Some(_) => return None,
            None if object.contains_key("properties") => ("object", false),
            None => {
                let strings =
                    |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
                if object.get("enum").is_some_and(strings)
                    || object.get("const").is_some_and(Value::is_string)
                {
                    ("string", false)
                } else {
                    return None;
                }
            }
        };
        let ty = match kind {
            "string" => ArgType::String,
            "integer" => ArgType::Long,
            "number" => ArgType::Decimal,
            "boolean" => ArgType::Bool,
            "array" => {
                let (item, _) = Self::of(object.get("items")?, root, depth + 1)?;
                ArgType::Set(Box::new(item))
            }
            "object" => {
                let required: Vec<&str> = object
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut attributes = Vec::new();
                if let Some(properties) = object.get("properties").and_then(Value::as_object) {
                    for (name, property) in properties {
                        if let Some((ty, nullable)) = Self::of(property, root, depth + 1) {
                            attributes.push(Attribute {
                                name: name.clone(),
                                ty,
                                required: !nullable && required.contains(&name.as_str()),
                            });
                        }
                    }
                }
                ArgType::Record(attributes)
            }
            _ => return None,
        };
        Some((ty, nullable))
    }

    /// The type in Cedar's JSON schema format.
    pub(crate) fn to_schema(&self) -> Value {
        match self {
            ArgType::String => json!({"type": "String"}),
            ArgType::Long => json!({"type": "Long"}),
            ArgType::Decimal => json!({"type": "Extension", "name": "decimal"}),
            ArgType::Bool => json!({"type": "Boolean"}),
            ArgType::Set(item) => json!({"type": "Set", "element": item.to_schema()}),
            ArgType::Record(attributes) => {
                let attributes: Map<String, Value> = attributes
                    .iter()
                    .map(|a| {
                        let mut schema = a.ty.to_schema();
                        schema["required"] = Value::Bool(a.required);
                        (a.name.clone(), schema)
                    })
                    .collect();
                json!({"type": "Record", "attributes": attributes})
            }
        }
    }

    /// `value` as a Cedar value of this type: properties the type does not know are left
    /// out, a `null` is an absent value.
    ///
    /// # Errors
    ///
    /// What does not fit, with its path (`items[1].qty`), for the caller.
    pub(crate) fn convert(&self, value: &Value) -> Result<RestrictedExpression, String> {
        self.convert_at(value, &mut String::new())
    }

    fn convert_at(&self, value: &Value, path: &mut String) -> Result<RestrictedExpression, String> {
        let wrong = |path: &str, expected: &str| {
            if path.is_empty() {
                format!("the arguments are not {expected}")
            } else {
                format!("argument `{path}` is not {expected}")
            }
        };
        match (self, value) {
            (ArgType::String, Value::String(s)) => Ok(RestrictedExpression::new_string(s.clone())),
            (ArgType::Bool, Value::Bool(b)) => Ok(RestrictedExpression::new_bool(*b)),
            (ArgType::Long, Value::Number(n)) => whole(n)
                .map(RestrictedExpression::new_long)
                .ok_or_else(|| wrong(path, "an integer that fits in 64 bits")),
            (ArgType::Decimal, Value::Number(n)) => decimal(n)
                .map(RestrictedExpression::new_decimal)
                .ok_or_else(|| {
                    wrong(
                        path,
                        "a number with at most 4 decimal places and below 922337203685477",
                    )
                }),
            (ArgType::Set(item), Value::Array(values)) => {
                let mut items = Vec::with_capacity(values.len());
                for (i, v) in values.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    items.push(item.convert_at(v, path)?);
                    path.truncate(len);
                }
                Ok(RestrictedExpression::new_set(items))
            }
            (ArgType::Record(attributes), Value::Object(object)) => {
                let mut fields = Vec::with_capacity(attributes.len());
                for attribute in attributes {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&attribute.name);
                    match object.get(&attribute.name) {
                        None | Some(Value::Null) if attribute.required => {
                            return Err(format!("argument `{path}` is missing"));
                        }
                        None | Some(Value::Null) => {}
                        Some(v) => {
                            fields.push((attribute.name.clone(), attribute.ty.convert_at(v, path)?))
                        }
                    }
                    path.truncate(len);
                }
                RestrictedExpression::new_record(fields).map_err(|e| e.to_string())
            }
            // A tool without object input: nothing of it is typed.
            (ArgType::Record(attributes), _) if path.is_empty() && attributes.is_empty() => {
                RestrictedExpression::new_record([]).map_err(|e| e.to_string())
            }
            (ArgType::String, _) => Err(wrong(path, "a string")),
            (ArgType::Bool, _) => Err(wrong(path, "a boolean")),
            (ArgType::Long, _) => Err(wrong(path, "an integer")),
            (ArgType::Decimal, _) => Err(wrong(path, "a number")),
            (ArgType::Set(_), _) => Err(wrong(path, "an array")),
            (ArgType::Record(_), _) => Err(wrong(path, "an object")),
        }
    }
}

/// A JSON number that is a whole number in 64 bits (`5.0` is one).
fn whole(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    // Both bounds are exact in f64; the upper one is excluded (it is 2^63).
    (f.fract() == 0.0 && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f))
        .then_some(f as i64)
}

/// A JSON number as the text of a Cedar `decimal` (`100` is `100.0`), when it has at most
/// four places after the point and fits: Cedar keeps decimals as 64-bit integers of
/// ten-thousandths.
fn decimal(n: &serde_json::Number) -> Option<String> {
    const LIMIT: i128 = i64::MAX as i128;
    if let Some(i) = n.as_i64() {
        return (i128::from(i) * 10_000 <= LIMIT && i128::from(i) * 10_000 >= -LIMIT)
            .then(|| format!("{i}.0"));
    }
    let text = n.to_string();
    if text.contains(['e', 'E']) {
        return None;
    }
    let (whole, places) = text.split_once('.').unwrap_or((&text, "0"));
    let places = places.trim_end_matches('0');
    let places = if places.is_empty() { "0" } else { places };
    if places.len() > 4 {
        return None;
    }
    let integer: i128 = whole.parse().ok()?;
    (integer * 10_000 < LIMIT && integer * 10_000 > -LIMIT).then(|| format!("{whole}.{places}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_kinds_map_to_cedar_types() {
        let schema = json!({
            "type": "object",
            "required": ["amount", "tenant"],
            "properties": {
                "amount": {"type": "number"},
                "count": {"type": ["integer", "null"]},
                "tenant": {"type": "string"},
                "dry_run": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"type": ["string", "integer"]},
                "mode": {"enum": ["a", "b"]},
                "nested": {"$ref": "#/$defs/Nested"}
            },
            "$defs": {"Nested": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}
        });
        let ArgType::Record(attributes) = ArgType::of_input(&schema) else {
            panic!("an object input is a record");
        };
        let find = |name: &str| attributes.iter().find(|a| a.name == name).cloned();
        assert_eq!(
            find("amount").map(|a| (a.ty, a.required)),
            Some((ArgType::Decimal, true))
        );
        assert_eq!(
            find("count").map(|a| (a.ty, a.required)),
            Some((ArgType::Long, false))
        );
        assert_eq!(find("tenant").map(|a| a.ty), Some(ArgType::String));
        assert_eq!(
            find("tags").map(|a| a.ty),
            Some(ArgType::Set(Box::new(ArgType::String)))
        );
        assert_eq!(find("mode").map(|a| a.ty), Some(ArgType::String));
        assert_eq!(find("either"), None, "a union of kinds has no Cedar type");
        let nested = find("nested").expect("a $ref is followed");
        assert_eq!(
            nested.ty,
            ArgType::Record(vec![Attribute {
                name: "x".into(),
                ty: ArgType::Long,
                required: true
            }])
        );
    }

    #[test]
    fn a_recursive_schema_ends_in_an_untyped_part_not_a_loop() {
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}
        });
        assert!(matches!(ArgType::of_input(&schema), ArgType::Record(_)));
    }

    #[test]
    fn numbers_become_decimals_with_at_most_four_places() {
        let d = |v: Value| decimal(&serde_json::from_value(v).unwrap());
        assert_eq!(d(json!(100)), Some("100.0".into()));
        assert_eq!(d(json!(99.5)), Some("99.5".into()));
        assert_eq!(d(json!(-0.0001)), Some("-0.0001".into()));
        assert_eq!(d(json!(0.00001)), None);
        assert_eq!(d(json!(1e300)), None);
        assert_eq!(d(json!(i64::MAX)), None);
    }

    #[test]
    fn a_value_of_the_wrong_kind_is_named_by_its_path() {
        let ty = ArgType::of_input(&json!({
            "type": "object", "required": ["items"],
            "properties": {"items": {"type": "array", "items": {"type": "object",
                "properties": {"qty": {"type": "integer"}}}}}
        }));
        let err = ty
            .convert(&json!({"items": [{"qty": 1}, {"qty": "two"}]}))
            .unwrap_err();
        assert_eq!(err, "argument `items[1].qty` is not an integer");
        assert_eq!(
            ty.convert(&json!({})).unwrap_err(),
            "argument `items` is missing"
        );
        assert!(ty.convert(&json!({"items": [], "unknown": true})).is_ok());
    }
}
