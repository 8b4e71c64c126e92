//! Approval webhooks (`policies.approval.webhooks`), against the real binary and a real
//! receiver on loopback: a call that waits, is decided or expires is told with a signed
//! `POST` that never carries the call's input; failed deliveries are retried under the
//! same id and counted in `/metrics`.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{Answer, Gateway, client, eventually, invoke, random_u32, redis_or_skip, user_yaml};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;
use toolgate_gateway::webhooks::{self, REPLAY_WINDOW, WebhookVerifyError};

/// The webhook secret, given to the gateway through `${HOOK_SECRET}`.
const SECRET: &str = "whsec-test-0123456789abcdef";

/// A value that must never leave the gateway in a webhook.
const CANARY: &str = "sk_live_CANARY_7f3a9c1e";

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn id(&self) -> &str {
        self.headers[webhooks::ID_HEADER].to_str().unwrap()
    }

    fn verify(&self, now: SystemTime) -> Result<(), WebhookVerifyError> {
        webhooks::verify(
            SECRET.as_bytes(),
            &self.headers,
            &self.body,
            now,
            REPLAY_WINDOW,
        )
    }
}

/// A webhook receiver on a free loopback port: it keeps every request and answers each
/// with the next status of its script (200 once the script is used up).
#[derive(Clone, Default)]
struct Receiver {
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<u16>>>,
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    receiver
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    let status = receiver.script.lock().unwrap().pop_front().unwrap_or(200);
    StatusCode::from_u16(status).unwrap()
}

/// Keeps the request and never answers it.
async fn receive_and_hang(
    State(receiver): State<Receiver>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    receiver
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    std::future::pending().await
}

/// Keeps the request and answers 200 once `open` is.
async fn receive_when_open(
    State((receiver, mut open)): State<(Receiver, watch::Receiver<bool>)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    receiver
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    let _ = open.wait_for(|open| *open).await;
    StatusCode::OK
}

impl Receiver {
    /// Starts a receiver answering `script` first; it and its URL.
    async fn start(script: &[u16]) -> (Receiver, String) {
        let receiver = Receiver::default();
        receiver.script.lock().unwrap().extend(script);
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(receiver.clone());
        let url = Receiver::serve(app).await;
        (receiver, url)
    }

    /// Starts a receiver that keeps every request and never answers any; it and its URL.
    async fn start_hanging() -> (Receiver, String) {
        let receiver = Receiver::default();
        let app = Router::new()
            .route("/hook", post(receive_and_hang))
            .with_state(receiver.clone());
        let url = Receiver::serve(app).await;
        (receiver, url)
    }

    /// Starts a receiver that keeps every request and answers none until its gate is
    /// opened (`true`), then 200 to each; it, its URL and the gate.
    async fn start_gated() -> (Receiver, String, watch::Sender<bool>) {
        let receiver = Receiver::default();
        let (gate, open) = watch::channel(false);
        let app = Router::new()
            .route("/hook", post(receive_when_open))
            .with_state((receiver.clone(), open));
        let url = Receiver::serve(app).await;
        (receiver, url, gate)
    }

    /// Serves `app` on a free loopback port; the URL of its `/hook`.
    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The requests whose body has `type` = `kind`.
    fn of_type(&self, kind: &str) -> Vec<Received> {
        self.all()
            .into_iter()
            .filter(|r| r.json()["type"] == kind)
            .collect()
    }

    /// The requests of `kind` about suspension `id`, in the order they came.
    fn about(&self, kind: &str, id: &str) -> Vec<Received> {
        self.of_type(kind)
            .into_iter()
            .filter(|r| r.json()["suspension"]["id"] == id)
            .collect()
    }

