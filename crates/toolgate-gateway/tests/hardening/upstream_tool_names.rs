//! Tool names an upstream lists that toolgate cannot register — too long once prefixed,
//! listed twice, with a space or a NUL, a built-in tool's — skip those tools, with a
//! warning that cannot forge a log line, and the gateway serves the rest, at start and on
//! reload. A name two upstreams both offer is served by neither (neither may take the
//! other's calls), and the gateway still starts and reloads: a policy naming it is a
//! warning. The upstream (`tests/upstreams/odd_names.py`) is a real stdio MCP server.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    Gateway, check, client, get, invoke, mcp_rpc, metric, open_session, python, user_yaml,
};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/odd_names.py");

/// The metric counting skipped tools.
const SKIPPED: &str = "toolgate_mcp_upstream_tools_skipped_total";

/// Writes the tool names an `odd_names.py` upstream lists at its next start into `file`.
fn list(file: &Path, names: &[&str]) {
    std::fs::write(file, serde_json::to_string(names).unwrap()).expect("writing the list");
}

/// The built-in `echo`; upstream `odd` (prefix `h_`) listing the names of `odd`, and
/// `plain` (no prefix) those of `plain`.
fn config(odd: &Path, plain: &Path) -> String {
    format!(
        "tools:\n  builtin: [echo]\n\
upstreams:\n\
  - {{ name: odd, command: {python}, args: [\"{SCRIPT}\"], prefix: h_, discover: false,\n\
      env: {{ ODD_NAMES_FILE: \"{odd}\" }} }}\n\
  - {{ name: plain, command: {python}, args: [\"{SCRIPT}\"], discover: false,\n\
      env: {{ ODD_NAMES_FILE: \"{plain}\" }} }}\n\
users:\n{alice}",
        python = python(),
        odd = odd.display(),
        plain = plain.display(),
        alice = user_yaml("alice", &["admin"]),
    )
}

/// A 63-character name: valid in MCP and in toolgate, 65 characters with `h_`.
fn long_name() -> String {
    "x".repeat(63)
}

/// The names of the tools `GET /v1/tools` and MCP `tools/list` give alice, sorted.
async fn listed(gateway: &Gateway) -> (Vec<String>, Vec<String>) {
    let names = |tools: &Value| {
        let mut names: Vec<String> = (tools.as_array().expect("a tool list").iter())
            .map(|t| t["name"].as_str().expect("a name").to_owned())
            .collect();
        names.sort();
        names
    };
    let v1 = get(&client(), &gateway.url("/v1/tools"), Some("alice")).await;
    assert_eq!(v1.status, 200, "{}", v1.body);
    let session = open_session(gateway, "alice").await;
    let mcp = mcp_rpc(gateway, "alice", &session, "tools/list", json!({})).await;
    (names(&v1.body["tools"]), names(&mcp["tools"]))
}

/// What calling `tool` as alice answers: its text, or the error code.
async fn call(gateway: &Gateway, tool: &str) -> String {
    let answer = invoke(gateway, "alice", tool, json!({})).await;
    if answer.status != 200 {
        return format!("{} {}", answer.status, answer.error_code());
    }
    let text = &answer.body["output"]["content"][0]["text"];
    text.as_str()
        .map_or_else(|| answer.body.to_string(), str::to_owned)
}

/// The odd names, beside `ok`: too long with the prefix, `ok` again, a space, a NUL with a
/// right-to-left override.
fn odd_names(long: &str) -> Vec<&str> {
    vec!["ok", long, "ok", "has space", "nul\u{0}rtl\u{202e}exe.txt"]
}

