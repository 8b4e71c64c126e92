//! A request of a method toolgate serves whose parameters do not fit it is answered
//! `-32602` (invalid params), naming what is wrong in plain words — not `-32601` ("method
//! not found"), which is for methods it does not serve. rmcp reads such a request as a
//! custom one, as it reads a request of a method it does not know.
//!
//! Sent over streamable HTTP, in a session, by an rmcp client writing the requests as
//! they come: a client of any SDK, or none, can send them. A 2026-07-28 request whose
//! `_meta` names a log level or a progress token of the wrong kind, and a list request
//! with a cursor (this server gives none), are answered `-32602` as well. What the MCP
//! library answers in plain text or in a bare word — an `MCP-Protocol-Version` header that
//! is not visible ASCII, a `ping` of 2026-07-28 — is a JSON-RPC error saying what to send,
//! and its refusals that repeat what a caller sent repeat it cut and escaped.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientRequest, CustomRequest, ErrorCode, ErrorData};
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use serde_json::{Value, json};
use toolgate_core::{Pipeline, ToolError, tool_fn};
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

/// A request of 2026-07-28 as its client writes it: `_meta` holds the protocol version and
/// the client's capabilities, plus `meta`.
fn request_2026(id: u64, method: &str, mut params: Value, meta: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    for (key, value) in meta.as_object().expect("an object") {
        params["_meta"][key] = value.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `body` posted to `url` with a 2026-07-28 client's headers: the status and the JSON-RPC
/// answer (from a JSON body, or the last event of an SSE stream).
async fn post_2026(http: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let method = body["method"].as_str().expect("a method");
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let response = common::within(20, method, request.body(body.to_string()).send())
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let text = common::within(20, "the body", response.text())
        .await
        .expect("read");
    let data = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .rfind(|data| !data.is_empty())
        .unwrap_or(&text);
    let answer = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, answer)
}

#[tokio::test]
async fn a_log_level_or_progress_token_of_the_wrong_kind_in_meta_is_invalid_params_and_nothing_runs()
 {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let pipeline = Pipeline::builder()
        .tool(tool_fn("ran", "Counts its runs.", move |_: ()| {
            let counted = Arc::clone(&counted);
            async move { Ok::<_, ToolError>(counted.fetch_add(1, Ordering::SeqCst) + 1) }
        }))
        .build()
        .expect("built");
    let service = McpServer::new(pipeline).http_service(StreamableHttpServerConfig::default());
    let url = common::serve_on_loopback(axum::Router::new().nest_service("/mcp", service)).await;
    let url = format!("{url}/mcp");
    let http = reqwest::Client::new();
    let call = json!({"name": "ran", "arguments": {}});
    let levels = "must be one of debug, info, notice, warning, error, critical, alert, emergency";
    let cases = [
        (
            "tools/call",
            json!({"io.modelcontextprotocol/logLevel": "loud"}),
            format!("`_meta[\"io.modelcontextprotocol/logLevel\"]` {levels}, not \"loud\""),
        ),
        (
            "tools/call",
            json!({"io.modelcontextprotocol/logLevel": 7}),
            format!("{levels}, not a number"),
        ),
        (
            "tools/list",
            json!({"io.modelcontextprotocol/logLevel": "LOUD"}),
            format!("{levels}, not \"LOUD\""),
        ),
        (
            "tools/call",
            json!({"progressToken": true}),
            "`_meta.progressToken` must be a string or a whole number".to_owned(),
        ),
        (
            "tools/call",
            json!({"progressToken": {"token": 1}}),
            "not an object: send one, or leave it out for no progress notifications".to_owned(),
        ),
    ];
    for (id, (method, meta, expected)) in (1..).zip(cases) {
        let params = if method == "tools/call" {
            call.clone()
        } else {
            json!({})
        };
        let (status, answer) =
            post_2026(&http, &url, &request_2026(id, method, params, meta.clone())).await;
        assert_eq!(status, 400, "{meta}: {answer}");
        assert_eq!(answer["id"], id, "{meta}: {answer}");
        assert_eq!(answer["error"]["code"], -32602, "{meta}: {answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(
            message.starts_with(&format!("malformed `{method}` request: ")),
            "{meta}: {message}"
        );
        assert!(message.contains(&expected), "{meta}: {message}");
        assert!(
            !message.contains("LoggingLevel") && !message.contains("variant"),
            "{message}"
        );
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a refused request does not run"
    );
    // A level and a token it can use: the call runs.
    let usable = json!({"io.modelcontextprotocol/logLevel": "debug", "progressToken": 7});
    let (status, answer) =
        post_2026(&http, &url, &request_2026(9, "tools/call", call, usable)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_list_request_with_a_cursor_is_invalid_params_as_every_list_is_one_page() {
    let url = server().await;
    let client = common::http_client(&url, None, None).await;
    // The first page is asked without a cursor, and it is the only one: no `nextCursor`.
    let tools = common::within(20, "tools/list", client.peer().list_tools(None))
        .await
        .expect("listed");
    assert!(
        !tools.tools.is_empty() && tools.next_cursor.is_none(),
        "{tools:?}"
    );
    for method in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
        // An empty cursor names no page: it is the first, as some clients ask for it.
        let request = CustomRequest::new(method, Some(json!({"cursor": ""})));
        let first = common::within(20, method, client.send_request(request.into())).await;
        assert!(first.is_ok(), "{method} with an empty cursor: {first:?}");
        for cursor in ["made-up", " "] {
            let params = Some(json!({"cursor": cursor}));
            let error = refused(&client, method, params).await;
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{method}: {error:?}");
            assert!(
                error.message.starts_with("unknown cursor: ")
                    && error
                        .message
                        .contains(&format!("`{method}` takes no `cursor`"))
                    && error.message.ends_with("send it without one"),
                "{method}: {}",
                error.message
            );
        }
    }
    let _ = client.cancel().await;
}

/// `body` posted to `url` as a 2026-07-28 client would, but with `mcp-name` as its
/// `Mcp-Name` header: the status and the JSON-RPC answer.
async fn post_2026_naming(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    mcp_name: &str,
) -> (u16, Value) {
    let method = body["method"].as_str().expect("a method");
    let request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", mcp_name)
        .body(body.to_string());
    let response = common::within(20, method, request.send())
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let answer = common::within(20, "the body", response.json::<Value>())
        .await
        .expect("a JSON body");
    (status, answer)
}

/// The refusal of a 2026-07-28 request whose `Mcp-Name` header names another tool, prompt,
/// resource or task than its body repeats both values, cut and escaped: never a hostile
/// value whole.
#[tokio::test]
async fn a_name_header_that_does_not_match_the_body_is_refused_with_what_it_repeats_cut_and_escaped()
 {
    let url = server().await;
    let http = reqwest::Client::new();
    let long = "t".repeat(5000);
    let prefix = "Mcp-Name header `x` does not match body value `";
    let long_header = format!("x{long}");
    let cases = [
        (
            "tasks/get",
            json!({"taskId": format!("\u{1b}[2J{long}")}),
            "x",
            format!("{prefix}\\u{{1b}}[2Jttt"),
        ),
        (
            "tools/call",
            json!({"name": format!("count\n{long}"), "arguments": {}}),
            "x",
            format!("{prefix}count\\nttt"),
        ),
        // The header's own value, as long: the message is cut within it.
        (
            "resources/read",
            json!({"uri": "file:///count"}),
            long_header.as_str(),
            "Mcp-Name header `xttt".to_owned(),
        ),
    ];
    for (id, (method, params, header, starts)) in (1..).zip(cases) {
        let body = request_2026(id, method, params, json!({}));
        let (status, answer) = post_2026_naming(&http, &url, &body, header).await;
        assert_eq!(status, 400, "{method}: {answer}");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(message.starts_with(&starts), "{method}: {message}");
        assert!(message.ends_with("ttt…"), "{method}: {message}");
        // 256 characters of the message, a few of them escaped, and the mark of the cut.
        assert!(message.chars().count() < 270, "{method}: {message}");
        assert!(
            !message.contains('\u{1b}') && !message.contains('\n'),
            "{message}"
        );
    }
    // A short value is repeated whole, with what hides in it escaped.
    let body = request_2026(
        8,
        "tasks/get",
        json!({"taskId": "t-1\n\u{1b}[2J\u{202e}"}),
        json!({}),
    );
    let (status, answer) = post_2026_naming(&http, &url, &body, "x").await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        format!("{prefix}t-1\\n\\u{{1b}}[2J\\u{{202e}}`")
    );
    // The header's own value is shown decoded, escaped the same way: a client encodes one
    // that holds such characters.
    let body = request_2026(9, "tasks/get", json!({"taskId": "t-1"}), json!({}));
    let encoded = format!(
        "=?base64?{}?=",
        base64::Engine::encode(&base64::prelude::BASE64_STANDARD, "t-2\r\n\u{1b}")
    );
    let (status, answer) = post_2026_naming(&http, &url, &body, &encoded).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "Mcp-Name header `t-2\\r\\n\\u{1b}` does not match body value `t-1`"
    );
}

