//! Secrets never leak: a full invocation suite with canary secrets, tracing at TRACE
//! captured into a buffer and a recording metrics recorder. Each canary — raw, base64
//! and URL-encoded — must occur zero times in logs, spans, audit records, metric names
//! and labels, errors, cache entries, suspended calls and outputs. A second test has the
//! tool echo its canaries upper- and lower-cased: in no case may they be found again.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use metrics_util::debugging::DebuggingRecorder;
use serde_json::json;
use toolgate_core::tool::{ErasedTool, ToolAnnotations};
use toolgate_core::{
    Hook, HookResult, InvokeOptions, JsonTool, Pipeline, ToolError, ToolInvokeContext, User, hook,
};
use toolgate_hooks::audit::{Audit, JsonLinesSink, MemorySink, TracingSink};
use toolgate_hooks::cache::{MokaCache, ResultCache};
use toolgate_hooks::metrics::Metrics;
use toolgate_hooks::output_limit::OutputLimit;
use toolgate_hooks::redaction::Redaction;
use toolgate_hooks::repair::ArgumentRepair;
use toolgate_hooks::secrets::{InMemorySecrets, SecretInjection};
use toolgate_hooks::validation::Validation;

const API_KEY: &str = "canary-api-key-4f1d9b7c";
const DB_PASSWORD: &str = "p@ss w0rd/+=canary&more";

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every form of every canary that must never appear.
fn forbidden() -> Vec<String> {
    let mut forms = Vec::new();
    for secret in [API_KEY, DB_PASSWORD] {
        forms.push(secret.to_owned());
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            forms.push(engine.encode(secret));
        }
        forms.push(url_encode(secret));
    }
    forms
}

/// The secret `name` injected into the call, as the tool reads it (empty when missing).
fn exposed(ctx: &ToolInvokeContext, name: &str) -> String {
    ctx.secrets()
        .get(name)
        .map(|s| s.expose().to_owned())
        .unwrap_or_default()
}

/// What the tool does with its secrets, by the `mode` argument.
fn leaky_tool(seen: Arc<AtomicUsize>) -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new(
        "leaky",
        "Uses two secrets and echoes them in every way it can.",
        json!({ "type": "object", "properties": { "mode": { "type": "string" }, "n": { "type": "integer" } }, "required": ["mode"] }),
        move |input, ctx| {
            let (key, password) = (exposed(ctx, "api-key"), exposed(ctx, "db-password"));
            if !key.is_empty() && !password.is_empty() {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let mode = input["mode"].as_str().unwrap_or_default().to_owned();
            Box::pin(async move {
                match mode.as_str() {
                    "raw" => Ok(
                        json!({ "auth": format!("Bearer-ish {key}"), "dsn": format!("postgres://app:{password}@db") }),
                    ),
                    "encoded" => Ok(json!([
                        STANDARD.encode(&key),
                        format!("basic={}", URL_SAFE_NO_PAD.encode(&password)),
                        format!("https://x.test/?token={}", url_encode(&password)),
                    ])),
                    "keys" => Ok(json!({ key.clone(): { "nested": [password.clone()] } })),
                    "error" => Err(ToolError::execution(format!(
                        "login failed for {key} / {password}"
                    ))),
                    "abort" => Err(ToolError::abort(
                        format!("refused {password}"),
                        "refused",
                        403,
                    )),
                    "panic" => panic!("crashed holding {key}"),
                    "hang" => std::future::pending().await,
                    "big" => Ok(json!(format!("{} {}", "x".repeat(5000), key))),
                    _ => Ok(json!("plain")),
                }
            })
        },
    );
    tool.definition_mut().tags = vec!["secret:api-key".into(), "secret:db-password".into()];
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    Arc::new(tool)
}

/// Suspends calls whose `mode` is `suspend`, at `will_execute`.
struct SuspendSome;

