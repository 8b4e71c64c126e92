//! `GET /.well-known/oauth-protected-resource` and `…/mcp`: where a client learns which
//! authorization server issues tokens for this gateway (RFC 9728). Not found when the
//! gateway accepts no OAuth tokens.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};
use crate::identity::{Route, metadata};

/// The metadata of the whole gateway (the resource of `/v1`).
pub(super) async fn whole(State(state): State<Arc<AppState>>) -> Response {
    answer(&state, Route::V1)
}

/// The metadata of the MCP endpoint.
pub(super) async fn mcp(State(state): State<Arc<AppState>>) -> Response {
    answer(&state, Route::Mcp)
}

fn answer(state: &AppState, route: Route) -> Response {
    let gateway = state.current.load();
    let Some(oauth) = gateway.identity.oauth() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this gateway accepts no OAuth tokens: it has no `identity.oauth` section",
        )
        .into_response();
    };
    let mut response = Json(metadata::document(oauth, route)).into_response();
    // Clients may cache it for a while; a reload that changes it is rare.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
