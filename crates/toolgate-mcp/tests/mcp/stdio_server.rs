//! The MCP server over a byte stream pair, as over stdin and stdout, written to line by line
//! as a client of no SDK would: every line that is not a message rmcp reads is answered —
//! a client waits for the answer to each request — and the session goes on.

use crate::common;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream, Lines};
use toolgate_core::tool::tool_fn_with_context;
use toolgate_core::{Pipeline, ToolError, ToolInvokeContext, tool_fn};
use toolgate_mcp::{CallerKey, McpServer};

/// The length of the text of the `big` tool's answer.
const BIG_ANSWER: usize = 2 * 1024 * 1024;

/// rmcp's limit on a line, and toolgate's.
const LIMIT: usize = 16 * 1024 * 1024;

/// A client of the server, writing raw lines and reading raw lines.
struct Raw {
    to_server: DuplexStream,
    from_server: Lines<BufReader<DuplexStream>>,
}

impl Raw {
    /// The `count` pipeline plus a `big` tool, served over a pair of pipes; initialized.
    async fn start() -> Raw {
        let pipeline = common::counting()
            .tool(tool_fn("big", "Answers a long text.", |_: ()| async move {
                Ok::<_, ToolError>("b".repeat(BIG_ANSWER))
            }))
            .build()
            .expect("built");
        Raw::serving(McpServer::new(pipeline)).await
    }

    async fn serving(server: McpServer) -> Raw {
        let (to_server, server_reads) = tokio::io::duplex(64 * 1024);
        let (server_writes, from_server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move { server.serve_io(server_reads, server_writes).await });
        let mut raw = Raw {
            to_server,
            from_server: BufReader::new(from_server).lines(),
        };
        raw.initialize().await;
        raw
    }

    async fn initialize(&mut self) {
        self.send(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }))
        .await;
        let answer = self.next().await;
        assert_eq!(answer["id"], 1, "{answer}");
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
    }

    async fn send(&mut self, message: &Value) {
        self.line(&message.to_string()).await;
    }

    async fn line(&mut self, line: &str) {
        write_line(&mut self.to_server, line.as_bytes()).await;
    }

    /// The next line the server writes, as JSON.
    async fn next(&mut self) -> Value {
        let line = common::within(20, "the server's next line", self.from_server.next_line())
            .await
            .expect("readable")
            .expect("the server answers");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:.200}"))
    }

    /// Asserts that the next line is the error `code` for `id`, its message saying `says`.
    async fn refused(&mut self, id: Value, code: i64, says: &str) {
        let answer = self.next().await;
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{message:?} does not say {says:?}");
    }

    /// Asserts that a `ping` is still answered: the session goes on.
    async fn goes_on(&mut self, id: i64) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
        let answer = self.next().await;
        assert_eq!(answer, json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    }
}

async fn write_line(to: &mut (impl AsyncWrite + Unpin), line: &[u8]) {
    common::within(20, "writing a line", async {
        to.write_all(line).await?;
        to.write_all(b"\n").await?;
        to.flush().await
    })
    .await
    .expect("the server reads");
}

#[tokio::test]
async fn a_line_that_is_not_json_is_answered_parse_error_and_the_session_goes_on() {
    let mut client = Raw::start().await;
    client.line("hello world").await;
    client.refused(Value::Null, -32700, "not JSON").await;
    client
        .line(r#"{"jsonrpc":"2.0","id":4,"method":"ping""#)
        .await;
    client.refused(Value::Null, -32700, "not JSON").await;
    client.goes_on(5).await;
}

#[tokio::test]
async fn an_invalid_request_is_answered_with_its_own_id() {
    let mut client = Raw::start().await;
    client
        .line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}"#)
        .await;
    client
        .refused(json!(2), -32600, "`params` must be an object")
        .await;
    client
        .line(r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#)
        .await;
    client
        .refused(json!(3), -32600, "`jsonrpc` must be \"2.0\"")
        .await;
    client
        .line(r#"{"jsonrpc":"2.0","id":"s-1","method":"ping","result":{}}"#)
        .await;
    client
        .refused(json!("s-1"), -32600, "cannot have a `result`")
        .await;
    // No Rust type name, no serde jargon.
    client.line(r#"{"jsonrpc":"2.0","id":{"x":1}}"#).await;
    let answer = client.next().await;
    assert_eq!(answer["id"], Value::Null);
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        !message.contains("untagged") && !message.contains("JsonRpc"),
        "{message}"
    );
    client
        .send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}))
        .await;
    let tools = client.next().await;
    assert_eq!(tools["id"], 6, "{tools}");
    assert!(tools["result"]["tools"].is_array(), "{tools}");
}

