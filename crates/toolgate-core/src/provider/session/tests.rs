//! The session scope's bounds as callers meet them: a share per caller, a bounded id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::prelude::*;
use crate::provider::{SessionConfig, bind_provider};
use crate::tool::tool_fn_with_context;

/// A per-session counter: what a session loses when it is evicted.
struct Turns;
impl TypeMapKey for Turns {
    type Value = AtomicU64;
}

/// `turn` counts the calls of its session; `session_id` answers the id the call runs in.
fn counting_pipeline(config: SessionConfig) -> Pipeline {
    Pipeline::builder()
        .tool(tool_fn_with_context(
            "turn",
            "Counts the turns of this session.",
            |_: (), ctx: &ToolInvokeContext| {
                let turns = ctx
                    .get::<Turns>()
                    .map(|t| t.fetch_add(1, Ordering::SeqCst) + 1);
                Box::pin(async move { turns.map_err(ToolError::from) })
            },
        ))
        .tool(tool_fn_with_context(
            "session_id",
            "The session id of this call.",
            |_: (), ctx: &ToolInvokeContext| {
                let id = ctx.session_id().map(str::to_owned);
                Box::pin(async move { Ok::<_, ToolError>(id) })
            },
        ))
        .hook(bind_provider::<Turns, _>(Scope::Session, |_| {
            Some(AtomicU64::new(0))
        }))
        .sessions(config)
        .build()
        .expect("the pipeline builds")
}

/// `toolgate_http::session_key` as it was before ids were bounded (core cannot depend on
/// toolgate-http).
fn keyed(user: &User, id: &str) -> String {
    json!([user.tenant, user.id, id]).to_string()
}

async fn turn(pipeline: &Pipeline, user: &User, session: &str) -> Value {
    let options = InvokeOptions::new().user(user.clone()).session(session);
    pipeline.invoke("turn", Value::Null, options).await.unwrap()
}

fn config(max_sessions: usize) -> SessionConfig {
    SessionConfig {
        max_sessions,
        idle_timeout: Duration::from_secs(3600),
    }
}

#[tokio::test(start_paused = true)]
async fn one_callers_flood_of_session_ids_evicts_only_their_own_sessions() {
    let max = 1_000;
    let pipeline = counting_pipeline(config(max));
    let ann = User::new("ann").with_tenant("acme");
    let chat = keyed(&ann, "chat-1");
    for _ in 0..5 {
        turn(&pipeline, &ann, &chat).await;
    }
    pipeline
        .session("host-thread")
        .provide::<Turns>(AtomicU64::new(100));

    let mallory = User::new("mallory").with_tenant("evil");
    for i in 0..5 * max {
        turn(&pipeline, &mallory, &keyed(&mallory, &format!("x{i}"))).await;
    }

    assert_eq!(turn(&pipeline, &ann, &chat).await, json!(6));
    let seeded = pipeline.session("host-thread").get::<Turns>();
    assert_eq!(seeded.unwrap().load(Ordering::SeqCst), 100);
    assert!(pipeline.session_count() <= max);
    // Her latest session is kept: she loses her own oldest first.
    let last = keyed(&mallory, &format!("x{}", 5 * max - 1));
    assert_eq!(turn(&pipeline, &mallory, &last).await, json!(2));
}

#[tokio::test(start_paused = true)]
async fn at_the_maximum_the_caller_holding_the_most_loses_their_least_recently_used_session() {
    // At most 10 sessions; a caller's share is one.
    let pipeline = counting_pipeline(config(10));
    let (ann, bob) = (User::new("ann"), User::new("bob"));
    turn(&pipeline, &bob, "b0").await;
    for i in 0..9 {
        turn(&pipeline, &ann, &format!("a{i}")).await;
    }
    // The clock stands still: only the order of use can tell a0 from a1.
    turn(&pipeline, &ann, "a0").await;
    turn(&pipeline, &ann, "a9").await;

    assert_eq!(pipeline.session_count(), 10);
    assert_eq!(
        turn(&pipeline, &bob, "b0").await,
        json!(2),
        "bob's older session stays"
    );
    assert_eq!(
        turn(&pipeline, &ann, "a0").await,
        json!(3),
        "a0 was used lately"
    );
    assert_eq!(
        turn(&pipeline, &ann, "a1").await,
        json!(1),
        "a1 was evicted"
    );
}