#[hook]
impl Hook for SuspendSome {
    fn will_execute(&self, ctx: &mut ToolInvokeContext) -> HookResult {
        if ctx.input()["mode"] == "suspend" {
            return ctx.suspend("needs a person");
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn no_canary_secret_reaches_any_output_log_span_record_metric_error_or_cache_entry() {
    // Panic payloads go to the panic hook's stderr, not to toolgate's logs; keep the
    // test output quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let dir = tempfile::tempdir().unwrap();
    let audit_file = dir.path().join("audit.jsonl");
    let audit_memory = MemorySink::new();
    let cache = Arc::new(MokaCache::default());
    let seen = Arc::new(AtomicUsize::new(0));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (outputs, errors, suspended) = rt.block_on(async {
        let p = Pipeline::builder()
            .tool(leaky_tool(seen.clone()))
            .record_hook_timings(true)
            .hook(Validation::new())
            .hook(ArgumentRepair::new())
            .hook(
                SecretInjection::builder()
                    .source(
                        InMemorySecrets::new()
                            .with("api-key", API_KEY)
                            .with("db-password", DB_PASSWORD),
                    )
                    .build(),
            )
            .hook(Redaction::new())
            .hook(ResultCache::builder().shared_backend(cache.clone()).build())
            .hook(
                Audit::builder()
                    .include_values(true)
                    .sink(audit_memory.clone())
                    .sink(JsonLinesSink::open(&audit_file).unwrap())
                    .sink(TracingSink)
                    .build(),
            )
            .hook(Metrics::new())
            .hook(OutputLimit::new().max_bytes(1000))
            .hook(SuspendSome)
            .build()
            .unwrap();

        let mut outputs = Vec::new();
        let mut errors = Vec::new();
        let mut suspended = Vec::new();
        let modes = [
            "raw", "raw", "encoded", "keys", "error", "abort", "panic", "big", "suspend", "plain",
        ];
        for (i, mode) in modes.into_iter().enumerate() {
            let options = InvokeOptions::new()
                .user(User::new("ann").with_tenant("acme"))
                .session("s-1")
                .timeout(Duration::from_secs(5));
            match p
                .invoke(
                    "leaky",
                    json!({ "mode": mode, "n": (i % 2).to_string() }),
                    options,
                )
                .await
            {
                Ok(out) => outputs.push(out),
                Err(ToolError::Suspended {
                    suspension_id,
                    reason,
                }) => {
                    let saved = p.suspended(&suspension_id).await.unwrap().expect("stored");
                    suspended.push(format!(
                        "{reason} {:?} {:?} {:?}",
                        saved.input, saved.output, saved.metadata
                    ));
                }
                Err(e) => errors.push(e),
            }
        }
        // A timeout and a dropped invocation while the tool holds the secrets.
        let hung = p
            .invoke(
                "leaky",
                json!({ "mode": "hang" }),
                InvokeOptions::new().timeout(Duration::from_secs(1)),
            )
            .await;
        errors.push(hung.unwrap_err());
        let dropped = tokio::time::timeout(
            Duration::from_millis(10),
            p.invoke(
                "leaky",
                json!({ "mode": "hang", "n": 1 }),
                InvokeOptions::new(),
            ),
        )
        .await;
        assert!(dropped.is_err(), "the call was dropped mid-flight");
        tokio::time::sleep(Duration::from_millis(50)).await; // let the dropped call's tail finish
        (outputs, errors, suspended)
    });
    drop(rt);
    let _ = std::panic::take_hook();

    assert!(
        seen.load(Ordering::SeqCst) >= 8,
        "the tool really had the secrets"
    );
    let mut haystacks: Vec<(&str, String)> = Vec::new();
    haystacks.push((
        "logs and spans",
        String::from_utf8(logs.0.lock().unwrap().clone()).unwrap(),
    ));
    haystacks.push(("outputs", serde_json::to_string(&outputs).unwrap()));
    haystacks.push((
        "errors",
        errors
            .iter()
            .map(|e| format!("{e} {e:?}"))
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    haystacks.push(("suspended calls", suspended.join("\n")));
    haystacks.push((
        "audit records",
        serde_json::to_string(&audit_memory.records()).unwrap(),
    ));
    haystacks.push(("audit file", std::fs::read_to_string(&audit_file).unwrap()));
    haystacks.push((
        "cache entries",
        serde_json::to_string(&cache.values()).unwrap(),
    ));
    let metrics: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, _)| format!("{:?}", key.key()))
        .collect();
    haystacks.push(("metrics", metrics.join("\n")));

    // The suite really exercised every path and every place it checks.
    assert_eq!(outputs.len(), 6, "{outputs:?}");
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert_eq!(suspended.len(), 1);
    assert_eq!(
        audit_memory.records().len(),
        12,
        "every call, the dropped one too, is audited"
    );
    assert!(haystacks.iter().all(|(_, text)| !text.is_empty()));
    assert!(
        haystacks[0].1.contains("toolgate.invoke"),
        "spans are captured"
    );
    assert!(
        haystacks[0].1.contains("[REDACTED:secret]")
            || haystacks[1].1.contains("[REDACTED:secret]")
    );
    assert!(metrics.iter().any(|m| m.contains("toolgate_calls_total")));

    let mut leaks = Vec::new();
    for (place, text) in &haystacks {
        for form in forbidden() {
            let count = text.matches(form.as_str()).count();
            if count > 0 {
                leaks.push(format!("{count} x {form:?} in {place}"));
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:#?}");
}

/// A tool that echoes its secrets re-cased, as one that upper-cases its output does.
fn shouting_tool() -> Arc<dyn ErasedTool> {
    let mut tool = JsonTool::new(
        "shouting",
        "Echoes its secrets in upper and lower case.",
        json!({ "type": "object", "properties": { "mode": { "type": "string" } }, "required": ["mode"] }),
        move |input, ctx| {
            let (key, password) = (exposed(ctx, "api-key"), exposed(ctx, "db-password"));
            let mode = input["mode"].as_str().unwrap_or_default().to_owned();
            Box::pin(async move {
                match mode.as_str() {
                    "upper" => Ok(json!({
                        "env": format!("API_KEY={}", key.to_uppercase()),
                        "dsn": format!("https://x.test/?pw={}", url_encode(&password.to_uppercase())),
                        key.to_uppercase(): "as a key",
                    })),
                    "lower" => Err(ToolError::execution(format!(
                        "login failed for {} / {}",
                        key.to_lowercase(),
                        password.to_lowercase()
                    ))),
                    _ => Ok(json!("plain")),
                }
            })
        },
    );
    tool.definition_mut().tags = vec!["secret:api-key".into(), "secret:db-password".into()];
    tool.definition_mut().annotations = ToolAnnotations::READ_ONLY;
    Arc::new(tool)
}

#[test]
fn a_tool_echoing_its_secrets_in_another_case_leaks_them_nowhere() {
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let audit = MemorySink::new();
    let cache = Arc::new(MokaCache::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (output, error) = rt.block_on(async {
        let p = Pipeline::builder()
            .tool(shouting_tool())
            .hook(
                SecretInjection::builder()
                    .source(
                        InMemorySecrets::new()
                            .with("api-key", API_KEY)
                            .with("db-password", DB_PASSWORD),
                    )
                    .build(),
            )
            .hook(ResultCache::builder().shared_backend(cache.clone()).build())
            .hook(
                Audit::builder()
                    .include_values(true)
                    .sink(audit.clone())
                    .sink(TracingSink)
                    .build(),
            )
            .build()
            .unwrap();
        let output = p
            .invoke("shouting", json!({ "mode": "upper" }), InvokeOptions::new())
            .await
            .unwrap();
        let error = p
            .invoke("shouting", json!({ "mode": "lower" }), InvokeOptions::new())
            .await
            .unwrap_err();
        (output, error)
    });

    assert_eq!(
        output["env"], "API_KEY=[REDACTED:secret]",
        "the upper-cased key was replaced where it stood"
    );
    assert_eq!(output["dsn"], "https://x.test/?pw=[REDACTED:secret]");
    assert_eq!(output["[REDACTED:secret]"], "as a key");
    let haystacks = [
        ("output", output.to_string()),
        ("error", format!("{error} {error:?}")),
        (
            "audit records",
            serde_json::to_string(&audit.records()).unwrap(),
        ),
        (
            "cache entries",
            serde_json::to_string(&cache.values()).unwrap(),
        ),
        (
            "logs",
            String::from_utf8(logs.0.lock().unwrap().clone()).unwrap(),
        ),
    ];
    assert_eq!(audit.records().len(), 2);
    // Compared without case: whatever case it is written in, the secret must be gone.
    let mut leaks = Vec::new();
    for (place, text) in &haystacks {
        let text = text.to_lowercase();
        for secret in [API_KEY, DB_PASSWORD] {
            let secret = secret.to_lowercase();
            for form in [secret.clone(), url_encode(&secret).to_lowercase()] {
                if text.contains(&form) {
                    leaks.push(format!("{form:?} (in some case) in {place}"));
                }
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:#?}");
}
