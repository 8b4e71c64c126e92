//! What is wrong with a request's body on `/mcp` is answered with the status that says so
//! and a JSON-RPC error, as `/v1` answers it: never a 500 or a 415 for the client's
//! mistake.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Gateway, client, key, user_yaml};

fn config() -> String {
    format!(
        "server:\n  body_limit: 1KiB\n  body_timeout: 300ms\ntools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

/// POSTs `body` to `/mcp` as alice; the status and the answer as JSON.
async fn post_mcp(gateway: &Gateway, body: String) -> (u16, Value) {
    let response = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key("alice"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("the answer's body");
    let answer =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("({status}) not JSON ({e}): {text}"));
    (status, answer)
}

fn initialize(padding: usize) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x".repeat(padding), "version": "0"}
        }
    })
    .to_string()
}

#[tokio::test]
async fn an_mcp_body_over_the_limit_is_answered_413_as_on_v1() {
    let gateway = Gateway::start(&config());
    let (status, answer) = post_mcp(&gateway, initialize(2048)).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("1024 bytes"), "{answer}");

    let v1 = client()
        .post(gateway.url("/v1/tools/echo/invoke"))
        .bearer_auth(key("alice"))
        .json(&json!({"text": "x".repeat(2048)}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(v1.status().as_u16(), 413);

    // A body within the limit still initializes a session.
    let (status, _) = post_mcp_sse(&gateway, initialize(10)).await;
    assert_eq!(status, 200);
}

/// POSTs `body` to `/mcp` and reads the answer as text (an SSE stream).
async fn post_mcp_sse(gateway: &Gateway, body: String) -> (u16, String) {
    let response = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key("alice"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn malformed_json_on_mcp_is_a_400_json_rpc_parse_error() {
    let gateway = Gateway::start(&config());
    for body in [r#"{"jsonrpc": "2.0", "id": 1, "method": "#, "not json", ""] {
        let (status, answer) = post_mcp(&gateway, body.to_owned()).await;
        assert_eq!(status, 400, "{body:?}: {answer}");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_eq!(answer["error"]["code"], -32700, "{body:?}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not valid JSON"), "{answer}");
    }
}

#[tokio::test]
async fn json_that_is_not_json_rpc_on_mcp_is_a_400_invalid_request_with_its_id() {
    let gateway = Gateway::start(&config());
    let (status, answer) = post_mcp(&gateway, r#"{"hello": "world"}"#.to_owned()).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");

    let no_method = json!({"jsonrpc": "2.0", "id": 7, "params": {}}).to_string();
    let (status, answer) = post_mcp(&gateway, no_method).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
}

#[tokio::test]
async fn an_mcp_body_that_never_comes_is_answered_408_and_the_connection_closed() {
    let gateway = Gateway::start(&config());
    let address = gateway.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.expect("connecting");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: 200\r\n\r\n{{\"jsonrpc\":",
        key("alice")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut received))
        .await
        .expect("the connection is closed")
        .expect("reading the answer");
    let received = String::from_utf8_lossy(&received);
    assert!(
        received.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{received}"
    );
    assert!(received.contains("connection: close\r\n"), "{received}");
    assert!(received.contains(r#""code":-32600"#), "{received}");
    assert!(received.contains("server.body_timeout"), "{received}");
}