#[tokio::test]
async fn an_upstreams_unregistrable_tool_names_are_skipped_and_its_good_tools_served() {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    let long = long_name();
    list(&odd, &odd_names(&long));
    list(&plain, &["plain_ok", "echo"]);
    let gateway = Gateway::start(&config(&odd, &plain));

    let expected = vec!["echo", "h_ok", "plain_ok"];
    let (v1, mcp) = listed(&gateway).await;
    assert_eq!(v1, expected, "GET /v1/tools");
    assert_eq!(mcp, expected, "MCP tools/list");
    assert_eq!(call(&gateway, "h_ok").await, "called ok");
    assert_eq!(call(&gateway, "plain_ok").await, "called plain_ok");
    // The built-in keeps its name: the upstream's `echo` displaces nothing.
    let echoed = invoke(&gateway, "alice", "echo", json!({"text": "hi"})).await;
    assert_eq!(echoed.status, 200, "{}", echoed.body);
    assert!(
        !echoed.body.to_string().contains("called echo"),
        "{}",
        echoed.body
    );

    let log = gateway.stderr();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("a tool the MCP server lists is not served"))
        .collect();
    assert_eq!(warnings.len(), 5, "{log}");
    let about = |text: &str| {
        *warnings
            .iter()
            .find(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no warning mentions {text:?}:\n{log}"))
    };
    let too_long = about(&format!("h_{long}"));
    assert!(
        too_long.contains("65 characters with the prefix `h_`, over the limit of 64")
            && too_long.contains("shorter `prefix` (or none)")
            && !too_long.contains("distinct names"),
        "{too_long}"
    );
    assert!(about("h_has space").contains("characters a tool name cannot have"));
    assert!(about("more than once").contains("h_ok"));
    let taken = about("a tool of the gateway's own");
    assert!(taken.contains("plain") && taken.contains("give the upstream a `prefix`"));
    // The NUL and the override are escaped, and the name quoted: a name can neither forge
    // or disguise a log line nor add a field to it (`tool="h_a b"`, never `tool=h_a b`).
    assert!(
        about("h_nul").contains("tool=\"h_nul\\\\u{0}rtl\\\\u{202e}exe.txt\""),
        "{log}"
    );
    assert!(
        about("h_has space").contains("tool=\"h_has space\""),
        "{log}"
    );
    assert!(
        !log.contains('\u{0}') && !log.contains('\u{202e}'),
        "{log:?}"
    );

    let metrics = gateway.metrics().await;
    for (server, reason, count) in [
        ("odd", "invalid_name", 3.0),
        ("odd", "listed_twice", 1.0),
        ("plain", "taken", 1.0),
    ] {
        let labels = [("server", server), ("reason", reason)];
        assert_eq!(
            metric(&metrics, SKIPPED, &labels),
            count,
            "{server} {reason}"
        );
    }
}

#[tokio::test]
async fn toolgate_check_names_each_skipped_tool_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    let long = long_name();
    list(&odd, &odd_names(&long));
    list(&plain, &["plain_ok"]);
    let (status, stdout, stderr) = check(&config(&odd, &plain));
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("OK — 3 tools"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "warning: upstream `odd`: tool `h_{long}` is not served: its name is 65 characters"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: upstream `odd`: tool `h_has space` is not served"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_name_two_upstreams_offer_is_served_by_neither_and_the_gateway_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    list(&odd, &["ok"]);
    list(&plain, &["plain_ok", "h_ok"]);
    // A policy names the contested tool: known, not a typo, so a warning.
    let yaml = format!(
        "{}policies:\n  approval:\n    tools: [h_ok]\n",
        config(&odd, &plain)
    );
    let (status, stdout, stderr) = check(&yaml);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("warning: upstream `odd`: tool `h_ok` is not served: upstream `plain` offers a tool of this name too")
            && stderr.contains("warning: upstream `plain`: tool `h_ok` is not served: upstream `odd` offers a tool of this name too")
            && stderr.contains("give the upstream a `prefix`"),
        "{stderr}"
    );

    let gateway = Gateway::start(&yaml);
    let (v1, mcp) = listed(&gateway).await;
    assert_eq!(
        v1,
        ["echo", "plain_ok", "toolgate.outcome"],
        "GET /v1/tools"
    );
    assert_eq!(mcp, v1, "MCP tools/list");
    assert_eq!(call(&gateway, "h_ok").await, "404 unknown_tool");
    assert!(
        gateway
            .stderr()
            .contains("a policy names a tool that is not served"),
        "{}",
        gateway.stderr()
    );
}

