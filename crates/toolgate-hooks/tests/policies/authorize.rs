use serde_json::json;
use toolgate_core::tool::ToolAnnotations;
use toolgate_core::{Pipeline, ToolError, User, tool_fn};
use toolgate_hooks::authorize::{Authorize, AuthorizeError, Effect, Rule, Rules, Verdict};

use crate::support::{as_caller, as_user, ok_tool, runs};

fn tagged_pipeline(auth: Authorize) -> Pipeline {
    Pipeline::builder()
        .tool(
            tool_fn("fs.read", "Reads.", |_: ()| async {
                Ok::<_, ToolError>("data")
            })
            .annotations(ToolAnnotations::READ_ONLY),
        )
        .tool(
            tool_fn("fs.delete", "Deletes.", |_: ()| async {
                Ok::<_, ToolError>("gone")
            })
            .tag("destructive"),
        )
        .tool(tool_fn("admin.reset", "Resets.", |_: ()| async {
            Ok::<_, ToolError>("reset")
        }))
        .hook(auth)
        .build()
        .unwrap()
}

fn staff(id: &str) -> User {
    User::new(id).with_roles(["staff"])
}

#[tokio::test]
async fn default_deny_refuses_a_call_no_rule_allows_with_forbidden() {
    let (builder, runs_) = ok_tool(Pipeline::builder(), "ping");
    let pipeline = builder
        .hook(Authorize::new(Rules::new(Effect::Deny)))
        .build()
        .unwrap();
    let err = pipeline
        .invoke("ping", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert!(
        err.to_string().contains("`ann` may not call `ping`"),
        "{err}"
    );
    assert_eq!(runs(&runs_), 0);
}

#[tokio::test]
async fn default_allow_lets_through_what_no_rule_denies() {
    let (builder, _) = ok_tool(Pipeline::builder(), "ping");
    let pipeline = builder
        .hook(Authorize::new(Rules::new(Effect::Allow)))
        .build()
        .unwrap();
    assert_eq!(
        pipeline
            .invoke("ping", json!(null), as_user("ann"))
            .await
            .unwrap(),
        json!("ok")
    );
}

#[tokio::test]
async fn deny_wins_over_allow_whatever_the_order() {
    let rules = Rules::new(Effect::Deny)
        .rule(Rule::deny().tag("destructive").user("bob"))
        .rule(Rule::allow().role("staff"));
    let pipeline = tagged_pipeline(Authorize::new(rules));
    let bob = toolgate_core::InvokeOptions::new().user(staff("bob"));
    let err = pipeline
        .invoke("fs.delete", json!(null), bob)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "forbidden");
    let bob = toolgate_core::InvokeOptions::new().user(staff("bob"));
    assert_eq!(
        pipeline.invoke("fs.read", json!(null), bob).await.unwrap(),
        json!("data")
    );
}

#[tokio::test]
async fn rules_match_on_role_tool_prefix_and_tag() {
    let rules = Rules::new(Effect::Deny)
        .rule(Rule::allow().tool("fs.*").role("staff"))
        .rule(Rule::allow().user("root"));
    let pipeline = tagged_pipeline(Authorize::new(rules));
    let ann = || toolgate_core::InvokeOptions::new().user(staff("ann"));
    assert!(pipeline.invoke("fs.read", json!(null), ann()).await.is_ok());
    assert!(
        pipeline
            .invoke("fs.delete", json!(null), ann())
            .await
            .is_ok()
    );
    assert_eq!(
        pipeline
            .invoke("admin.reset", json!(null), ann())
            .await
            .unwrap_err()
            .code(),
        "forbidden"
    );
    assert!(
        pipeline
            .invoke("admin.reset", json!(null), as_user("root"))
            .await
            .is_ok()
    );
    assert_eq!(
        pipeline
            .invoke("fs.read", json!(null), as_user("guest"))
            .await
            .unwrap_err()
            .code(),
        "forbidden"
    );
}

