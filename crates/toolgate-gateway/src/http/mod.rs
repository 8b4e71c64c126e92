//! The HTTP API (axum): tools, invocations, batches, suspensions, health, metrics and the
//! MCP endpoint.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/tools?format=toolgate\|openai\|anthropic\|gemini\|mcp` | the tools the caller may call |
//! | `POST /v1/tools/{name}/invoke` | one call; the body is the tool's arguments |
//! | `POST /v1/tool-calls?format=openai\|anthropic\|gemini` | a batch of a model's tool calls |
//! | `GET /v1/suspensions?status=&tool=&user=&tenant=&no_tenant=&since=&limit=&cursor=` | the calls waiting for approval, a page at a time (approvers: everyone's, or their tenant's; others: their own) |
//! | `GET /v1/suspensions/{id}` | a call waiting for approval |
//! | `POST /v1/suspensions/{id}/resume` | approve, reject or complete it |
//! | `GET /v1/admin/pins` | pinned tool definitions and changes waiting (approvers without a tenant) |
//! | `POST /v1/admin/pins/{tool}/accept` | accept a changed definition (approvers without a tenant) |
//! | `GET /v1/admin/stats` | calls, errors, refusals and latency per tool, from the gateway's own counters (approvers without a tenant) |
//! | `GET /v1/admin/decisions?limit=` | the last decisions on waiting calls, newest first (approvers) |
//! | `/console…` | the operator console, when `console:` is set (see [`crate::console`]) |
//! | `GET /.well-known/oauth-protected-resource[/mcp]` | OAuth protected resource metadata (RFC 9728), when `identity.oauth` is set |
//! | `GET /healthz`, `GET /readyz` | liveness, readiness |
//! | `GET /metrics` | Prometheus metrics |
//! | `/mcp` | MCP over streamable HTTP |
//!
//! Everything under `/v1` and `/mcp` needs `Authorization: Bearer <credential>`: an API
//! key or an OAuth access token, as `identity.routes` chooses (see [`crate::identity`]);
//! `/v1` also takes a console session's cookie (see [`crate::console`]). Once the
//! gateway drains for shutdown, both refuse new requests with 503 `shutting_down` (see
//! [`crate::drain`]); `/healthz`, `/readyz` and `/metrics` keep answering.
//!
//! Before any of that, a request with more than 100 header fields or more than
//! `server.max_header_bytes` of headers is answered 431 `headers_too_large` (see
//! [`header_limits`]).

mod accept;
mod admin;
mod admission;
pub(crate) mod app_state;
mod authenticate;
mod batch;
pub(crate) mod body;
mod error;
mod header_limits;
mod health;
mod invoke;
mod mcp;
mod pins;
mod plain_errors;
mod ratelimit;
mod request_metrics;
mod resource_metadata;
mod suspensions;
mod trace_context;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderName;
use axum::routing::{any, delete, get, post};
use toolgate_core::User;
use toolgate_mcp::CallerAccessToken;

use admission::AdmitLayer;
pub use app_state::AppState;
use authenticate::AuthenticateLayer;
pub use error::ApiError;
use header_limits::HeaderLimitsLayer;
use plain_errors::JsonErrorsLayer;
pub(crate) use plain_errors::OwnPage;
use request_metrics::RecordRequestsLayer;

use crate::console;
use crate::gateway::Gateway;
use crate::identity::metadata::METADATA_PATH;

/// The authenticated caller, and the gateway the request runs on from start to end (a
/// reload in the middle does not change it).
#[derive(Clone)]
pub struct Caller {
    /// Who is calling.
    pub user: Arc<User>,
    /// The access token the caller presented, kept only when an upstream trades it for
    /// a credential of its own (`as_caller.token_exchange`); never sent on.
    pub token: Option<CallerAccessToken>,
    /// The configuration the request runs on.
    pub gateway: Arc<Gateway>,
}