    /// The distinct suspensions the `suspension.waiting` requests were about.
    fn waiting_ids(&self) -> std::collections::HashSet<String> {
        self.of_type("suspension.waiting")
            .iter()
            .map(|r| r.json()["suspension"]["id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits (bounded) until a request of `kind` about suspension `id` came; the first.
    async fn wait_for(&self, kind: &str, id: &str) -> Received {
        eventually(
            &format!("a `{kind}` webhook for {id}"),
            Duration::from_secs(20),
            || async { !self.about(kind, id).is_empty() },
        )
        .await;
        self.about(kind, id).remove(0)
    }
}

/// A gateway whose `echo` and `sleep` calls wait for approval, telling `url` in `format`.
fn start_gateway(url: &str, extra: &str) -> Gateway {
    start_gateway_with_state(url, extra, "")
}

/// [`start_gateway`] with `state`, the configuration's `state:` section (none: in memory).
fn start_gateway_with_state(url: &str, extra: &str, state: &str) -> Gateway {
    start_gateway_with_webhooks(&[url], extra, state)
}

/// [`start_gateway_with_state`] telling each of `urls`, in this order.
fn start_gateway_with_webhooks(urls: &[&str], extra: &str, state: &str) -> Gateway {
    let users = user_yaml("alice", &["admin"]) + &user_yaml("bob", &["analyst"]);
    start_gateway_for(&users, urls, extra, state)
}

/// [`start_gateway_with_webhooks`] for `users`, the configuration's `users:` entries.
fn start_gateway_for(users: &str, urls: &[&str], extra: &str, state: &str) -> Gateway {
    let webhooks: String = urls
        .iter()
        .map(|url| format!("      - url: \"{url}\"\n        secret: ${{HOOK_SECRET}}\n"))
        .collect();
    let config = format!(
        "{state}tools:\n  builtin: [echo, sleep]\nusers:\n{users}\
policies:\n  approval:\n    tools: [echo, sleep]\n{extra}    webhooks:\n{webhooks}",
    );
    Gateway::start_with_env(&config, &[("HOOK_SECRET", SECRET)])
}

/// A `users:` entry for `id` with `roles`, in `tenant`.
fn user_in_tenant(id: &str, roles: &[&str], tenant: &str) -> String {
    user_yaml(id, roles).replacen(" }\n", &format!(", tenant: {tenant} }}\n"), 1)
}

/// The suspension id of a 202 answer.
fn suspension_id(answer: &Answer) -> String {
    assert_eq!(answer.status, 202, "{}", answer.body);
    answer.body["suspension_id"].as_str().unwrap().to_owned()
}

async fn park(gateway: &Gateway) -> String {
    park_as(gateway, "bob").await
}

/// `user` parks a call; its suspension id.
async fn park_as(gateway: &Gateway, user: &str) -> String {
    let input = json!({"text": format!("deploy with {CANARY}")});
    suspension_id(&invoke(gateway, user, "echo", input).await)
}

/// Parks `count` calls, a few at a time; their suspension ids.
async fn park_many(gateway: &Gateway, count: usize) -> Vec<String> {
    let bob = vec!["bob".to_owned(); count];
    park_many_as(gateway, &bob).await
}

/// Parks a call as each of `users`, a few at a time; their suspension ids.
async fn park_many_as(gateway: &Gateway, users: &[String]) -> Vec<String> {
    futures::stream::iter(users)
        .map(|user| park_as(gateway, user))
        .buffer_unordered(8)
        .collect()
        .await
}

/// The `_meta` of a 2026-07-28 caller that takes tasks.
fn takes_tasks() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
        "io.modelcontextprotocol/clientInfo": {"name": "toolgate-tests", "version": "0"},
    })
}

/// `user` withdraws their waiting call `id` over MCP: they cancel the task it is (its id
/// is the suspension id). The HTTP status and the JSON-RPC answer.
async fn withdraw(gateway: &Gateway, user: &str, id: &str) -> (u16, Value) {
    let params = json!({"taskId": id, "_meta": takes_tasks()});
    common::mcp_2026(gateway, user, "tasks/cancel", Some(id), params).await
}

/// `user` parks a call and withdraws it: a `suspension.waiting` and a
/// `suspension.decided` event, and nothing left waiting.
async fn park_and_withdraw(gateway: &Gateway, user: &str) {
    let id = suspension_id(&invoke(gateway, user, "echo", json!({"text": "deploy"})).await);
    let (status, ack) = withdraw(gateway, user, &id).await;
    assert_eq!(status, 200, "{ack}");
}

async fn decide(gateway: &Gateway, id: &str, decision: Value) -> Answer {
    let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    common::post(&client(), &url, Some("alice"), &decision).await
}

/// `expired` is signed with the secret, and tells the call's expiry as when it happened.
fn assert_signed_and_told_at_its_expiry(expired: &Received) {
    assert_eq!(expired.verify(SystemTime::now()), Ok(()));
    let body = expired.json();
    assert_eq!(
        body["occurred_at"], body["suspension"]["expires_at"],
        "{body}"
    );
}

