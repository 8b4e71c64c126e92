//! `/metrics` stays bounded whatever methods, paths and tool names clients send.

use reqwest::Method;
use serde_json::json;

use crate::common::{self, Gateway, client, key, user_yaml};

/// How many made-up values of each kind the test sends.
const MADE_UP: usize = 300;

/// The series of `text` (Prometheus text): its sample lines, without comments.
fn series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .collect()
}

#[tokio::test]
async fn made_up_methods_paths_and_tool_names_keep_the_metric_series_bounded() {
    let gateway = Gateway::start(&format!(
        "tools:\n  builtin: [echo]\nusers:\n{}",
        user_yaml("alice", &["admin"])
    ));
    let client = client();
    for i in 0..MADE_UP {
        let method = Method::from_bytes(format!("M{i}XXXXXXXX").as_bytes()).expect("a method");
        let answer = client
            .request(method, gateway.url("/healthz"))
            .send()
            .await
            .expect("a made-up method");
        assert_eq!(answer.status().as_u16(), 405);
        let answer = client
            .get(gateway.url(&format!("/made/up/path/{i}")))
            .send()
            .await
            .expect("a made-up path");
        assert_eq!(answer.status().as_u16(), 404);
        let answer = client
            .post(gateway.url(&format!("/v1/tools/made_up_tool_{i}/invoke")))
            .bearer_auth(key("alice"))
            .json(&json!({}))
            .send()
            .await
            .expect("a made-up tool");
        assert_eq!(answer.status().as_u16(), 404);
    }
    let echoed = common::invoke(&gateway, "alice", "echo", json!({"text": "hi"})).await;
    assert_eq!(echoed.status, 200, "{}", echoed.body);

    let text = gateway.metrics().await;
    let series = series(&text);
    // A few routes (healthz, unmatched, invoke), two standard methods and `other`, a few
    // statuses, and the echo call's series: dozens of lines, not hundreds.
    assert!(
        series.len() < 80,
        "{} series after {MADE_UP} made-up methods, paths and tools:\n{text}",
        series.len()
    );
    for made_up in ["M1XXXXXXXX", "/made/up/path/1", "made_up_tool_1"] {
        assert!(
            !text.contains(made_up),
            "`{made_up}` became a label:\n{text}"
        );
    }
    let requests = |labels: &[(&str, &str)]| {
        common::metric(&text, "toolgate_http_requests_total", labels) as usize
    };
    assert_eq!(requests(&[("method", "other")]), MADE_UP, "{text}");
    assert_eq!(
        requests(&[("route", "unmatched"), ("method", "GET")]),
        MADE_UP,
        "{text}"
    );
    assert_eq!(
        requests(&[("route", "/v1/tools/{name}/invoke"), ("status", "404")]),
        MADE_UP,
        "{text}"
    );
    assert_eq!(
        common::metric(&text, "toolgate_calls_total", &[("tool", "echo")]) as usize,
        1,
        "{text}"
    );
}
