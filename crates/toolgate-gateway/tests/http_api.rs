//! The HTTP API of the real binary: listing, invoking, and the error answers of every
//! policy (401, 403, 400, 413, 429, 504), plus the `/mcp` endpoint.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Gateway, client, get, invoke, key, post_with, user_yaml};
use serde_json::{Value, json};

/// alice (admin) may call everything; bob (analyst) only the calculator; carol has no role.
fn authorized_config() -> String {
    format!(
        "tools:\n  builtin: [calculator, echo, sleep]\nusers:\n{}{}{}\
policies:\n  authorization:\n    default: deny\n    rules:\n      \
- {{ effect: allow, roles: [admin] }}\n      \
- {{ effect: allow, roles: [analyst], tools: [calculator] }}\n",
        user_yaml("alice", &["admin"]),
        user_yaml("bob", &["analyst"]),
        user_yaml("carol", &[]),
    )
}

fn names(values: &[Value], field: impl Fn(&Value) -> &Value) -> BTreeSet<String> {
    values
        .iter()
        .map(|v| field(v).as_str().expect("a tool name").to_owned())
        .collect()
}

/// The tool names of a listing in `format`.
fn listed(format: &str, body: &Value) -> BTreeSet<String> {
    let array = |v: &Value| v.as_array().cloned().unwrap_or_default();
    match format {
        "toolgate" => names(&array(&body["tools"]), |t| &t["name"]),
        "openai" => names(&array(body), |t| &t["function"]["name"]),
        "anthropic" => names(&array(body), |t| &t["name"]),
        "gemini" => names(&array(&body[0]["functionDeclarations"]), |t| &t["name"]),
        "mcp" => names(&array(&body["tools"]), |t| &t["name"]),
        other => panic!("no listing format {other}"),
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[tokio::test]
async fn listing_shows_only_the_tools_the_caller_may_call_in_every_format() {
    let gateway = Gateway::start(&authorized_config());
    let client = client();
    for format in ["toolgate", "openai", "anthropic", "gemini", "mcp"] {
        let path = if format == "toolgate" {
            "/v1/tools".to_owned()
        } else {
            format!("/v1/tools?format={format}")
        };
        let bob = get(&client, &gateway.url(&path), Some("bob")).await;
        assert_eq!(bob.status, 200, "{format}: {}", bob.body);
        assert_eq!(
            listed(format, &bob.body),
            set(&["calculator"]),
            "{format}: {}",
            bob.body
        );

        let alice = get(&client, &gateway.url(&path), Some("alice")).await;
        assert_eq!(alice.status, 200, "{format}: {}", alice.body);
        assert_eq!(
            listed(format, &alice.body),
            set(&["calculator", "echo", "sleep"]),
            "{format}: {}",
            alice.body
        );

        let carol = get(&client, &gateway.url(&path), Some("carol")).await;
        assert_eq!(
            listed(format, &carol.body),
            set(&[]),
            "{format}: {}",
            carol.body
        );
    }
    let unknown = get(&client, &gateway.url("/v1/tools?format=cobol"), Some("bob")).await;
    assert_eq!(
        (unknown.status, unknown.error_code()),
        (400, "unknown_format")
    );
}

#[tokio::test]
async fn invoking_the_calculator_answers_its_result() {
    let gateway = Gateway::start(&authorized_config());
    let answer = invoke(&gateway, "bob", "calculator", json!({"expression": "6*7"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["output"]["result"], 42);
    assert!(answer.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn an_x_session_id_sent_twice_or_unusable_is_refused_400_bad_session_id() {
    let gateway = Gateway::start(&authorized_config());
    let url = gateway.url("/v1/tools/calculator/invoke");
    let body = json!({"expression": "6*7"});
    let (client, bob) = (client(), key("bob"));
    for headers in [
        &[("x-session-id", "mine"), ("x-session-id", "yours")][..],
        &[("x-session-id", "two words")],
    ] {
        let refused = post_with(&client, &url, Some(&bob), &body, headers).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_session_id"),
            "{headers:?}: {}",
            refused.body
        );
    }
    let usable = post_with(
        &client,
        &url,
        Some(&bob),
        &body,
        &[("x-session-id", "chat-1")],
    )
    .await;
    assert_eq!(usable.status, 200, "{}", usable.body);
}

#[tokio::test]
async fn a_batch_thread_id_sent_twice_or_unusable_is_refused_400_bad_thread_id() {
    let gateway = Gateway::start(&authorized_config());
    let message = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "calculator", "arguments": "{\"expression\": \"6*7\"}"},
    }]});
    let (client, bob) = (client(), key("bob"));
    let url = |query: &str| gateway.url(&format!("/v1/tool-calls?format=openai{query}"));
    let long = format!("&thread={}", "t".repeat(129));
    for (query, headers) in [
        ("", &[("x-thread-id", "mine"), ("x-thread-id", "yours")][..]),
        ("", &[("x-thread-id", "two words")]),
        ("&thread=", &[]),
        ("&thread=two%20words", &[]),
        ("&thread=%01", &[]),
        (long.as_str(), &[]),
    ] {
        let refused = post_with(&client, &url(query), Some(&bob), &message, headers).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_thread_id"),
            "{query} {headers:?}: {}",
            refused.body
        );
    }
    for (query, headers) in [
        ("&thread=chat-1", &[][..]),
        ("", &[("x-thread-id", "chat-1")]),
        ("", &[]),
    ] {
        let usable = post_with(&client, &url(query), Some(&bob), &message, headers).await;
        assert_eq!(usable.status, 200, "{query} {headers:?}: {}", usable.body);
        assert_eq!(
            usable.body["results"][0]["status"], "success",
            "{}",
            usable.body
        );
    }
}

