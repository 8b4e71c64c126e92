//! Embedding a toolgate [`Pipeline`](toolgate_core::Pipeline) in your own HTTP server.
//!
//! The pieces the `toolgate` gateway's own `/v1` routes are made of, for a host that serves
//! tools from an axum (or any tower) server of its own:
//!
//! - [`HttpError`]: a [`ToolError`](toolgate_core::ToolError) (or an error of your own) as an
//!   HTTP answer: its status, `Retry-After` for retry-afters, and the gateway's JSON body
//!   `{"error": {"code", "message", "retry_after_ms"?, "violations"?}}`.
//! - [`invocation_response`]: an [`Invocation`](toolgate_core::Invocation) as the gateway
//!   answers it (200 with the output, 202 for a suspended call, the error otherwise).
//! - [`Caller`] and [`CallOptions`]: your authentication middleware puts a [`Caller`] in the
//!   request's extensions; the [`CallOptions`] extractor turns the request into
//!   [`InvokeOptions`](toolgate_core::InvokeOptions) (the caller, `x-session-id`,
//!   `x-request-id`).
//! - [`JsonInput`]: the request body as the tool's JSON arguments, each refusal (not JSON,
//!   compressed, too large, too slow) an [`HttpError`].
//! - [`PipelineService`]: a tower [`Service`](tower_service::Service) over a pipeline that
//!   answers [`ToolCall`]s, so it stacks with tower middleware.
//!
//! `docs/embedding.md` walks through an axum host end to end.
//!
//! ```
//! use axum::{Router, extract::{Path, State}, response::Response, routing::post};
//! use toolgate_core::Pipeline;
//! use toolgate_http::{CallOptions, JsonInput, invocation_response};
//!
//! async fn invoke(
//!     State(pipeline): State<Pipeline>,
//!     Path(tool): Path<String>,
//!     call: CallOptions,
//!     JsonInput(input): JsonInput,
//! ) -> Response {
//!     invocation_response(&pipeline.invoke_detailed(&tool, input, call.options).await)
//! }
//!
//! # fn app(pipeline: Pipeline) -> Router {
//! Router::new().route("/tools/{tool}", post(invoke)).with_state(pipeline)
//! # }
//! ```
#![deny(missing_docs)]

mod call;
mod error;
mod input;
mod response;
mod service;

pub use call::{
    CallOptions, Caller, UnusableId, X_REQUEST_ID, X_SESSION_ID, caller_session, header_id,
    is_usable_id, request_id, session_id, session_key,
};
pub use error::HttpError;
pub use input::{BodyTimeout, DEFAULT_BODY_TIMEOUT, JsonInput, content_coding};
pub use response::invocation_response;
pub use service::{PipelineService, ToolCall};

/// The embedding guide, `docs/embedding.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/embedding.md")]
pub struct EmbeddingGuide;
