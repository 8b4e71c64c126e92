//! A tenant is part of who a caller is: the same subject in another tenant (one person
//! signed in to another organization, or another issuer's user of the same name) neither
//! sees a call waiting for approval nor reads its outcome, over `/v1` and over MCP's
//! `toolgate.outcome`; an approver with a tenant lists, sees and decides only the calls of
//! that tenant, one without (an operator) those of every tenant. Nor does that subject use
//! or crowd out the other's MCP sessions, or run in the other's session when a batch names
//! the same thread.

use reqwest::Method;
use serde_json::{Value, json};

use std::time::Duration;

use crate::common::{Answer, Gateway, client, eventually, get, mcp_with, post, post_with};
use crate::loopback::Issuer;
use crate::{MCP_RESOURCE, RESOURCE, config, invoke, mcp_call};

/// Tokens of the reader `ann` in `tenant`: for `/v1`, and for `/mcp`.
fn ann_of(issuer: &Issuer, tenant: &str) -> (String, String) {
    let token = |audience: &str| {
        issuer.token_with(|c| {
            c.insert("sub".to_owned(), json!("ann"));
            c.insert("tenant".to_owned(), json!(tenant));
            c.insert("aud".to_owned(), json!(audience));
        })
    };
    (token(RESOURCE), token(MCP_RESOURCE))
}

/// `GET /v1/suspensions/{id}` with `token`.
async fn show(gateway: &Gateway, token: &str, id: &str) -> Answer {
    let request = client()
        .get(gateway.url(&format!("/v1/suspensions/{id}")))
        .bearer_auth(token);
    Answer::read(request.send().await.expect("the gateway answers")).await
}

/// The ids `token` lists, of waiting calls or (`decided`) of decided ones.
async fn listed(gateway: &Gateway, token: &str, decided: bool) -> Vec<String> {
    let status = if decided { "?status=decided" } else { "" };
    let request = client()
        .get(gateway.url(&format!("/v1/suspensions{status}")))
        .bearer_auth(token);
    let answer = Answer::read(request.send().await.expect("the gateway answers")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let calls = answer.body["suspensions"].as_array().expect("a list");
    calls
        .iter()
        .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// What `toolgate.outcome` answers `token` for `id`, over stateless MCP.
async fn outcome(gateway: &Gateway, token: &str, id: &str) -> Value {
    let (status, _, body) =
        mcp_call(gateway, Some(token), "toolgate.outcome", json!({"id": id})).await;
    assert_eq!(status, 200, "{body}");
    // One JSON answer, or one server-sent event carrying it.
    let json = body
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&body);
    let answer: Value = serde_json::from_str(json.trim()).expect("a JSON-RPC answer");
    assert!(answer["result"].is_object(), "{answer}");
    answer["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_and_its_outcome_stay_within_their_tenant_for_callers_and_approvers() {
    let issuer = Issuer::serve(true).await;
    let yaml = config(&issuer.url, "", "")
        .replacen("tools: [echo] }", "tools: [echo, toolgate.outcome] }", 1)
        .replacen(
            "policies:\n",
            "policies:\n  approval: { tools: [echo] }\n",
            1,
        );
    let gateway = Gateway::start(&yaml);
    let ((acme, acme_mcp), (globex, globex_mcp)) =
        (ann_of(&issuer, "acme"), ann_of(&issuer, "globex"));

    let parked = invoke(&gateway, Some(&acme), "echo", json!({"text": "acme's"})).await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let id = parked.body["suspension_id"]
        .as_str()
        .expect("an id")
        .to_owned();

    assert_eq!(
        show(&gateway, &acme, &id).await.status,
        200,
        "its caller sees it"
    );
    assert_eq!(
        listed(&gateway, &acme, false).await,
        std::slice::from_ref(&id)
    );
    assert!(listed(&gateway, &globex, false).await.is_empty());
    let others = show(&gateway, &globex, &id).await;
    assert_eq!(others.status, 404, "{:?}", others.body);
    assert!(
        !others.body.to_string().contains("acme's"),
        "{:?}",
        others.body
    );
    let waiting = outcome(&gateway, &globex_mcp, &id).await;
    assert_eq!(waiting["isError"], true, "{waiting}");
    assert_eq!(
        waiting["_meta"]["io.toolgate/error"]["code"],
        "unknown_suspension"
    );

    // An approver of globex neither lists, sees nor decides acme's call.
    let boss = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("boss"));
        c.insert("tenant".to_owned(), json!("globex"));
        c.insert("roles".to_owned(), json!(["admin"]));
    });
    assert!(listed(&gateway, &boss, false).await.is_empty());
    assert_eq!(show(&gateway, &boss, &id).await.status, 404);
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let refused = client()
        .post(&url)
        .bearer_auth(&boss)
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(refused.status().as_u16(), 404);
    assert_eq!(show(&gateway, &acme, &id).await.body["status"], "waiting");
    // An approver of acme does.
    let acmes_boss = issuer.token_with(|c| {
        c.insert("sub".to_owned(), json!("boss"));
        c.insert("tenant".to_owned(), json!("acme"));
        c.insert("roles".to_owned(), json!(["admin"]));
    });
    assert_eq!(
        listed(&gateway, &acmes_boss, false).await,
        std::slice::from_ref(&id)
    );
    assert_eq!(show(&gateway, &acmes_boss, &id).await.status, 200);

    // Alice, an operator of no tenant, approves it.
    let approved = post(
        &client(),
        &url,
        Some("alice"),
        &json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);

    // The decision is in acme's history, not in globex's.
    let history = |token: String| {
        let request = client()
            .get(gateway.url("/v1/admin/decisions"))
            .bearer_auth(token);
        async move {
            let answer = Answer::read(request.send().await.expect("the gateway answers")).await;
            assert_eq!(answer.status, 200, "{:?}", answer.body);
            answer.body["decisions"].as_array().expect("a list").len()
        }
    };
    assert_eq!(history(boss.clone()).await, 0);
    assert_eq!(history(acmes_boss.clone()).await, 1);

    let decided = show(&gateway, &acme, &id).await;
    assert_eq!(decided.status, 200, "{:?}", decided.body);
    assert_eq!(decided.body["status"], "decided");
    assert_eq!(
        (&decided.body["user"], &decided.body["tenant"]),
        (&json!("ann"), &json!("acme"))
    );
    assert!(
        decided.body.to_string().contains("acme's"),
        "{:?}",
        decided.body
    );
    let others = show(&gateway, &globex, &id).await;
    assert_eq!(others.status, 404, "{:?}", others.body);
    assert!(
        !others.body.to_string().contains("acme's"),
        "{:?}",
        others.body
    );
    assert_eq!(
        listed(&gateway, &acme, true).await,
        std::slice::from_ref(&id)
    );
    assert!(listed(&gateway, &globex, true).await.is_empty());
    let read = outcome(&gateway, &globex_mcp, &id).await;
    assert_eq!(
        read["_meta"]["io.toolgate/error"]["code"], "unknown_suspension",
        "{read}"
    );
    let read = outcome(&gateway, &acme_mcp, &id).await;
    assert!(read.to_string().contains("acme's"), "{read}");
    // An approver still sees it, whoever made it.
    assert_eq!(
        get(&client(), &url.replace("/resume", ""), Some("alice"))
            .await
            .status,
        200
    );
}