#[tokio::test]
async fn a_reload_skips_the_new_lists_bad_names_and_a_name_two_upstreams_offer() {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    list(&odd, &["ok"]);
    list(&plain, &["plain_ok"]);
    let gateway = Gateway::start(&config(&odd, &plain));
    assert_eq!(call(&gateway, "h_ok").await, "called ok");

    // The upstream's list changed: its new good tool is served, its bad names skipped.
    let long = long_name();
    let mut changed = odd_names(&long);
    changed.push("later");
    list(&odd, &changed);
    gateway.reload(1).await;
    assert_eq!(call(&gateway, "h_later").await, "called later");
    let (v1, mcp) = listed(&gateway).await;
    assert_eq!(v1, ["echo", "h_later", "h_ok", "plain_ok"], "GET /v1/tools");
    assert_eq!(mcp, v1, "MCP tools/list");
    assert!(
        gateway
            .stderr()
            .contains("a tool the MCP server lists is not served"),
        "{}",
        gateway.stderr()
    );

    // Another upstream now offers `h_later` too: the reload goes through, and neither
    // serves it; the rest is served as before.
    list(&plain, &["plain_ok", "h_later"]);
    gateway.reload(2).await;
    assert!(
        gateway
            .stderr()
            .contains("upstream `plain` offers a tool of this name too"),
        "{}",
        gateway.stderr()
    );
    assert_eq!(call(&gateway, "h_later").await, "404 unknown_tool");
    assert_eq!(call(&gateway, "h_ok").await, "called ok");
    assert_eq!(call(&gateway, "plain_ok").await, "called plain_ok");
}

#[tokio::test]
async fn a_tool_whose_input_schema_is_a_string_is_named_in_the_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    let malformed = json!(["ok", {"name": "bad", "inputSchema": "a string"}]);
    std::fs::write(&odd, malformed.to_string()).unwrap();
    list(&plain, &["plain_ok"]);
    let (status, stdout, stderr) = check(&config(&odd, &plain));
    assert!(!status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("tool 2 of the page (`bad`): its `inputSchema` is not a JSON object"),
        "{stderr}"
    );
}

/// [`config`] with policies naming `tool` (a timeout, and a rate limit).
fn naming(odd: &Path, plain: &Path, tool: &str) -> String {
    format!(
        "{}policies:\n  timeouts:\n    tools: {{ {tool}: 5s }}\n  rate_limits:\n    - {{ name: few, rate: 100/minute, tools: [{tool}] }}\n",
        config(odd, plain)
    )
}

#[tokio::test]
async fn a_policy_naming_a_prefixed_tool_its_upstream_no_longer_lists_warns_and_the_gateway_starts_and_reloads()
 {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    list(&odd, &["ok", "old"]);
    list(&plain, &["plain_ok"]);
    let yaml = naming(&odd, &plain, "h_old");
    let gateway = Gateway::start(&yaml);
    assert_eq!(call(&gateway, "h_old").await, "called old");

    // A new version of the upstream no longer lists `old`: the reload goes through, with a
    // warning naming the field, the tool and the upstream.
    list(&odd, &["ok"]);
    gateway.reload(1).await;
    let log = gateway.stderr();
    let warning = (log.lines())
        .find(|l| {
            l.contains("a policy names a tool its upstream does not list now")
                && l.contains("field=policies.timeouts.tools.h_old")
        })
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    assert!(
        warning.contains("the upstream `odd` does not list a tool `h_old` now")
            && warning.contains("the policy takes effect if it lists it again"),
        "{warning}"
    );
    assert_eq!(call(&gateway, "h_old").await, "404 unknown_tool");
    assert_eq!(call(&gateway, "h_ok").await, "called ok");

    // `toolgate check` says so too, and a gateway starts with it.
    let (status, stdout, stderr) = check(&yaml);
    assert!(status.success(), "{stdout}\n{stderr}");
    for field in [
        "policies.timeouts.tools.h_old",
        "policies.rate_limits[0].tools[0]",
    ] {
        assert!(
            stderr.contains(&format!(
                "warning: `{field}` names the tool `h_old`, but the upstream `odd` does not list a tool `h_old` now; the policy takes effect if it lists it again"
            )),
            "{field}: {stderr}"
        );
    }
    let restarted = Gateway::start(&yaml);
    assert_eq!(call(&restarted, "h_ok").await, "called ok");

    // The upstream lists it again: the policy takes effect.
    list(&odd, &["ok", "old"]);
    gateway.reload(2).await;
    assert_eq!(call(&gateway, "h_old").await, "called old");
}

