//! A decision that does not take the call leaves it waiting and records nothing: an
//! approval bound to a tool definition that changed since the call began to wait is
//! refused (409 `approval_mismatch`), and the call's caller still reads it as waiting —
//! over `/v1` and with `toolgate.outcome` — rather than as decided, which would have a
//! client drop a call another approver can still decide.

use serde_json::json;

use super::{approve, message, show, suspension_id, users};
use crate::common::{Gateway, invoke, python};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/odd_names.py");

/// The tool list of the upstream: one tool, `wipe`, described as `description`.
fn listing(description: &str) -> String {
    json!([{"name": "wipe", "description": description, "inputSchema": {"type": "object"}}])
        .to_string()
}

#[tokio::test]
async fn an_approval_refused_because_the_tool_changed_leaves_the_call_waiting_for_its_caller() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let names = dir.path().join("names.json");
    std::fs::write(&names, listing("wipes the disk")).unwrap();
    let yaml = format!(
        "upstreams:\n  - {{ name: odd, command: {python}, args: [\"{SCRIPT}\"], prefix: h_,\n      env: {{ ODD_NAMES_FILE: \"{names}\" }} }}\n{users}\
policies:\n  approval:\n    tools: [h_wipe]\n    expire_after: 1h\n  authorization:\n    default: allow\n",
        python = python(),
        names = names.display(),
        users = users(),
    );
    let gateway = Gateway::start(&yaml);
    let id = suspension_id(&invoke(&gateway, "bob", "h_wipe", json!({})).await);

    // The upstream now describes the tool otherwise: the approval no longer holds for it.
    std::fs::write(&names, listing("wipes every disk")).unwrap();
    gateway.reload(1).await;
    let refused = approve(&gateway, "alice", &id).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["code"], "approval_mismatch",
        "{}",
        refused.body
    );
    assert!(
        message(&refused).contains("still waits"),
        "{}",
        refused.body
    );

    let shown = show(&gateway, "bob", &id).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.body["status"], "waiting", "{}", shown.body);
    let read = invoke(&gateway, "bob", "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(
        read.body["output"]["status"], "waiting",
        "the caller reads the call as waiting, not decided: {}",
        read.body
    );
}