/// `initialize` with `token`: the status and the session it opened, if any.
async fn initialize(gateway: &Gateway, token: &str) -> (u16, Option<String>) {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tenants", "version": "0"}}
    });
    let (status, session, _) = mcp_with(gateway, Method::POST, token, None, Some(initialize)).await;
    (status, session)
}

/// `ping` with `token` in `session`: the status and the answer's text.
async fn ping(gateway: &Gateway, token: &str, session: &str) -> (u16, String) {
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let (status, _, text) = mcp_with(gateway, Method::POST, token, Some(session), Some(ping)).await;
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_of_ann_of_acme_is_unknown_to_ann_of_globex() {
    let issuer = Issuer::serve(true).await;
    let gateway = Gateway::start(&config(&issuer.url, "", ""));
    let ((_, acme), (_, globex)) = (ann_of(&issuer, "acme"), ann_of(&issuer, "globex"));

    let (status, session) = initialize(&gateway, &acme).await;
    assert_eq!(status, 200);
    let session = session.expect("initialize opens a session");
    let (status, text) = ping(&gateway, &globex, &session).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("unknown_session"), "{text}");
    let (status, text) = ping(&gateway, &acme, &session).await;
    assert_eq!(status, 200, "its opener still uses it: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_from_ann_of_globex_leaves_the_places_of_ann_of_acme() {
    let issuer = Issuer::serve(true).await;
    let yaml = format!(
        "server:\n  mcp_sessions: {{ per_user: 2 }}\n{}",
        config(&issuer.url, "", "")
    );
    let gateway = Gateway::start(&yaml);
    let ((_, acme), (_, globex)) = (ann_of(&issuer, "acme"), ann_of(&issuer, "globex"));

    assert_eq!(initialize(&gateway, &acme).await.0, 200);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(initialize(&gateway, &globex).await.0);
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429],
        "globex's ann has 2 places"
    );
    let (status, session) = initialize(&gateway, &acme).await;
    assert_eq!(status, 200, "acme's ann still has her second place");
    assert!(session.is_some());
    assert_eq!(initialize(&gateway, &acme).await.0, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_naming_the_same_batch_thread_run_in_sessions_of_their_own() {
    let issuer = Issuer::serve(true).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let audit = dir.path().join("audit.jsonl");
    let yaml = format!(
        "{}audit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        config(&issuer.url, "", ""),
        audit.display()
    );
    let gateway = Gateway::start(&yaml);
    let ((acme, _), (globex, _)) = (ann_of(&issuer, "acme"), ann_of(&issuer, "globex"));
    let alice = crate::common::key("alice");

    let message = |id: &str| {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id, "type": "function",
            "function": {"name": "echo", "arguments": json!({"text": id}).to_string()},
        }]})
    };
    let url = |thread: &str| gateway.url(&format!("/v1/tool-calls?format=openai{thread}"));
    // The same thread named in the query and in the header, and the thread a caller
    // without one gets (their user id) named by another.
    let batches = [
        (&acme, "call_acme", url("&thread=t1"), &[][..]),
        (
            &globex,
            "call_globex",
            url(""),
            &[("x-thread-id", "t1")][..],
        ),
        (&acme, "call_acme_default", url(""), &[][..]),
        (&alice, "call_alice", url("&thread=ann"), &[][..]),
    ];
    for (token, id, url, headers) in &batches {
        let answer = post_with(&client(), url, Some(token), &message(id), headers).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.body["results"][0]["status"], "success",
            "{}",
            answer.body
        );
    }

    let sessions = || {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("an audit record"))
            .filter(|record| record["tool"] == "echo")
            .map(|record| record["session_id"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    eventually("every call is audited", Duration::from_secs(10), || async {
        sessions().len() == batches.len()
    })
    .await;
    let sessions = sessions();
    for (i, session) in sessions.iter().enumerate() {
        assert!(!session.is_empty(), "{sessions:?}");
        assert!(
            sessions[i + 1..].iter().all(|other| other != session),
            "two callers share a session: {sessions:?}"
        );
    }
}