#[tokio::test]
async fn a_batch_in_a_shape_the_format_does_not_read_is_refused_never_answered_with_no_calls() {
    let gateway = Gateway::start(&authorized_config());
    let (client, bob) = (client(), key("bob"));
    let url = gateway.url("/v1/tool-calls?format=openai");
    let call = json!({
        "id": "call_1", "type": "function",
        "function": {"name": "calculator", "arguments": "{\"expression\": \"6*7\"}"},
    });
    // The message's `tool_calls` array on its own runs its calls.
    let bare = post_with(&client, &url, Some(&bob), &json!([call]), &[]).await;
    assert_eq!(bare.status, 200, "{}", bare.body);
    assert_eq!(
        bare.body["results"][0]["status"], "success",
        "{}",
        bare.body
    );
    assert_eq!(
        bare.body["results"][0]["output"]["result"], 42,
        "{}",
        bare.body
    );
    // A payload that is no message at all.
    for payload in [json!("hello"), json!(42), json!(null), json!(true)] {
        let refused = post_with(&client, &url, Some(&bob), &payload, &[]).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_tool_calls"),
            "{payload}: {}",
            refused.body
        );
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("a message (a JSON object) was expected")),
            "{}",
            refused.body
        );
    }
    // Another provider's calls, sent without its format: named, so the caller can ask for it.
    for (payload, format) in [
        (
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Let me work it out."},
                {"type": "tool_use", "id": "t1", "name": "calculator", "input": {"expression": "6*7"}},
            ]}),
            "anthropic",
        ),
        (
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "calculator", "args": {"expression": "6*7"}}},
            ]}}]}),
            "gemini",
        ),
    ] {
        let refused = post_with(&client, &url, Some(&bob), &payload, &[]).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_tool_calls"),
            "{payload}: {}",
            refused.body
        );
        let message = refused.body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("?format={format}")),
            "{format}: {message}"
        );
        let asked = gateway.url(&format!("/v1/tool-calls?format={format}"));
        let answered = post_with(&client, &asked, Some(&bob), &payload, &[]).await;
        assert_eq!(answered.status, 200, "{format}: {}", answered.body);
        assert_eq!(
            answered.body["results"][0]["status"], "success",
            "{format}: {}",
            answered.body
        );
    }
    // A message with no calls still has none.
    let none = json!({"role": "assistant", "content": "Nothing to do."});
    let answered = post_with(&client, &url, Some(&bob), &none, &[]).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.body["results"], json!([]), "{}", answered.body);
    // An object that is neither a message nor a response (a typo), in the default format
    // and in OpenAI's by name: refused naming what was expected, never 200 with nothing run.
    let default = gateway.url("/v1/tool-calls");
    let echo = json!({"name": "calculator", "arguments": {"expression": "6*7"}});
    for payload in [
        json!({"calls": [echo]}),
        json!({"tool_call": [echo]}),
        json!({"foo": 1}),
    ] {
        for url in [&url, &default] {
            let refused = post_with(&client, url, Some(&bob), &payload, &[]).await;
            assert_eq!(
                (refused.status, refused.error_code()),
                (400, "bad_tool_calls"),
                "{payload} at {url}: {}",
                refused.body
            );
            assert!(
                refused
                    .error_message()
                    .contains("an assistant message (an object with `role`)"),
                "{}",
                refused.body
            );
        }
    }
}

