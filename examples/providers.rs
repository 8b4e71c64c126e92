//! Providers in two scopes, the short way: a URL allow-list hook that reads each session's
//! allow-list (seeded by the host when the session starts) and counts the calls it checks
//! in one global counter. `#[requires]` stays on the hook, so a wiring mistake fails
//! `build()`, and a call in a session the host never seeded is refused with an error that
//! names the missing provider. docs/providers.md explains each step.
//!
//! Run with `cargo run --example providers`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use garde::Validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolgate::prelude::*;

/// The hosts a session may fetch from: session scope, seeded by the host.
struct AllowedHosts;
impl TypeMapKey for AllowedHosts {
    type Value = Vec<String>;
}

/// How many calls the allow-list checked: global scope, one counter for every call.
struct CallsChecked;
impl TypeMapKey for CallsChecked {
    type Value = AtomicU64;
}

/// Refuses a `url` whose host is not on the session's allow-list, before any capacity is
/// taken (`will_authorize` sees the raw arguments).
struct UrlAllowList;

#[hook]
#[requires(AllowedHosts, CallsChecked)]
impl Hook for UrlAllowList {
    fn will_authorize(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        ctx.get::<CallsChecked>()?.fetch_add(1, Ordering::Relaxed);
        let allowed = ctx.get::<AllowedHosts>()?;
        let url = ctx.input()["url"].as_str().unwrap_or_default();
        let host = url.split("://").nth(1).unwrap_or_default();
        let host = host.split(['/', ':', '?']).next().unwrap_or_default();
        if !allowed.iter().any(|allowed| allowed == host) {
            let reason = format!("argument `url`: host `{host}` is not allowed in this session");
            return ctx.abort(reason, "forbidden", 403);
        }
        Ok(())
    }
}

#[derive(Deserialize, Validate, JsonSchema)]
struct Fetch {
    /// The page to fetch.
    #[garde(length(min = 1, max = 2000))]
    url: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let checked = Arc::new(AtomicU64::new(0));
    let pipeline = Pipeline::builder()
        .tool(tool_fn(
            "fetch",
            "Fetches a web page.",
            |f: Fetch| async move { Ok::<_, ToolError>(format!("<html>{}</html>", f.url)) },
        ))
        .hook(UrlAllowList)
        // Global: bound once; the host keeps its own handle to read the count.
        .provide_shared::<CallsChecked>(Arc::clone(&checked))
        // Session: the host seeds it per session, so the build check accepts the hook's
        // `#[requires(AllowedHosts)]` and checks every call for it instead.
        .per_call_provider::<AllowedHosts>()
        .build()?;

    // A session starts: the host seeds its allow-list once.
    pipeline
        .session("alice-1")
        .provide::<AllowedHosts>(vec!["docs.rs".into()]);
    let alice = || {
        InvokeOptions::new()
            .user(User::new("alice"))
            .session("alice-1")
    };

    let page = json!({"url": "https://docs.rs/tokio"});
    let out = pipeline.invoke("fetch", page, alice()).await?;
    println!("allowed: {out}");

    let page = json!({"url": "https://evil.example/steal"});
    let refused = pipeline.invoke("fetch", page, alice()).await.unwrap_err();
    println!("refused: {refused}");
    assert_eq!(refused.code(), "forbidden");

    // A session the host never seeded: refused before any hook runs, naming the provider.
    let stranger = InvokeOptions::new().session("no-such-session");
    let page = json!({"url": "https://docs.rs"});
    let unseeded = pipeline.invoke("fetch", page, stranger).await.unwrap_err();
    println!("unseeded: {unseeded}");
    assert_eq!(unseeded.code(), "provider_not_supplied");

    println!("calls checked: {}", checked.load(Ordering::Relaxed));
    assert_eq!(checked.load(Ordering::Relaxed), 2);
    Ok(())
}