#[tokio::test]
async fn an_evaluator_error_denies_the_call() {
    let failing =
        |_: &User, _: &toolgate_core::tool::ToolDefinition| -> Result<Verdict, AuthorizeError> {
            Err(AuthorizeError("policy store unreachable".into()))
        };
    let (builder, runs_) = ok_tool(Pipeline::builder(), "ping");
    let pipeline = builder.hook(Authorize::new(failing)).build().unwrap();
    let err = pipeline
        .invoke("ping", json!(null), as_user("ann"))
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("forbidden", 403));
    assert!(
        !err.to_string().contains("unreachable"),
        "the caller must not see the evaluator's error: {err}"
    );
    assert_eq!(runs(&runs_), 0);
}

#[tokio::test]
async fn listing_shows_only_the_tools_the_user_may_call() {
    let auth = Authorize::new(
        Rules::new(Effect::Deny)
            .rule(Rule::allow().role("staff"))
            .rule(Rule::deny().tag("destructive").role("intern")),
    );
    let pipeline = tagged_pipeline(auth.clone());
    let names = |user: &User| -> Vec<String> {
        auth.visible_tools(user, pipeline.definitions())
            .into_iter()
            .map(|d| d.name.clone())
            .collect()
    };
    assert_eq!(
        names(&staff("ann")),
        ["fs.read", "fs.delete", "admin.reset"]
    );
    assert_eq!(
        names(&User::new("ivy").with_roles(["staff", "intern"])),
        ["fs.read", "admin.reset"]
    );
    assert!(names(&User::new("guest")).is_empty());
}

#[tokio::test]
async fn listing_hides_every_tool_when_the_evaluator_errors() {
    let auth = Authorize::new(
        |_: &User, _: &toolgate_core::tool::ToolDefinition| -> Result<Verdict, AuthorizeError> {
            Err(AuthorizeError("boom".into()))
        },
    );
    let pipeline = tagged_pipeline(Authorize::new(Rules::new(Effect::Allow)));
    assert!(
        auth.visible_tools(&staff("ann"), pipeline.definitions())
            .is_empty()
    );
}

#[tokio::test]
async fn an_approved_call_whose_caller_lost_access_while_it_waited_is_refused_and_never_runs() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use toolgate_hooks::consent::Consent;

    // The refusal names the caller, with the tenant if it has one.
    for (caller, refused) in [
        (as_user("bob"), "user `bob` may no longer call `wipe`"),
        (
            as_caller("bob", "acme"),
            "user `bob` of tenant `acme` may no longer call `wipe`",
        ),
    ] {
        let revoked = Arc::new(AtomicBool::new(false));
        let gate = Arc::clone(&revoked);
        let auth = Authorize::new(
            move |user: &User, _: &toolgate_core::tool::ToolDefinition| {
                Ok(if gate.load(Ordering::SeqCst) {
                    Verdict::deny(format!("user `{}` may not call this", user.id))
                } else {
                    Verdict::Allow
                })
            },
        );
        let consent = Consent::builder().tool("wipe").build();
        let approvals = consent.approvals();
        let (builder, wiped) = ok_tool(Pipeline::builder(), "wipe");
        let pipeline = builder.hook(auth).hook(consent).build().unwrap();
        let waiting = pipeline
            .invoke("wipe", json!(null), caller)
            .await
            .unwrap_err();
        let ToolError::Suspended { suspension_id, .. } = waiting else {
            panic!("expected a suspension, got {waiting:?}");
        };

        revoked.store(true, Ordering::SeqCst);
        let err = approvals
            .approve(&pipeline, &suspension_id, false, Default::default())
            .await
            .unwrap_err();

        assert_eq!((err.code(), err.status()), ("forbidden", 403));
        assert!(err.to_string().starts_with(refused), "{err}");
        assert_eq!(runs(&wiped), 0);
    }
}
