//! An upstream that fails a call with ten megabytes of text — as a JSON-RPC error or as a
//! result with `isError`, over stdio and over HTTP — reaches no caller whole: `/v1`,
//! `/mcp`, a batch and the audit file each get the start of it, within the bound of an
//! error's message, with a marker saying how long it was. Nor does an upstream that refuses
//! to list its tools reach a log line or the start-up error whole.

use reqwest::Method;
use serde_json::{Value, json};
use toolgate_core::error::MAX_ERROR_CHARS;

use crate::common::{
    Gateway, HttpUpstream, client, key, mcp, open_session, python, run, user_yaml,
};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/upstreams/loud_errors.py"
);

/// What ends every error the upstream sends, and must never be read.
const END: &str = "END-OF-THE-ERROR";

/// The most bytes an answer carrying one cut error may take: the message in ASCII, and
/// room for the JSON around it.
const MOST_BYTES: usize = MAX_ERROR_CHARS + 2_000;

fn config(audit: &std::path::Path, url: &str) -> String {
    format!(
        concat!(
            "upstreams:\n",
            "  - {{ name: raw, command: {python}, args: [\"{script}\"], prefix: stdio_ }}\n",
            "  - {{ name: rawhttp, url: \"{url}\", prefix: http_ }}\n",
            "policies:\n  output_limit:\n    max_bytes: 64KiB\n",
            "audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n  include_values: true\n",
            "users:\n{alice}",
        ),
        script = SCRIPT,
        url = url,
        python = python(),
        audit = audit.display(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// Checks one answer's text: within the bound, cut with the marker, without the end.
fn assert_cut(what: &str, text: &str) {
    assert!(
        text.len() <= MOST_BYTES,
        "{what}: {} bytes, over {MOST_BYTES}",
        text.len()
    );
    assert!(!text.contains(END), "{what} carries the end of the error");
    assert!(
        text.contains("characters; the first"),
        "{what} has no marker: {}",
        &text[text.len().saturating_sub(300)..]
    );
}

#[tokio::test]
async fn an_upstream_s_huge_error_reaches_every_caller_and_the_audit_file_cut() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let upstream = HttpUpstream::start(SCRIPT, &["http"], &[]);
    let gateway = Gateway::start(&config(&audit, &upstream.url));
    let tools = ["stdio_refuse", "stdio_fail", "http_refuse", "http_fail"];

    for tool in tools {
        let response = client()
            .post(gateway.url(&format!("/v1/tools/{tool}/invoke")))
            .bearer_auth(key("alice"))
            .json(&json!({}))
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status(), 502, "{tool}");
        let text = response.text().await.unwrap();
        assert_cut(&format!("{tool} over /v1"), &text);
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["code"], "tool_error", "{tool}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.chars().count() <= MAX_ERROR_CHARS, "{tool}");
        assert!(
            message.contains("the message was 10,000,0"),
            "{tool}: {}",
            &message[message.len() - 200..]
        );
    }

    let calls: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            json!({"id": format!("call_{i}"), "type": "function",
                   "function": {"name": tool, "arguments": "{}"}})
        })
        .collect();
    let batch = client()
        .post(gateway.url("/v1/tool-calls"))
        .bearer_auth(key("alice"))
        .json(&json!({"role": "assistant", "tool_calls": calls}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(batch.status(), 200);
    let text = batch.text().await.unwrap();
    // Each error twice: in its result, and in the tool message for the model.
    assert!(
        text.len() <= 2 * tools.len() * MOST_BYTES,
        "the batch: {} bytes",
        text.len()
    );
    assert!(!text.contains(END), "the batch carries the end of an error");
    let body: Value = serde_json::from_str(&text).unwrap();
    for result in body["results"].as_array().unwrap() {
        assert_eq!(result["status"], "error", "{}", result["error"]["code"]);
    }

    let session = open_session(&gateway, "alice").await;
    for (id, tool) in tools.iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/call",
                          "params": {"name": tool, "arguments": {}}});
        let (status, _, text) =
            mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
        assert_eq!(status, 200, "{tool}");
        assert_cut(&format!("{tool} over /mcp"), &text);
    }

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    let lines: Vec<&str> = records.lines().collect();
    assert_eq!(lines.len(), 3 * tools.len());
    for line in lines {
        assert_cut("an audit record", line);
    }
}

#[test]
fn an_upstream_that_refuses_to_list_its_tools_at_start_up_is_logged_and_told_cut_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.yaml");
    let yaml = format!(
        concat!(
            "upstreams:\n",
            "  - {{ name: raw, command: {python}, args: [\"{script}\", unlisted], prefix: stdio_, connect_timeout: 2s }}\n",
            "users:\n{alice}",
        ),
        python = python(),
        script = SCRIPT,
        alice = user_yaml("alice", &["admin"]),
    );
    std::fs::write(&config, yaml).unwrap();
    let config = config.to_str().unwrap();
    let (status, _, stderr) = run(
        &["serve", "--config", config, "--listen", "127.0.0.1:0"],
        "",
    );
    assert!(
        !status.success(),
        "the gateway does not start without the tools"
    );
    assert!(
        stderr.contains("MCP server `raw` did not list its tools"),
        "{}",
        &stderr[stderr.len().saturating_sub(2_000)..]
    );
    assert!(!stderr.contains(END), "stderr carries the end of the error");
    for line in stderr.lines() {
        assert!(line.len() <= MOST_BYTES, "a line of {} bytes", line.len());
    }
    // Cut once, where the upstream's words were read: a message cut again would say it
    // was some 60,000 characters long.
    let markers: Vec<&str> = stderr.split("[cut: the message was ").skip(1).collect();
    assert!(!markers.is_empty(), "no marker");
    for marker in markers {
        assert!(
            marker.starts_with("10,000,"),
            "cut twice: {}",
            &marker[..60]
        );
    }
}