#[tokio::test]
async fn a_tool_without_arguments_is_listed_and_called_with_an_empty_object() {
    let config = format!(
        "tools:\n  builtin: [current_time]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start(&config);
    let listing = get(
        &client(),
        &gateway.url("/v1/tools?format=openai"),
        Some("alice"),
    )
    .await;
    assert_eq!(
        listing.body[0]["function"]["name"], "current_time",
        "{}",
        listing.body
    );
    assert_eq!(
        listing.body[0]["function"]["parameters"]["type"], "object",
        "{}",
        listing.body
    );
    let answer = invoke(&gateway, "alice", "current_time", json!({})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body["output"]["unix_ms"].as_u64().unwrap_or(0) > 0,
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn requests_without_a_valid_key_are_unauthenticated() {
    let gateway = Gateway::start(&authorized_config());
    let client = client();
    let url = gateway.url("/v1/tools/calculator/invoke");
    let input = json!({"expression": "1"});
    let cases = [
        ("no key", post_with(&client, &url, None, &input, &[]).await),
        (
            "wrong key",
            post_with(&client, &url, Some("tg_test_mallory_key"), &input, &[]).await,
        ),
        (
            "not a bearer",
            post_with(
                &client,
                &url,
                None,
                &input,
                &[("authorization", &format!("Basic {}", key("bob")))],
            )
            .await,
        ),
    ];
    for (case, answer) in cases {
        assert_eq!(answer.status, 401, "{case}: {}", answer.body);
        assert_eq!(
            answer.error_code(),
            "unauthenticated",
            "{case}: {}",
            answer.body
        );
    }
    let listing = get(&client, &gateway.url("/v1/tools"), None).await;
    assert_eq!(
        (listing.status, listing.error_code()),
        (401, "unauthenticated")
    );
}

#[tokio::test]
async fn calls_the_authorization_policy_denies_are_forbidden() {
    let gateway = Gateway::start(&authorized_config());
    let bob = invoke(&gateway, "bob", "echo", json!({"text": "hi"})).await;
    assert_eq!(bob.status, 403, "{}", bob.body);
    assert_eq!(bob.error_code(), "forbidden");
    let carol = invoke(&gateway, "carol", "calculator", json!({"expression": "1"})).await;
    assert_eq!((carol.status, carol.error_code()), (403, "forbidden"));
    // The same call by someone the policy allows goes through.
    let alice = invoke(&gateway, "alice", "echo", json!({"text": "hi"})).await;
    assert_eq!(alice.status, 200, "{}", alice.body);
    assert_eq!(alice.body["output"]["text"], "hi");
}

#[tokio::test]
async fn invalid_arguments_are_refused_with_their_field_paths() {
    let gateway = Gateway::start(&authorized_config());
    let wrong_type = invoke(&gateway, "alice", "calculator", json!({"expression": 5})).await;
    assert_eq!(wrong_type.status, 400, "{}", wrong_type.body);
    assert_eq!(wrong_type.error_code(), "invalid_input");
    assert_eq!(
        wrong_type.body["error"]["violations"][0]["path"],
        "expression"
    );

    let out_of_range = invoke(&gateway, "alice", "sleep", json!({"ms": 9_999_999})).await;
    assert_eq!(out_of_range.status, 400, "{}", out_of_range.body);
    assert_eq!(out_of_range.error_code(), "invalid_input");
    assert_eq!(out_of_range.body["error"]["violations"][0]["path"], "ms");

    let not_json = client()
        .post(gateway.url("/v1/tools/calculator/invoke"))
        .bearer_auth(key("alice"))
        .header("content-type", "application/json")
        .body("{\"expression\": ")
        .send()
        .await
        .expect("sending the request");
    assert_eq!(not_json.status().as_u16(), 400);
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_with_413() {
    let config = format!("server:\n  body_limit: 1KiB\n{}", authorized_config());
    let gateway = Gateway::start(&config);
    let small = invoke(&gateway, "alice", "echo", json!({"text": "a".repeat(100)})).await;
    assert_eq!(small.status, 200, "{}", small.body);
    let large = invoke(&gateway, "alice", "echo", json!({"text": "a".repeat(2048)})).await;
    assert_eq!(large.status, 413, "{}", large.body);
    assert_eq!(large.error_code(), "body_too_large");
}

#[tokio::test]
async fn a_compressed_body_is_refused_with_415_and_not_read_as_plain_json() {
    let gateway = Gateway::start(&authorized_config());
    // A body labelled gzip that is in fact plain JSON: read as sent, it would have been
    // served, whatever the client meant by the label.
    for (path, coding) in [("/v1/tools/echo/invoke", "gzip"), ("/mcp", "identity, br")] {
        let refused = client()
            .post(gateway.url(path))
            .bearer_auth(key("alice"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("content-encoding", coding)
            .body(r#"{"text": "hi"}"#)
            .send()
            .await
            .expect("sending the request");
        assert_eq!(refused.status().as_u16(), 415, "{path}");
        assert_eq!(refused.headers()["accept-encoding"], "identity", "{path}");
        assert_eq!(refused.headers()["connection"], "close", "{path}");
        let body: Value = refused.json().await.expect("a JSON error");
        assert_eq!(
            body["error"]["code"], "unsupported_content_encoding",
            "{body}"
        );
        let said = coding.rsplit(' ').next().unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`Content-Encoding: {said}`")),
            "{message}"
        );
    }
    // `identity` is no coding at all.
    let plain = client()
        .post(gateway.url("/v1/tools/echo/invoke"))
        .bearer_auth(key("alice"))
        .header("content-type", "application/json")
        .header("content-encoding", "identity")
        .body(r#"{"text": "hi"}"#)
        .send()
        .await
        .expect("sending the request");
    assert_eq!(plain.status().as_u16(), 200);
}

#[tokio::test]
async fn the_call_over_the_rate_limit_is_told_when_to_retry() {
    let config = format!(
        "tools:\n  builtin: [calculator]\nusers:\n{}\
policies:\n  rate_limits:\n    - {{ name: slow, rate: 2/minute }}\n",
        user_yaml("alice", &["admin"])
    );
    let gateway = Gateway::start(&config);
    for n in 1..=2 {
        let answer = invoke(
            &gateway,
            "alice",
            "calculator",
            json!({"expression": "1+1"}),
        )
        .await;
        assert_eq!(answer.status, 200, "call {n}: {}", answer.body);
    }
    let third = invoke(
        &gateway,
        "alice",
        "calculator",
        json!({"expression": "1+1"}),
    )
    .await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(third.error_code(), "rate_limited");
    let retry_after_ms = third.body["error"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    // 2/minute: the next call is admitted within half a minute.
    assert!((1..=30_000).contains(&retry_after_ms), "{retry_after_ms}");
    let header: u64 = third
        .headers
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds");
    assert_eq!(header, retry_after_ms.div_ceil(1000).max(1));
}

fn sleep_config(server: &str) -> String {
    format!(
        "server:\n{server}tools:\n  builtin: [sleep]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    )
}

#[tokio::test]
async fn a_call_past_the_server_deadline_times_out_promptly() {
    let gateway = Gateway::start(&sleep_config("  request_timeout: 300ms\n"));
    let started = Instant::now();
    let answer = invoke(&gateway, "alice", "sleep", json!({"ms": 5000})).await;
    let took = started.elapsed();
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert_eq!(answer.error_code(), "timeout");
    assert!(took < Duration::from_secs(2), "the 504 took {took:?}");
}

#[tokio::test]
async fn a_call_past_the_deadline_the_client_asks_for_times_out_promptly() {
    let gateway = Gateway::start(&sleep_config("  request_timeout: 30s\n"));
    let started = Instant::now();
    let answer = post_with(
        &client(),
        &gateway.url("/v1/tools/sleep/invoke"),
        Some(&key("alice")),
        &json!({"ms": 5000}),
        &[("x-toolgate-timeout-ms", "200")],
    )
    .await;
    let took = started.elapsed();
    assert_eq!(answer.status, 504, "{}", answer.body);
    assert_eq!(answer.error_code(), "timeout");
    assert!(took < Duration::from_secs(2), "the 504 took {took:?}");
    // A short call within the client's deadline is unaffected.
    let quick = post_with(
        &client(),
        &gateway.url("/v1/tools/sleep/invoke"),
        Some(&key("alice")),
        &json!({"ms": 10}),
        &[("x-toolgate-timeout-ms", "5000")],
    )
    .await;
    assert_eq!(quick.status, 200, "{}", quick.body);
    assert_eq!(quick.body["output"]["slept_ms"], 10);
}

/// An OpenAI assistant message with one call per `(id, tool, arguments)`.
fn openai_calls(calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

#[tokio::test]
async fn a_batch_ends_at_the_request_deadline_and_calls_that_never_started_time_out_unrun() {
    // One call at a time, each allowed the whole second: without a deadline for the whole
    // batch, six calls that never answer in time would hold the request six seconds.
    let gateway = Gateway::start(&sleep_config(
        "  request_timeout: 1s\n  batch_concurrency: 1\n",
    ));
    let ids: Vec<String> = (0..6).map(|i| format!("call_{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .map(|id| (id.as_str(), "sleep", json!({"ms": 600_000})))
        .collect();
    let url = gateway.url("/v1/tool-calls?format=openai");
    let started = Instant::now();
    let answer = post_with(
        &client(),
        &url,
        Some(&key("alice")),
        &openai_calls(&calls),
        &[],
    )
    .await;
    let took = started.elapsed();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let results = answer.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 6, "{}", answer.body);
    assert!(
        results.iter().all(|r| r["error"]["code"] == "timeout"),
        "{}",
        answer.body
    );
    let unrun = results
        .iter()
        .filter(|r| {
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the batch's time ran out"))
        })
        .count();
    assert_eq!(unrun, 5, "only the first call started: {}", answer.body);
    assert!(took < Duration::from_secs(4), "the batch took {took:?}");
}

#[tokio::test]
async fn a_batch_with_two_calls_of_one_id_is_refused_400_naming_the_id() {
    let gateway = Gateway::start(&authorized_config());
    let (client, alice) = (client(), key("alice"));
    let echo = json!({"text": "hi"});
    let openai = openai_calls(&[
        ("dup", "echo", echo.clone()),
        ("other", "echo", echo.clone()),
        ("dup", "echo", echo.clone()),
    ]);
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_dup", "name": "echo", "input": echo},
        {"type": "tool_use", "id": "toolu_dup", "name": "echo", "input": echo},
    ]});
    for (format, payload, id) in [
        ("openai", openai, "`dup`"),
        ("anthropic", anthropic, "`toolu_dup`"),
    ] {
        let url = gateway.url(&format!("/v1/tool-calls?format={format}"));
        let refused = post_with(&client, &url, Some(&alice), &payload, &[]).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_tool_calls"),
            "{format}: {}",
            refused.body
        );
        let message = refused.error_message();
        assert!(
            message.contains(id) && message.contains("same id"),
            "{format}: {message}"
        );
    }
    // A long repeated id is named only in part.
    let long = "d".repeat(200);
    let payload = openai_calls(&[(&long, "echo", echo.clone()), (&long, "echo", echo)]);
    let url = gateway.url("/v1/tool-calls?format=openai");
    let refused = post_with(&client, &url, Some(&alice), &payload, &[]).await;
    assert_eq!(refused.error_code(), "bad_tool_calls", "{}", refused.body);
    assert!(refused.error_message().len() < 400, "{}", refused.body);
}

/// Broken before: a batch of one call with the empty id was run, and its result could not
/// be matched to it. Ids are otherwise opaque: case and Unicode form tell ids apart.
#[tokio::test]
async fn a_batch_call_with_an_empty_id_is_refused_and_ids_differing_in_case_or_form_are_distinct() {
    let gateway = Gateway::start(&authorized_config());
    let (client, alice) = (client(), key("alice"));
    let echo = json!({"text": "hi"});
    let url = |format: &str| gateway.url(&format!("/v1/tool-calls?format={format}"));
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "", "name": "echo", "input": echo},
    ]});
    for (format, payload) in [
        ("openai", openai_calls(&[("", "echo", echo.clone())])),
        ("anthropic", anthropic),
    ] {
        let refused = post_with(&client, &url(format), Some(&alice), &payload, &[]).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_tool_calls"),
            "{format}: {}",
            refused.body
        );
        let message = refused.error_message();
        assert!(
            message.contains("call 1 has an empty id") && message.contains("nothing ran"),
            "{format}: {message}"
        );
    }
    let ids = ["call_A", "call_a", "caf\u{e9}", "cafe\u{301}"];
    let calls: Vec<_> = ids.iter().map(|id| (*id, "echo", echo.clone())).collect();
    let answer = post_with(
        &client,
        &url("openai"),
        Some(&alice),
        &openai_calls(&calls),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(answer.body["results"][i]["call_id"], *id, "{}", answer.body);
        assert_eq!(
            answer.body["results"][i]["status"], "success",
            "{}",
            answer.body
        );
    }
}

#[tokio::test]
async fn a_batch_call_id_over_256_bytes_is_refused_and_a_long_unknown_name_is_not_echoed() {
    let gateway = Gateway::start(&authorized_config());
    let (client, alice) = (client(), key("alice"));
    let echo = json!({"text": "hi"});
    let url = |format: &str| gateway.url(&format!("/v1/tool-calls?format={format}"));
    let too_long = "i".repeat(257);
    let openai = openai_calls(&[
        ("call_1", "echo", echo.clone()),
        (&too_long, "echo", echo.clone()),
    ]);
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": too_long, "name": "echo", "input": echo},
    ]});
    for (format, payload) in [("openai", openai), ("anthropic", anthropic)] {
        let refused = post_with(&client, &url(format), Some(&alice), &payload, &[]).await;
        assert_eq!(
            (refused.status, refused.error_code()),
            (400, "bad_tool_calls"),
            "{format}: {}",
            refused.body
        );
        let message = refused.error_message();
        assert!(
            message.contains("257 bytes") && !message.contains(&too_long),
            "{format}: {message}"
        );
    }
    // 65 characters of four bytes each: the limit counts bytes, as the agent layer's does.
    let wide = "\u{1F600}".repeat(65);
    let refused = post_with(
        &client,
        &url("openai"),
        Some(&alice),
        &openai_calls(&[(&wide, "echo", echo.clone())]),
        &[],
    )
    .await;
    assert_eq!(refused.error_code(), "bad_tool_calls", "{}", refused.body);
    assert!(
        refused.error_message().contains("260 bytes"),
        "{}",
        refused.body
    );
    let at_the_bound = "i".repeat(256);
    let answer = post_with(
        &client,
        &url("openai"),
        Some(&alice),
        &openai_calls(&[(&at_the_bound, "echo", echo.clone())]),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["results"][0]["call_id"], at_the_bound.as_str());

    let long_name = "n".repeat(100_000);
    let answer = post_with(
        &client,
        &url("openai"),
        Some(&alice),
        &openai_calls(&[("call_1", &long_name, echo)]),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["results"][0];
    assert_eq!(result["error"]["code"], "unknown_tool", "{result}");
    let shown = result["tool_name"].as_str().unwrap();
    assert_eq!(shown, format!("{}…", "n".repeat(64)));
    assert!(answer.body.to_string().len() < 2_000, "{}", answer.body);
}

