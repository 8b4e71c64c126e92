//! Bad input gets a clear typed error, never a panic; the registry refuses duplicates and
//! lists schemas that carry the garde bounds.

use garde::Validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::core::error::{BuildError, RegistryError};
use toolgate::core::pipeline::InputLimits;
use toolgate::core::registry::{ToolRef, ToolRegistry};
use toolgate::core::{InvokeOptions, Pipeline, Stage::*, ToolError, tool_fn};
use toolgate_test::{ScriptedTool, TestPipeline, assert_stages};

use crate::{TOOL, input, options};

#[derive(Debug, Deserialize, Serialize, Validate, JsonSchema)]
struct Search {
    #[garde(length(min = 1, max = 10))]
    query: String,
    #[garde(range(min = 1, max = 50))]
    limit: u32,
}

fn search_tool() -> impl toolgate::core::Tool<Input = Search, Output = Value> {
    tool_fn("search", "Searches.", |s: Search| async move {
        Ok::<_, ToolError>(json!({ "query": s.query, "limit": s.limit }))
    })
}

fn search_pipeline() -> (Pipeline, toolgate_test::StageLog) {
    let test = TestPipeline::new()
        .typed_tool(search_tool())
        .recording("rec", |h| h);
    let log = test.log();
    (test.build(), log)
}

fn violations(err: &ToolError) -> Vec<(String, String)> {
    match err {
        ToolError::InvalidInput(v) => v
            .iter()
            .map(|v| (v.path.clone(), v.message.clone()))
            .collect(),
        other => panic!("expected invalid input, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_tool_is_a_typed_error_and_no_stage_runs() {
    let test = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .recording("rec", |h| h);
    let log = test.log();

    let err = test
        .build()
        .invoke("nope", input(), options())
        .await
        .unwrap_err();

    assert_eq!(
        err,
        ToolError::UnknownTool {
            name: "nope".into()
        }
    );
    assert_eq!((err.code(), err.status()), ("unknown_tool", 404));
    assert!(log.is_empty(), "{log:?}");
}

#[tokio::test]
async fn input_that_is_not_an_object_fails_validation_for_an_object_schema() {
    let (pipeline, log) = search_pipeline();

    let err = pipeline
        .invoke("search", json!([1, 2]), options())
        .await
        .unwrap_err();

    assert_eq!(
        violations(&err),
        [(
            String::new(),
            "the arguments must be a JSON object".to_owned()
        )]
    );
    assert_eq!((err.code(), err.status()), ("invalid_input", 400));
    assert_stages(
        &log,
        &[
            WillCreateInvokeContext,
            DidCreateInvokeContext,
            WillBindProviders,
            WillAuthorize,
            WillCheckConsent,
            WillCheckFeatureFlags,
            WillAcquireQuota,
            WillAcquireSemaphore,
            WillParseInput,
            WillValidateInput,
            OnError,
            WillAudit,
            DidAudit,
            OnMetrics,
            DidReleaseSemaphore,
            DidReleaseQuota,
            WillFinalizeInvoke,
        ],
    );
}

#[tokio::test]
async fn garde_failures_name_every_failing_field_in_an_llm_readable_message() {
    let (pipeline, _) = search_pipeline();

    let err = pipeline
        .invoke(
            "search",
            json!({ "query": "far too long a query", "limit": 99 }),
            options(),
        )
        .await
        .unwrap_err();

    let mut found = violations(&err);
    found.sort();
    assert_eq!(
        found,
        [
            ("limit".to_owned(), "greater than 50".to_owned()),
            ("query".to_owned(), "length is greater than 10".to_owned()),
        ]
    );
    let message = err.to_string();
    assert!(message.starts_with("invalid arguments: "), "{message}");
    assert!(
        message.contains("argument `limit`: greater than 50"),
        "{message}"
    );
}

#[tokio::test]
async fn a_field_of_the_wrong_type_is_reported_with_its_path() {
    let (pipeline, _) = search_pipeline();

    let err = pipeline
        .invoke(
            "search",
            json!({ "query": "ok", "limit": "ten" }),
            options(),
        )
        .await
        .unwrap_err();

    let found = violations(&err);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "limit");
}

#[tokio::test]
async fn valid_typed_input_reaches_the_typed_tool_and_comes_back_typed() {
    let tool = search_tool();
    let search = ToolRef::of(&tool);
    let pipeline = Pipeline::builder().tool(tool).build().unwrap();

    let out: Value = pipeline
        .invoke_typed(
            &search,
            Search {
                query: "rust".into(),
                limit: 3,
            },
            InvokeOptions::new(),
        )
        .await
        .unwrap();

    assert_eq!(out, json!({ "query": "rust", "limit": 3 }));
}

#[tokio::test]
async fn input_over_the_size_limit_is_refused_before_any_stage_runs() {
    let test = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .recording("rec", |h| h)
        .configure(|b| {
            b.input_limits(InputLimits {
                max_bytes: 64,
                max_depth: 8,
            })
        });
    let log = test.log();
    let pipeline = test.build();
    let big = json!({ "text": "x".repeat(100) });

    let err = pipeline
        .invoke(TOOL, big.clone(), options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::InputTooLarge { limit: 64, .. }),
        "{err:?}"
    );
    assert_eq!((err.code(), err.status()), ("input_too_large", 413));

    let err = pipeline
        .invoke_str(TOOL, &big.to_string(), options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ToolError::InputTooLarge { limit: 64, .. }),
        "{err:?}"
    );
    assert!(log.is_empty(), "{log:?}");
}