#[tokio::test]
async fn an_id_too_large_for_an_integer_is_answered_that_it_is_out_of_range() {
    let mut client = Raw::start().await;
    client
        .line(r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}"#)
        .await;
    client
        .refused(
            Value::Null,
            -32600,
            "`id` is a number out of range: a numeric `id` must be a whole number from -9223372036854775808 to 9223372036854775807",
        )
        .await;
    client
        .line(r#"{"jsonrpc":"2.0","id":2.5,"method":"ping"}"#)
        .await;
    client
        .refused(
            Value::Null,
            -32600,
            "`id` must be a string or a whole number, not a number with a fractional part",
        )
        .await;
    client.goes_on(3).await;
}

#[tokio::test]
async fn a_number_too_large_or_a_lone_surrogate_is_answered_with_the_request_s_id() {
    let mut client = Raw::start().await;
    client
        .line(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"count","arguments":{"x":1e400}}}"#)
        .await;
    client
        .refused(
            json!(3),
            -32600,
            "a number in the message is too large to read (`1e400`)",
        )
        .await;
    client
        .line(r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"count","arguments":{"x":"\ud800"}}}"#)
        .await;
    client
        .refused(
            json!("s"),
            -32600,
            "a string in the message has the escape `\\ud800`, half of a UTF-16 surrogate pair",
        )
        .await;
    // The id itself: nobody's request, answered with a null id.
    client
        .line(r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#)
        .await;
    client
        .refused(Value::Null, -32600, "too large to read")
        .await;
    // A notification is not answered.
    client
        .line(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\udc00","progress":1}}"#)
        .await;
    client.goes_on(4).await;
}

#[tokio::test]
async fn a_second_initialize_is_refused_and_the_session_keeps_what_it_declared() {
    let pipeline = Pipeline::builder()
        .tool(tool_fn_with_context(
            "declared",
            "What the caller declared, as the server holds it.",
            |_: (), ctx: &ToolInvokeContext| {
                Box::pin(async move {
                    let caller = ctx
                        .try_get::<CallerKey>()
                        .ok_or_else(|| ToolError::internal("no MCP caller"))?;
                    Ok::<_, ToolError>(json!({
                        "sampling": caller.can_sample(),
                        "elicitation": caller.can_elicit(),
                        "session": &*caller.session_id,
                    }))
                })
            },
        ))
        .build()
        .expect("built");
    let mut client = Raw::serving(McpServer::new(pipeline)).await;
    let declared = async |client: &mut Raw, id: i64| {
        client
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "declared", "arguments": {}}}))
            .await;
        let answer = client.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        answer["result"]["content"][0]["text"].clone()
    };
    let before = declared(&mut client, 2).await;
    client
        .send(&json!({
            "jsonrpc": "2.0", "id": 3, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"sampling": {}, "elicitation": {}},
                "clientInfo": {"name": "someone else", "version": "2"},
            },
        }))
        .await;
    client
        .refused(json!(3), -32600, "this connection is already initialized")
        .await;
    let after = declared(&mut client, 4).await;
    assert_eq!(before, after, "the session is as it was set up");
    assert!(
        before
            .as_str()
            .is_some_and(|text| text.contains(r#""sampling":false"#)),
        "{before}"
    );
    client.goes_on(5).await;
}

#[tokio::test]
async fn a_batch_is_answered_that_batches_are_not_supported() {
    let mut client = Raw::start().await;
    client
        .line(r#"[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":5,"method":"ping"}]"#)
        .await;
    client
        .refused(
            Value::Null,
            -32600,
            "batches are not supported: send one message per line",
        )
        .await;
    client.goes_on(6).await;
}

#[tokio::test]
async fn a_message_nested_too_deep_is_answered_with_its_id() {
    let mut client = Raw::start().await;
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    client
        .line(&format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"count","arguments":{{"x":{deep}}}}}}}"#
        ))
        .await;
    client.refused(json!(2), -32600, "deeper than 127").await;
    let meta = format!("{}1{}", r#"{"a":"#.repeat(6_000), "}".repeat(6_000));
    client
        .line(&format!(
            r#"{{"jsonrpc":"2.0","id":"m","method":"ping","params":{{"_meta":{meta}}}}}"#
        ))
        .await;
    client.refused(json!("m"), -32600, "deeper than 127").await;
    client.goes_on(3).await;
}

