//! The request that opens a session: an `initialize` without `Mcp-Session-Id`.
//!
//! rmcp opens the session while it handles the request, and the host learns its id only
//! from the answer. A client that hangs up before then has its request's future dropped
//! by the HTTP server: were rmcp's work in that future, the session would stay open,
//! unknown to the endpoint and to the host, until rmcp's keep-alive — so a flood of
//! `initialize` requests whose clients hang up would hold memory past every bound the
//! host sets on sessions. So rmcp handles such a request in a task of its own
//! ([`apart`]), and the session it opened is closed at once ([`Opening`]) unless its
//! answer reaches the host, which then counts it.
//!
//! An `initialize` whose parameters rmcp cannot read is no `initialize` to rmcp, which
//! would ask for a session id; it is answered here instead ([`malformed`]): 400 with
//! `-32602` (invalid params) and the request's id, naming what is wrong.

use std::convert::Infallible;
use std::task::Poll;

use http::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ProtocolVersion};
use serde_json::{Map, Value};
use toolgate_core::error::shown_id;
use tower_service::Service;

use super::cancellation::GuardedBody;
use super::direct::PROTOCOL_VERSION;
use super::message::kind_of;
use super::request_body::rejection;

/// The header that names a session.
const SESSION_ID_HEADER: &str = "mcp-session-id";

/// JSON-RPC: the request is not one the server takes.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: the request's parameters do not fit its method.
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the server failed.
const INTERNAL_ERROR: i64 = -32603;

/// Whether `message` is an `initialize` request, which opens a session when it names none.
pub(super) fn opens_session(message: Option<&ClientJsonRpcMessage>) -> bool {
    matches!(
        message,
        Some(ClientJsonRpcMessage::Request(request))
            if matches!(request.request, ClientRequest::InitializeRequest(_))
    )
}

/// A session rmcp opened for a request whose answer has not reached the host yet: closed
/// when dropped before [`answered`](Self::answered) — the client left, and nobody can
/// use the session.
pub(super) struct Opening {
    /// The session's id; `None` when the answer opened none (a refusal).
    id: Option<String>,
    /// Ends the session inside rmcp.
    close: Option<Box<dyn FnOnce(String) + Send>>,
}

impl Opening {
    /// The answer reached the host, which now holds the session.
    pub(super) fn answered(mut self) {
        self.close = None;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let (Some(id), Some(close)) = (self.id.take(), self.close.take())
            // Closing runs on the runtime; without one (it is shutting down), rmcp's
            // sessions end with it.
            && tokio::runtime::Handle::try_current().is_ok()
        {
            tracing::debug!(
                "closing the MCP session of an `initialize` whose client left before its answer"
            );
            close(id);
        }
    }
}

/// `service`'s answer to `request` (an `initialize` naming no session), worked out in a
/// task of its own so that it is finished whatever becomes of the caller, with the
/// session it opened held by an [`Opening`]: the session is closed through `close` if the
/// caller is gone before the answer reaches it. `None` if the task failed (it panicked).
pub(super) async fn apart<S, R, B>(
    mut service: S,
    request: R,
    close: impl FnOnce(String) + Send + 'static,
) -> Option<(http::Response<B>, Opening)>
where
    S: Service<R, Response = http::Response<B>, Error = Infallible> + Send + 'static,
    S::Future: Send,
    R: Send + 'static,
    B: Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let ready = std::future::poll_fn(|cx| match service.poll_ready(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => Poll::Pending,
        });
        ready.await;
        let Ok(response) = service.call(request).await;
        let id = response
            .headers()
            .get(SESSION_ID_HEADER)
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        let opening = Opening {
            id,
            close: Some(Box::new(close)),
        };
        // Nobody waits any more (the send fails), or the answer is dropped unread with the
        // channel: either way the opening is dropped, and the session closed.
        let _ = answer.send((response, opening));
    });
    answered.await.ok()
}

