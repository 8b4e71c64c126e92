//! Argument repair: each repair kind, recorded in metadata; ambiguity is an error; a
//! repaired input stays within the input depth limit.

mod common;

use garde::Validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::pipeline::InputLimits;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, tool_fn};
use toolgate_hooks::repair::{ArgumentRepair, REPAIRS_METADATA_KEY, RepairKind};
use toolgate_hooks::validation::Validation;

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "limit": { "type": "integer" },
            "ratio": { "type": ["number", "null"] },
            "exact": { "type": "boolean" },
            "filter": { "type": "object", "properties": { "min": { "type": "integer" } } },
            "ids": { "type": "array", "items": { "type": "integer" } },
            "tags": { "type": "array", "items": { "type": "string" } },
            "unit": { "type": "string", "default": "metric" },
            "either": { "type": ["string", "integer"] }
        }
    })
}

async fn run(input: Value) -> (Result<Value, ToolError>, Vec<Value>) {
    let (audit, sink) = common::memory_audit();
    let p = Pipeline::builder()
        .tool(common::echo("t", schema()))
        .hook(ArgumentRepair::new())
        .hook(Validation::new())
        .hook(audit)
        .build()
        .unwrap();
    let out = p.invoke("t", input, InvokeOptions::new()).await;
    let record = common::only_record(&sink);
    let repairs = record
        .metadata
        .get(REPAIRS_METADATA_KEY)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    (out, repairs)
}

fn repair(path: &str, kind: &str) -> Value {
    json!({ "path": path, "kind": kind })
}

#[tokio::test]
async fn number_sent_as_string_becomes_a_number() {
    let (out, repairs) = run(json!({ "limit": "10", "ratio": "0.5", "unit": "si" })).await;
    assert_eq!(
        out.unwrap(),
        json!({ "limit": 10, "ratio": 0.5, "unit": "si" })
    );
    assert_eq!(
        repairs,
        [
            repair("limit", "string_to_number"),
            repair("ratio", "string_to_number")
        ]
    );
}

#[tokio::test]
async fn boolean_sent_as_string_becomes_a_boolean() {
    let (out, repairs) = run(json!({ "exact": "true", "unit": "si" })).await;
    assert_eq!(out.unwrap()["exact"], json!(true));
    assert_eq!(repairs, [repair("exact", "string_to_boolean")]);
}

#[tokio::test]
async fn object_sent_as_json_string_is_parsed_and_repaired_inside() {
    let (out, repairs) = run(json!({ "filter": "{\"min\": \"3\"}", "unit": "si" })).await;
    assert_eq!(out.unwrap()["filter"], json!({ "min": 3 }));
    assert_eq!(
        repairs,
        [
            repair("filter", "json_string_to_object"),
            repair("filter.min", "string_to_number")
        ]
    );
}

#[tokio::test]
async fn array_sent_as_json_string_is_parsed() {
    let (out, repairs) = run(json!({ "ids": "[1, 2]", "unit": "si" })).await;
    assert_eq!(out.unwrap()["ids"], json!([1, 2]));
    assert_eq!(repairs, [repair("ids", "json_string_to_array")]);
}

#[tokio::test]
async fn single_value_where_an_array_is_wanted_is_wrapped() {
    let (out, repairs) = run(json!({ "tags": "rust", "ids": "7", "unit": "si" })).await;
    let out = out.unwrap();
    assert_eq!(out["tags"], json!(["rust"]));
    assert_eq!(out["ids"], json!([7]));
    assert_eq!(
        repairs,
        [
            repair("ids", "wrapped_in_array"),
            repair("ids[0]", "string_to_number"),
            repair("tags", "wrapped_in_array")
        ]
    );
}

#[tokio::test]
async fn missing_property_gets_its_schema_default() {
    let (out, repairs) = run(json!({})).await;
    assert_eq!(out.unwrap(), json!({ "unit": "metric" }));
    assert_eq!(repairs, [repair("unit", "default_filled")]);
}

#[tokio::test]
async fn ambiguous_values_are_left_for_validation_to_reject() {
    let (out, repairs) = run(json!({ "limit": "1.5", "exact": "yes", "unit": "si" })).await;
    let err = out.unwrap_err();
    let ToolError::InvalidInput(v) = &err else {
        panic!("{err:?}")
    };
    let paths: Vec<&str> = v.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(paths, ["exact", "limit"]);
    assert!(repairs.is_empty(), "{repairs:?}");

    let (out, repairs) = run(json!({ "either": 5, "limit": "5 apples", "unit": "si" })).await;
    assert!(out.is_err());
    assert!(
        repairs.is_empty(),
        "a union type or a partial number is never guessed: {repairs:?}"
    );
}

