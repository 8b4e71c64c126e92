//! An answer a streamable-HTTP upstream writes on a request's stream with the request's
//! own id, that cannot be read (a number past a 64-bit float): the request fails at once,
//! saying so, instead of waiting out its deadline, and the next one on the connection is
//! answered — a `tools/call` toolgate sends itself, and a request rmcp sends
//! (`resources/read`). Such a message naming a request whose stream it did not come on —
//! another caller's, on the shared connection — fails nothing: on another request's
//! stream, or on the standalone stream.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::hand_written::{event_stream, initialized, json_answer};
use crate::common::{imported, serve_on_loopback, within};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_core::{InvokeOptions, Pipeline};
use toolgate_mcp::UpstreamConfig;

/// Answers a call whose arguments name `unreadable` with an event that cannot be read,
/// any other with its arguments.
async fn posted(body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => initialized(&id, "unreadable"),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
        ]}})),
        "tools/call" => {
            let arguments = &message["params"]["arguments"];
            let data = if arguments.get("unreadable").is_some() {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"v":1e999}}}}}}"#
                )
            } else {
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                    {"type": "text", "text": arguments.to_string()}]}})
                .to_string()
            };
            let event = format!("event: message\ndata: {data}\n\n");
            event_stream(futures::stream::iter([event]))
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

#[tokio::test]
async fn a_call_answered_on_its_stream_with_a_message_that_cannot_be_read_fails_at_once() {
    let app = axum::Router::new().route("/mcp", axum::routing::post(posted));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("unreadable", url)
        .discover(false)
        .call_timeout(Duration::from_secs(30));
    let (_upstream, pipeline) = imported(config).await;
    for _ in 0..2 {
        let error = within(
            60,
            "a call answered with a message that cannot be read",
            pipeline.invoke("echo", json!({"unreadable": true}), InvokeOptions::new()),
        )
        .await
        .expect_err("cannot be read");
        assert_eq!(error.code(), "tool_error", "{error}");
        let message = error.to_string();
        assert!(
            message.contains(
                "MCP server `unreadable` answered this call with a message that cannot be read: a number too large to read"
            ),
            "{message}"
        );
    }
    let answer = within(
        60,
        "a call",
        pipeline.invoke("echo", json!({"text": "after"}), InvokeOptions::new()),
    )
    .await
    .expect("answered");
    assert!(answer.to_string().contains("after"), "{answer}");
}

/// An answer to request `id` that cannot be read: a resource's size past a 64-bit float.
fn unreadable_answer_to(id: &Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"contents":[{{"uri":"x://y","text":"t"}}],"size":1e999}}}}"#
    )
}

/// `data` as one SSE message event.
fn event(data: &str) -> String {
    format!("event: message\ndata: {data}\n\n")
}

/// A streamable-HTTP upstream at 2025-11-25 with resources. A read of `bad://own` is
/// answered with an answer to it that cannot be read, on a stream that stays open; a read of `slow://kept` is answered
/// once [`released`](Self::released); a read of `bad://other` gets on its stream first an
/// answer that cannot be read naming the read of `slow://kept`, then its own answer; any
/// other read, its URI. When `standalone_names_kept`, the standalone stream carries an
/// answer that cannot be read naming the read of `slow://kept`, once that is asked.
#[derive(Default)]
struct Resources {
    /// The id of the read of `slow://kept`, once asked.
    kept: Mutex<Option<Value>>,
    /// Notified when the read of `slow://kept` is asked.
    changed: Notify,
    /// Lets the read of `slow://kept` be answered.
    released: CancellationToken,
    standalone_names_kept: bool,
    /// Cancelled once the standalone stream has sent its event.
    standalone_sent: CancellationToken,
}

impl Resources {
    /// The id of the read of `slow://kept`, once it is asked.
    async fn kept(&self) -> Value {
        loop {
            let changed = self.changed.notified();
            if let Some(id) = self.kept.lock().unwrap().clone() {
                return id;
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), changed).await;
        }
    }
}

async fn resources_posted(State(upstream): State<Arc<Resources>>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON");
    let id = message["id"].clone();
    let read = |text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "result": {"contents": [
            {"uri": message["params"]["uri"], "text": text}]}})
        .to_string()
    };
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "resources", "version": "1"}}})),
        "tools/list" => json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}})),
        "resources/list" => {
            json_answer(json!({"jsonrpc": "2.0", "id": id, "result": {"resources": []}}))
        }
        "resources/read" => match message["params"]["uri"].as_str().unwrap_or_default() {
            "bad://own" => {
                // The stream stays open after it: a read whose answer is skipped waits
                // for another until its deadline.
                let answer = event(&unreadable_answer_to(&id));
                event_stream(futures::stream::iter([answer]).chain(futures::stream::pending()))
            }
            "slow://kept" => {
                *upstream.kept.lock().unwrap() = Some(id.clone());
                upstream.changed.notify_waiters();
                let (released, answer) = (upstream.released.clone(), read("kept"));
                event_stream(futures::stream::once(async move {
                    released.cancelled().await;
                    event(&answer)
                }))
            }
            "bad://other" => {
                let kept = upstream.kept().await;
                event_stream(futures::stream::iter([
                    event(&unreadable_answer_to(&kept)),
                    event(&read("other")),
                ]))
            }
            uri => event_stream(futures::stream::iter([event(&read(uri))])),
        },
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

