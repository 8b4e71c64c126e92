//! Tools imported from an upstream MCP server (the official Python SDK, over stdio and
//! streamable HTTP): their arguments are checked before the call leaves, and their results
//! reach an MCP client whole — every content block, the image's bytes exactly — with only
//! what policy removes (here, redaction of an email in the text) changed.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    Gateway, HttpUpstream, check, invoke, mcp, mcp_rpc, open_session, python, python_mcp_available,
    rpc_answer, user_yaml,
};

fn config() -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    format!(
        "upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
policies:\n  redaction: {{}}\n\
users:\n{alice}",
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// The JSON-RPC result of an `/mcp` answer.
fn rpc_result(body: &str) -> Value {
    rpc_answer(body)["result"].clone()
}

#[tokio::test]
async fn a_wrong_argument_is_refused_before_the_call_leaves_naming_the_field() {
    if !python_mcp_available("a_wrong_argument_is_refused_before_the_call_leaves_naming_the_field")
    {
        return;
    }
    let gateway = Gateway::start(&config());
    let good = invoke(&gateway, "alice", "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(good.status, 200, "{}", good.body);
    assert_eq!(
        good.body["output"]["structuredContent"]["result"], 5,
        "{}",
        good.body
    );

    let bad = invoke(&gateway, "alice", "add", json!({"a": "two", "b": 3})).await;
    assert_eq!(
        (bad.status, bad.error_code()),
        (400, "invalid_input"),
        "{}",
        bad.body
    );
    assert_eq!(
        bad.body["error"]["violations"][0]["path"], "a",
        "{}",
        bad.body
    );

    let session = open_session(&gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "add", "arguments": {"b": 3}}});
    let (status, _, body) = mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{body}");
    let result = rpc_result(&body);
    assert_eq!(result["isError"], true, "{body}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("argument `a`"),
        "{body}"
    );
}

#[tokio::test]
async fn an_image_result_reaches_the_mcp_client_whole_with_its_text_redacted() {
    if !python_mcp_available("an_image_result_reaches_the_mcp_client_whole_with_its_text_redacted")
    {
        return;
    }
    let gateway = Gateway::start(&config());
    let session = open_session(&gateway, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "picture", "arguments": {}}});
    let (status, _, body) = mcp(&gateway, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{body}");
    let result = rpc_result(&body);
    let content = result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(content.len(), 2, "{body}");
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "a picture for [REDACTED:email]"})
    );
    assert_eq!(content[1]["type"], "image", "{body}");
    assert_eq!(content[1]["mimeType"], "image/png", "{body}");
    let data = content[1]["data"].as_str().unwrap_or_default();
    assert!(
        data.ends_with("/020+7946+0958+AA"),
        "the image's bytes changed: {data}"
    );
    assert_ne!(result["isError"], true, "{body}");
}

#[test]
fn check_says_which_imported_tools_have_their_arguments_checked() {
    if !python_mcp_available("check_says_which_imported_tools_have_their_arguments_checked") {
        return;
    }
    let (status, stdout, stderr) = check(&config());
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("add  [mcp]\n  arguments checked against the upstream's input schema"),
        "{stdout}"
    );
}

/// What `tests/clients/relay_client.py` saw, as alice, through `gateway`.
async fn relay_seen(gateway: &Gateway) -> Value {
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/relay_client.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(client)
        .arg(gateway.url("/mcp"))
        .arg(crate::common::key("alice"));
    client_output(command, gateway, "relay client").await
}

fn assert_progress_relayed(seen: &Value) {
    assert_eq!(
        seen["progress"],
        json!([
            [1.0, 3.0, "step 1 of 3"],
            [2.0, 3.0, "step 2 of 3"],
            [3.0, 3.0, "step 3 of 3"]
        ]),
        "every progress notification reaches the caller, with its own token"
    );
    assert_eq!(seen["results"]["count"], "counted to 3");
}

