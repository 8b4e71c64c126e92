//! Request bodies: bounded, JSON, with clear errors.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::ApiError;

/// Parses a request body as JSON of type `T`, or answers 413 for a body over the limit and
/// 400 for one that is not the JSON expected (naming where it went wrong).
pub fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is over the gateway's limit (`server.body_limit`): send less data",
            )
        } else {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_body", rejection.body_text())
        }
    })?;
    let bad = |at: String, e: serde_json::Error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the request body is not the JSON expected{at}: {e}"),
        )
    };
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!(" at `{path}`")
        };
        bad(at, e.into_inner())
    })?;
    deserializer.end().map_err(|e| bad(String::new(), e))?;
    Ok(value)
}