#[tokio::test]
async fn input_nested_deeper_than_the_limit_is_refused() {
    let pipeline = TestPipeline::new()
        .tool(ScriptedTool::new(TOOL))
        .configure(|b| {
            b.input_limits(InputLimits {
                max_bytes: 1 << 20,
                max_depth: 4,
            })
        })
        .build();
    let deep = json!({ "a": { "b": { "c": { "d": { "e": 1 } } } } });

    let err = pipeline
        .invoke(TOOL, deep.clone(), options())
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::InputTooDeep { limit: 4 });
    assert_eq!(err.status(), 400);

    let err = pipeline
        .invoke_str(TOOL, &deep.to_string(), options())
        .await
        .unwrap_err();
    assert_eq!(err, ToolError::InputTooDeep { limit: 4 });

    let hostile = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let err = pipeline
        .invoke_str(TOOL, &hostile, options())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "input_too_deep");
}

#[tokio::test]
async fn json_text_that_does_not_parse_is_invalid_input_not_a_panic() {
    let pipeline = TestPipeline::new().tool(ScriptedTool::new(TOOL)).build();

    let err = pipeline
        .invoke_str(TOOL, "{\"q\": ", options())
        .await
        .unwrap_err();

    assert_eq!(err.code(), "invalid_input");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
}

#[test]
fn the_registry_refuses_a_second_tool_with_the_same_name() {
    let mut registry = ToolRegistry::new();
    registry.register(search_tool()).unwrap();

    let err = registry.register(search_tool()).unwrap_err();

    assert_eq!(
        err,
        RegistryError::DuplicateTool {
            name: "search".into()
        }
    );
    assert!(err.to_string().contains("already registered"), "{err}");
    assert_eq!(
        Pipeline::builder()
            .registry(registry)
            .build()
            .unwrap()
            .definitions()
            .len(),
        1
    );
}

#[test]
fn a_tool_named_dot_or_dot_dot_is_refused_because_a_url_path_resolves_it_away() {
    for name in [".", ".."] {
        let tool = tool_fn(name, "Searches.", |s: Search| async move {
            Ok::<_, ToolError>(json!({ "query": s.query }))
        });
        let err = ToolRegistry::new().register(tool).unwrap_err();
        assert_eq!(err, RegistryError::InvalidName { name: name.into() });
        assert!(err.to_string().contains("not `.` or `..` alone"), "{err}");
    }
    for name in ["...", ".hidden", "files..read", "v1."] {
        assert!(ToolRegistry::is_valid_name(name), "{name}");
    }
}

#[test]
fn a_builder_given_a_name_twice_fails_at_build_with_the_registry_error() {
    let err = Pipeline::builder()
        .tool(search_tool())
        .tool(search_tool())
        .build()
        .unwrap_err();

    assert_eq!(
        err,
        BuildError::Registry(RegistryError::DuplicateTool {
            name: "search".into()
        })
    );
    assert!(err.to_string().contains("already registered"), "{err}");
}

#[test]
fn listed_input_schemas_carry_the_garde_bounds() {
    let pipeline = Pipeline::builder().tool(search_tool()).build().unwrap();

    let definition = pipeline.definitions().next().unwrap();
    let properties = &definition.input_schema["properties"];

    assert_eq!(definition.name, "search");
    assert_eq!(definition.input_schema["type"], "object");
    assert_eq!(properties["query"]["maxLength"], 10);
    assert_eq!(properties["query"]["minLength"], 1);
    assert_eq!(properties["limit"]["maximum"], 50);
    assert_eq!(properties["limit"]["minimum"], 1);
    assert!(definition.output_schema.is_some());
}

#[tokio::test]
async fn a_whole_number_written_with_a_fraction_or_an_exponent_is_an_integer_as_json_schema_says() {
    let (pipeline, _) = search_pipeline();
    for limit in [json!(5.0), json!(5e0), json!(50.0)] {
        let output = pipeline
            .invoke("search", json!({ "query": "q", "limit": limit }), options())
            .await
            .unwrap();
        assert_eq!(
            output["limit"],
            json!(limit.as_f64().unwrap() as u64),
            "{output}"
        );
    }
    let err = pipeline
        .invoke("search", json!({ "query": "q", "limit": 5.5 }), options())
        .await
        .unwrap_err();
    assert_eq!(
        violations(&err),
        [(
            "limit".to_owned(),
            "invalid type: the number 5.5, expected a whole number, 0 or more".to_owned()
        )]
    );
}
