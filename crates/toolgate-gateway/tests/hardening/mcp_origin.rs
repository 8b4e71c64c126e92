//! `/mcp` refuses browser pages of other sites (DNS rebinding): only loopback pages and
//! the origins in `server.mcp_allowed_origins` may call it; clients that send no `Origin`
//! are not browsers and pass, whatever host they name the gateway by.

use serde_json::{Value, json};

use crate::common::{Gateway, client, key, user_yaml};

fn config() -> String {
    format!(
        "server:\n  mcp_allowed_origins: [\"https://app.example.com\"]\ntools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

/// POSTs `initialize` to `/mcp` as alice with `origin`; the status and the answer's text.
async fn initialize(gateway: &Gateway, origin: Option<&str>) -> (u16, String) {
    initialize_as(gateway, origin, None).await
}

/// [`initialize`], naming the gateway `host` (its loopback address when `None`).
async fn initialize_as(
    gateway: &Gateway,
    origin: Option<&str>,
    host: Option<&str>,
) -> (u16, String) {
    let mut request = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key("alice"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    if let Some(host) = host {
        request = request.header("host", host);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}
    });
    let response = request
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("the answer's body"))
}

#[tokio::test]
async fn a_page_of_another_origin_is_refused_403_with_a_json_error() {
    let gateway = Gateway::start(&config());
    for origin in ["https://evil.example", "null", "http://app.example.com"] {
        let (status, text) = initialize(&gateway, Some(origin)).await;
        assert_eq!(status, 403, "{origin}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(answer["error"]["code"], "origin_not_allowed", "{answer}");
    }
}

#[tokio::test]
async fn loopback_pages_configured_origins_and_non_browser_clients_pass() {
    let gateway = Gateway::start(&config());
    for origin in [
        None,
        Some("http://localhost:5173"),
        Some("http://127.0.0.1"),
        Some("https://app.example.com"),
        Some("https://app.example.com:443"),
    ] {
        let (status, text) = initialize(&gateway, origin).await;
        assert_eq!(status, 200, "{origin:?}: {text}");
    }
}

#[tokio::test]
async fn a_client_that_names_the_gateway_by_another_host_passes_and_a_rebinding_page_does_not() {
    let gateway = Gateway::start(&config());
    // Behind a load balancer or a DNS name, the `Host` is not a loopback name.
    for host in [
        "gateway.example.com",
        "gateway.internal:8443",
        "10.0.0.7:8080",
    ] {
        let (status, text) = initialize_as(&gateway, None, Some(host)).await;
        assert_eq!(status, 200, "{host}: {text}");
    }
    // A page that rebound its own name to the gateway names that host and its origin.
    let (status, text) =
        initialize_as(&gateway, Some("http://evil.example"), Some("evil.example")).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("origin_not_allowed"), "{text}");
}

#[test]
fn an_allowed_origin_that_is_not_an_origin_is_refused_at_load() {
    let yaml = format!(
        "server:\n  mcp_allowed_origins: [\"app.example.com/path\"]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    );
    let error = toolgate_gateway::config::parse(&yaml).expect_err("not an origin");
    assert!(error.to_string().contains("is not an origin"), "{error}");
}
