//! Secrets: sources, declarations, missing secrets, and scrubbing of every encoding.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::json;
use toolgate_core::tool::ErasedTool;
use toolgate_core::{InvokeOptions, JsonTool, Pipeline};
use toolgate_hooks::secrets::{
    EnvSecrets, FileSecrets, InMemorySecrets, SCRUBBED, Scrubber, SecretInjection, SecretSource,
};

/// A tool that returns the names of the secrets it got and whether each is non-empty.
fn inspector(tags: &[&str]) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new("inspect", "", json!({}), |_, ctx| {
        let mut names: Vec<String> = ctx.secrets().names().map(str::to_owned).collect();
        names.sort();
        let lengths: Vec<usize> = names
            .iter()
            .map(|n| ctx.secrets().get(n).unwrap().expose().len())
            .collect();
        Box::pin(async move {
            Ok::<_, toolgate_core::ToolError>(json!({ "names": names, "lengths": lengths }))
        })
    });
    tool.definition_mut().tags = tags.iter().map(|t| (*t).to_owned()).collect();
    Arc::new(tool)
}

#[tokio::test]
async fn only_declared_secrets_are_injected_from_the_first_source_that_has_them() {
    let p = Pipeline::builder()
        .tool(inspector(&["secret:a"]))
        .hook(
            SecretInjection::builder()
                .source(InMemorySecrets::new().with("a", "1"))
                .source(
                    InMemorySecrets::new()
                        .with("a", "22")
                        .with("b", "333")
                        .with("c", "4444"),
                )
                .tool("inspect", ["b"])
                .build(),
        )
        .build()
        .unwrap();
    let out = p
        .invoke("inspect", json!({}), InvokeOptions::new())
        .await
        .unwrap();
    assert_eq!(out, json!({ "names": ["a", "b"], "lengths": [1, 3] }));
}

#[tokio::test]
async fn a_missing_secret_fails_the_call_naming_it() {
    let p = Pipeline::builder()
        .tool(inspector(&["secret:nope"]))
        .hook(
            SecretInjection::builder()
                .source(InMemorySecrets::new())
                .build(),
        )
        .build()
        .unwrap();
    let err = p
        .invoke("inspect", json!({}), InvokeOptions::new())
        .await
        .unwrap_err();
    assert_eq!((err.code(), err.status()), ("missing_secret", 500));
    assert!(
        err.to_string()
            .contains("secret `nope` needed by tool `inspect`"),
        "{err}"
    );
}

#[tokio::test]
async fn environment_and_file_sources_read_their_secrets() {
    let env = EnvSecrets::with_prefix("TOOLGATE_HOOKS_TEST_");
    assert_eq!(
        env.variable("github-token"),
        "TOOLGATE_HOOKS_TEST_GITHUB_TOKEN"
    );
    // Setting a variable is unsafe in edition 2024 (and unsafe code is forbidden here), so
    // read one every test process has, through an empty prefix.
    let path = std::env::var("PATH").unwrap();
    let from_env = EnvSecrets::with_prefix("");
    assert_eq!(
        from_env
            .fetch("path")
            .await
            .unwrap()
            .map(|s| s.expose().to_owned()),
        Some(path)
    );
    assert!(env.fetch("absent").await.unwrap().is_none());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db-password"), "hunter2\n").unwrap();
    let files = FileSecrets::new(dir.path());
    assert_eq!(
        files
            .fetch("db-password")
            .await
            .unwrap()
            .map(|s| s.expose().to_owned()),
        Some("hunter2".into())
    );
    assert!(files.fetch("absent").await.unwrap().is_none());
    assert!(
        files.fetch("../etc/passwd").await.is_err(),
        "names cannot escape the directory"
    );
}

