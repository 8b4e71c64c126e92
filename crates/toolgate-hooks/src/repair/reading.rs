//! What one place in the input holds once [`ArgumentRepair`](super::ArgumentRepair) has
//! repaired it: for a policy that reads the input before the repair runs (a budget prices
//! a call at `will_acquire_quota`) and must not read less than the tool will get.

use std::borrow::Cow;

use serde_json::Value;

use super::walk::{child_schema, repair_node, resolve};

/// Calls `reading` with what `pointer` (a JSON Pointer) finds in `input` in each form the
/// input can reach its tool: as sent, and as [`ArgumentRepair`](super::ArgumentRepair)
/// repairs it against the tool's input `schema` — with every kind of repair on, or with
/// some turned off. `None` is a pointer that finds nothing.
///
/// The walk follows the pointer and repairs only the values on its way, exactly as the
/// hook would (the same decisions, from the same code) — the value found is repaired
/// itself, not what it holds, which is all a count needs; a JSON string is parsed without
/// the hook's depth limit, since the hook refuses a call whose repair goes past it. The
/// last call, whose second argument is true, is the reading with every repair made; each
/// earlier one leaves one repair on the way unmade — the hook walks no further into a
/// value it did not repair, so below it the input is read as sent. The first is the
/// input as sent, when any repair is on the way.
pub(crate) fn readings_at(
    input: &Value,
    schema: &Value,
    pointer: &str,
    reading: &mut dyn FnMut(Option<&Value>, bool),
) {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return reading(None, true);
    }
    let mut here = Cow::Borrowed(input);
    let mut schema = Some(schema);
    let mut rest = pointer;
    loop {
        let resolved = schema.and_then(resolve);
        if let Some((_, ty)) = resolved
            && let Some((_, Ok(repaired))) = repair_node(&here, ty)
        {
            reading(here.pointer(rest), false);
            here = Cow::Owned(repaired);
        }
        if rest.is_empty() {
            return reading(Some(&here), true);
        }
        let end = rest[1..].find('/').map_or(rest.len(), |i| i + 1);
        let (step, after) = rest.split_at(end);
        schema = resolved.and_then(|(schema, ty)| child_schema(schema, ty, &here, step));
        let child = match here {
            Cow::Borrowed(value) => value.pointer(step).map(Cow::Borrowed),
            Cow::Owned(mut value) => value.pointer_mut(step).map(|v| Cow::Owned(v.take())),
        };
        let Some(child) = child else {
            // A property left out whose schema gives a default gets it before the tool
            // runs (ArgumentRepair fills it in; a typed tool's serde default is what its
            // schema says): that is read too, as a form and not as the full reading, so
            // a default that is no count refuses nothing. `schema` is the property's own,
            // when the object's schema lists it (as `fill_defaults` requires).
            let listed = schema.filter(|_| resolved.is_some_and(|(_, ty)| ty == "object"));
            if let Some(default) = listed.and_then(|property| property.get("default")) {
                reading(default.pointer(after), false);
            }
            return reading(None, true);
        };
        here = child;
        rest = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn readings(input: &Value, schema: &Value, pointer: &str) -> Vec<(Option<Value>, bool)> {
        let mut all = Vec::new();
        readings_at(input, schema, pointer, &mut |value, full| {
            all.push((value.cloned(), full));
        });
        all
    }

    fn export() -> Value {
        json!({
            "type": "object",
            "properties": {
                "options": {
                    "type": "object",
                    "properties": { "pages": { "type": "integer" } }
                },
                "items": {
                    "type": "array",
                    "items": { "type": "object", "properties": { "n": { "type": "integer" } } }
                }
            }
        })
    }

    #[test]
    fn an_input_without_repairs_is_read_once_as_sent() {
        let input = json!({"options": {"pages": 5}});
        assert_eq!(
            readings(&input, &export(), "/options/pages"),
            [(Some(json!(5)), true)]
        );
        assert_eq!(readings(&input, &export(), "/options/rows"), [(None, true)]);
    }

    #[test]
    fn a_json_string_on_the_way_is_read_as_sent_and_as_parsed() {
        let input = json!({"options": "{\"pages\": \"500\"}"});
        assert_eq!(
            readings(&input, &export(), "/options/pages"),
            [
                (None, false),
                (Some(json!("500")), false),
                (Some(json!(500)), true)
            ]
        );
        let root = json!("{\"options\": {\"pages\": 7}}");
        assert_eq!(
            readings(&root, &export(), "/options/pages"),
            [(None, false), (Some(json!(7)), true)]
        );
    }

    #[test]
    fn a_single_value_wrapped_in_an_array_is_read_both_ways() {
        let input = json!({"items": {"n": 3}});
        assert_eq!(
            readings(&input, &export(), "/items/0/n"),
            [(None, false), (Some(json!(3)), true)]
        );
        assert_eq!(
            readings(&input, &export(), "/items/n"),
            [(Some(json!(3)), false), (None, true)]
        );
    }

    #[test]
    fn a_pointer_with_escapes_finds_its_property() {
        let schema = json!({"type": "object", "properties": {"a/b": {"type": "integer"}}});
        let input = json!({"a/b": "9"});
        assert_eq!(
            readings(&input, &schema, "/a~1b"),
            [(Some(json!("9")), false), (Some(json!(9)), true)]
        );
    }

    #[test]
    fn the_full_reading_is_what_the_repair_walk_leaves_there() {
        let inputs = [
            json!({"options": "{\"pages\": \"5\"}", "items": "[{\"n\": \"1\"}]"}),
            json!("{\"options\": {\"pages\": 2}, \"items\": {\"n\": \"3\"}}"),
            json!({"items": "{\"n\": 4}", "options": "not json"}),
            json!({"items": [{"n": "6"}, 7], "options": null}),
        ];
        for input in inputs {
            let mut repaired = input.clone();
            crate::repair::repair(&mut repaired, &export(), "", &|_| true, &mut Vec::new());
            for pointer in ["/options/pages", "/items/0/n", "/items/1", "/items/0/m"] {
                let full = readings(&input, &export(), pointer).pop().unwrap();
                assert_eq!(
                    full,
                    (repaired.pointer(pointer).cloned(), true),
                    "{input} {pointer}"
                );
            }
        }
    }

    #[test]
    fn a_property_left_out_is_read_as_its_schema_default_too() {
        let schema = json!({
            "type": "object",
            "properties": {
                "pages": {"type": "integer", "default": 50},
                "options": {"type": "object", "default": {"rows": 7}},
                "mode": {"type": "string", "default": "all"}
            }
        });
        assert_eq!(
            readings(&json!({}), &schema, "/pages"),
            [(Some(json!(50)), false), (None, true)]
        );
        assert_eq!(
            readings(&json!({}), &schema, "/options/rows"),
            [(Some(json!(7)), false), (None, true)]
        );
        assert_eq!(
            readings(&json!({}), &schema, "/mode"),
            [(Some(json!("all")), false), (None, true)]
        );
        assert_eq!(
            readings(&json!({"pages": 3}), &schema, "/pages"),
            [(Some(json!(3)), true)]
        );
        // No default for a property the schema does not list.
        assert_eq!(readings(&json!({}), &schema, "/other"), [(None, true)]);
    }

    #[test]
    fn a_pointer_that_is_not_one_reads_nothing() {
        assert_eq!(readings(&json!({"a": 1}), &json!({}), "a"), [(None, true)]);
    }
}