#[tokio::test]
async fn repairs_are_recorded_without_values() {
    let (_, repairs) = run(json!({ "tags": "secret-tag-value", "unit": "si" })).await;
    assert!(
        !Value::Array(repairs)
            .to_string()
            .contains("secret-tag-value")
    );
}

#[tokio::test]
async fn a_disabled_repair_kind_is_not_applied() {
    let p = Pipeline::builder()
        .tool(common::echo("t", schema()))
        .hook(
            ArgumentRepair::builder()
                .disable(RepairKind::WrappedInArray)
                .build(),
        )
        .hook(Validation::new())
        .build()
        .unwrap();
    let err = p
        .invoke("t", json!({ "tags": "rust" }), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input");
}

#[derive(Deserialize, Validate, JsonSchema)]
struct Search {
    #[garde(length(min = 1))]
    tags: Vec<String>,
    #[garde(range(max = 50))]
    limit: u32,
    #[garde(skip)]
    filter: Option<Filter>,
}

#[derive(Deserialize, Validate, JsonSchema)]
struct Filter {
    #[garde(skip)]
    min: u32,
}

#[tokio::test]
async fn typed_tools_are_repaired_before_their_serde_check() {
    let p = Pipeline::builder()
        .tool(tool_fn("search", "Searches.", |s: Search| async move {
            Ok::<_, ToolError>(json!([s.tags, s.limit, s.filter.map(|f| f.min)]))
        }))
        .hook(ArgumentRepair::new())
        .build()
        .unwrap();
    let out = p
        .invoke(
            "search",
            json!({ "tags": "a", "limit": "5", "filter": "{\"min\": 2}" }),
            InvokeOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(out, json!([["a"], 5, 2]));
}

/// A pipeline whose tool `t` takes an array `a` and answers how deep what it got nests.
fn depth_pipeline(repair: ArgumentRepair) -> Pipeline {
    depth_pipeline_within(repair, InputLimits::default())
}

fn depth_pipeline_within(repair: ArgumentRepair, limits: InputLimits) -> Pipeline {
    fn depth(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
            Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }
    let schema = json!({ "type": "object", "properties": { "a": { "type": "array" } } });
    Pipeline::builder()
        .tool(JsonTool::new("t", "Measures.", schema, |input, _| {
            let out = json!(depth(input));
            Box::pin(async move { Ok::<_, ToolError>(out) })
        }))
        .hook(repair)
        .input_limits(limits)
        .build()
        .unwrap()
}

fn nested_text(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

#[tokio::test]
async fn a_json_string_nested_past_the_depth_limit_is_refused_like_direct_input() {
    let p = depth_pipeline(ArgumentRepair::new());
    let direct: Value = serde_json::from_str(&nested_text(120)).unwrap();
    let direct = p
        .invoke("t", json!({ "a": direct }), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(direct.code(), "input_too_deep");
    // 120 levels parse; 200 are past what parsing allows at all: both are too deep.
    for levels in [64, 120, 200] {
        let err = p
            .invoke(
                "t",
                json!({ "a": nested_text(levels) }),
                InvokeOptions::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (err.code(), err.status(), err.to_string()),
            (direct.code(), direct.status(), direct.to_string()),
            "{levels} levels"
        );
    }
}

#[tokio::test]
async fn a_json_string_within_the_depth_limit_is_still_repaired() {
    let p = depth_pipeline(ArgumentRepair::new());
    for (levels, reached) in [(10, 11), (63, 64)] {
        let out = p
            .invoke(
                "t",
                json!({ "a": nested_text(levels) }),
                InvokeOptions::new(),
            )
            .await
            .unwrap();
        assert_eq!(out, json!(reached), "{levels} levels in the string");
    }
}

#[tokio::test]
async fn the_depth_limit_of_a_repair_follows_the_limits_it_is_given() {
    let limits = InputLimits {
        max_depth: 8,
        ..InputLimits::default()
    };
    let p = depth_pipeline_within(ArgumentRepair::new(), limits);
    let err = p
        .invoke("t", json!({ "a": nested_text(8) }), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input nests deeper than 8 levels: flatten the arguments"
    );
    let out = p
        .invoke("t", json!({ "a": nested_text(7) }), InvokeOptions::new())
        .await
        .unwrap();
    assert_eq!(out, json!(8));
}