fn metric(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    common::metric(metrics, name, labels)
}

#[tokio::test]
async fn a_waiting_call_sends_a_signed_event_that_carries_no_input() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");

    let id = park(&gateway).await;
    let waiting = receiver.wait_for("suspension.waiting", &id).await;

    assert_eq!(waiting.verify(SystemTime::now()), Ok(()));
    assert!(waiting.id().starts_with("evt_"), "{}", waiting.id());
    assert_eq!(waiting.headers["content-type"], "application/json");
    let body = waiting.json();
    assert_eq!(body["id"], waiting.id());
    assert_eq!(body["suspension"]["tool"], "echo");
    assert_eq!(body["suspension"]["user"], "bob");
    assert!(
        body["suspension"].get("tenant").is_none(),
        "bob has no tenant: {body}"
    );
    assert!(body["suspension"]["expires_at"].is_string(), "{body}");
    assert!(body["occurred_at"].is_string(), "{body}");
    assert!(body.get("decision").is_none(), "{body}");
    let text = String::from_utf8_lossy(&waiting.body);
    assert!(
        !text.contains(CANARY) && !text.contains("deploy with"),
        "{text}"
    );
    assert!(!text.contains("\"input\""), "{text}");
    assert!(!gateway.stderr().contains(SECRET), "{}", gateway.stderr());
}

#[tokio::test]
async fn a_call_over_mcp_that_waits_is_told_too() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");
    let session = common::open_session(&gateway, "bob").await;

    let params = json!({"name": "echo", "arguments": {"text": CANARY}});
    let waiting = common::mcp_rpc(&gateway, "bob", &session, "tools/call", params).await;
    let id = waiting["_meta"]["io.toolgate/error"]["suspensionId"]
        .as_str()
        .unwrap_or_else(|| panic!("a suspension id: {waiting}"))
        .to_owned();

    let told = receiver.wait_for("suspension.waiting", &id).await;
    assert_eq!(told.verify(SystemTime::now()), Ok(()));
    assert!(!String::from_utf8_lossy(&told.body).contains(CANARY));
}