/// The answer to a request whose task failed before it answered.
pub(super) fn failed() -> http::Response<GuardedBody> {
    rejection(
        StatusCode::INTERNAL_SERVER_ERROR,
        Value::Null,
        INTERNAL_ERROR,
        "the MCP server failed while opening the session: send `initialize` again".to_owned(),
    )
}

/// The answer to `message` when it is an `initialize` request whose parameters rmcp
/// could not read (it reads it as a request of a method it does not know): 400 with
/// `-32602` and the request's id, naming the first thing wrong.
///
/// A request of 2026-07-28 or later (its `MCP-Protocol-Version` header, or the version its
/// `_meta` names) is left to rmcp: that revision has no `initialize`, which is answered
/// 404 with `-32601` (method not found), whatever its parameters.
pub(super) fn malformed(
    headers: &http::HeaderMap,
    message: Option<&ClientJsonRpcMessage>,
) -> Option<http::Response<GuardedBody>> {
    let Some(ClientJsonRpcMessage::Request(request)) = message else {
        return None;
    };
    let ClientRequest::CustomRequest(custom) = &request.request else {
        return None;
    };
    if custom.method != "initialize" || of_a_revision_without_initialize(headers, custom) {
        return None;
    }
    let problem = initialize_problem(custom.params.as_ref()).unwrap_or_else(|| {
        "its `params` do not fit the method: send `protocolVersion` (a string), `capabilities` (an object) and `clientInfo` (an object with `name` and `version`), as the MCP specification says".to_owned()
    });
    Some(rejection(
        StatusCode::BAD_REQUEST,
        request.id.clone().into_json_value(),
        INVALID_PARAMS,
        format!("malformed `initialize` request: {problem}"),
    ))
}

/// The answer to `message` when it is an `initialize` request whose
/// `MCP-Protocol-Version` header names another revision than its `params.protocolVersion`:
/// 400 with `-32600` (invalid request) and the request's id, as rmcp refuses it, but with
/// both values cut and escaped as toolgate repeats an id — rmcp would repeat them whole,
/// in its answer and in a warning in the log. A header naming a revision the server does
/// not speak, or one of 2026-07-28 or later (without `initialize`), or one that is not
/// visible ASCII, is left to rmcp, which refuses it for that.
pub(super) fn mismatched_version(
    headers: &http::HeaderMap,
    message: Option<&ClientJsonRpcMessage>,
) -> Option<http::Response<GuardedBody>> {
    let Some(ClientJsonRpcMessage::Request(request)) = message else {
        return None;
    };
    let ClientRequest::InitializeRequest(initialize) = &request.request else {
        return None;
    };
    let header = headers.get(PROTOCOL_VERSION)?.to_str().ok()?;
    // A revision the server does not speak is refused as such (`-32022`), and one without
    // `initialize` as the method not found: both by rmcp, before it compares.
    let spoken = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|known| known.as_str() == header);
    if !spoken || header >= ProtocolVersion::STANDARD_HEADERS.as_str() {
        return None;
    }
    let body = initialize.params.protocol_version.as_str();
    if header == body {
        return None;
    }
    Some(rejection(
        StatusCode::BAD_REQUEST,
        request.id.clone().into_json_value(),
        INVALID_REQUEST,
        format!(
            "the MCP-Protocol-Version header (`{}`) does not match `params.protocolVersion` of `initialize` (`{}`): send the same revision in both, or no header",
            shown_id(header),
            shown_id(body)
        ),
    ))
}

/// Whether `request` speaks a revision that has no `initialize` (2026-07-28 on): by its
/// `MCP-Protocol-Version` header, or by the version its `_meta` names.
fn of_a_revision_without_initialize(
    headers: &http::HeaderMap,
    request: &rmcp::model::CustomRequest,
) -> bool {
    let first = ProtocolVersion::STANDARD_HEADERS.as_str();
    let by_header = headers
        .get(PROTOCOL_VERSION)
        .and_then(|version| version.to_str().ok())
        .is_some_and(|version| version >= first);
    let by_meta = request
        .params
        .as_ref()
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str)
        .is_some_and(|version| version >= first);
    by_header || by_meta
}

