//! `JsonInput` refuses a body whose JSON names a key twice in one object: serde_json would
//! keep the last value silently, and a policy and the tool could read different ones.

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use http::StatusCode;
use serde_json::{Value, json};
use toolgate_http::{HttpError, JsonInput};

async fn read(body: &str) -> Result<Value, HttpError> {
    let request = Request::builder()
        .method("POST")
        .uri("/tools/read_file")
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    JsonInput::from_request(request, &())
        .await
        .map(|input| input.0)
}

#[tokio::test]
async fn a_body_with_a_repeated_key_is_refused_400_bad_json_naming_the_key_and_its_object() {
    let refused = read(r#"{"arguments": {"path": "/etc/passwd", "path": "/tmp/x"}}"#)
        .await
        .unwrap_err();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.code(), "bad_json");
    assert_eq!(
        refused.body().message,
        "the request body is refused: the key `path` appears twice in the object at `/arguments`: send each key once"
    );

    let refused = read(r#"{"path": "/etc/passwd", "path": "/tmp/x"}"#)
        .await
        .unwrap_err();
    assert_eq!(
        refused.body().message,
        "the request body is refused: the key `path` appears twice in the top-level object: send each key once"
    );
}

#[tokio::test]
async fn a_hostile_repeated_key_is_shown_short_and_on_one_line() {
    let key = format!("x\r\n2026-01-01 INFO forged{}", "k".repeat(100_000));
    let body = serde_json::to_string(&json!({"items": [{}]}))
        .unwrap()
        .replace(
            "{}",
            &format!("{{\"{0}\": 1, \"{0}\": 2}}", key.escape_default()),
        );
    let refused = read(&body).await.unwrap_err();
    let message = &refused.body().message;
    assert_eq!(refused.code(), "bad_json");
    assert!(message.contains("at `/items/0`"), "{message}");
    assert!(
        message.contains("the key `x\\r\\n2026-01-01 INFO forged"),
        "{message}"
    );
    assert!(!message.chars().any(char::is_control), "{message}");
    assert!(message.chars().count() < 200, "{message}");
}

#[tokio::test]
async fn a_body_without_repeated_keys_reads_as_serde_json_reads_it() {
    for body in [
        r#"{"path": "/tmp/x", "options": {"mode": "r", "path": "/tmp/y"}, "list": [{"a": 1}, {"a": 1}]}"#,
        r#"[1, -2, 18446744073709551615, 1.5e300, "é", null, true]"#,
        "null",
    ] {
        assert_eq!(
            read(body).await.unwrap(),
            serde_json::from_str::<Value>(body).unwrap(),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_body_that_is_not_json_is_still_told_so_with_its_position() {
    let refused = read(r#"{"path": "/tmp/x""#).await.unwrap_err();
    assert_eq!(refused.code(), "bad_json");
    assert_eq!(
        refused.body().message,
        "the request body is not JSON: EOF while parsing an object at line 1 column 17"
    );
}

#[tokio::test]
async fn a_body_nested_127_levels_deep_is_read_and_128_is_refused_saying_so() {
    let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let read_whole = read(&nested(127)).await.unwrap();
    let mut depth = 0;
    let mut value = &read_whole;
    while let Some(inner) = value.as_array() {
        depth += 1;
        match inner.first() {
            Some(next) => value = next,
            None => break,
        }
    }
    assert_eq!(depth, 127);

    let refused = read(&nested(128)).await.unwrap_err();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.code(), "bad_json");
    assert_eq!(
        refused.body().message,
        "the request body is not JSON: arrays and objects nested 128 levels deep or more at line 1 column 128: send at most 127 levels"
    );
}
