use serde_json::json;
use toolgate_core::{Pipeline, ToolError, User, tool_fn};
use toolgate_hooks::feature_flags::{FeatureFlags, FlagError, FlagProvider, InMemoryFlags};
use toolgate_hooks::{OnBackendError, async_trait};

use crate::support::{as_user, ok_tool, runs};

fn pipeline(hook: FeatureFlags) -> Pipeline {
    let (builder, _) = ok_tool(Pipeline::builder(), "search");
    let builder = builder.tool(
        tool_fn("preview", "Beta.", |_: ()| async {
            Ok::<_, ToolError>("beta")
        })
        .tag("beta"),
    );
    builder.hook(hook).build().unwrap()
}

#[tokio::test]
async fn a_tool_switched_off_is_refused_with_feature_disabled() {
    let flags = InMemoryFlags::new();
    let pipeline = pipeline(FeatureFlags::builder(flags.clone()).build());
    assert!(
        pipeline
            .invoke("search", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
    flags.set("tool.search", false);
    let err = pipeline
        .invoke("search", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("feature_disabled", 403));
    assert!(err.to_string().contains("tool.search"), "{err}");
    flags.set("tool.search", true);
    assert!(
        pipeline
            .invoke("search", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_tag_flag_switches_off_every_tool_with_the_tag() {
    let flags = InMemoryFlags::new();
    let pipeline = pipeline(
        FeatureFlags::builder(flags.clone())
            .tag("beta", "beta-tools")
            .build(),
    );
    flags.set("beta-tools", false);
    assert_eq!(
        pipeline
            .invoke("preview", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "feature_disabled"
    );
    assert!(
        pipeline
            .invoke("search", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn unset_flags_count_as_configured() {
    let flags = InMemoryFlags::new();
    let gate = FeatureFlags::builder(flags.clone())
        .tool_flag_prefix(None)
        .tool("search", "search-ga")
        .when_unset(false)
        .build();
    let pipeline = pipeline(gate);
    assert_eq!(
        pipeline
            .invoke("search", json!(null), as_user("ann"))
            .await
            .unwrap_err()
            .code(),
        "feature_disabled"
    );
    assert!(
        pipeline
            .invoke("preview", json!(null), as_user("ann"))
            .await
            .is_ok(),
        "no flag gates preview"
    );
    flags.set("search-ga", true);
    assert!(
        pipeline
            .invoke("search", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}

struct Down;
#[async_trait]
impl FlagProvider for Down {
    async fn is_enabled(&self, _: &str, _: &User) -> Result<Option<bool>, FlagError> {
        Err(FlagError("flag service down".into()))
    }
}

#[tokio::test]
async fn a_failing_provider_refuses_by_default_and_passes_when_fail_open() {
    let (builder, runs_) = ok_tool(Pipeline::builder(), "search");
    let closed = builder
        .hook(FeatureFlags::builder(Down).build())
        .build()
        .unwrap();
    let err = closed
        .invoke("search", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.status()),
        ("feature_flags_unavailable", 503)
    );
    assert_eq!(runs(&runs_), 0);

    let open = pipeline(
        FeatureFlags::builder(Down)
            .on_provider_error(OnBackendError::FailOpen)
            .build(),
    );
    assert!(
        open.invoke("search", json!(null), as_user("ann"))
            .await
            .is_ok()
    );
}