#[tokio::test]
async fn progress_sampling_and_elicitation_of_an_upstream_reach_the_callers_mcp_client() {
    if !python_mcp_available(
        "progress_sampling_and_elicitation_of_an_upstream_reach_the_callers_mcp_client",
    ) {
        return;
    }
    // Over streamable HTTP the upstream asks on the call's own response stream: the
    // request is the caller's by that stream.
    let upstream = shapes();
    let gateway = Gateway::start(&format!(
        "upstreams:\n  - name: shapes\n    url: {url}\n\
policies:\n  redaction: {{}}\n\
users:\n{alice}",
        url = upstream.url,
        alice = user_yaml("alice", &["admin"]),
    ));
    let seen = relay_seen(&gateway).await;

    assert_progress_relayed(&seen);
    assert_eq!(seen["sampling"], json!(["the answer?"]));
    assert_eq!(seen["results"]["ask_model"], "the model said: forty-two");

    let elicited = &seen["elicitation"][0];
    assert!(
        elicited.is_object(),
        "no elicitation reached the client: {seen}"
    );
    assert_eq!(elicited["message"], "Pick a colour");
    let colour = &elicited["schema"]["properties"]["colour"];
    assert_eq!(
        colour["default"], "blue",
        "defaults pass unchanged: {elicited}"
    );
    assert_eq!(
        colour["enum"],
        json!(["red", "blue"]),
        "enums pass unchanged: {elicited}"
    );
    assert_eq!(seen["results"]["ask_user"], "the user picked red");
}

#[tokio::test]
async fn over_stdio_an_upstreams_progress_reaches_the_caller_and_its_requests_are_refused() {
    if !python_mcp_available(
        "over_stdio_an_upstreams_progress_reaches_the_caller_and_its_requests_are_refused",
    ) {
        return;
    }
    // Over stdio nothing says which call a sampling or elicitation request is for, and the
    // connection is shared by every caller: the upstream is refused, and no caller asked.
    // Progress names its call by its token, and still arrives.
    let gateway = Gateway::start(&config());
    let seen = relay_seen(&gateway).await;

    assert_progress_relayed(&seen);
    assert_eq!(seen["sampling"], json!([]), "{seen}");
    assert_eq!(seen["elicitation"], json!([]), "{seen}");
    for tool in ["ask_model", "ask_user"] {
        let answer = seen["results"][tool].as_str().unwrap_or_default();
        assert!(
            answer.contains("did not come on the response stream of a call"),
            "the upstream was told why: {answer}"
        );
    }
}

/// alice may use everything; bob only the `add` tool.
fn policy_config(audit: &std::path::Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    format!(
        "upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
policies:\n  redaction: {{}}\n  authorization:\n    default: deny\n    rules:\n      - {{ effect: allow, users: [alice] }}\n      - {{ effect: allow, users: [bob], tools: [add] }}\n\
audit:\n  sink: file\n  path: {audit}\n  flush_every: 0s\n\
users:\n{alice}{bob}",
        python = python(),
        audit = audit.display(),
        alice = user_yaml("alice", &["analyst"]),
        bob = user_yaml("bob", &["analyst"]),
    )
}

#[tokio::test]
async fn prompts_and_resources_go_through_authorization_redaction_and_audit() {
    if !python_mcp_available("prompts_and_resources_go_through_authorization_redaction_and_audit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gateway = Gateway::start(&policy_config(&audit));

    let alice = open_session(&gateway, "alice").await;
    let prompts = mcp_rpc(&gateway, "alice", &alice, "prompts/list", json!({})).await;
    assert_eq!(prompts["prompts"][0]["name"], "greet", "{prompts}");
    assert_eq!(
        prompts["prompts"][0]["arguments"][0]["name"], "name",
        "{prompts}"
    );
    let got = mcp_rpc(
        &gateway,
        "alice",
        &alice,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Ann"}}),
    )
    .await;
    assert_eq!(
        got["messages"][0]["content"]["text"], "Say hello to Ann.",
        "{got}"
    );
    let listed = mcp_rpc(&gateway, "alice", &alice, "resources/list", json!({})).await;
    assert_eq!(listed["resources"][0]["uri"], "shapes://note", "{listed}");
    let read = mcp_rpc(
        &gateway,
        "alice",
        &alice,
        "resources/read",
        json!({"uri": "shapes://note"}),
    )
    .await;
    assert_eq!(
        read["contents"][0]["text"], "write to [REDACTED:email]",
        "output redaction applies to resources: {read}"
    );
    let missing = mcp_rpc(
        &gateway,
        "alice",
        &alice,
        "resources/read",
        json!({"uri": "shapes://none"}),
    )
    .await;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");

    // bob may call `add` only: he sees no prompt and no resource, and cannot use them.
    let bob = open_session(&gateway, "bob").await;
    let prompts = mcp_rpc(&gateway, "bob", &bob, "prompts/list", json!({})).await;
    assert_eq!(prompts["prompts"], json!([]), "{prompts}");
    let listed = mcp_rpc(&gateway, "bob", &bob, "resources/list", json!({})).await;
    assert_eq!(listed["resources"], json!([]), "{listed}");
    let refused = mcp_rpc(
        &gateway,
        "bob",
        &bob,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "x"}}),
    )
    .await;
    assert!(refused["error"].is_object(), "{refused}");
    let refused = mcp_rpc(
        &gateway,
        "bob",
        &bob,
        "resources/read",
        json!({"uri": "shapes://note"}),
    )
    .await;
    assert!(refused["error"].is_object(), "{refused}");
    // Nor are they tools.
    let tools = mcp_rpc(&gateway, "alice", &alice, "tools/list", json!({})).await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("prompt.") || n.starts_with("resources.")),
        "{names:?}"
    );

    let records = std::fs::read_to_string(&audit).expect("the audit file");
    let audited: Vec<(String, String)> = records
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|r| {
            (
                r["user_id"].as_str().unwrap_or_default().to_owned(),
                r["tool"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        audited.contains(&("alice".to_owned(), "prompt.greet".to_owned())),
        "{audited:?}"
    );
    assert!(
        audited.contains(&("alice".to_owned(), "resources.shapes".to_owned())),
        "{audited:?}"
    );
}

/// The conformance fixture (`tests/conformance/everything.py`) serving streamable HTTP.
fn everything() -> HttpUpstream {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance/everything.py"
    );
    HttpUpstream::start(script, &["0"], &[])
}