#[tokio::test]
async fn a_timeout_header_that_is_not_a_whole_number_of_milliseconds_is_refused_400_bad_timeout() {
    let gateway = Gateway::start(&format!(
        "{}policies:\n  approval:\n    tools: [sleep]\n",
        sleep_config("  request_timeout: 30s\n").replace("[sleep]", "[sleep, echo]")
    ));
    let (client, alice) = (client(), key("alice"));
    let echo = gateway.url("/v1/tools/echo/invoke");
    let text = json!({"text": "hi"});
    let refused = |answer: &common::Answer, what: &str| {
        assert_eq!(
            (answer.status, answer.error_code()),
            (400, "bad_timeout"),
            "{what}: {}",
            answer.body
        );
        let message = answer.error_message();
        assert!(
            message.contains("must be a whole number of milliseconds, 1 or more")
                && message.contains("deadline of 30000 ms is cut to it"),
            "{what}: {message}"
        );
    };
    for value in [
        "abc", "-1", "1.5", "+5", "1e3", "", " ", "5000ms", "0", "00",
    ] {
        let answer = post_with(
            &client,
            &echo,
            Some(&alice),
            &text,
            &[("x-toolgate-timeout-ms", value)],
        )
        .await;
        refused(&answer, &format!("{value:?}"));
    }
    let twice = [
        ("x-toolgate-timeout-ms", "5000"),
        ("x-toolgate-timeout-ms", "100"),
    ];
    let answer = post_with(&client, &echo, Some(&alice), &text, &twice).await;
    refused(&answer, "sent twice");
    assert!(
        answer.error_message().contains("more than once"),
        "{}",
        answer.body
    );

    // A whole number is taken: over the gateway's deadline (even past what 64 bits hold),
    // it is cut to it.
    for value in [
        "1",
        "5000",
        "99999999999999999999",
        "123456789012345678901234567890",
    ] {
        let answer = post_with(
            &client,
            &echo,
            Some(&alice),
            &text,
            &[("x-toolgate-timeout-ms", value)],
        )
        .await;
        assert_eq!(answer.status, 200, "{value}: {}", answer.body);
    }

    // A batch and a resume are held to the same rule.
    let batch = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "echo", "arguments": "{\"text\": \"hi\"}"},
    }]});
    let url = gateway.url("/v1/tool-calls?format=openai");
    let bad = [("x-toolgate-timeout-ms", "1.5")];
    refused(
        &post_with(&client, &url, Some(&alice), &batch, &bad).await,
        "a batch",
    );
    let good = [("x-toolgate-timeout-ms", "5000")];
    let answer = post_with(&client, &url, Some(&alice), &batch, &good).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let resume = gateway.url("/v1/suspensions/nope/resume");
    let approve = json!({"decision": "approve"});
    refused(
        &post_with(&client, &resume, Some(&alice), &approve, &bad).await,
        "a resume",
    );
    let answer = post_with(&client, &resume, Some(&alice), &approve, &good).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
}

