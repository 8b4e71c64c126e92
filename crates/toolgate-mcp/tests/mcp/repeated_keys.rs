//! A client's message that names a key twice in one object — anywhere, `params.arguments`
//! included — is refused `-32600` (invalid request) with its `id`, as a message that is
//! JSON but not one toolgate reads: serde_json would keep the last value silently, and a
//! policy and the tool could read different ones. So is one with a whole number past
//! those a JSON value holds exactly, which would reach the tool as another number. The
//! session goes on.

use crate::common;

use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toolgate_mcp::McpServer;

/// Messages with a key given twice, the `id` their answer carries, and what it says.
const REPEATED: [(&str, i64, &str); 6] = [
    (
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"count","arguments":{"path":"/etc/passwd","path":"/tmp/x"}}}"#,
        7,
        "the key `path` appears twice in the object at `/params/arguments`: send each key once",
    ),
    (
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"count","_meta":{"progressToken":1,"progressToken":2}}}"#,
        8,
        "the key `progressToken` appears twice in the object at `/params/_meta`",
    ),
    (
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"count","name":"other"}}"#,
        9,
        "the key `name` appears twice in the object at `/params`",
    ),
    (
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"x":{"y":[{"z":1,"z":1}]}}}"#,
        10,
        "the key `z` appears twice in the object at `/params/x/y/0`",
    ),
    (
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"count","arguments":{"n":18446744073709551616}}}"#,
        13,
        "the number 18446744073709551616 at line 1 column 90 is a whole number past those kept exactly",
    ),
    (
        r#"{"jsonrpc":"2.0","id":14,"method":"tools/list","params":{"cursor":-9223372036854775809}}"#,
        14,
        "the number -9223372036854775809 at line 1 column 67",
    ),
];

#[tokio::test]
async fn http_a_message_with_a_repeated_key_is_refused_invalid_request_with_its_id() {
    let pipeline = common::counting().build().expect("built");
    let service = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", service);
    let url = format!("{}/mcp", common::serve_on_loopback(app).await);
    let http = reqwest::Client::new();
    for (body, id, says) in REPEATED {
        let response = common::within(
            10,
            "a POST with a repeated key",
            http.post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body)
                .send(),
        )
        .await
        .expect("the server answers");
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let text = common::within(10, "the answer", response.text())
            .await
            .expect("readable");
        let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message:?} does not say {says:?}");
    }
    // A request whose `id` is named twice has no id to be answered with.
    let response = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":11,"id":12,"method":"ping"}"#)
        .send()
        .await
        .expect("the server answers");
    let answer: Value =
        serde_json::from_str(&response.text().await.expect("readable")).expect("JSON");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
}

#[tokio::test]
async fn stdio_a_message_with_a_repeated_key_is_refused_invalid_request_and_the_session_goes_on() {
    let pipeline = common::counting().build().expect("built");
    let (mut to_server, server_reads) = tokio::io::duplex(64 * 1024);
    let (server_writes, from_server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        McpServer::new(pipeline)
            .serve_io(server_reads, server_writes)
            .await
    });
    let mut lines = BufReader::new(from_server).lines();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ping = json!({"jsonrpc": "2.0", "id": 99, "method": "ping"});
    let mut sent = vec![initialize.to_string(), initialized.to_string()];
    sent.extend(REPEATED.iter().map(|(line, _, _)| (*line).to_owned()));
    sent.push(r#"{"jsonrpc":"2.0","id":11,"id":12,"method":"ping"}"#.to_owned());
    sent.push(ping.to_string());
    for line in sent {
        to_server
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("written");
    }
    let mut next = async || -> Value {
        let line = common::within(20, "the server's next line", lines.next_line())
            .await
            .expect("readable")
            .expect("the server answers");
        serde_json::from_str(&line).expect("JSON")
    };
    // toolgate's refusals and rmcp's answers come in whatever order they are ready.
    let mut answers = Vec::new();
    for _ in 0..REPEATED.len() + 3 {
        answers.push(next().await);
    }
    let answer_to = |id: i64| {
        answers
            .iter()
            .find(|answer| answer["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id}: {answers:?}"))
    };
    assert!(answer_to(1)["result"].is_object());
    for (body, id, says) in REPEATED {
        let answer = answer_to(id);
        assert_eq!(answer["error"]["code"], -32600, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message:?} does not say {says:?}");
    }
    // A request whose `id` is named twice has no id to be answered with.
    assert!(
        answers.iter().any(|answer| answer["id"].is_null()
            && answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the key `id` appears twice"))),
        "{answers:?}"
    );
    assert_eq!(
        answer_to(99),
        &json!({"jsonrpc": "2.0", "id": 99, "result": {}})
    );
}
