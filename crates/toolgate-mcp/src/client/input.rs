//! An upstream's `input_required` requests put to a 2025-11-25 caller, which cannot take
//! them as a result: asked one by one on the caller's own connection.

use rmcp::model::{InputRequest, InputRequests, InputResponses, ServerRequest};
use serde_json::Value;
use tokio::time::Instant;
use toolgate_core::ToolError;

use crate::caller::CallerRequest;

/// Asks the caller of a 2025-11-25 connection, one by one, what an upstream's
/// `input_required` result asks (`requests`, the MCP `inputRequests` object): sampling,
/// elicitation and roots requests on the caller's connection, within `deadline`. The
/// answers are keyed as the requests were, for the upstream's next round.
pub(crate) async fn ask_caller(
    caller: &CallerRequest,
    requests: Value,
    deadline: Instant,
    server: &str,
) -> Result<InputResponses, ToolError> {
    let requests: InputRequests = serde_json::from_value(requests).map_err(|e| {
        ToolError::execution(format!(
            "MCP server `{server}` asked for input in a form toolgate cannot read: {e}"
        ))
    })?;
    let started = Instant::now();
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let (what, declared, request) = match request {
            InputRequest::CreateMessage(r) => (
                "sampling",
                caller.can_sample(),
                ServerRequest::CreateMessageRequest(r),
            ),
            InputRequest::Elicitation(r) => (
                "elicitation",
                caller.can_elicit(),
                ServerRequest::ElicitRequest(r),
            ),
            InputRequest::ListRoots(r) => (
                "roots",
                caller.can_list_roots(),
                ServerRequest::ListRootsRequest(r),
            ),
            _ => {
                return Err(ToolError::execution(format!(
                    "MCP server `{server}` asked for a kind of input toolgate does not know"
                )));
            }
        };
        if !declared {
            return Err(ToolError::execution(format!(
                "MCP server `{server}` asked for {what}, which this MCP client did not declare it can answer"
            )));
        }
        let answer =
            match tokio::time::timeout_at(deadline, caller.peer.send_request(request)).await {
                Err(_) => {
                    return Err(ToolError::Timeout {
                        after: started.elapsed(),
                    });
                }
                Ok(Err(rmcp::service::ServiceError::McpError(e))) => {
                    return Err(ToolError::execution(toolgate_core::error::error_text(
                        format_args!(
                            "the caller refused the {what} request of MCP server `{server}`: {}",
                            e.message
                        ),
                    )));
                }
                Ok(Err(e)) => {
                    return Err(ToolError::transient(format!(
                        "the caller did not answer the {what} request of MCP server `{server}`: {e}"
                    )));
                }
                Ok(Ok(answer)) => answer,
            };
        let answer = serde_json::to_value(answer)
            .map_err(|e| ToolError::internal(format!("an answer could not be written: {e}")))?;
        responses.insert(key, answer);
    }
    Ok(responses)
}