#[tokio::test]
async fn a_policy_naming_a_tool_in_no_upstreams_prefix_is_still_refused_and_says_to_give_a_prefix()
{
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    list(&odd, &["ok"]);
    list(&plain, &["plain_ok"]);

    // A typo, or a tool `plain` (no prefix) stopped listing: which, no fact tells.
    let (status, stdout, stderr) = check(&naming(&odd, &plain, "plain_gone"));

    assert!(!status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("no tool is named `plain_gone`")
            && stderr.contains("`plain` (`upstreams[1].prefix`)")
            && stderr.contains("give that upstream a `prefix`"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("`odd` (`upstreams[0].prefix`)"),
        "{stderr}"
    );
}

/// [`config`] with policies that protect, naming `held` (a person approves its calls) and
/// `barred` (alice may not call it).
fn protecting(odd: &Path, plain: &Path, held: &str, barred: &str) -> String {
    format!(
        "{}policies:\n  approval:\n    tools: [{held}]\n    destructive_tools: false\n  authorization:\n    default: allow\n    rules:\n      - {{ effect: deny, users: [alice], tools: [{barred}] }}\n",
        config(odd, plain)
    )
}

/// The status calling `tool` as alice answers: 202 for a call that waits for a person.
async fn status_of(gateway: &Gateway, tool: &str) -> u16 {
    invoke(gateway, "alice", tool, json!({})).await.status
}

#[tokio::test]
async fn a_policy_that_protects_naming_a_prefixed_tool_no_tool_has_is_refused_at_start_and_on_reload()
 {
    let dir = tempfile::tempdir().unwrap();
    let (odd, plain) = (dir.path().join("odd.json"), dir.path().join("plain.json"));
    list(&odd, &["ok", "send", "wire"]);
    list(&plain, &["plain_ok"]);

    // A typo carrying the upstream's prefix: `h_send` and `h_wire` would run unprotected.
    for (yaml, field) in [
        (
            protecting(&odd, &plain, "h_sned", "h_wire"),
            "policies.approval.tools[0]",
        ),
        (
            protecting(&odd, &plain, "h_send", "h_wrie"),
            "policies.authorization.rules[0].tools[0]",
        ),
    ] {
        let (status, stdout, stderr) = check(&yaml);
        assert!(!status.success(), "{field}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("`{field}`"))
                && stderr.contains("no tool is named `h_")
                && stderr.contains("even one carrying the prefix of the upstream `odd`")
                && stderr.contains("Fix the name if it is a typo")
                && stderr.contains("remove the name from the policy")
                && !stderr.contains("give that upstream a `prefix`"),
            "{field}: {stderr}"
        );
    }

    // Spelt right, the policies hold.
    let yaml = protecting(&odd, &plain, "h_send", "h_wire");
    let gateway = Gateway::start(&yaml);
    assert_eq!(
        status_of(&gateway, "h_send").await,
        202,
        "waits for a person"
    );
    assert_eq!(status_of(&gateway, "h_wire").await, 403, "refused to alice");
    assert_eq!(call(&gateway, "h_ok").await, "called ok");

    // A new version of the upstream no longer lists one of them: the reload is refused,
    // and the previous configuration keeps serving, with its policies.
    for (times, (listed, field, tool)) in [
        (["ok", "wire"], "policies.approval.tools[0]", "h_send"),
        (
            ["ok", "send"],
            "policies.authorization.rules[0].tools[0]",
            "h_wire",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        list(&odd, &listed);
        gateway.signal("HUP");
        let refused = "the new configuration was refused";
        (gateway.wait_for_log(refused, times + 1, Duration::from_secs(60))).await;
        let log = gateway.stderr();
        let refusal = (log.lines().filter(|l| l.contains(refused)))
            .nth(times)
            .unwrap();
        assert!(
            refusal.contains(&format!("`{field}`: no tool is named `{tool}`"))
                && refusal.contains("remove the name from the policy"),
            "{refusal}"
        );
        assert!(!log.contains("configuration reloaded"), "{log}");
        assert_eq!(status_of(&gateway, "h_send").await, 202, "still waits");
        assert_eq!(status_of(&gateway, "h_wire").await, 403, "still refused");
        assert_eq!(call(&gateway, "h_ok").await, "called ok");

        // Nor does a gateway start with it.
        let (status, stdout, stderr) = check(&yaml);
        assert!(!status.success(), "{stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("`{field}`: no tool is named `{tool}`")),
            "{stderr}"
        );
    }
}
