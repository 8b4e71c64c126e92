//! `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

/// Alive: the process answers.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready for traffic: not draining for shutdown. Reachable during the drain, when it
/// answers 503 `{"status": "draining"}`.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.drain.is_draining() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "draining" })),
        )
            .into_response()
    } else {
        let tools = state.current.load().pipeline().registry().len();
        Json(json!({ "status": "ready", "tools": tools })).into_response()
    }
}

/// Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match &state.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "metrics are not enabled in this process",
        )
            .into_response(),
    }
}
