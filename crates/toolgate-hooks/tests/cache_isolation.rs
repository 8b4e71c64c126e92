//! No cross-user cache hits: a property test over random users and inputs, and a canary
//! test whose values name their owner.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::json;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline, ToolError, User};
use toolgate_hooks::cache::{MokaCache, ResultCache};

fn canary_pipeline(backend: Arc<MokaCache>, runs: Arc<AtomicUsize>) -> Pipeline {
    let mut tool = JsonTool::new(
        "profile",
        "Returns the caller's profile.",
        json!({}),
        move |input, ctx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let out = json!({ "owner": ctx.user().id, "canary": format!("canary-of-{}", ctx.user().id), "input": input });
            Box::pin(async move { Ok::<_, ToolError>(out) })
        },
    );
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    Pipeline::builder()
        .tool(tool)
        .hook(ResultCache::builder().shared_backend(backend).build())
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_call_is_ever_served_another_users_result(
        calls in proptest::collection::vec((0usize..6, 0u8..4), 1..60)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let runs = Arc::new(AtomicUsize::new(0));
            let p = canary_pipeline(Arc::new(MokaCache::default()), runs.clone());
            let mut distinct = HashSet::new();
            for (user, input) in &calls {
                let id = format!("user-{user}");
                let out = p
                    .invoke("profile", json!({ "q": input }), InvokeOptions::new().user(User::new(id.clone())))
                    .await
                    .unwrap();
                prop_assert_eq!(&out["owner"], &json!(id));
                distinct.insert((user, input));
            }
            // Hits did happen (one run per distinct user and input), and none crossed users.
            prop_assert_eq!(runs.load(Ordering::SeqCst), distinct.len());
            Ok(())
        })?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_values_are_only_ever_read_by_their_owner() {
    let backend = Arc::new(MokaCache::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let p = canary_pipeline(backend.clone(), runs);
    let users: Vec<String> = (0..20).map(|i| format!("owner-{i}")).collect();
    let mut tasks = Vec::new();
    for round in 0..5 {
        for user in &users {
            let (p, user) = (p.clone(), user.clone());
            tasks.push(tokio::spawn(async move {
                let out = p
                    .invoke(
                        "profile",
                        json!({ "q": round % 2 }),
                        InvokeOptions::new().user(User::new(user.clone())),
                    )
                    .await
                    .unwrap();
                (user, out)
            }));
        }
    }
    for task in tasks {
        let (user, out) = task.await.unwrap();
        assert_eq!(out["owner"], json!(user));
        assert_eq!(out["canary"], json!(format!("canary-of-{user}")));
    }
    // Every stored entry names one owner, and there is one entry per owner and input.
    let values = backend.values();
    assert_eq!(values.len(), users.len() * 2);
    for value in values {
        assert_eq!(
            value["canary"],
            json!(format!("canary-of-{}", value["owner"].as_str().unwrap()))
        );
    }
}

#[tokio::test]
async fn a_cached_private_result_of_ann_of_acme_is_not_served_to_ann_of_globex() {
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&runs);
    let mut tool = JsonTool::new(
        "profile",
        "Returns the caller's profile.",
        json!({}),
        move |_, ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            let out = json!({ "id": ctx.user().id, "tenant": ctx.user().tenant });
            Box::pin(async move { Ok::<_, ToolError>(out) })
        },
    );
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    let pipeline = Pipeline::builder()
        .tool(tool)
        .hook(ResultCache::builder().build())
        .build()
        .unwrap();
    let call = |tenant: Option<&str>| {
        let mut ann = User::new("ann");
        ann.tenant = tenant.map(str::to_owned);
        pipeline.invoke("profile", json!({}), InvokeOptions::new().user(ann))
    };

    let acme = call(Some("acme")).await.unwrap();
    assert_eq!(acme, json!({"id": "ann", "tenant": "acme"}));
    assert_eq!(
        call(Some("acme")).await.unwrap(),
        acme,
        "her own result is cached"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    assert_eq!(
        call(Some("globex")).await.unwrap(),
        json!({"id": "ann", "tenant": "globex"}),
        "ann of globex gets a result of her own"
    );
    assert_eq!(
        call(None).await.unwrap(),
        json!({"id": "ann", "tenant": null}),
        "so does the ann without a tenant"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