#[tokio::test]
async fn an_invalid_notification_is_not_answered() {
    let mut client = Raw::start().await;
    client
        .line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#)
        .await;
    client
        .line(r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#)
        .await;
    // The next line is the answer to the ping: neither notification was answered.
    client.goes_on(7).await;
}

#[tokio::test]
async fn a_line_over_the_limit_is_answered_and_read_past_in_bounded_memory() {
    let mut client = Raw::start().await;
    let head = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"count","arguments":{"x":""#;
    client.to_server.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'A'; 1024 * 1024];
    for _ in 0..LIMIT / chunk.len() + 1 {
        client.to_server.write_all(&chunk).await.unwrap();
    }
    // Answered while the line is still coming: it is not waited for, nor held, whole.
    client
        .refused(json!(9), -32600, "over the limit of 16 MiB")
        .await;
    for _ in 0..2 * LIMIT / chunk.len() {
        client.to_server.write_all(&chunk).await.unwrap();
    }
    write_line(&mut client.to_server, b"\"}}}").await;
    // Read past: the line ended, the next one is read.
    client.goes_on(10).await;

    // A line over the limit that is not JSON is a parse error.
    for _ in 0..LIMIT / chunk.len() + 1 {
        client.to_server.write_all(&chunk).await.unwrap();
    }
    write_line(&mut client.to_server, b"").await;
    client.refused(Value::Null, -32700, "over the limit").await;
    client.goes_on(11).await;
}

#[tokio::test]
async fn a_line_just_within_the_limit_reaches_rmcp() {
    let mut client = Raw::start().await;
    let head = r#"{"jsonrpc":"2.0","id":12,"method":"ping","params":{"_meta":{"x":""#;
    let tail = r#""}}}"#;
    // With its newline, the line is the limit exactly.
    let fill = "A".repeat(LIMIT - head.len() - tail.len() - 1);
    client.line(&format!("{head}{fill}{tail}")).await;
    let answer = client.next().await;
    assert_eq!(answer, json!({"jsonrpc": "2.0", "id": 12, "result": {}}));
}

#[tokio::test]
async fn answers_never_land_in_the_middle_of_a_line_of_rmcp_s() {
    let mut client = Raw::start().await;
    for id in 20..24 {
        client
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "big"}}))
            .await;
        for _ in 0..20 {
            client.line("hello world").await;
        }
    }
    let (mut results, mut parse_errors) = (0, 0);
    while results < 4 || parse_errors < 80 {
        let answer = client.next().await;
        if answer["error"]["code"] == -32700 {
            parse_errors += 1;
        } else {
            let text = answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("a result: {answer:.300}"));
            assert_eq!(text.len(), BIG_ANSWER);
            results += 1;
        }
    }
    assert_eq!((results, parse_errors), (4, 80));
}