#[tokio::test(start_paused = true)]
async fn under_the_maximum_a_caller_keeps_every_session_they_make() {
    // A single-user host (every thread one user's) keeps up to the maximum, as before.
    let pipeline = counting_pipeline(config(100));
    let ann = User::new("ann");
    for i in 0..100 {
        turn(&pipeline, &ann, &format!("a{i}")).await;
    }
    assert_eq!(pipeline.session_count(), 100);
    assert_eq!(turn(&pipeline, &ann, "a0").await, json!(2));
}

#[tokio::test(start_paused = true)]
async fn host_seeded_sessions_are_not_capped_per_caller() {
    let pipeline = counting_pipeline(config(100));
    for i in 0..50 {
        pipeline
            .session(format!("thread-{i}"))
            .provide::<Turns>(AtomicU64::new(0));
    }
    assert_eq!(pipeline.session_count(), 50);
    // A caller's share counts their own sessions only.
    let ann = User::new("ann");
    for i in 0..10 {
        turn(&pipeline, &ann, &format!("a{i}")).await;
    }
    assert_eq!(pipeline.session_count(), 60);
    assert!(pipeline.session("thread-0").get::<Turns>().is_some());
}

#[tokio::test(start_paused = true)]
async fn the_total_cap_still_bounds_many_callers_together() {
    let max = 100;
    let pipeline = counting_pipeline(config(max));
    for caller in 0..20 {
        let user = User::new(format!("user-{caller}"));
        for i in 0..max / 10 {
            turn(&pipeline, &user, &format!("{caller}-{i}")).await;
        }
    }
    assert!(pipeline.session_count() <= max);
}

#[tokio::test(start_paused = true)]
async fn long_session_ids_are_kept_as_a_fixed_length_digest() {
    let pipeline = counting_pipeline(config(1_000));
    let ann = User::new("ann");
    let big = "x".repeat(1 << 20);
    let ids: Vec<String> = (0..32).map(|i| keyed(&ann, &format!("{big}{i}"))).collect();
    for id in &ids {
        assert_eq!(turn(&pipeline, &ann, id).await, json!(1));
    }
    // Distinct ids stay distinct sessions, and the same id finds its session again.
    assert_eq!(pipeline.session_count(), 32);
    assert_eq!(turn(&pipeline, &ann, &ids[7]).await, json!(2));

    let options = InvokeOptions::new().user(ann.clone()).session(&ids[7]);
    let seen = pipeline
        .invoke("session_id", Value::Null, options)
        .await
        .unwrap();
    let seeded = pipeline.session(&ids[7]);
    assert_eq!(seen, json!(seeded.id()));
    assert!(seeded.id().len() <= 128, "{} bytes kept", seeded.id().len());
    assert_eq!(seeded.get::<Turns>().unwrap().load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_session_id_of_at_most_128_bytes_is_kept_as_given() {
    let pipeline = counting_pipeline(config(1_000));
    let id = "t".repeat(128);
    assert_eq!(pipeline.session(&id).id(), id);
    let options = InvokeOptions::new().session(&id);
    let seen = pipeline
        .invoke("session_id", Value::Null, options)
        .await
        .unwrap();
    assert_eq!(seen, json!(id));
}

#[tokio::test(start_paused = true)]
async fn a_caller_leaves_no_trace_once_their_sessions_are_gone() {
    use std::sync::Arc;

    use crate::provider::SessionStore;

    let store = SessionStore::new(config(100));
    store.get_or_create(&Arc::from("a"), Some(&User::new("ann")));
    store.get_or_create(&Arc::from("b"), Some(&User::new("bob").with_tenant("acme")));
    store.get_or_create(&Arc::from("h"), None);
    assert_eq!(store.callers(), 2);

    assert!(store.remove("a"));
    assert_eq!(store.callers(), 1);
    tokio::time::advance(Duration::from_secs(3601)).await;
    assert!(store.get("b").is_none(), "b expired");
    assert_eq!(store.callers(), 0);
}
