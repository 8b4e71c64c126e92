//! OpenTelemetry: what the real `toolgate` binary exports over OTLP/HTTP, received by a
//! small collector on loopback (an axum route decoding `POST /v1/traces` with the
//! `opentelemetry-proto` types — a real OTLP wire decode) — span names, GenAI and MCP
//! attributes, parent/child links, and the trace id carried across an imported MCP
//! upstream (a second gateway, which exports to the same collector); and the audit file's
//! lines exported as OTLP log records (`POST /v1/logs`) that carry its hash chain.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use common::{Gateway, client, eventually, key, mcp, open_session, post_with, user_yaml};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use reqwest::Method;
use serde_json::json;

/// What the gateways must never export or log: the value of the collector's header.
const OTLP_SECRET: &str = "otlp-secret-4c1d2e9f7a";

/// One received span.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent: String,
    trace_state: String,
    attributes: HashMap<String, String>,
    status_code: i32,
}

impl Received {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// One received log record.
#[derive(Clone, Debug)]
struct ReceivedLog {
    service: String,
    event_name: String,
    body: String,
    trace_id: String,
    span_id: String,
    attributes: HashMap<String, String>,
}

impl ReceivedLog {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    logs: Arc<Mutex<Vec<ReceivedLog>>>,
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of `service` named `name`.
    fn named(&self, service: &str, name: &str) -> Vec<Received> {
        (self.spans().into_iter())
            .filter(|s| s.service == service && s.name == name)
            .collect()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

async fn traces(
    State(collector): State<Collector>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        collector
            .authorizations
            .lock()
            .unwrap()
            .push(auth.to_owned());
    }
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut spans = collector.spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = (resource.resource.iter())
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Received {
                    service: service.clone(),
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    trace_state: span.trace_state,
                    attributes: (span.attributes.iter())
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                    status_code: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    ""
}

async fn logs(State(collector): State<Collector>, body: Bytes) -> &'static str {
    let request = ExportLogsServiceRequest::decode(body).expect("an OTLP protobuf logs export");
    let mut logs = collector.logs.lock().unwrap();
    for resource in request.resource_logs {
        let service = (resource.resource.iter())
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for scope in resource.scope_logs {
            for record in scope.log_records {
                logs.push(ReceivedLog {
                    service: service.clone(),
                    event_name: record.event_name,
                    body: text(&record.body),
                    trace_id: hex(&record.trace_id),
                    span_id: hex(&record.span_id),
                    attributes: (record.attributes.iter())
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                });
            }
        }
    }
    ""
}

/// A collector on a free loopback port: its base URL.
async fn start_collector() -> (Collector, String) {
    let collector = Collector::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        .with_state(collector.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (collector, url)
}

/// A `telemetry:` section exporting to `collector` as `service`.
fn telemetry_yaml(collector: &str, service: &str, capture_arguments: bool) -> String {
    format!(
        "telemetry:\n  otlp:\n    endpoint: {collector}\n    headers: {{ authorization: \"Bearer ${{OTLP_SECRET}}\" }}\n  service_name: {service}\n  capture_arguments: {capture_arguments}\n"
    )
}

/// Exports every 50 ms instead of every 5 s (spans) or 1 s (logs).
const ENV: [(&str, &str); 3] = [
    ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ("OTEL_BLRP_SCHEDULE_DELAY", "50"),
    ("OTLP_SECRET", OTLP_SECRET),
];

/// A gateway with the calculator behind a rate limit (so stages have hooks).
fn upstream_yaml(collector: &str, capture_arguments: bool) -> String {
    format!(
        "tools:\n  builtin: [calculator]\npolicies:\n  rate_limits:\n    - {{ name: per-user, rate: 1000/minute }}\nusers:\n{bob}{telemetry}",
        bob = user_yaml("bob", &["admin"]),
        telemetry = telemetry_yaml(collector, "upstream", capture_arguments),
    )
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_v1_call_exports_an_execute_tool_span_under_the_callers_traceparent() {
    let (collector, url) = start_collector().await;
    let gateway = Gateway::start_with_env(&upstream_yaml(&url, false), &ENV);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let answer = post_with(
        &client(),
        &gateway.url("/v1/tools/calculator/invoke"),
        Some(&key("bob")),
        &json!({"expression": "6*7"}),
        &[
            ("traceparent", traceparent.as_str()),
            ("x-request-id", "call-1"),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    eventually(
        "the execute_tool span is exported",
        Duration::from_secs(20),
        || {
            let found = !collector
                .named("upstream", "execute_tool calculator")
                .is_empty();
            async move { found }
        },
    )
    .await;
    let span = collector
        .named("upstream", "execute_tool calculator")
        .remove(0);
    assert_eq!(span.trace_id, TRACE, "{span:?}");
    assert_eq!(span.parent, PARENT, "{span:?}");
    assert_eq!(span.kind, SpanKind::Internal as i32);
    assert_eq!(span.attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(span.attr("gen_ai.tool.name"), Some("calculator"));
    assert_eq!(span.attr("gen_ai.tool.call.id"), Some("call-1"));
    assert_eq!(span.attr("error.type"), None, "{span:?}");
    assert_eq!(
        span.attr("gen_ai.tool.call.arguments"),
        None,
        "arguments are exported only when asked for"
    );

    // Stage spans: children of the invocation's span, only for stages with hooks.
    eventually(
        "the stage spans are exported",
        Duration::from_secs(20),
        || {
            let found = !collector.named("upstream", "will_acquire_quota").is_empty();
            async move { found }
        },
    )
    .await;
    let quota = collector.named("upstream", "will_acquire_quota").remove(0);
    assert_eq!(quota.parent, span.span_id, "{quota:?}");
    assert_eq!(quota.trace_id, TRACE);
    assert!(
        collector
            .named("upstream", "will_bind_providers")
            .is_empty()
            || collector.named("upstream", "will_bind_providers")[0].parent == span.span_id
    );

    // The collector's header was sent; its value is in no span and no log line.
    assert!(
        (collector.authorizations.lock().unwrap().iter())
            .any(|a| a == &format!("Bearer {OTLP_SECRET}"))
    );
    for s in collector.spans() {
        assert!(
            !format!("{s:?}").contains(OTLP_SECRET),
            "a span carries the secret: {s:?}"
        );
    }
    assert!(
        !gateway.stderr().contains(OTLP_SECRET),
        "{}",
        gateway.stderr()
    );
}

#[tokio::test]
async fn a_failed_call_records_its_error_type_and_a_malformed_traceparent_starts_a_new_trace() {
    let (collector, url) = start_collector().await;
    let gateway = Gateway::start_with_env(&upstream_yaml(&url, true), &ENV);
    let answer = post_with(
        &client(),
        &gateway.url("/v1/tools/calculator/invoke"),
        Some(&key("bob")),
        &json!({"expression": 7}),
        &[
            ("traceparent", "00-zz-not-a-trace-01"),
            ("tracestate", "a=b"),
        ],
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let ok = post_with(
        &client(),
        &gateway.url("/v1/tools/calculator/invoke"),
        Some(&key("bob")),
        &json!({"expression": "1+1"}),
        &[],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);

    eventually("both spans are exported", Duration::from_secs(20), || {
        let n = collector.named("upstream", "execute_tool calculator").len();
        async move { n == 2 }
    })
    .await;
    let spans = collector.named("upstream", "execute_tool calculator");
    let failed = spans
        .iter()
        .find(|s| s.attr("error.type").is_some())
        .expect("the failed call's span");
    assert_eq!(failed.attr("error.type"), Some("invalid_input"));
    assert_eq!(failed.status_code, 2, "status error: {failed:?}");
    assert_eq!(
        failed.parent, "",
        "a malformed traceparent starts a new trace"
    );
    // capture_arguments is on here.
    assert_eq!(
        failed.attr("gen_ai.tool.call.arguments"),
        Some(r#"{"expression":7}"#)
    );
    let good = spans
        .iter()
        .find(|s| s.attr("error.type").is_none())
        .unwrap();
    assert_eq!(
        good.attr("gen_ai.tool.call.arguments"),
        Some(r#"{"expression":"1+1"}"#)
    );
    assert_eq!(
        good.attr("gen_ai.tool.call.result"),
        None,
        "results were not asked for"
    );
}

#[tokio::test]
async fn an_mcp_call_carries_its_meta_traceparent_through_an_imported_upstream() {
    let (collector, url) = start_collector().await;
    let upstream = Gateway::start_with_env(&upstream_yaml(&url, false), &ENV);
    let edge_yaml = format!(
        "tools:\n  builtin: []\nupstreams:\n  - name: up\n    url: {upstream}\n    credential_env: UP_KEY\n    prefix: up_\nusers:\n{alice}{telemetry}",
        upstream = upstream.url("/mcp"),
        alice = user_yaml("alice", &["admin"]),
        telemetry = telemetry_yaml(&url, "edge", false),
    );
    let up_key = key("bob");
    let edge = Gateway::start_with_env(
        &edge_yaml,
        &[ENV[0], ENV[1], ENV[2], ("UP_KEY", up_key.as_str())],
    );

    let session = open_session(&edge, "alice").await;
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "up_calculator", "arguments": {"expression": "2+3"},
                   "_meta": {"traceparent": format!("00-{TRACE}-{PARENT}-01"),
                             "tracestate": "rojo=00f067aa0ba902b7"}}});
    let (status, _, body) = mcp(&edge, Method::POST, "alice", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("5"), "{body}");
    eventually(
        "the upstream's server span is exported",
        Duration::from_secs(20),
        || {
            let found = !collector
                .named("upstream", "tools/call calculator")
                .is_empty();
            async move { found }
        },
    )
    .await;
    eventually(
        "the edge's spans are exported",
        Duration::from_secs(20),
        || {
            let found = !collector.named("edge", "tools/call calculator").is_empty()
                && !collector
                    .named("edge", "execute_tool up_calculator")
                    .is_empty();
            async move { found }
        },
    )
    .await;

    // Edge: tools/call up_calculator (server) ← the caller's span.
    let server = collector
        .named("edge", "tools/call up_calculator")
        .remove(0);
    assert_eq!(
        (server.trace_id.as_str(), server.parent.as_str()),
        (TRACE, PARENT)
    );
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(server.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(server.attr("gen_ai.tool.name"), Some("up_calculator"));
    assert_eq!(server.attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(server.attr("jsonrpc.request.id"), Some("41"));
    assert_eq!(server.attr("mcp.session.id"), Some(session.as_str()));
    assert_eq!(server.attr("network.transport"), Some("tcp"));
    // execute_tool up_calculator (internal) ← the server span.
    let invocation = collector
        .named("edge", "execute_tool up_calculator")
        .remove(0);
    assert_eq!(invocation.parent, server.span_id);
    assert_eq!(invocation.trace_id, TRACE);
    // tools/call calculator (client) ← the invocation.
    let client_span = collector.named("edge", "tools/call calculator").remove(0);
    assert_eq!(client_span.parent, invocation.span_id);
    assert_eq!(client_span.kind, SpanKind::Client as i32);
    // Upstream: tools/call calculator (server) ← the edge's client span, same trace: the
    // upstream read the `_meta.traceparent` the edge sent.
    let remote = collector
        .named("upstream", "tools/call calculator")
        .remove(0);
    assert_eq!(remote.trace_id, TRACE, "{remote:?}");
    assert_eq!(remote.parent, client_span.span_id, "{remote:?}");
    // The caller's tracestate went along, through the edge, to the upstream.
    assert_eq!(server.trace_state, "rojo=00f067aa0ba902b7", "{server:?}");
    assert_eq!(remote.trace_state, "rojo=00f067aa0ba902b7", "{remote:?}");
    let remote_invocation = collector.named("upstream", "execute_tool calculator");
    assert!(
        remote_invocation.iter().any(|s| s.parent == remote.span_id),
        "{remote_invocation:?}"
    );
    assert!(!edge.stderr().contains(OTLP_SECRET));
}

#[tokio::test]
async fn calls_go_on_while_the_collector_is_down_and_the_failed_exports_are_logged() {
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let gateway = Gateway::start_with_env(&upstream_yaml(&closed, false), &ENV);
    for i in 0..20 {
        let answer = post_with(
            &client(),
            &gateway.url("/v1/tools/calculator/invoke"),
            Some(&key("bob")),
            &json!({"expression": format!("{i}+1")}),
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // The exporter says so in the log (its batch thread's warnings), and nothing else
    // changed for the callers.
    gateway
        .wait_for_log("opentelemetry", 1, Duration::from_secs(20))
        .await;
    assert!(
        !gateway.stderr().contains(OTLP_SECRET),
        "{}",
        gateway.stderr()
    );
}

#[tokio::test]
async fn a_reload_that_rotates_the_collectors_credentials_warns_and_keeps_the_running_ones_scrubbed()
 {
    // The exporter runs for the process, with the credentials it started with; at debug
    // level it logs the URL of every export that fails, password included.
    const OLD_PASSWORD: &str = "old-otlp-password-6b1f";
    const NEW_PASSWORD: &str = "new-otlp-password-93ce";
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let yaml = |password: &str| {
        format!(
            "logging:\n  level: debug\n{}",
            upstream_yaml(&format!("http://otel:{password}@{closed}"), false)
        )
    };
    let gateway = Gateway::start_with_env(&yaml(OLD_PASSWORD), &ENV);
    std::fs::write(&gateway.config, yaml(NEW_PASSWORD)).unwrap();
    gateway.reload(1).await;
    assert!(
        gateway
            .stderr()
            .contains("`telemetry` takes effect on restart only"),
        "a reload that changes the collector must say it is not applied:\n{}",
        gateway.stderr()
    );
    let exported_before = gateway.stderr().matches("HttpClient.NetworkError").count();
    let answer = post_with(
        &client(),
        &gateway.url("/v1/tools/calculator/invoke"),
        Some(&key("bob")),
        &json!({"expression": "6*7"}),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The failed export of that call's span, after the reload, logs the running URL.
    gateway
        .wait_for_log(
            "HttpClient.NetworkError",
            exported_before + 1,
            Duration::from_secs(30),
        )
        .await;
    let log = gateway.stderr();
    assert!(log.contains("otel:[REDACTED"), "{log}");
    assert!(!log.contains(OLD_PASSWORD), "{log}");
}

/// A `tools/call` of the calculator to `/mcp` in `session`, with these HTTP headers and
/// this `_meta`.
async fn mcp_call_with(
    gateway: &Gateway,
    session: &str,
    headers: &[(&str, &str)],
    meta: serde_json::Value,
) {
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "calculator", "arguments": {"expression": "1+2"}, "_meta": meta}});
    let mut request = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key("bob"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.body(call.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("\"result\""), "{body}");
}

#[tokio::test]
async fn on_mcp_the_http_traceparent_is_the_parent_unless_the_message_meta_has_one() {
    let (collector, url) = start_collector().await;
    let gateway = Gateway::start_with_env(&upstream_yaml(&url, false), &ENV);
    let session = open_session(&gateway, "bob").await;
    let header_trace = "11111111111111111111111111111111";
    let meta_trace = "22222222222222222222222222222222";
    let from_header = format!("00-{header_trace}-{PARENT}-01");
    mcp_call_with(
        &gateway,
        &session,
        &[("traceparent", from_header.as_str())],
        json!({}),
    )
    .await;
    mcp_call_with(
        &gateway,
        &session,
        &[("traceparent", from_header.as_str())],
        json!({"traceparent": format!("00-{meta_trace}-{PARENT}-01")}),
    )
    .await;
    eventually(
        "both server spans are exported",
        Duration::from_secs(20),
        || {
            let n = collector.named("upstream", "tools/call calculator").len();
            async move { n == 2 }
        },
    )
    .await;
    let mut traces: Vec<String> = (collector.named("upstream", "tools/call calculator"))
        .into_iter()
        .inspect(|s| assert_eq!(s.parent, PARENT, "{s:?}"))
        .map(|s| s.trace_id)
        .collect();
    traces.sort();
    assert_eq!(traces, [header_trace, meta_trace]);
}

/// An Ed25519 seed for the audit checkpoints (32 bytes in base64).
const SIGNING_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[tokio::test]
async fn every_audit_line_is_exported_as_a_log_record_that_carries_the_chain() {
    use sha2::{Digest, Sha256};

    let (collector, url) = start_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let yaml = format!(
        "{}  logs: {{ audit: true }}\naudit:\n  sink: file\n  path: {}\n  flush_every: 0s\n  signing_key: {SIGNING_KEY}\n  checkpoint_every: 2\n",
        upstream_yaml(&url, false),
        audit.display()
    );
    let mut gateway = Gateway::start_with_env(&yaml, &ENV);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    for (i, headers) in [
        vec![
            ("traceparent", traceparent.as_str()),
            ("x-request-id", "call-1"),
        ],
        vec![("x-request-id", "call-2")],
        vec![("x-request-id", "call-3")],
    ]
    .into_iter()
    .enumerate()
    {
        let answer = post_with(
            &client(),
            &gateway.url("/v1/tools/calculator/invoke"),
            Some(&key("bob")),
            &json!({"expression": format!("{i}+1")}),
            &headers,
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // Records 1 and 2, and their checkpoint, are exported while the gateway serves.
    eventually(
        "the first lines are exported",
        Duration::from_secs(20),
        || {
            let n = collector.logs.lock().unwrap().len();
            async move { n >= 3 }
        },
    )
    .await;
    // The drain writes the last checkpoint (of record 3), and the exporter is flushed.
    gateway.signal("TERM");
    let status = gateway.wait_exit(Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "{}", gateway.stderr());

    let lines: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 5, "three records, two checkpoints: {lines:#?}");
    let logs = collector.logs.lock().unwrap().clone();
    let bodies: Vec<&str> = logs.iter().map(|l| l.body.as_str()).collect();
    assert_eq!(
        bodies, lines,
        "each line exported once, as written, in order"
    );

    let sha256 = |text: &str| -> String {
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let records: Vec<&ReceivedLog> = logs
        .iter()
        .filter(|l| l.event_name == "toolgate.audit.record")
        .collect();
    assert_eq!(records.len(), 3, "{logs:#?}");
    let mut prev = "genesis".to_owned();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.service, "upstream");
        assert_eq!(
            record.attr("toolgate.audit.seq"),
            Some((i + 1).to_string().as_str())
        );
        // A receiver checks the chain from the log records alone.
        assert_eq!(
            record.attr("toolgate.audit.prev"),
            Some(prev.as_str()),
            "{record:?}"
        );
        let hash = sha256(&record.body);
        assert_eq!(record.attr("toolgate.audit.hash"), Some(hash.as_str()));
        prev = hash;
        assert_eq!(record.attr("gen_ai.tool.name"), Some("calculator"));
        assert_eq!(record.attr("enduser.id"), Some("bob"));
        assert_eq!(record.attr("toolgate.audit.outcome"), Some("success"));
        assert_eq!(
            record.attr("toolgate.audit.request_id"),
            Some(format!("call-{}", i + 1).as_str())
        );
    }
    // The call that came with a trace context is linked to it.
    assert_eq!(records[0].trace_id, TRACE, "{:?}", records[0]);
    assert_eq!(records[0].span_id.len(), 16, "{:?}", records[0]);
    assert_ne!(records[1].trace_id, TRACE);

    let checkpoints: Vec<&ReceivedLog> = logs
        .iter()
        .filter(|l| l.event_name == "toolgate.audit.checkpoint")
        .collect();
    assert_eq!(checkpoints.len(), 2, "{logs:#?}");
    assert_eq!(checkpoints[1].attr("toolgate.audit.seq"), Some("3"));
    assert_eq!(
        checkpoints[1].attr("toolgate.audit.checkpoint.hash"),
        Some(prev.as_str()),
        "the closing checkpoint signs the last record"
    );
    assert!(logs.iter().all(|l| !format!("{l:?}").contains(OTLP_SECRET)));
}

#[tokio::test]
async fn an_exported_audit_record_tells_ann_of_acme_from_ann_of_globex() {
    let (collector, url) = start_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let tenant_user = |tenant: &str| {
        format!(
            "  - {{ id: ann, tenant: {tenant}, key_sha256: \"{}\", roles: [admin] }}\n",
            toolgate_gateway::auth::hash_key(&key(&format!("ann_{tenant}")))
        )
    };
    let yaml = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}{}{}{}  logs: {{ audit: true }}\naudit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        tenant_user("acme"),
        tenant_user("globex"),
        user_yaml("ann", &["admin"]),
        telemetry_yaml(&url, "upstream", false),
        dir.path().join("audit.jsonl").display()
    );
    let gateway = Gateway::start_with_env(&yaml, &ENV);
    for (caller, request) in [
        ("ann_acme", "acme"),
        ("ann_globex", "globex"),
        ("ann", "none"),
    ] {
        let answer = post_with(
            &client(),
            &gateway.url("/v1/tools/calculator/invoke"),
            Some(&key(caller)),
            &json!({"expression": "1+1"}),
            &[("x-request-id", request)],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let records = || {
        (collector.logs.lock().unwrap().iter())
            .filter(|l| l.event_name == "toolgate.audit.record")
            .cloned()
            .collect::<Vec<ReceivedLog>>()
    };
    eventually(
        "the three records are exported",
        Duration::from_secs(20),
        || {
            let n = records().len();
            async move { n >= 3 }
        },
    )
    .await;
    for record in records() {
        let tenant = record.attr("toolgate.audit.tenant");
        let expected = match record.attr("toolgate.audit.request_id") {
            Some("none") => None,
            other => other,
        };
        assert_eq!(record.attr("enduser.id"), Some("ann"));
        assert_eq!(tenant, expected, "{record:?}");
    }
}

#[tokio::test]
async fn a_callers_huge_tool_name_and_request_id_are_exported_cut_to_a_bound() {
    // What a caller chooses reaches the export queue, which is bounded by a count of spans:
    // each span must be bounded in size too, or a slow collector holds gigabytes.
    let (collector, url) = start_collector().await;
    let gateway = Gateway::start_with_env(&upstream_yaml(&url, false), &ENV);
    let session = open_session(&gateway, "bob").await;
    let name = format!("made_up_{}", "n".repeat(200_000));
    let id = format!("id_{}", "i".repeat(200_000));
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": {}}});
    let (status, _, text) = mcp(&gateway, Method::POST, "bob", Some(&session), Some(call)).await;
    assert_eq!(status, 200, "the call is answered");
    assert!(text.contains("\"error\""), "an unknown tool is an error");
    // A name that is no tool is in no span name or attribute: made-up names would each
    // become an operation of their own in the tracing backend.
    let server_span = || {
        (collector.spans().into_iter())
            .find(|s| s.kind == SpanKind::Server as i32 && s.name == "tools/call")
    };
    eventually(
        "the server span is exported",
        Duration::from_secs(20),
        || {
            let found = server_span().is_some();
            async move { found }
        },
    )
    .await;
    let span = server_span().unwrap();
    assert!(
        span.name.len() <= 256,
        "a span name of {} bytes",
        span.name.len()
    );
    for (key, value) in &span.attributes {
        assert!(
            value.len() <= 4096,
            "attribute {key} of {} bytes was exported",
            value.len()
        );
    }
    assert!(
        span.attr("gen_ai.tool.name").is_none(),
        "{:?}",
        span.attributes
    );
    let exported_id = span.attr("jsonrpc.request.id").expect("the request id");
    assert!(
        exported_id.starts_with("id_iii") && exported_id.ends_with("…[truncated]"),
        "the id is cut and marked: {}",
        &exported_id[exported_id.len().saturating_sub(40)..]
    );
}

#[tokio::test]
async fn a_collector_that_never_answers_holds_the_exit_once_not_once_per_exporter() {
    // Listening but never reading: every export waits for its timeout.
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", black_hole.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "{}  logs: {{ audit: true }}\naudit:\n  sink: file\n  path: {}\n  flush_every: 0s\n",
        upstream_yaml(&url, false),
        dir.path().join("audit.jsonl").display()
    );
    let mut gateway = Gateway::start_with_env(&yaml, &ENV);
    for i in 0..20 {
        let answer = post_with(
            &client(),
            &gateway.url("/v1/tools/calculator/invoke"),
            Some(&key("bob")),
            &json!({"expression": format!("{i}+1")}),
            &[],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    gateway.signal("TERM");
    let started = std::time::Instant::now();
    let status = gateway.wait_exit(Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "{}", gateway.stderr());
    // The trace and log exporters are waited for together: 5 s, not 5 s and 5 s more.
    // (The bound is loose for a loaded machine; one after the other took over 10 s.)
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the exit took {:?}:\n{}",
        started.elapsed(),
        gateway.stderr()
    );
    drop(black_hole);
}
