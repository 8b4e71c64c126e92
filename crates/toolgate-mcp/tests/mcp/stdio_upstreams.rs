//! Stdio upstreams that misbehave (`tests/python/wayward_stdio.py`): one that stops
//! reading its input, one that dies as soon as it is called, one that answers with
//! messages that cannot be read. Each is a child process
//! shared by every caller, so what it does must not hold the others up for long, nor
//! make toolgate start programs without end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::within;
use serde_json::{Value, json};
use toolgate_core::registry::ToolRegistry;
use toolgate_core::{InvokeOptions, Pipeline, ToolError};
use toolgate_mcp::{Backoff, Upstream, UpstreamConfig};

const WAYWARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/wayward_stdio.py");

/// The fixture in `mode`, appending the id of each process it starts to `starts`.
fn wayward(mode: &str, starts: &Path) -> UpstreamConfig {
    UpstreamConfig::stdio("wayward", "python3", [WAYWARD, mode])
        .env("WAYWARD_STARTS", starts.display().to_string())
        .discover(false)
}

/// A file of this test's own to list started processes in.
fn starts_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("wayward-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The ids of the processes the fixture started, in order.
fn started(starts: &Path) -> Vec<u32> {
    std::fs::read_to_string(starts)
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a process id"))
        .collect()
}

/// Whether process `pid` is still there (running, or exited and not reaped).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

async fn pipeline(config: UpstreamConfig) -> (Upstream, Pipeline) {
    let upstream = within(30, "import", Upstream::connect(config))
        .await
        .expect("imported");
    let mut tools = ToolRegistry::new();
    upstream.register(&mut tools).expect("registered");
    let pipeline = Pipeline::builder().registry(tools).build().expect("built");
    (upstream, pipeline)
}

async fn echo(pipeline: &Pipeline, input: Value) -> Result<Value, ToolError> {
    within(
        30,
        "a call",
        pipeline.invoke("echo", input, InvokeOptions::new()),
    )
    .await
}

#[tokio::test]
async fn an_upstream_that_stops_reading_its_input_is_stopped_and_started_again() {
    let starts = starts_file("stops-reading");
    let (_upstream, pipeline) =
        pipeline(wayward("stops-reading", &starts).call_timeout(Duration::from_secs(1))).await;
    // More than a pipe holds: the write waits for a reader that never comes.
    let error = echo(&pipeline, json!({"text": "x".repeat(300_000)}))
        .await
        .expect_err("never read");
    assert_eq!(error.code(), "timeout", "{error}");

    let stuck = started(&starts)[0];
    let answer = within(20, "a new program answers", async {
        loop {
            if let Ok(answer) = echo(&pipeline, json!({"text": "hi"})).await {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(answer.to_string().contains("hi"), "{answer}");
    assert_eq!(started(&starts).len(), 2, "started once more");
    within(10, "the stuck program is stopped and reaped", async {
        while exists(stuck) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let _ = std::fs::remove_file(&starts);
}

#[tokio::test]
async fn an_upstream_that_dies_at_every_call_is_started_again_with_backoff_not_at_every_call() {
    let starts = starts_file("dies-after-init");
    let (_upstream, pipeline) = pipeline(wayward("dies-after-init", &starts).backoff(Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(10),
    }))
    .await;
    let mut last = None;
    for _ in 0..20 {
        last = Some(echo(&pipeline, json!({})).await.expect_err("it dies"));
    }
    let last = last.expect("called");
    // Waits of 200, 400, 800 and 1600 ms, each within what one call waits for an
    // upstream to come back; past them the calls fail at once, naming the wait.
    assert_eq!(last.code(), "upstream_unavailable", "{last}");
    assert!(last.is_retryable(), "{last}");
    let all = started(&starts);
    assert!(
        all.len() <= 7,
        "20 calls started {} programs: a restart must wait out the backoff",
        all.len()
    );
    within(10, "every program it started is gone and reaped", async {
        while all.iter().any(|pid| exists(*pid)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let _ = std::fs::remove_file(&starts);
}

#[tokio::test]
async fn an_answer_that_cannot_be_read_fails_its_call_at_once_and_the_connection_goes_on() {
    let starts = starts_file("unreadable-answers");
    let (_upstream, pipeline) =
        pipeline(wayward("unreadable-answers", &starts).call_timeout(Duration::from_secs(30)))
            .await;
    let cases = [
        ("number", "a number too large to read"),
        ("surrogate", "half a UTF-16 surrogate pair"),
        ("code", "`error.code` must be a whole number"),
        ("deep", "nested 128 levels deep or more"),
    ];
    // All at once, on the one connection: each fails alone.
    let calls = cases.map(|(unreadable, _)| {
        within(
            60,
            "a call answered with a message that cannot be read",
            pipeline.invoke(
                "echo",
                json!({ "unreadable": unreadable }),
                InvokeOptions::new(),
            ),
        )
    });
    let failed = futures::future::join_all(calls).await;
    for ((unreadable, why), failed) in cases.iter().zip(failed) {
        let error = failed.expect_err(unreadable);
        assert_eq!(error.code(), "tool_error", "{unreadable}: {error}");
        let message = error.to_string();
        assert!(
            message.contains(
                "MCP server `wayward` answered this call with a message that cannot be read"
            ) && message.contains(why),
            "{unreadable}: {message}"
        );
    }
    let answer = echo(&pipeline, json!({"text": "after"}))
        .await
        .expect("answered");
    assert!(answer.to_string().contains("after"), "{answer}");
    assert_eq!(started(&starts).len(), 1, "one connection throughout");
    let _ = std::fs::remove_file(&starts);
}