/// The router of the whole API.
///
/// `toolgate serve` serves it with each request's peer address in its extensions, as
/// axum's `ConnectInfo<SocketAddr>`. Serve it the same way (axum's
/// `into_make_service_with_connect_info::<SocketAddr>()`) for
/// `identity.failed_credentials` to count wrong credentials per client: without the
/// peer's address no client can be told apart, and the limit does not apply.
pub fn router(state: AppState) -> Router {
    let body_limit = state.current.load().config.server.body_limit.0;
    let max_header_bytes = state.current.load().config.server.max_header_bytes.0;
    let traced = state.current.load().config.telemetry.is_some();
    let authenticated = Router::new()
        .route("/v1/tools", get(invoke::list_tools))
        .route("/v1/tools/{name}/invoke", post(invoke::invoke))
        .route("/v1/tool-calls", post(batch::tool_calls))
        .route("/v1/suspensions", get(suspensions::list))
        .route("/v1/suspensions/{id}", get(suspensions::show))
        .route("/v1/suspensions/{id}/resume", post(suspensions::resume))
        .route("/v1/admin/pins", get(pins::list))
        .route("/v1/admin/pins/{tool}", delete(pins::forget))
        .route("/v1/admin/pins/{tool}/accept", post(pins::accept))
        .route(
            "/v1/admin/stats",
            get(admin::stats).delete(admin::reset_stats),
        )
        .route("/v1/admin/decisions", get(admin::decisions))
        .route("/mcp", any(mcp::endpoint))
        .route_layer(AuthenticateLayer::new(state.current.clone()))
        // Outside authentication: a replica that is going away refuses everyone alike.
        .route_layer(AdmitLayer::new(state.drain.clone()));
    // Trace context is read only when traces are exported (a restart applies a change).
    let authenticated = if traced {
        authenticated.route_layer(axum::middleware::from_fn(trace_context::adopt))
    } else {
        authenticated
    };
    Router::new()
        .route(METADATA_PATH, get(resource_metadata::whole))
        .route(&format!("{METADATA_PATH}/mcp"), get(resource_metadata::mcp))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/console", get(console::page))
        .route("/console/", get(console::page))
        .route("/console/app.js", get(console::script))
        .route("/console/app.css", get(console::style))
        .route("/console/sign-in", get(console::sign_in_options))
        .route("/console/oauth/start", get(console::oauth_start))
        .route("/console/oauth/callback", get(console::oauth_callback))
        .route(
            "/console/session",
            get(console::show)
                .post(console::sign_in)
                // Anyone may send a sign-in, credential or none: its body is small, and a
                // slow sender holds no more than this while it waits for the rest.
                .layer(DefaultBodyLimit::max(console::SIGN_IN_BODY_LIMIT))
                .delete(console::sign_out),
        )
        .merge(authenticated)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            body::refuse_unreadable_bodies,
        ))
        .layer(JsonErrorsLayer)
        // Before everything but the request metrics, so that refusals are counted.
        .layer(HeaderLimitsLayer::new(max_header_bytes))
        .layer(RecordRequestsLayer::default())
        // Every request clones the state of its route: one shared pointer, not each field.
        .with_state(Arc::new(state))
}

/// `x-toolgate-timeout-ms`: a client's own deadline, in milliseconds.
const X_TOOLGATE_TIMEOUT_MS: HeaderName = HeaderName::from_static("x-toolgate-timeout-ms");

/// The deadline of a request: the server's, or less when the client asks for less with
/// `x-toolgate-timeout-ms` (a whole number of milliseconds, at least 1; more than the
/// server's is cut to it, however large).
///
/// # Errors
///
/// 400 `bad_timeout` for a value that is not such a number (`abc`, `-1`, `1.5`, `+5`,
/// empty), for 0 (no deadline at all: every call would fail at once), and for the header
/// sent more than once.
fn request_timeout(
    gateway: &Gateway,
    headers: &axum::http::HeaderMap,
) -> Result<Duration, ApiError> {
    let limit = gateway.config.server.request_timeout;
    let mut sent = headers.get_all(X_TOOLGATE_TIMEOUT_MS).iter();
    let Some(value) = sent.next() else {
        return Ok(limit);
    };
    let bad = |what: &str| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "bad_timeout",
            format!(
                "{what}: `x-toolgate-timeout-ms` must be a whole number of milliseconds, 1 or more (e.g. `5000`; a value over this gateway's deadline of {} ms is cut to it): send one such number, or leave the header out for the gateway's deadline",
                limit.as_millis()
            ),
        )
    };
    if sent.next().is_some() {
        return Err(bad(
            "the request carries `x-toolgate-timeout-ms` more than once",
        ));
    }
    let digits = value.to_str().unwrap_or("").trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            "the value of `x-toolgate-timeout-ms` is not a whole number",
        ));
    }
    // Only digits: a number too large for `u64` is larger than any deadline, and cut to it.
    let ms = digits.parse::<u64>().unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(bad("a deadline of 0 ms leaves no time for the call"));
    }
    Ok(Duration::from_millis(ms).min(limit))
}