/// rmcp's own refusals of a request whose headers do not match its body repeat what the
/// caller sent; they reach the caller escaped and cut.
#[tokio::test]
async fn a_refusal_by_rmcp_repeats_what_the_caller_sent_escaped_and_cut() {
    let url = server().await;
    let http = reqwest::Client::new();
    let hostile = format!("\n\u{1b}[2J\u{202e}{}", "Z".repeat(900_000));
    // The version the body names is not the header's.
    let mut body = request_2026(1, "tools/list", json!({}), json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
        json!(format!("2026-07-28{hostile}"));

    let (status, answer) = post_2026(&http, &url, &body).await;

    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], -32020, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("2026-07-28\\n\\u{1b}[2J\\u{202e}ZZZ") && message.ends_with('…'),
        "{message}"
    );
    // 256 characters of the message, three of them escaped, and the mark of the cut.
    assert!(message.chars().count() < 300, "{message}");
    assert!(!message.contains('\u{1b}') && !message.contains('\n'));
}

/// 2026-07-28 has no `initialize`: one of that revision is the method not found (404,
/// `-32601`), as the conformance suite checks, not a malformed `initialize` of 2025.
#[tokio::test]
async fn an_initialize_of_2026_is_a_method_not_found_not_a_malformed_initialize() {
    let url = server().await;
    let http = reqwest::Client::new();
    let body = request_2026(500, "initialize", json!({}), json!({}));

    let (status, answer) = post_2026(&http, &url, &body).await;

    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert_eq!(answer["id"], 500, "{answer}");
}