#[tokio::test]
async fn a_decision_is_told_with_who_decided_and_a_rejection_with_its_reason() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");
    let approved = park(&gateway).await;
    let rejected = park(&gateway).await;
    let for_retry = park(&gateway).await;

    let answer = decide(&gateway, &approved, json!({"decision": "approve"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let no = json!({"decision": "reject", "reason": "not during the freeze"});
    assert_eq!(decide(&gateway, &rejected, no).await.status, 403);
    let retry = json!({"decision": "approve_retry"});
    assert_eq!(decide(&gateway, &for_retry, retry).await.status, 200);

    let told = receiver.wait_for("suspension.decided", &approved).await;
    assert_eq!(told.verify(SystemTime::now()), Ok(()));
    assert_eq!(
        told.json()["decision"],
        json!({"decision": "approve", "decided_by": "alice", "reason": null})
    );
    assert_eq!(told.json()["suspension"]["tool"], "echo");
    let told = receiver.wait_for("suspension.decided", &rejected).await;
    assert_eq!(
        told.json()["decision"],
        json!({"decision": "reject", "decided_by": "alice", "reason": "not during the freeze"})
    );
    let told = receiver.wait_for("suspension.decided", &for_retry).await;
    assert_eq!(
        told.json()["decision"],
        json!({"decision": "approve_retry", "decided_by": "alice", "reason": null})
    );
    let waiting = receiver.wait_for("suspension.waiting", &approved).await;
    assert_ne!(waiting.id(), receiver.of_type("suspension.decided")[0].id());
    let everything = String::from_utf8_lossy(
        &receiver
            .all()
            .iter()
            .flat_map(|r| r.body.to_vec())
            .collect::<Vec<_>>(),
    )
    .into_owned();
    assert!(!everything.contains(CANARY), "{everything}");
}

#[tokio::test]
async fn the_events_of_a_tenants_call_name_the_callers_and_the_approvers_tenant() {
    let (receiver, url) = Receiver::start(&[]).await;
    let users =
        user_in_tenant("alice", &["admin"], "acme") + &user_in_tenant("bob", &["analyst"], "acme");
    let gateway = start_gateway_for(&users, &[&url], "", "");
    let id = park(&gateway).await;

    let waiting = receiver.wait_for("suspension.waiting", &id).await;
    assert_eq!(waiting.verify(SystemTime::now()), Ok(()));
    let body = waiting.json();
    assert_eq!(body["suspension"]["user"], "bob", "{body}");
    assert_eq!(body["suspension"]["tenant"], "acme", "{body}");

    let answer = decide(&gateway, &id, json!({"decision": "approve"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let decided = receiver.wait_for("suspension.decided", &id).await.json();
    assert_eq!(decided["suspension"]["tenant"], "acme", "{decided}");
    assert_eq!(
        decided["decision"],
        json!({"decision": "approve", "decided_by": "alice", "decided_by_tenant": "acme", "reason": null})
    );
}

#[tokio::test]
async fn a_caller_withdrawing_its_waiting_call_with_tasks_cancel_is_told_as_a_rejection() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");
    let id = park(&gateway).await;

    let (status, ack) = withdraw(&gateway, "bob", &id).await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");

    let told = receiver.wait_for("suspension.decided", &id).await;
    assert_eq!(told.verify(SystemTime::now()), Ok(()));
    let decision = &told.json()["decision"];
    assert_eq!(
        (
            decision["decision"].as_str(),
            decision["decided_by"].as_str()
        ),
        (Some("reject"), Some("bob")),
        "{decision}"
    );
    assert!(
        decision["reason"]
            .as_str()
            .is_some_and(|r| r.contains("withdrawn by `bob`")),
        "{decision}"
    );
}

#[tokio::test]
async fn a_caller_withdrawing_its_running_call_is_told_once_as_withdrawn() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");
    let id = suspension_id(&invoke(&gateway, "bob", "sleep", json!({"ms": 600_000})).await);
    let approver = tokio::spawn({
        let url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
        async move {
            let body = json!({"decision": "approve"});
            let timeout = [("x-toolgate-timeout-ms", "60000")];
            common::post_with(
                &client(),
                &url,
                Some(&common::key("alice")),
                &body,
                &timeout,
            )
            .await
        }
    });
    let shown = gateway.url(&format!("/v1/suspensions/{id}"));
    eventually(
        "the approved call runs",
        Duration::from_secs(10),
        || async { common::get(&client(), &shown, Some("bob")).await.body["status"] == "running" },
    )
    .await;

    let (status, ack) = withdraw(&gateway, "bob", &id).await;
    assert_eq!(status, 200, "{ack}");

    let told = receiver.wait_for("suspension.withdrawn", &id).await;
    assert_eq!(told.verify(SystemTime::now()), Ok(()));
    let body = told.json();
    assert_eq!(body["suspension"]["tool"], "sleep", "{body}");
    assert_eq!(body["suspension"]["user"], "bob", "{body}");
    assert!(
        body["suspension"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{body}"
    );
    assert!(body["suspension"]["suspended_at"].is_string(), "{body}");
    let decision = &body["decision"];
    assert_eq!(
        (
            decision["decision"].as_str(),
            decision["decided_by"].as_str()
        ),
        (Some("withdraw"), Some("bob")),
        "{body}"
    );
    assert!(
        decision["reason"]
            .as_str()
            .is_some_and(|r| r.contains("while it ran after `alice` decided it")),
        "{body}"
    );

    // A second cancel is acknowledged, and withdraws nothing more.
    let (status, ack) = withdraw(&gateway, "bob", &id).await;
    assert_eq!(status, 200, "{ack}");
    let answered = tokio::time::timeout(Duration::from_secs(20), approver)
        .await
        .expect("the approver is answered once the call is stopped")
        .expect("the request ran");
    assert_eq!(answered.status, 409, "{}", answered.body);
    receiver.wait_for("suspension.decided", &id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.about("suspension.withdrawn", &id).len(), 1);
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_the_same_id_three_times_and_it_counts_as_delivered() {
    let (receiver, url) = Receiver::start(&[500, 503]).await;
    let gateway = start_gateway(&url, "");

    let id = park(&gateway).await;

    eventually("three attempts", Duration::from_secs(20), || async {
        receiver.all().len() >= 3
    })
    .await;
    let attempts = receiver.all();
    assert_eq!(attempts.len(), 3, "no fourth attempt after a 200");
    assert!(attempts.iter().all(|a| a.id() == attempts[0].id()));
    assert!(attempts.iter().all(|a| a.verify(SystemTime::now()).is_ok()));
    assert!(attempts.iter().all(|a| a.json()["suspension"]["id"] == id));
    eventually(
        "the delivery is counted",
        Duration::from_secs(10),
        || async {
            let metrics = gateway.metrics().await;
            metric(
                &metrics,
                webhooks::DELIVERIES,
                &[("event", "waiting"), ("outcome", "delivered")],
            ) == 1.0
        },
    )
    .await;
    let metrics = gateway.metrics().await;
    assert_eq!(
        metric(&metrics, webhooks::RETRIES, &[("event", "waiting")]),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, webhooks::DELIVERIES, &[("outcome", "failed")]),
        0.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_receiver_that_refuses_is_not_retried_and_the_failure_is_counted() {
    let (receiver, url) = Receiver::start(&[400]).await;
    let gateway = start_gateway(&url, "");

    park(&gateway).await;

    eventually(
        "the failure is counted",
        Duration::from_secs(10),
        || async {
            let metrics = gateway.metrics().await;
            metric(
                &metrics,
                webhooks::DELIVERIES,
                &[("event", "waiting"), ("outcome", "failed")],
            ) == 1.0
        },
    )
    .await;
    assert_eq!(receiver.all().len(), 1, "a 400 is not retried");
}

#[tokio::test]
async fn a_receiver_that_is_down_is_counted_failed_and_logged_without_its_address() {
    // A port that was free a moment ago: nothing listens there. Named by a host name, which
    // the failure's log line must not show.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://localhost:{}/hook",
        closed.local_addr().unwrap().port()
    );
    drop(closed);
    let gateway = start_gateway(&url, "");

    park(&gateway).await;

    // Five attempts with backoff: about 2 to 4 s.
    eventually(
        "the failure is counted",
        Duration::from_secs(30),
        || async {
            let metrics = gateway.metrics().await;
            metric(
                &metrics,
                webhooks::DELIVERIES,
                &[("event", "waiting"), ("outcome", "failed")],
            ) == 1.0
        },
    )
    .await;
    let metrics = gateway.metrics().await;
    assert_eq!(
        metric(&metrics, webhooks::RETRIES, &[("event", "waiting")]),
        f64::from(webhooks::MAX_ATTEMPTS - 1),
        "{metrics}"
    );
    gateway
        .wait_for_log("a webhook was not delivered", 1, Duration::from_secs(5))
        .await;
    let log = gateway.stderr();
    let line = (log.lines())
        .find(|line| line.contains("a webhook was not delivered"))
        .unwrap();
    assert!(line.contains("policies.approval.webhooks[0]"), "{line}");
    assert!(line.contains("Connection refused"), "why it failed: {line}");
    assert!(!line.contains("localhost"), "the webhook's host: {line}");
    assert!(!log.contains(SECRET), "{log}");
}

#[tokio::test]
async fn a_call_nobody_decides_is_told_expired_once_and_a_decided_one_never() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "    expire_after: 1s\n");
    let decided = park(&gateway).await;
    let forgotten = park(&gateway).await;
    let answer = decide(&gateway, &decided, json!({"decision": "approve"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let expired = receiver.wait_for("suspension.expired", &forgotten).await;

    assert_signed_and_told_at_its_expiry(&expired);
    // The decided call expired first, had it been left waiting: its timer is past.
    let about = |id: &str| receiver.about("suspension.expired", id).len();
    assert_eq!(about(&decided), 0);
    // Looking the expired call up (410) reports nothing again.
    let shown = common::get(
        &client(),
        &gateway.url(&format!("/v1/suspensions/{forgotten}")),
        Some("alice"),
    )
    .await;
    assert_eq!(shown.status, 410, "{}", shown.body);
    assert_eq!(
        decide(&gateway, &forgotten, json!({"decision": "approve"}))
            .await
            .status,
        410
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(about(&forgotten), 1, "told once");
}

#[tokio::test]
async fn a_received_webhook_fails_verification_once_tampered_or_replayed_late() {
    let (receiver, url) = Receiver::start(&[]).await;
    let gateway = start_gateway(&url, "");
    let id = park(&gateway).await;
    let genuine = receiver.wait_for("suspension.waiting", &id).await;
    let now = SystemTime::now();
    assert_eq!(genuine.verify(now), Ok(()));

    let mut tampered = genuine.clone();
    tampered.body =
        Bytes::from(String::from_utf8_lossy(&genuine.body).replace("\"bob\"", "\"eve\""));
    let late = now + REPLAY_WINDOW + Duration::from_secs(60);

    assert_eq!(tampered.verify(now), Err(WebhookVerifyError::BadSignature));
    assert!(matches!(
        genuine.verify(late),
        Err(WebhookVerifyError::OutsideWindow { .. })
    ));
    let other_secret = webhooks::verify(
        b"another-secret-0123456789",
        &genuine.headers,
        &genuine.body,
        now,
        REPLAY_WINDOW,
    );
    assert_eq!(other_secret, Err(WebhookVerifyError::BadSignature));
}

#[tokio::test]
async fn the_slack_format_sends_a_text_line_with_the_same_facts() {
    let (receiver, url) = Receiver::start(&[]).await;
    let config = format!(
        "tools:\n  builtin: [echo]\nusers:\n{}\
policies:\n  approval:\n    tools: [echo]\n    webhooks:\n      - {{ url: \"{url}\", secret: \"${{HOOK_SECRET}}\", format: slack, events: [waiting] }}\n",
        user_yaml("bob", &["analyst"]),
    );
    let gateway = Gateway::start_with_env(&config, &[("HOOK_SECRET", SECRET)]);

    let id = park(&gateway).await;

    eventually("a slack message", Duration::from_secs(20), || async {
        !receiver.all().is_empty()
    })
    .await;
    let message = &receiver.all()[0];
    assert_eq!(message.verify(SystemTime::now()), Ok(()));
    let body = message.json();
    let text = body["text"].as_str().expect("a `text` line");
    assert!(
        text.contains("`echo`") && text.contains("bob") && text.contains(&id),
        "{text}"
    );
    assert!(body["blocks"].is_array(), "{body}");
    assert!(
        !message
            .body
            .windows(CANARY.len())
            .any(|w| w == CANARY.as_bytes())
    );
}

#[tokio::test]
async fn after_a_reload_the_events_of_calls_already_waiting_go_to_the_new_webhooks() {
    let (before, before_url) = Receiver::start(&[]).await;
    let (after, after_url) = Receiver::start(&[]).await;
    // Long enough for the reload to be done first, even on a loaded machine.
    let gateway = start_gateway(&before_url, "    expire_after: 4s\n");
    let decided = park(&gateway).await;
    let forgotten = park(&gateway).await;
    before.wait_for("suspension.waiting", &forgotten).await;

    let config = std::fs::read_to_string(&gateway.config).unwrap();
    std::fs::write(&gateway.config, config.replace(&before_url, &after_url)).unwrap();
    gateway.reload(1).await;
    let answer = decide(&gateway, &decided, json!({"decision": "approve"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    after.wait_for("suspension.decided", &decided).await;
    after.wait_for("suspension.expired", &forgotten).await;
    assert!(before.of_type("suspension.decided").is_empty());
    assert!(before.of_type("suspension.expired").is_empty());
}

#[tokio::test]
async fn a_call_kept_on_redis_is_told_expired_after_the_gateway_that_parked_it_restarted() {
    let test = "a_call_kept_on_redis_is_told_expired_after_the_gateway_that_parked_it_restarted";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    let (receiver, url) = Receiver::start(&[]).await;
    let prefix = format!("tgwebhooks{}x{:x}", std::process::id(), random_u32());
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n");
    // Long enough for a gateway to start before the call expires: a call that expires
    // while no gateway runs is not listed any more, and is not told.
    let expiry = "    expire_after: 8s\n";
    let parked_on = start_gateway_with_state(&url, expiry, &state);
    let id = park(&parked_on).await;
    receiver.wait_for("suspension.waiting", &id).await;
    // The gateway that watched the call is gone before the call expires; the call stays
    // on Redis. Two gateways come up: one in its place, and a second replica.
    drop(parked_on);
    let (restarted, replica) = (
        start_gateway_with_state(&url, expiry, &state),
        start_gateway_with_state(&url, expiry, &state),
    );

    let expired = receiver.wait_for("suspension.expired", &id).await;

    assert_signed_and_told_at_its_expiry(&expired);
    // Both watched it; the store gives its expiry to one of them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let told: Vec<String> = receiver
        .about("suspension.expired", &id)
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(told.len(), 1, "told by both replicas: {told:?}");
    drop((restarted, replica));
}

#[tokio::test]
async fn a_call_whose_replica_died_before_another_watched_it_is_told_expired_once() {
    let test = "a_call_whose_replica_died_before_another_watched_it_is_told_expired_once";
    let Some(redis) = redis_or_skip(test) else {
        return;
    };
    let (receiver, url) = Receiver::start(&[]).await;
    let prefix = format!("tgwebhooks{}x{:x}", std::process::id(), random_u32());
    let state = format!("state:\n  url: {redis}\n  key_prefix: {prefix}\n");
    let expiry = "    expire_after: 2s\n";
    // Two replicas that take in the calls of others at once, then every 30 s: a call
    // parked just after they started is not theirs to watch before it expires.
    let survivors = [
        start_gateway_with_state(&url, expiry, &state),
        start_gateway_with_state(&url, expiry, &state),
    ];
    for survivor in &survivors {
        let answer = invoke(survivor, "bob", "echo", json!({"text": "warm up"})).await;
        decide(
            survivor,
            &suspension_id(&answer),
            json!({"decision": "approve"}),
        )
        .await;
    }
    let parked_on = start_gateway_with_state(&url, expiry, &state);
    let id = park(&parked_on).await;
    receiver.wait_for("suspension.waiting", &id).await;
    // Killed before the call expires, and before anyone else took it in.
    drop(parked_on);

    // Within a round of the survivors (every 30 s) after the expiry.
    eventually(
        &format!("a `suspension.expired` webhook for {id}"),
        Duration::from_secs(45),
        || async { !receiver.about("suspension.expired", &id).is_empty() },
    )
    .await;

    assert_signed_and_told_at_its_expiry(&receiver.about("suspension.expired", &id)[0]);
    // Both survivors' rounds came to it: one told it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.about("suspension.expired", &id).len(), 1);
    drop(survivors);
}

#[tokio::test]
async fn a_receiver_that_never_answers_delays_no_other_receivers_events() {
    let (hanging, hanging_url) = Receiver::start_hanging().await;
    let (healthy, healthy_url) = Receiver::start(&[]).await;
    // The hanging receiver first: each event is queued for it before the healthy one.
    let gateway = start_gateway_with_webhooks(&[&hanging_url, &healthy_url], "", "");
    // More calls than one webhook may have deliveries in progress: the hanging receiver's
    // hold all of its own slots.
    let count = 3 * webhooks::IN_FLIGHT;

    let parked = park_many(&gateway, count).await;

    // Well within the first attempt's timeout to the hanging receiver (10 s, and 4 more
    // attempts after it): were its deliveries in the way, the healthy receiver would wait
    // for them for about a minute.
    eventually(
        "every event at the healthy receiver",
        Duration::from_secs(20),
        || async { healthy.waiting_ids().len() == count },
    )
    .await;
    assert_eq!(
        healthy.waiting_ids(),
        parked.into_iter().collect(),
        "the healthy receiver was told of every parked call"
    );
    assert!(!hanging.all().is_empty(), "the hanging receiver was tried");
    let metrics = gateway.metrics().await;
    let deliveries = |outcome| {
        metric(
            &metrics,
            webhooks::DELIVERIES,
            &[("event", "waiting"), ("outcome", outcome)],
        )
    };
    assert_eq!(deliveries("delivered"), count as f64, "{metrics}");
    assert_eq!(deliveries("dropped"), 0.0, "{metrics}");
    assert_eq!(
        deliveries("failed"),
        0.0,
        "the hanging receiver's are still being tried: {metrics}"
    );
}

#[tokio::test]
async fn a_full_queue_drops_only_the_events_of_its_own_webhook() {
    let (hanging, hanging_url) = Receiver::start_hanging().await;
    let (healthy, healthy_url) = Receiver::start(&[]).await;
    // What the hanging receiver's webhook can hold (its requests in progress and its
    // queue), and more, from enough callers that none of them passes their own share.
    let held = webhooks::IN_FLIGHT + webhooks::QUEUE_CAPACITY;
    let callers: Vec<String> = (0..held / webhooks::CALLER_SHARE + 2)
        .map(|i| format!("caller{i}"))
        .collect();
    let users = user_yaml("alice", &["admin"])
        + &callers
            .iter()
            .map(|caller| user_yaml(caller, &["analyst"]))
            .collect::<String>();
    let gateway = start_gateway_for(&users, &[&hanging_url, &healthy_url], "", "");
    let each: Vec<String> = callers
        .iter()
        .flat_map(|caller| vec![caller.clone(); webhooks::CALLER_SHARE])
        .collect();
    let count = each.len();

    let parked = park_many_as(&gateway, &each).await;

    eventually(
        "every event at the healthy receiver",
        Duration::from_secs(60),
        || async { healthy.waiting_ids().len() == count },
    )
    .await;
    assert_eq!(healthy.waiting_ids(), parked.into_iter().collect());
    assert!(!hanging.all().is_empty(), "the hanging receiver was tried");
    let metrics = gateway.metrics().await;
    let deliveries = |outcome| {
        metric(
            &metrics,
            webhooks::DELIVERIES,
            &[("event", "waiting"), ("outcome", outcome)],
        )
    };
    assert_eq!(deliveries("delivered"), count as f64, "{metrics}");
    // Only the hanging receiver's were dropped: at most what did not fit in its webhook.
    let dropped = deliveries("dropped");
    assert!(
        dropped >= 1.0 && dropped <= (count - held) as f64,
        "{dropped} dropped: {metrics}"
    );
    let past_share = metric(
        &metrics,
        webhooks::DELIVERIES,
        &[("reason", "caller_share")],
    );
    assert_eq!(past_share, 0.0, "nobody passed their share: {metrics}");
    gateway
        .wait_for_log("the webhook queue is full", 1, Duration::from_secs(5))
        .await;
    let log = gateway.stderr();
    assert!(log.contains("policies.approval.webhooks[0]"), "{log}");
}

/// The reviewer's flood: an ordinary user parks and withdraws calls in a loop (each loop a
/// `waiting` and a `decided` event) while the receiver is slow, more than the webhook's
/// queue holds. Another tenant's caller who then parks a call must still be told: the
/// flooder holds at most [`webhooks::CALLER_SHARE`] of the queue, and only their own
/// events are dropped past it.
#[tokio::test]
async fn one_callers_flood_does_not_crowd_another_callers_events_out_of_the_webhook_queue() {
    // The receiver answers nothing until the flood is over, so that the flood's events
    // stay queued however slowly this machine sends them.
    let (receiver, url, gate) = Receiver::start_gated().await;
    let users = user_yaml("alice", &["admin"])
        + &user_in_tenant("dave", &["analyst"], "acme")
        + &user_in_tenant("bob", &["analyst"], "globex");
    let gateway = start_gateway_for(&users, &[&url], "", "");
    // More events than the webhook holds (its deliveries in progress and its queue).
    let loops = (webhooks::IN_FLIGHT + webhooks::QUEUE_CAPACITY) / 2 + webhooks::CALLER_SHARE;
    let started = Instant::now();

    futures::stream::iter(0..loops)
        .map(|_| park_and_withdraw(&gateway, "dave"))
        .buffer_unordered(6)
        .collect::<Vec<()>>()
        .await;
    let flood_took = started.elapsed();
    let bobs = suspension_id(&invoke(&gateway, "bob", "echo", json!({"text": "deploy"})).await);
    gate.send_replace(true);

    let told = receiver.wait_for("suspension.waiting", &bobs).await;
    assert_eq!(told.verify(SystemTime::now()), Ok(()));
    assert_eq!(told.json()["suspension"]["tenant"], "globex");
    let metrics = gateway.metrics().await;
    let dropped = |reason| {
        metric(
            &metrics,
            webhooks::DELIVERIES,
            &[("outcome", "dropped"), ("reason", reason)],
        )
    };
    let past_share = dropped("caller_share");
    assert!(
        past_share >= 1.0 && past_share <= (2 * loops - webhooks::CALLER_SHARE) as f64,
        "dave's events past his share are dropped: {metrics}"
    );
    assert_eq!(dropped("queue_full"), 0.0, "{metrics}");
    // Told in the log once in a while, not once per dropped event.
    let told_in_log = gateway
        .stderr()
        .matches("holds as many of this caller's events as one caller may")
        .count();
    let windows = flood_took.as_secs() / webhooks::DROPS_LOGGED_EVERY.as_secs() + 2;
    assert!(
        (1..=windows as usize).contains(&told_in_log),
        "{told_in_log} log lines for {past_share} dropped events in {flood_took:?}"
    );
}