/// The standalone stream: when the upstream is to, an answer that cannot be read naming
/// the read of `slow://kept` once that is asked; then nothing, open.
async fn standalone(State(upstream): State<Arc<Resources>>) -> Response {
    if !upstream.standalone_names_kept {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let events = futures::stream::once(async move {
        let kept = upstream.kept().await;
        let sent = upstream.standalone_sent.clone();
        (event(&unreadable_answer_to(&kept)), sent)
    })
    .flat_map(|(event, sent)| {
        // Told sent once the event is on its way; then the stream stays open.
        futures::stream::iter([event]).chain(futures::stream::once(async move {
            sent.cancel();
            std::future::pending::<String>().await
        }))
    });
    event_stream(events)
}

/// `upstream` served on loopback, its resources imported as `resources.resources`, each
/// request given 30 s.
async fn resources_upstream(upstream: &Arc<Resources>) -> Arc<Pipeline> {
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(resources_posted).get(standalone),
        )
        .with_state(Arc::clone(upstream));
    let url = serve_on_loopback(app).await + "/mcp";
    let config = UpstreamConfig::http("resources", url)
        .discover(false)
        .call_timeout(Duration::from_secs(30));
    let (_, pipeline) = imported(config).await;
    Arc::new(pipeline)
}

/// Reads `uri` of the upstream.
async fn read(pipeline: &Pipeline, uri: &str) -> Result<Value, toolgate_core::ToolError> {
    pipeline
        .invoke(
            "resources.resources",
            json!({"uri": uri}),
            InvokeOptions::new(),
        )
        .await
}

/// Starts a read of `slow://kept`, answered once the upstream is released.
fn read_kept(
    pipeline: &Arc<Pipeline>,
) -> tokio::task::JoinHandle<Result<Value, toolgate_core::ToolError>> {
    let pipeline = Arc::clone(pipeline);
    tokio::spawn(async move { read(&pipeline, "slow://kept").await })
}

#[tokio::test]
async fn a_read_answered_on_its_stream_with_a_message_that_cannot_be_read_fails_at_once() {
    let pipeline = resources_upstream(&Arc::default()).await;
    for _ in 0..2 {
        let started = Instant::now();
        // The request's deadline is 30 s: failing within 10 is failing at once.
        let error = within(
            10,
            "a read answered with a message that cannot be read",
            async { read(&pipeline, "bad://own").await },
        )
        .await
        .expect_err("cannot be read");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(error.code(), "tool_error", "{error}");
        let message = error.to_string();
        assert!(
            message.contains(
                "MCP server `resources` answered the request with a message that cannot be read: a number too large to read"
            ),
            "{message}"
        );
        // In words: no type of the code that read it.
        for word in ["::", "Error(", "McpError", "ServiceError", "serde"] {
            assert!(!message.contains(word), "{message}");
        }
    }
    let answer = within(10, "a read", read(&pipeline, "fine://1"))
        .await
        .expect("answered");
    assert_eq!(answer["contents"][0]["text"], "fine://1", "{answer}");
}

#[tokio::test]
async fn a_message_that_cannot_be_read_on_one_reads_stream_does_not_fail_the_read_it_names() {
    let upstream = Arc::new(Resources::default());
    let pipeline = resources_upstream(&upstream).await;
    let kept = read_kept(&pipeline);
    within(10, "the read of slow://kept is asked", upstream.kept()).await;
    // Its stream carries, before its own answer, an answer naming the other read.
    let other = within(
        10,
        "the read of bad://other",
        read(&pipeline, "bad://other"),
    )
    .await
    .expect("answered with its own answer");
    assert_eq!(other["contents"][0]["text"], "other", "{other}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !kept.is_finished(),
        "the read named is still waiting for its answer"
    );
    upstream.released.cancel();
    let kept = within(10, "the read of slow://kept", kept)
        .await
        .unwrap()
        .expect("answered with its own answer");
    assert_eq!(kept["contents"][0]["text"], "kept", "{kept}");
}

#[tokio::test]
async fn a_message_that_cannot_be_read_on_the_standalone_stream_fails_no_request() {
    let upstream = Arc::new(Resources {
        standalone_names_kept: true,
        ..Resources::default()
    });
    let pipeline = resources_upstream(&upstream).await;
    let kept = read_kept(&pipeline);
    within(
        10,
        "the standalone stream sends its event",
        upstream.standalone_sent.cancelled(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !kept.is_finished(),
        "the read named is still waiting for its answer"
    );
    upstream.released.cancel();
    let kept = within(10, "the read of slow://kept", kept)
        .await
        .unwrap()
        .expect("answered with its own answer");
    assert_eq!(kept["contents"][0]["text"], "kept", "{kept}");
}