/// `body` posted to `url` with `headers` as sent: the status, the `Content-Type` and the
/// body as text.
async fn post_raw(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &[u8])],
    body: &Value,
) -> (u16, String, String) {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        let value = reqwest::header::HeaderValue::from_bytes(value).expect("a header value");
        request = request.header(*name, value);
    }
    let response = common::within(20, "the answer", request.body(body.to_string()).send())
        .await
        .expect("answered");
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|kind| kind.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = common::within(20, "the body", response.text())
        .await
        .expect("read");
    (status, kind, text)
}

/// A `MCP-Protocol-Version` header that is not visible ASCII names no revision: the
/// caller is told so in a JSON-RPC error, with the revisions it may send.
#[tokio::test]
async fn a_protocol_version_header_that_is_not_visible_ascii_is_a_json_rpc_error_naming_what_to_send()
 {
    let url = server().await;
    let http = reqwest::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}});
    // A byte past ASCII, and a mark that turns text around written in UTF-8.
    for version in [&b"2025-11-25\xff"[..], b"\xe2\x80\xae2025-11-25"] {
        let (status, kind, text) =
            post_raw(&http, &url, &[("mcp-protocol-version", version)], &list).await;
        assert_eq!(status, 400, "{text}");
        assert!(kind.starts_with("application/json"), "{kind}: {text}");
        let answer: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], 3, "{answer}");
        assert_eq!(answer["error"]["code"], -32022, "{answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(
            message.contains("must be visible ASCII text such as 2025-11-25"),
            "{message}"
        );
        // toolgate's own words reach the caller whole, not cut as what rmcp repeats is.
        assert!(message.ends_with("or no header"), "{message}");
        assert!(
            answer["error"]["data"]["supported"]
                .as_array()
                .is_some_and(|supported| supported.contains(&json!("2025-11-25"))),
            "{answer}"
        );
    }
}

/// 2026-07-28 has no `ping`: it is the method not found (404, `-32601`), as the
/// conformance suite checks, in words that name the method and what to send instead.
#[tokio::test]
async fn a_ping_of_2026_is_a_method_not_found_naming_the_method() {
    let url = server().await;
    let http = reqwest::Client::new();
    let body = request_2026(11, "ping", json!({}), json!({}));

    let (status, answer) = post_2026(&http, &url, &body).await;

    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["id"], 11, "{answer}");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains("`ping`"), "{message}");
    assert!(message.contains("2026-07-28"), "{message}");
    assert!(message.ends_with("to use `ping`"), "{message}");
}

