//! Validation: schema checks with field paths, output checks, input limits.

mod common;

use garde::Validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolgate_core::hook::HookRegistration;
use toolgate_core::pipeline::InputLimits;
use toolgate_core::{InvokeOptions, Pipeline, ToolError, tool_fn};
use toolgate_hooks::validation::{SchemaCheck, Validation};

fn paths(err: &ToolError) -> Vec<String> {
    let ToolError::InvalidInput(v) = err else {
        panic!("expected invalid input, got {err:?}")
    };
    v.iter().map(|v| v.path.clone()).collect()
}

fn order_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "customer": { "type": "string", "minLength": 1 },
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": { "sku": { "type": "string" }, "qty": { "type": "integer", "minimum": 1 } },
                    "required": ["sku", "qty"]
                }
            }
        },
        "required": ["customer", "items"]
    })
}

#[tokio::test]
async fn schema_tool_errors_list_every_failing_field_with_its_path() {
    let p = Pipeline::builder()
        .tool(common::echo("order", order_schema()))
        .hook(Validation::new())
        .build()
        .unwrap();
    let input =
        json!({ "items": [{ "sku": "a", "qty": 2 }, { "sku": 7, "qty": 0 }, { "qty": 1 }] });
    let err = p
        .invoke("order", input, InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        paths(&err),
        ["customer", "items[1].qty", "items[1].sku", "items[2].sku"]
    );
    assert_eq!((err.code(), err.status()), ("invalid_input", 400));
    assert!(err.to_string().contains("argument `items[1].qty`"), "{err}");
}

#[tokio::test]
async fn messages_never_quote_the_offending_value() {
    let p = Pipeline::builder()
        .tool(common::echo("order", order_schema()))
        .hook(Validation::new())
        .build()
        .unwrap();
    let input = json!({ "customer": "ok", "items": [{ "sku": "x", "qty": "ann@example.com" }] });
    let err = p
        .invoke("order", input, InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(paths(&err), ["items[0].qty"]);
    assert!(!err.to_string().contains("ann@example.com"), "{err}");
}

#[derive(Deserialize, Validate, JsonSchema)]
struct Page {
    #[garde(range(min = 1, max = 50))]
    limit: u32,
    #[garde(length(min = 1))]
    query: String,
}

#[tokio::test]
async fn typed_tool_garde_errors_keep_their_paths_when_the_schema_check_is_off() {
    let p = Pipeline::builder()
        .tool(tool_fn("page", "Pages.", |p: Page| async move {
            Ok::<_, ToolError>(p.limit)
        }))
        .hook(
            Validation::builder()
                .schema_check(SchemaCheck::Remote)
                .build(),
        )
        .build()
        .unwrap();
    let err = p
        .invoke(
            "page",
            json!({ "limit": 99, "query": "" }),
            InvokeOptions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(paths(&err), ["limit", "query"]);
}

#[tokio::test]
async fn typed_tool_is_checked_against_its_derived_schema_by_default() {
    let p = Pipeline::builder()
        .tool(tool_fn("page", "Pages.", |p: Page| async move {
            Ok::<_, ToolError>(p.limit)
        }))
        .hook(Validation::new())
        .build()
        .unwrap();
    let err = p
        .invoke("page", json!({ "limit": 99 }), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(paths(&err), ["limit", "query"]);
    let ok = p
        .invoke(
            "page",
            json!({ "limit": 9, "query": "q" }),
            InvokeOptions::new(),
        )
        .await;
    assert_eq!(ok.unwrap(), json!(9));
}

#[tokio::test]
async fn output_that_breaks_its_declared_schema_fails_with_invalid_output() {
    let mut tool = toolgate_core::JsonTool::new(
        "bad",
        "Returns the wrong shape.",
        json!({"type": "object"}),
        |_, _| Box::pin(async { Ok::<_, ToolError>(json!({ "count": "three" })) }),
    );
    tool.definition_mut().output_schema = Some(json!({
        "type": "object", "properties": { "count": { "type": "integer" } }, "required": ["count"]
    }));
    let p = Pipeline::builder()
        .tool(tool)
        .hook(Validation::new())
        .build()
        .unwrap();
    let err = p
        .invoke("bad", json!({}), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("invalid_output", 502));
    assert!(err.to_string().contains("`count`"), "{err}");

    let unchecked = {
        let mut tool =
            toolgate_core::JsonTool::new("bad", "", json!({"type": "object"}), |_, _| {
                Box::pin(async { Ok::<_, ToolError>(json!({ "count": "three" })) })
            });
        tool.definition_mut().output_schema =
            Some(json!({"type": "object", "properties": {"count": {"type": "integer"}}}));
        Pipeline::builder()
            .tool(tool)
            .hook(Validation::builder().check_output(false).build())
            .build()
            .unwrap()
    };
    assert!(
        unchecked
            .invoke("bad", json!({}), InvokeOptions::new())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn input_beyond_the_hook_limits_is_refused_before_any_check() {
    let limits = InputLimits {
        max_bytes: 64,
        max_depth: 3,
    };
    let p = Pipeline::builder()
        .tool(common::echo("echo", json!({"type": "object"})))
        .hook(Validation::builder().limits(limits).build())
        .build()
        .unwrap();
    let deep = json!({ "a": { "b": { "c": { "d": 1 } } } });
    let err = p
        .invoke("echo", deep, InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::InputTooDeep { limit: 3 });
    let large = json!({ "text": "x".repeat(100) });
    let err = p
        .invoke("echo", large, InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "input_too_large");
    assert!(
        p.invoke("echo", json!({ "a": 1 }), InvokeOptions::new())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_schema_is_compiled_once_per_tool() {
    let validation = std::sync::Arc::new(Validation::new());
    let p = Pipeline::builder()
        .tool(common::echo("order", order_schema()))
        .tool(common::echo("echo", json!({"type": "object"})))
        .hook(HookRegistration::shared(validation.clone()))
        .build()
        .unwrap();
    for _ in 0..5 {
        let _ = p
            .invoke(
                "order",
                json!({ "customer": "c", "items": [] }),
                InvokeOptions::new(),
            )
            .await;
        let _ = p.invoke("echo", json!({}), InvokeOptions::new()).await;
    }
    assert_eq!(validation.schemas().len(), 2);
}

#[tokio::test]
async fn a_tool_with_a_broken_schema_fails_with_an_internal_error_not_a_panic() {
    let p = Pipeline::builder()
        .tool(common::echo(
            "broken",
            json!({"type": "object", "minLength": "three"}),
        ))
        .hook(Validation::new())
        .build()
        .unwrap();
    let err = p
        .invoke("broken", json!({}), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "internal");
    assert!(
        err.to_string().contains("input schema of tool `broken`"),
        "{err}"
    );
}