#[tokio::test]
async fn the_session_ends_when_the_client_closes_its_input() {
    let (to_server, server_reads) = tokio::io::duplex(1024);
    let (server_writes, from_server) = tokio::io::duplex(1024);
    let server = McpServer::new(Pipeline::builder().build().expect("built"));
    let served = tokio::spawn(async move { server.serve_io(server_reads, server_writes).await });
    let mut to_server = to_server;
    write_line(&mut to_server, b"hello world").await;
    drop(to_server);
    let mut lines = BufReader::new(from_server).lines();
    let answer = common::within(20, "the answer", lines.next_line())
        .await
        .expect("readable")
        .expect("answered");
    assert!(answer.contains("-32700"), "{answer}");
    // rmcp saw the input end before any handshake: the serving ends, and the output too.
    let ended = common::within(20, "serving ends", served)
        .await
        .expect("joined");
    assert!(ended.is_err(), "no handshake: {ended:?}");
    let end = common::within(20, "the output ends", lines.next_line())
        .await
        .expect("readable");
    assert_eq!(end, None);
}

/// The demo server in a child process, fed a 100 MB line on its stdin: answered, read
/// past, and its memory stays far below the line's size.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_process_fed_a_100_mb_line_answers_it_and_stays_small() {
    use std::process::Stdio;

    let mut child = tokio::process::Command::new(common::DEMO)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo server starts");
    let pid = child.id().expect("running");
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut next = async || -> Value {
        let line = common::within(30, "the server's next line", lines.next_line())
            .await
            .expect("readable")
            .expect("the server answers");
        serde_json::from_str(&line).expect("JSON")
    };
    write_line(
        &mut stdin,
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        })
        .to_string()
        .as_bytes(),
    )
    .await;
    assert_eq!(next().await["id"], 1);
    write_line(
        &mut stdin,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;

    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":""#)
        .await
        .unwrap();
    let chunk = vec![b'A'; 1024 * 1024];
    for _ in 0..100 {
        common::within(30, "writing", stdin.write_all(&chunk))
            .await
            .unwrap();
    }
    write_line(&mut stdin, br#""}}}"#).await;
    write_line(&mut stdin, br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#).await;
    let answer = next().await;
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the limit of 16 MiB")),
        "{answer}"
    );
    assert_eq!(
        next().await,
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );

    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let peak_kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(
        peak_kb < 64 * 1024,
        "the server peaked at {peak_kb} kB for a 100 MB line"
    );
    drop(stdin);
    let exited = common::within(20, "exit", child.wait())
        .await
        .expect("waited");
    assert!(exited.success(), "{exited}");
}

#[tokio::test]
async fn a_log_level_of_the_wrong_kind_in_meta_is_invalid_params_and_the_call_does_not_run() {
    let mut client = Raw::start().await;
    let count = |id: i64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "count", "arguments": {}, "_meta": meta}})
    };
    client.send(&count(2, json!({}))).await;
    assert_eq!(client.next().await["result"]["content"][0]["text"], "1");
    client
        .send(&count(
            3,
            json!({"io.modelcontextprotocol/logLevel": "loud"}),
        ))
        .await;
    client
        .refused(
            json!(3),
            -32602,
            "`_meta[\"io.modelcontextprotocol/logLevel\"]` must be one of debug, info, notice, warning, error, critical, alert, emergency, not \"loud\"",
        )
        .await;
    client.send(&count(4, json!({"progressToken": [1]}))).await;
    client
        .refused(
            json!(4),
            -32602,
            "`_meta.progressToken` must be a string or a whole number",
        )
        .await;
    // Neither refused call ran: the session's next call is its second.
    client
        .send(&count(
            5,
            json!({"io.modelcontextprotocol/logLevel": "error"}),
        ))
        .await;
    assert_eq!(client.next().await["result"]["content"][0]["text"], "2");
}
