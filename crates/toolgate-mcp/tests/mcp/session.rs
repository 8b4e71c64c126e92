//! The MCP connection as the pipeline's session scope, and how non-object inputs travel,
//! with the server in process over an in-memory pipe (`McpServer::serve_io`).

use std::time::Duration;

use crate::common::{Client, call, counting, text, within};
use rmcp::ServiceExt;
use serde_json::{Value, json};
use toolgate_core::{JsonTool, ToolError};
use toolgate_mcp::McpServer;

fn server() -> McpServer {
    let builder = counting().tool(JsonTool::new(
        "shout",
        "Upper-cases a string.",
        json!({"type": "string", "maxLength": 100}),
        |input: &Value, _ctx| {
            let out = input.as_str().map(str::to_uppercase);
            Box::pin(async move {
                out.ok_or_else(|| ToolError::execution("expected a string"))
                    .map(Value::String)
            })
        },
    ));
    McpServer::new(builder.build().expect("built"))
}

/// A client connected to `server` over an in-memory pipe.
async fn connect(
    server: &McpServer,
) -> (
    Client,
    tokio::task::JoinHandle<Result<(), toolgate_mcp::McpError>>,
) {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_end);
    let server = server.clone();
    let serving = tokio::spawn(async move { server.serve_io(server_read, server_write).await });
    let client = within(10, "handshake", ().serve(tokio::io::split(client_end)))
        .await
        .expect("connected");
    (client, serving)
}

#[tokio::test]
async fn each_connection_is_one_session_and_its_providers_go_when_it_closes() {
    let server = server();
    let (first, first_serving) = connect(&server).await;
    let (second, _second_serving) = connect(&server).await;

    assert_eq!(
        text(&call(&first, "count", json!({})).await.expect("answered")),
        "1"
    );
    assert_eq!(
        text(&call(&first, "count", json!({})).await.expect("answered")),
        "2"
    );
    assert_eq!(
        text(&call(&second, "count", json!({})).await.expect("answered")),
        "1"
    );
    assert_eq!(server.pipeline().session_count(), 2);

    within(10, "the client closes", first.cancel())
        .await
        .expect("closed");
    within(10, "the server side ends", first_serving)
        .await
        .expect("joined")
        .expect("served");
    within(10, "the session is dropped", async {
        while server.pipeline().session_count() != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_string_input_is_listed_and_passed_as_the_input_argument() {
    let server = server();
    let (client, _serving) = connect(&server).await;
    let tools = within(10, "tools/list", client.peer().list_all_tools())
        .await
        .expect("listed");
    let shout = tools.iter().find(|t| t.name == "shout").expect("listed");
    assert_eq!(shout.input_schema["type"], json!("object"));
    assert_eq!(
        shout.input_schema["properties"]["input"]["type"],
        json!("string")
    );
    assert_eq!(shout.input_schema["required"], json!(["input"]));

    let result = call(&client, "shout", json!({"input": "quiet"}))
        .await
        .expect("answered");
    assert_eq!(text(&result), "QUIET");
}