/// The first thing wrong with `params` as the parameters of `initialize`, in the words of
/// the MCP specification; `None` when it is nothing said here.
fn initialize_problem(params: Option<&Value>) -> Option<String> {
    let params = match params {
        Some(Value::Object(params)) => params,
        None | Some(Value::Null) => {
            return Some(
                "`params` are missing: give `protocolVersion`, `capabilities` and `clientInfo`"
                    .to_owned(),
            );
        }
        Some(other) => {
            return Some(format!(
                "`params` must be an object, not {}",
                kind_of(other)
            ));
        }
    };
    const VERSION: &str = "the revision of MCP the client speaks, a string such as \"2025-11-25\"";
    match params.get("protocolVersion") {
        None | Some(Value::Null) => {
            return Some(format!("`protocolVersion` is missing: give {VERSION}"));
        }
        Some(Value::String(_)) => {}
        Some(other) => {
            return Some(format!(
                "`protocolVersion` must be {VERSION}, not {}",
                kind_of(other)
            ));
        }
    }
    let capabilities = match params.get("capabilities") {
        None | Some(Value::Null) => {
            return Some(
                "`capabilities` is missing: give an object naming what the client supports (`{}` for nothing)"
                    .to_owned(),
            );
        }
        Some(Value::Object(capabilities)) => capabilities,
        Some(other) => {
            return Some(format!(
                "`capabilities` must be an object, not {}",
                kind_of(other)
            ));
        }
    };
    if let Some(problem) = capability_problem(capabilities) {
        return Some(problem);
    }
    let client = match params.get("clientInfo") {
        None | Some(Value::Null) => {
            return Some(
                "`clientInfo` is missing: give an object with the client's `name` and `version` (strings)"
                    .to_owned(),
            );
        }
        Some(Value::Object(client)) => client,
        Some(other) => {
            return Some(format!(
                "`clientInfo` must be an object with the client's `name` and `version` (strings), not {}",
                kind_of(other)
            ));
        }
    };
    ["name", "version"]
        .into_iter()
        .find_map(|field| match client.get(field) {
            Some(Value::String(_)) => None,
            None | Some(Value::Null) => Some(format!(
                "`clientInfo.{field}` is missing: give the client's {field}, a string"
            )),
            Some(other) => Some(format!(
                "`clientInfo.{field}` must be a string, not {}",
                kind_of(other)
            )),
        })
}

/// The first capability the client declares that is not an object (each is one, `{}`
/// when it has no options).
fn capability_problem(capabilities: &Map<String, Value>) -> Option<String> {
    capabilities.iter().find_map(|(name, value)| {
        (!value.is_object() && !value.is_null()).then(|| {
            format!(
                "`capabilities.{}` must be an object (`{{}}` when it has no options), not {}",
                toolgate_core::error::shown_text(name, 64),
                kind_of(value)
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::initialize_problem;

    fn problem(params: serde_json::Value) -> String {
        initialize_problem(Some(&params)).expect("a problem")
    }

    #[test]
    fn a_malformed_initialize_is_told_which_field_is_wrong_and_what_it_must_be() {
        let client = json!({"name": "x", "version": "1"});
        assert!(problem(json!({})).starts_with("`protocolVersion` is missing"));
        let number =
            problem(json!({"protocolVersion": 5, "capabilities": {}, "clientInfo": client}));
        assert!(
            number.starts_with(
                "`protocolVersion` must be the revision of MCP the client speaks, a string"
            ),
            "{number}"
        );
        assert!(number.ends_with("not a number"), "{number}");
        let sampling = problem(
            json!({"protocolVersion": "2025-11-25", "capabilities": {"sampling": 5}, "clientInfo": client}),
        );
        assert!(
            sampling.starts_with("`capabilities.sampling` must be an object"),
            "{sampling}"
        );
        let name = problem(
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"version": "1"}}),
        );
        assert!(name.starts_with("`clientInfo.name` is missing"), "{name}");
        assert!(
            initialize_problem(Some(
                &json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client})
            ))
            .is_none()
        );
    }
}
