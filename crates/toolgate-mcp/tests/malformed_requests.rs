//! A request of a method toolgate serves whose parameters do not fit it is answered
//! `-32602` (invalid params), naming what is wrong in plain words — not `-32601` ("method
//! not found"), which is for methods it does not serve. rmcp reads such a request as a
//! custom one, as it reads a request of a method it does not know.
//!
//! Sent over streamable HTTP, in a session, by an rmcp client writing the requests as
//! they come: a client of any SDK, or none, can send them.

mod common;

use rmcp::model::{ClientRequest, CustomRequest, ErrorCode, ErrorData};
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use serde_json::{Value, json};
use toolgate_mcp::McpServer;

/// toolgate serving the `count` tool over streamable HTTP: its `/mcp` URL.
async fn server() -> String {
    let pipeline = common::counting().build().expect("built");
    let service = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/mcp")
}

/// The JSON-RPC error `method` with `params` is answered.
async fn refused(client: &common::Client, method: &str, params: Option<Value>) -> ErrorData {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, params.clone()));
    match common::within(20, method, client.send_request(request)).await {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("{method} {params:?}: a JSON-RPC error, not {other:?}"),
    }
}

#[tokio::test]
async fn a_served_method_with_malformed_params_is_invalid_params_naming_what_is_wrong() {
    let url = server().await;
    let client = common::http_client(&url, None, None).await;
    let cases = [
        (
            "logging/setLevel",
            Some(json!({"level": "loud"})),
            "`level` must be one of debug, info, notice, warning, error, critical, alert, emergency",
        ),
        ("logging/setLevel", None, "missing: give"),
        ("resources/read", Some(json!({})), "`uri` is missing"),
        (
            "resources/read",
            Some(json!({"uri": 5})),
            "`uri` must be a string, not a number",
        ),
        ("resources/subscribe", Some(json!({})), "`uri` is missing"),
        ("prompts/get", Some(json!({})), "`name` is missing"),
        (
            "prompts/get",
            Some(json!({"name": "x", "arguments": [1]})),
            "`arguments` must be an object, not an array",
        ),
        (
            "completion/complete",
            Some(json!({"argument": {"name": "a", "value": "b"}})),
            "`ref` is missing",
        ),
    ];
    for (method, params, expected) in cases {
        let error = refused(&client, method, params.clone()).await;
        assert_eq!(
            error.code,
            ErrorCode::INVALID_PARAMS,
            "{method} {params:?}: {error:?}"
        );
        assert!(
            error
                .message
                .starts_with(&format!("malformed `{method}` request: ")),
            "{method} {params:?}: {}",
            error.message
        );
        assert!(
            error.message.contains(expected),
            "{method} {params:?}: {}",
            error.message
        );
        assert!(
            !error.message.contains("invalid type") && !error.message.contains("expected"),
            "{method} {params:?}: no serde wording: {}",
            error.message
        );
    }
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_method_the_server_does_not_serve_is_still_method_not_found() {
    let url = server().await;
    let client = common::http_client(&url, None, None).await;
    let unknown = refused(&client, "no/such/method", Some(json!({}))).await;
    assert_eq!(unknown.code, ErrorCode::METHOD_NOT_FOUND, "{unknown:?}");
    // This server runs no tasks (it advertises no tasks extension): `tasks/*` are not
    // served, whatever their parameters.
    let tasks = refused(&client, "tasks/get", Some(json!({"taskId": 5}))).await;
    assert_eq!(tasks.code, ErrorCode::METHOD_NOT_FOUND, "{tasks:?}");
    let _ = client.cancel().await;
}
