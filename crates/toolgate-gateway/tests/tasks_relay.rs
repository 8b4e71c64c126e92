//! An upstream's tasks (SEP-2663) relayed through the gateway: a caller that declares the
//! extension is handed a task of the gateway's own for the upstream's, and polls,
//! answers and cancels it through the gateway; no other caller reaches it, whatever id it
//! sends; one caller's flood of tasks is bounded and spares the others'. The upstream is
//! toolgate-mcp's `tasks_upstream` example (an rmcp server that runs tools as tasks, and
//! trusts anyone who knows a task id), served over streamable HTTP on loopback in the
//! test's process.

mod common;

#[path = "../../toolgate-mcp/examples/tasks_upstream/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::time::Duration;

use common::{Gateway, user_yaml};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

/// Serves the tasks upstream on a free loopback port; its MCP endpoint.
async fn tasks_upstream() -> String {
    let upstream = fixture::TasksUpstream::default();
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The gateway importing the tasks upstream, for ann and bob.
async fn gateway() -> Gateway {
    let url = tasks_upstream().await;
    let users = format!("{}{}", user_yaml("ann", &[]), user_yaml("bob", &[]));
    Gateway::start(&format!(
        "users:\n{users}upstreams:\n  - {{ name: jobs, url: \"{url}\" }}\n"
    ))
}

/// The per-request `_meta` of a 2026-07-28 caller, declaring the tasks extension or not.
fn meta(tasks: bool) -> Value {
    let extensions = if tasks {
        json!({"io.modelcontextprotocol/tasks": {}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
    })
}

/// `tools/call` of `tool` as `user`, declaring the tasks extension or not; the answer.
async fn call(gateway: &Gateway, user: &str, tool: &str, arguments: Value, tasks: bool) -> Value {
    let params = json!({"name": tool, "arguments": arguments, "_meta": meta(tasks)});
    let (status, answer) = common::mcp_2026(gateway, user, "tools/call", Some(tool), params).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A `slow_compute` of `seconds` as `user`, as a task: the handle the caller got.
async fn task_of(gateway: &Gateway, user: &str, seconds: u64) -> String {
    let arguments = json!({"seconds": seconds, "label": user});
    let answer = call(gateway, user, "slow_compute", arguments, true).await;
    let task = &answer["result"];
    assert_eq!(task["resultType"], "task", "{answer}");
    task["taskId"].as_str().expect("a task id").to_owned()
}

/// `method` (`tasks/get`, `tasks/cancel`, `tasks/update`) of task `id` as `user`, with
/// `extra` parameters; the JSON-RPC answer.
async fn on_task(gateway: &Gateway, user: &str, method: &str, id: &str, extra: Value) -> Value {
    let mut params = json!({"taskId": id, "_meta": meta(true)});
    if let Value::Object(extra) = extra {
        params.as_object_mut().expect("an object").extend(extra);
    }
    let (status, answer) = common::mcp_2026(gateway, user, method, Some(id), params).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Polls task `id` as `user` until it is in `status` (or has ended); its last state.
async fn until(gateway: &Gateway, user: &str, id: &str, status: &str) -> Value {
    for _ in 0..200 {
        let task = on_task(gateway, user, "tasks/get", id, json!({})).await["result"].clone();
        let now = task["status"].as_str().unwrap_or_default();
        if now == status || ["completed", "failed", "cancelled"].contains(&now) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never became {status}");
}

/// The message of the error `answer` carries, with `id` replaced by `ID`.
fn unknown_message(answer: &Value, id: &str) -> String {
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    answer["error"]["message"]
        .as_str()
        .expect("a message")
        .replace(id, "ID")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_declares_tasks_polls_and_answers_its_upstream_task_through_the_gateway() {
    let gateway = gateway().await;

    let id = task_of(&gateway, "ann", 0).await;
    // A handle of the gateway's own: the upstream's id (`task-N`) is not shown.
    assert!(id.starts_with("tgt_") && id.len() == 36, "{id}");
    let done = until(&gateway, "ann", &id, "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["taskId"], id.as_str(), "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "computed ann",
        "{done}"
    );

    // A task that asks a question: asked through the gateway, answered with `tasks/update`.
    let asked = call(&gateway, "ann", "confirm_delete", json!({}), true).await;
    let id = asked["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let waiting = until(&gateway, "ann", &id, "input_required").await;
    assert!(waiting["inputRequests"]["confirm"].is_object(), "{waiting}");
    let answer =
        json!({"inputResponses": {"confirm": {"action": "accept", "content": {"confirm": "yes"}}}});
    let ack = on_task(&gateway, "ann", "tasks/update", &id, answer).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = until(&gateway, "ann", &id, "completed").await;
    assert_eq!(
        done["result"]["content"][0]["text"], "delete: yes",
        "{done}"
    );

    // A caller that does not declare the extension is never handed a task: the upstream
    // is not told it may make one, and answers the call itself.
    let plain = call(
        &gateway,
        "bob",
        "slow_compute",
        json!({"seconds": 0, "label": "b"}),
        false,
    )
    .await;
    assert_eq!(
        plain["result"]["content"][0]["text"], "computed b",
        "{plain}"
    );
    assert!(plain["result"].get("taskId").is_none(), "{plain}");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_caller_asking_about_a_task_is_told_it_is_unknown_as_for_one_that_never_was() {
    let gateway = gateway().await;
    let anns = task_of(&gateway, "ann", 30).await;

    // Bob, with ann's handle: the same answer as for a handle that was never made.
    let never = format!("tgt_{}", "0".repeat(32));
    let bob_on_anns = on_task(&gateway, "bob", "tasks/get", &anns, json!({})).await;
    let bob_on_none = on_task(&gateway, "bob", "tasks/get", &never, json!({})).await;
    assert_eq!(
        unknown_message(&bob_on_anns, &anns),
        unknown_message(&bob_on_none, &never)
    );
    // Nor can bob cancel it, or reach the upstream's task by its own (guessable) id.
    let cancel = on_task(&gateway, "bob", "tasks/cancel", &anns, json!({})).await;
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");
    let guessed = on_task(&gateway, "bob", "tasks/get", "task-1", json!({})).await;
    assert_eq!(guessed["error"]["code"], -32602, "{guessed}");
    // …nor through the HTTP API, where the tasks tool refuses what MCP did not route.
    let direct = common::invoke(&gateway, "bob", "tasks.jobs", json!({"get": anns})).await;
    assert_eq!(direct.status, 400, "{}", direct.body);

    // Ann's task is untouched, and hers to cancel.
    let task = on_task(&gateway, "ann", "tasks/get", &anns, json!({})).await;
    assert_eq!(task["result"]["status"], "working", "{task}");
    let ack = on_task(&gateway, "ann", "tasks/cancel", &anns, json!({})).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let task = until(&gateway, "ann", &anns, "cancelled").await;
    assert_eq!(task["status"], "cancelled", "{task}");

    // A megabyte of id is not sent back.
    let long = "x".repeat(1 << 20);
    let params = json!({"taskId": long, "_meta": meta(true)});
    let (_, answer) = common::mcp_2026(&gateway, "bob", "tasks/get", Some("x"), params).await;
    assert!(
        answer.to_string().len() < 1024,
        "{} bytes",
        answer.to_string().len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_tasks_from_one_caller_forgets_its_own_oldest_and_spares_other_callers() {
    let gateway = gateway().await;
    let bobs = task_of(&gateway, "bob", 60).await;

    // The gateway keeps 100 tasks per caller: ann's 105 leave her 100 newest.
    let mut anns = Vec::new();
    for _ in 0..105 {
        anns.push(task_of(&gateway, "ann", 60).await);
    }
    for (n, id) in anns.iter().enumerate() {
        let answer = on_task(&gateway, "ann", "tasks/get", id, json!({})).await;
        if n < 5 {
            assert_eq!(answer["error"]["code"], -32602, "task {n}: {answer}");
        } else {
            assert_eq!(answer["result"]["status"], "working", "task {n}: {answer}");
        }
    }
    let task = on_task(&gateway, "bob", "tasks/get", &bobs, json!({})).await;
    assert_eq!(task["result"]["status"], "working", "{task}");
}