fn mcp_initialize() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "toolgate-tests", "version": "0"}
        }
    })
}

#[tokio::test]
async fn mcp_without_a_key_is_unauthenticated() {
    let gateway = Gateway::start(&authorized_config());
    let answer = post_with(
        &client(),
        &gateway.url("/mcp"),
        None,
        &mcp_initialize(),
        &[("accept", "application/json, text/event-stream")],
    )
    .await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert_eq!(answer.error_code(), "unauthenticated");
}

#[tokio::test]
async fn mcp_initialize_with_a_key_names_the_server() {
    let gateway = Gateway::start(&authorized_config());
    let response = client()
        .post(gateway.url("/mcp"))
        .bearer_auth(key("bob"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(mcp_initialize().to_string())
        .send()
        .await
        .expect("sending initialize");
    assert_eq!(response.status().as_u16(), 200);
    // The answer may be an SSE stream that stays open: read until the result arrives.
    let mut response = response;
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains("serverInfo") {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, response.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) => break,
            Ok(Err(e)) => panic!("reading the MCP answer: {e}"),
            Err(_) => break,
        }
    }
    assert!(seen.contains("serverInfo"), "{seen}");
    assert!(seen.contains("\"toolgate\""), "{seen}");
}

// ---------------------------------------------------------------------------------------
// The README's walk-through, on the shipped example configuration