#[test]
fn every_encoding_of_a_secret_is_scrubbed() {
    let secret = "s3cr3t value/+&";
    let scrubber = Scrubber::for_values([secret]);
    let encoded_url = "s3cr3t%20value%2F%2B%26";
    let mut value = json!({
        "raw": format!("x {secret} y"),
        "b64": STANDARD.encode(secret),
        "b64url": format!("tok={}", URL_SAFE_NO_PAD.encode(secret)),
        "url": format!("https://x.test/?p={encoded_url}"),
        "form": "s3cr3t+value%2F%2B%26",
        secret: "as a key",
    });
    assert_eq!(scrubber.scrub_value(&mut value), 6);
    let text = value.to_string();
    assert!(!text.contains("s3cr3t"), "{text}");
    assert_eq!(value["raw"], format!("x {SCRUBBED} y"));
}

#[test]
fn scrubbing_leaves_text_without_secrets_alone() {
    let scrubber = Scrubber::for_values(["topsecret", ""]);
    assert_eq!(scrubber.scrub_text("nothing here"), None);
    let mut v = json!({ "a": [1, "b", null] });
    assert_eq!(scrubber.scrub_value(&mut v), 0);
}

#[test]
fn a_secret_escaped_in_json_or_a_debug_log_is_scrubbed() {
    let secret = r#"pa"ss\word"#;
    let scrubber = Scrubber::for_values([secret]);
    let json_line = serde_json::to_string(&json!({ "echo": secret })).unwrap();
    let clean = scrubber
        .scrub_bytes(json_line.as_bytes())
        .expect("found in JSON");
    let clean = String::from_utf8(clean).unwrap();
    assert_eq!(clean, format!(r#"{{"echo":"{SCRUBBED}"}}"#));
    let debug_line = format!("reason={:?}", format!("got {secret}"));
    let clean = scrubber
        .scrub_text(&debug_line)
        .expect("found in Debug output");
    assert!(!clean.contains("ss\\\\word"), "{clean}");
    assert!(scrubber.occurs_in(secret) && !scrubber.occurs_in("password"));
    assert_eq!(format!("{scrubber:?}"), "Scrubber(1 secrets)");
}

#[test]
fn keys_that_scrub_to_the_same_placeholder_keep_their_values() {
    let scrubber = Scrubber::for_values(["tok-1", "tok-2"]);
    let mut value = json!({ "tok-1": 1, "tok-2": 2 });
    assert_eq!(scrubber.scrub_value(&mut value), 2);
    assert_eq!(value, json!({ SCRUBBED: 1, format!("{SCRUBBED} (2)"): 2 }));
}

/// Whether the hook named `hook` is anywhere in `tool`'s plan.
fn planned(p: &Pipeline, tool: &str, hook: &str) -> bool {
    p.plan(tool)
        .expect("a registered tool")
        .iter()
        .any(|(_, hooks)| hooks.iter().any(|h| h == hook))
}

#[tokio::test]
async fn only_tools_that_declare_a_secret_have_the_hook_in_their_plan() {
    let mut plain = JsonTool::new("plain", "", json!({}), |_, ctx| {
        let given = ctx.secrets().names().count();
        Box::pin(async move { Ok::<_, toolgate_core::ToolError>(json!({ "given": given })) })
    });
    plain.definition_mut().tags = vec!["read-only".to_owned()];
    let configured = JsonTool::new("configured", "", json!({}), |_, _| {
        Box::pin(async { Ok::<_, toolgate_core::ToolError>(json!("ok")) })
    });
    let p = Pipeline::builder()
        .tool(inspector(&["secret:a"]))
        .tool(plain)
        .tool(configured)
        .hook(
            SecretInjection::builder()
                .source(InMemorySecrets::new().with("a", "1").with("b", "2"))
                .tool("configured", ["b"])
                .build(),
        )
        .build()
        .unwrap();
    // Declared by a tag, and by the hook's configuration.
    assert!(planned(&p, "inspect", "secret_injection"));
    assert!(planned(&p, "configured", "secret_injection"));
    // Declaring none: left out, so the call pays nothing for the hook and gets no secret.
    assert!(!planned(&p, "plain", "secret_injection"));
    let out = p
        .invoke("plain", json!({}), InvokeOptions::new())
        .await
        .unwrap();
    assert_eq!(out, json!({ "given": 0 }));
}