/// `shapes.py` serving streamable HTTP.
fn shapes() -> HttpUpstream {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    HttpUpstream::start(script, &["--http"], &[])
}

/// What `tests/clients/rounds_client.py` saw, in `era`: over streamable HTTP to the
/// gateway's `/mcp`, or over stdio to `toolgate mcp` on the same configuration.
async fn rounds_seen(gateway: &Gateway, era: &str, stdio: bool) -> Value {
    let client = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/rounds_client.py"
    );
    let mut command = tokio::process::Command::new(python());
    command.arg(client).arg(era);
    if stdio {
        let config = gateway.config.to_str().expect("a UTF-8 path");
        command.args([
            "--stdio",
            crate::common::BIN,
            "mcp",
            "--config",
            config,
            "--user",
            "alice",
        ]);
    } else {
        command
            .arg(gateway.url("/mcp"))
            .arg(crate::common::key("alice"));
    }
    let what = format!("{era} client (stdio: {stdio})");
    client_output(command, gateway, &what).await
}

/// What a Python client (`command`) of `gateway` printed: one JSON object. Fails the test,
/// with the client's and the gateway's output, when it fails or takes over 120 s.
async fn client_output(
    mut command: tokio::process::Command,
    gateway: &Gateway,
    what: &str,
) -> Value {
    let run = command.kill_on_drop(true).output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the Python client finishes within 120 s")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}\ngateway:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gateway.stderr()
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

#[tokio::test]
async fn an_upstreams_input_required_rounds_reach_callers_of_both_eras_and_are_never_cached() {
    if !python_mcp_available(
        "an_upstreams_input_required_rounds_reach_callers_of_both_eras_and_are_never_cached",
    ) {
        return;
    }
    let upstream = everything();
    // The greeting tool is cached (as if read-only): a result made with a caller's
    // answers must still never be stored or served again.
    let gateway = Gateway::start(&format!(
        "upstreams:\n  - name: everything\n    url: {url}\n\
policies:\n  cache:\n    tools: {{ test_input_required_result_elicitation: 5m }}\n\
users:\n{alice}",
        url = upstream.url,
        alice = user_yaml("alice", &["admin"]),
    ));
    // The upstream marks its lists public; through the gateway, which lists per caller and
    // decides per caller who may read what, every list and read is private.
    let read = "test://static-text";
    for (method, name, params) in [
        ("tools/list", None, json!({})),
        ("resources/list", None, json!({})),
        ("resources/read", Some(read), json!({ "uri": read })),
    ] {
        let (status, answer) =
            crate::common::mcp_2026(&gateway, "alice", method, name, params).await;
        assert_eq!(status, 200, "{method}: {answer}");
        assert_eq!(
            answer["result"]["cacheScope"], "private",
            "{method} through the gateway: {answer}"
        );
    }
    for (era, stdio) in [
        ("2025-11-25", false),
        ("2026-07-28", false),
        ("2025-11-25", true),
        ("2026-07-28", true),
    ] {
        let seen = rounds_seen(&gateway, era, stdio).await;
        let era = &format!("{era} over {}", if stdio { "stdio" } else { "HTTP" });
        assert_eq!(
            seen["elicited"],
            json!([
                "Step 1: What is your name?",
                "Step 2: What is your favorite color?",
                "What is your name?",
                "What is your name?"
            ]),
            "{era}: every round's request reached the client: {seen}"
        );
        assert_eq!(
            seen["results"]["multi_round"], "Multi-round complete for Alice who likes blue",
            "{era}: the upstream's state came back to it intact: {seen}"
        );
        assert_eq!(seen["results"]["first"], "Hello, Bob!", "{era}: {seen}");
        // At 2026-07-28 the client held the upstream's state (the multi-round tool's two
        // rounds) only sealed by the gateway.
        let states: Vec<&str> = seen["states"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let expected = if era.starts_with("2026-07-28") { 2 } else { 0 };
        assert_eq!(states.len(), expected, "{era}: {seen}");
        for state in states {
            assert!(
                !state.contains("round"),
                "{era}: the upstream's state is sealed, not readable as sent: {state}"
            );
        }
        assert_eq!(
            seen["results"]["second"], "Hello, Carol!",
            "{era}: the second call was not answered from the first's result: {seen}"
        );
    }
}

#[tokio::test]
async fn an_upstreams_resource_updates_reach_subscribers_of_both_eras() {
    if !python_mcp_available("an_upstreams_resource_updates_reach_subscribers_of_both_eras") {
        return;
    }
    let upstream = everything();
    let gateway = Gateway::start(&format!(
        "upstreams:\n  - name: everything\n    url: {url}\nusers:\n{alice}",
        url = upstream.url,
        alice = user_yaml("alice", &["admin"]),
    ));
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/watch_client.py");
    for era in ["2025-11-25", "2026-07-28"] {
        let mut command = tokio::process::Command::new(python());
        command
            .arg(client)
            .arg(era)
            .arg(gateway.url("/mcp"))
            .arg(crate::common::key("alice"));
        let seen = client_output(command, &gateway, &format!("{era} watch client")).await;
        assert_eq!(
            seen["updates"],
            json!(["test://watched-resource"]),
            "{era}: the update reached the subscriber once: {seen}"
        );
        if era == "2026-07-28" {
            assert_eq!(
                seen["honored"],
                json!(["test://watched-resource"]),
                "{seen}"
            );
        }
    }
}

#[tokio::test]
async fn an_imported_tool_the_cache_includes_is_served_from_it_over_v1_and_mcp() {
    if !python_mcp_available(
        "an_imported_tool_the_cache_includes_is_served_from_it_over_v1_and_mcp",
    ) {
        return;
    }
    // The imported tool reads the caller's routing key while it runs (over `/mcp`, where it
    // is bound, and over `/v1`, where it is not): the gateway's cache is told its results
    // do not depend on it, so they are stored all the same.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/shapes.py");
    let gateway = Gateway::start(&format!(
        "upstreams:\n  - name: shapes\n    command: {python}\n    args: [\"{script}\"]\n\
policies:\n  cache:\n    tools: {{ add: 5m }}\n\
users:\n{alice}",
        python = python(),
        alice = user_yaml("alice", &["admin"]),
    ));
    let first = invoke(&gateway, "alice", "add", json!({"a": 2, "b": 3})).await;
    let second = invoke(&gateway, "alice", "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(first.body["metadata"]["cache"], "miss", "{}", first.body);
    assert_eq!(second.body["metadata"]["cache"], "hit", "{}", second.body);

    let session = open_session(&gateway, "alice").await;
    let call = json!({"name": "add", "arguments": {"a": 2, "b": 3}});
    let over_mcp = mcp_rpc(&gateway, "alice", &session, "tools/call", call).await;
    assert_eq!(over_mcp["structuredContent"]["result"], 5, "{over_mcp}");
    let text = gateway.metrics().await;
    let hits = crate::common::metric(
        &text,
        "toolgate_cache_lookups_total",
        &[("tool", "add"), ("result", "hit")],
    );
    assert_eq!(hits, 2.0, "the `/mcp` call was a hit too:\n{text}");
}