const ALICE: &str = "tg_demo_alice_admin_key";
const BOB: &str = "tg_demo_bob_analyst_key";

/// What `curl -s URL -H 'Authorization: Bearer KEY' -d BODY` sends: a POST whose content
/// type is a form's, not JSON's.
async fn curl_post(client: &reqwest::Client, url: &str, api_key: &str, body: &str) -> (u16, Value) {
    let response = client
        .post(url)
        .bearer_auth(api_key)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned())
        .send()
        .await
        .expect("sending the request");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

#[tokio::test]
async fn the_example_configuration_serves_the_readme_walkthrough() {
    let gateway = Gateway::start_file(std::path::Path::new(common::EXAMPLE_CONFIG));
    let client = client();
    let invoke_url = |tool: &str| gateway.url(&format!("/v1/tools/{tool}/invoke"));

    let listing = client
        .get(gateway.url("/v1/tools?format=openai"))
        .bearer_auth(BOB)
        .send()
        .await
        .expect("listing");
    assert_eq!(listing.status().as_u16(), 200);
    let listing: Value = listing.json().await.unwrap();
    // `toolgate.outcome` too: bob's `sleep` waits, and he reads its outcome with it.
    assert_eq!(
        listed("openai", &listing),
        set(&[
            "calculator",
            "current_time",
            "echo",
            "sleep",
            "toolgate.outcome"
        ]),
        "{listing}"
    );

    let (status, body) = curl_post(
        &client,
        &invoke_url("calculator"),
        BOB,
        r#"{"expression": "6 * 7"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["result"], 42);

    let (status, body) = curl_post(
        &client,
        &invoke_url("calculator"),
        BOB,
        r#"{"expression": 42}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["violations"][0]["path"], "expression",
        "{body}"
    );

    let (status, body) = curl_post(&client, &invoke_url("sleep"), BOB, r#"{"ms": 100}"#).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "suspended");
    let id = body["suspension_id"].as_str().expect("suspension_id");

    let resume_url = gateway.url(&format!("/v1/suspensions/{id}/resume"));
    let approve = r#"{"decision": "approve"}"#;
    let (status, body) = curl_post(&client, &resume_url, BOB, approve).await;
    assert_eq!(status, 403, "an analyst may not approve: {body}");
    let (status, body) = curl_post(&client, &resume_url, ALICE, approve).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["slept_ms"], 100, "the invoke answer: {body}");

    let (status, _) = curl_post(
        &client,
        &invoke_url("calculator"),
        "tg_demo_mallory_key",
        "{}",
    )
    .await;
    assert_eq!(status, 401);

    let metrics = gateway.metrics().await;
    let calls = |labels: &[(&str, &str)]| common::metric(&metrics, "toolgate_calls_total", labels);
    assert_eq!(
        calls(&[("tool", "calculator"), ("outcome", "success")]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        calls(&[("tool", "calculator"), ("code", "invalid_input")]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        calls(&[("tool", "sleep"), ("outcome", "suspended")]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        calls(&[("tool", "sleep"), ("outcome", "success")]),
        1.0,
        "{metrics}"
    );
}