/// An `initialize` whose `MCP-Protocol-Version` header names another revision than its
/// `params.protocolVersion` is an invalid request, as rmcp answers it, but with both values
/// cut and escaped: a version of 200 KB holding a mark that turns text around is not
/// repeated whole (rmcp also wrote it whole into its log).
#[tokio::test]
async fn an_initialize_whose_version_header_differs_from_its_params_is_refused_cut_and_escaped() {
    // What is logged while this test's server answers (a current-thread runtime: every
    // task of the server runs on this thread).
    let logged = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let logged = logged.clone();
        move || LogWriter(logged.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(writer)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let url = server().await;
    let http = reqwest::Client::new();
    let hostile = format!("2025-11-25\u{202e}\n{}", "V".repeat(200_000));
    let initialize = json!({
        "jsonrpc": "2.0",
        "id": 41,
        "method": "initialize",
        "params": {
            "protocolVersion": hostile,
            "capabilities": {},
            "clientInfo": {"name": "attacker", "version": "1"},
        },
    });

    let (status, kind, text) = post_raw(
        &http,
        &url,
        &[("mcp-protocol-version", b"2025-11-25")],
        &initialize,
    )
    .await;

    assert_eq!(status, 400, "{text}");
    assert!(kind.starts_with("application/json"), "{kind}");
    assert!(text.len() < 1_000, "{} bytes", text.len());
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["id"], 41, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(message.contains("(`2025-11-25`)"), "{message}");
    assert!(message.contains("2025-11-25\\u{202e}\\nVVV"), "{message}");
    assert!(!message.contains('\u{202e}'), "{message}");
    assert!(message.ends_with("or no header"), "{message}");
    let logged = logged.lock().expect("the log").len();
    assert!(logged < 10_000, "{logged} bytes logged");

    // A header naming a revision the server does not speak is refused for that, first.
    let (status, _, text) = post_raw(
        &http,
        &url,
        &[("mcp-protocol-version", b"1999-01-01")],
        &initialize,
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(answer["error"]["code"], -32022, "{answer}");
    assert_eq!(
        answer["error"]["data"]["requested"], "1999-01-01",
        "{answer}"
    );
}

/// A revision the server does not speak is a JSON-RPC error answering the request: its id,
/// the value sent cut and escaped, and the revisions to send.
#[tokio::test]
async fn an_unsupported_protocol_version_is_answered_with_the_requests_id_and_the_revisions_to_send()
 {
    let url = server().await;
    let http = reqwest::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": "list-1", "method": "tools/list", "params": {}});
    // A tab is visible ASCII to HTTP, and breaks a line of a log.
    let hostile = format!("1999-01-01\t{}", "9".repeat(10_000));
    for (version, requested) in [
        ("1999-01-01".to_owned(), "1999-01-01".to_owned()),
        (hostile, format!("1999-01-01\\t{}…", "9".repeat(53))),
    ] {
        let (status, kind, text) = post_raw(
            &http,
            &url,
            &[("mcp-protocol-version", version.as_bytes())],
            &list,
        )
        .await;
        assert_eq!(status, 400, "{text}");
        assert!(kind.starts_with("application/json"), "{kind}");
        assert!(text.len() < 1_000, "{} bytes", text.len());
        let answer: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(answer["id"], "list-1", "{answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], -32022, "{answer}");
        assert_eq!(error["data"]["requested"], requested, "{answer}");
        let supported = error["data"]["supported"].as_array().expect("revisions");
        assert!(supported.contains(&json!("2025-11-25")), "{answer}");
        let message = error["message"].as_str().expect("a message");
        assert!(message.contains("send one it speaks"), "{message}");
    }
}

/// One of MCP's single-valued headers sent twice is refused, naming it, before any session
/// is looked at: rmcp would act on the first value where a proxy in front may read the last.
#[tokio::test]
async fn an_mcp_header_sent_twice_is_refused_naming_it() {
    let url = server().await;
    let http = reqwest::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {}});
    for (name, first, second) in [
        (
            "mcp-session-id",
            &b"one-session"[..],
            &b"another-session"[..],
        ),
        ("mcp-protocol-version", b"2025-11-25", b"2025-06-18"),
        ("mcp-method", b"tools/list", b"tools/list"),
    ] {
        let (status, kind, text) =
            post_raw(&http, &url, &[(name, first), (name, second)], &list).await;
        assert_eq!(status, 400, "{name}: {text}");
        assert!(kind.starts_with("application/json"), "{kind}");
        let answer: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(answer["id"], 12, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(
            message
                .to_lowercase()
                .contains(&format!("`{name}` header is sent 2 times")),
            "{message}"
        );
    }
}

/// Appends what it is given to a shared buffer: a log read back by a test.
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
