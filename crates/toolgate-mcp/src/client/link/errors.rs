//! The upstream's refusals and failures as toolgate errors.

use std::borrow::Cow;
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, InputRequiredResult};
use rmcp::service::ServiceError;
use serde_json::Value;
use tokio::time::Instant;
use toolgate_core::ToolError;
use toolgate_core::error::{InputViolations, error_text};

use super::{Channel, Link};
use crate::caller::{CallerRequest, missing_capability};
use crate::client::failure::{Refusal, is_connection_failure, refusal, request_failure};
use crate::client::message_head::MAX_MESSAGE_BYTES;
use crate::client::places::{Busy, NoPlace, ShareUsed};
use crate::client::stdio::OVERSIZED_ANSWER;
use crate::client::unreadable;

/// The error code of a resource the upstream does not have.
pub(crate) const RESOURCE_NOT_FOUND: &str = "resource_not_found";

impl Link {
    /// The upstream's refusal of a request that needs a capability the caller did not
    /// declare (2026-07-28: `-32021`), as the caller's error naming what to declare
    /// ([`MISSING_CAPABILITY`], 400; over MCP, `-32021` again).
    pub(super) fn missing_capability(
        &self,
        e: &ErrorData,
        caller: Option<&CallerRequest>,
    ) -> ToolError {
        let required = e
            .data
            .as_ref()
            .and_then(|data| data.get("requiredCapabilities"))
            .cloned();
        let who = format!("MCP server `{}`", self.config.name);
        let (mut error, mut refusal) = missing_capability(&who, required);
        self.scrubber.scrub_error(&mut error);
        refusal.message = self.scrubbed(refusal.message.into_owned()).into();
        if let Some(caller) = caller {
            caller.refusal.set(refusal);
        }
        error
    }

    /// The error of a request whose answer was too long to read, answered in its place
    /// ([`OVERSIZED_ANSWER`]): the upstream's failure, and this call's alone.
    pub(super) fn oversized_answer(&self) -> ToolError {
        ToolError::execution(format!(
            "MCP server `{}` answered with more than {} MiB, more than toolgate reads: ask it for less; its connection stays open for other calls",
            self.config.name,
            MAX_MESSAGE_BYTES / (1024 * 1024)
        ))
    }

    /// The error of a request whose answer could not be read (`why`, in words), answered
    /// in its place ([`UNREADABLE_ANSWER`](crate::client::unreadable::UNREADABLE_ANSWER)):
    /// the upstream's failure, and this `request`'s alone (`this call`, `the request`).
    pub(super) fn unreadable_answer(&self, request: &str, why: &str) -> ToolError {
        ToolError::execution(self.scrubbed(format!(
            "MCP server `{}` answered {request} with a message that cannot be read: {why}; its connection stays open for other calls",
            self.config.name
        )))
    }

    /// Why request `e` failed ([`request_failure`]) for a log line: scrubbed whole, then
    /// cut to the bound of an error's message ([`error_text`]) — the words may carry what
    /// the upstream answered, of any length.
    pub(super) fn failure_words(&self, e: &ServiceError) -> String {
        error_text(format_args!("{}", self.scrubbed_sent(request_failure(e))))
    }

    /// The upstream's JSON-RPC error as a toolgate error: a resource it does not have is
    /// `resource_not_found` (404), a bad parameter `invalid_input` (400), anything else
    /// the upstream's failure.
    pub(super) fn refused(&self, e: ErrorData) -> ToolError {
        if is_oversized_answer(&e) {
            return self.oversized_answer();
        }
        if let Some(why) = unreadable::why_answered(&e) {
            return self.unreadable_answer("the request", why);
        }
        if e.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY {
            return self.missing_capability(&e, None);
        }
        // Scrubbed whole, then cut: a cut never leaves half a credential behind.
        let sent = self.scrubbed_sent(e.message.into_owned());
        let message = error_text(format_args!(
            "MCP server `{}` refused the request: {sent}",
            self.config.name
        ));
        match e.code {
            ErrorCode::RESOURCE_NOT_FOUND => ToolError::abort(message, RESOURCE_NOT_FOUND, 404),
            ErrorCode::INVALID_PARAMS => ToolError::InvalidInput(InputViolations::one("", message)),
            _ => ToolError::execution(message),
        }
    }

    pub(super) fn unexpected(&self, method: &str) -> ToolError {
        ToolError::execution(format!(
            "MCP server `{}` answered `{method}` with something else than its result",
            self.config.name
        ))
    }

    pub(super) fn timed_out(&self, started: Instant) -> ToolError {
        ToolError::Timeout {
            after: started.elapsed(),
        }
    }

    /// The error of a request that failed on connection `generation` of `channel` with
    /// no JSON-RPC answer. An upstream that answered the request with a failure status,
    /// or with a body toolgate cannot read, failed that request alone: the connection
    /// stays, and the other callers on it go on ([`Self::refusal_error`]). Otherwise the
    /// connection failed, and is dropped for the next call to open a new one
    /// ([`Self::broken`]).
    pub(super) async fn failed(
        &self,
        channel: &Channel,
        generation: u64,
        e: ServiceError,
    ) -> ToolError {
        if e.auth_challenge().is_none()
            && let Some(refused) = refusal(&e)
        {
            let reason = self.failure_words(&e);
            tracing::warn!(server = %self.config.name, %reason, "the MCP server failed a request");
            return self.refusal_error(refused);
        }
        // rmcp fails a request whose own response stream ended before its answer (an
        // upstream that wrote it wrong, or cut it) as if the connection had closed, and so
        // does a call from the calling task whose stream broke off (`client/direct.rs`):
        // the connection is dropped only if it did. One that closes later is found closed
        // by the next call ([`Self::connected`]).
        if matches!(e, ServiceError::TransportClosed) && self.still_open(channel, generation).await
        {
            tracing::warn!(server = %self.config.name, "the MCP server ended a request's stream before its answer");
            return busy(
                "upstream_unavailable",
                self.config.backoff.delay(1),
                format!(
                    "MCP server `{}` ended the request's stream before its answer",
                    self.config.name
                ),
            );
        }
        self.forget(channel, generation).await;
        self.broken(channel, generation, e)
    }

    /// The caller's error for a request the upstream answered and failed: what it
    /// answered, in words, and none of its body (which may echo what it was sent).
    fn refusal_error(&self, refused: Refusal) -> ToolError {
        let name = &self.config.name;
        let wait = |asked: Option<Duration>| asked.unwrap_or_else(|| self.config.backoff.delay(1));
        match refused {
            Refusal::TooLarge => ToolError::execution(format!(
                "MCP server `{name}` answered with more than toolgate reads"
            )),
            Refusal::Unreadable => ToolError::execution(format!(
                "MCP server `{name}` answered with something other than a JSON-RPC answer to the request"
            )),
            Refusal::Status {
                status: 429,
                retry_after,
            } => busy(
                "upstream_rate_limited",
                wait(retry_after),
                format!(
                    "MCP server `{name}` is limiting toolgate's requests (HTTP 429); try again later"
                ),
            ),
            Refusal::Status {
                status: status @ 502..=504,
                retry_after,
            } => busy(
                "upstream_unavailable",
                wait(retry_after),
                format!("MCP server `{name}` is unavailable (HTTP {status}); try again later"),
            ),
            Refusal::Status {
                status: status @ (401 | 403),
                ..
            } => ToolError::execution(format!(
                "MCP server `{name}` refused the credential toolgate sent it ({}); the operator must check the credential it is given",
                http_status(status)
            )),
            Refusal::Status {
                status: status @ 500..,
                ..
            } => ToolError::transient(format!(
                "MCP server `{name}` failed the request ({})",
                http_status(status)
            )),
            Refusal::Status { status, .. } => ToolError::execution(format!(
                "MCP server `{name}` refused the request ({})",
                http_status(status)
            )),
        }
    }

    /// The error of a request that failed on connection `generation` of `channel`, not
    /// by the upstream's answer. The connection failing is 503 `upstream_unavailable`
    /// with the wait before the next attempt to connect; an upstream that wrote a message
    /// too long to read ended its connection, and is the upstream's failure (502). The
    /// transport's own words go to the log, not to the caller.
    pub(super) fn broken(&self, channel: &Channel, generation: u64, e: ServiceError) -> ToolError {
        let reason = self.failure_words(&e);
        tracing::warn!(server = %self.config.name, %reason, "a request to the MCP server failed");
        if channel.oversized.ended(generation) {
            return ToolError::execution(format!(
                "MCP server `{}` sent a message of more than {} MiB, more than toolgate reads; its connection was closed and will be opened again for the next call",
                self.config.name,
                MAX_MESSAGE_BYTES / (1024 * 1024)
            ));
        }
        if e.auth_challenge().is_some() {
            // Reached, and refused the credential: waiting does not help.
            return ToolError::execution(format!(
                "MCP server `{}` refused the credential toolgate sent it (HTTP 401 or 403); the operator must check the credential it is given",
                self.config.name
            ));
        }
        if is_connection_failure(&e) {
            return busy(
                "upstream_unavailable",
                self.config.backoff.delay(1),
                format!(
                    "the connection to MCP server `{}` failed; it is being re-established",
                    self.config.name
                ),
            );
        }
        ToolError::transient(format!(
            "MCP server `{}` could not answer: {reason}",
            self.config.name
        ))
    }

    /// The error of a call that found every place among the upstream's requests in
    /// flight taken until its deadline: 503 `upstream_busy`, as an upstream limiting
    /// toolgate's requests is, with the words of [`Busy`] (the bound, and what to do).
    pub(super) fn busy_upstream(&self, e: Busy) -> ToolError {
        busy("upstream_busy", self.config.backoff.delay(1), e.to_string())
    }

    /// The error of a request that got no place by its deadline: [`busy_upstream`] for
    /// the upstream's bound; for its caller's share, 503 `upstream_share_used` with the
    /// words of [`ShareUsed`] (the caller's own requests hold it up, the share, what to do).
    ///
    /// [`busy_upstream`]: Self::busy_upstream
    pub(super) fn no_place(&self, e: NoPlace) -> ToolError {
        match e {
            NoPlace::Busy(e) => self.busy_upstream(e),
            NoPlace::ShareUsed(e) => self.share_used(e),
        }
    }

    fn share_used(&self, e: ShareUsed) -> ToolError {
        busy(
            "upstream_share_used",
            self.config.backoff.delay(1),
            e.to_string(),
        )
    }

    pub(super) fn unavailable(&self, wait: std::time::Duration) -> ToolError {
        busy(
            "upstream_unavailable",
            wait,
            format!("MCP server `{}` is unavailable", self.config.name),
        )
    }
}

/// 503 with `code`: the upstream cannot take the request now; the caller may try again
/// after `delay`.
fn busy(code: &'static str, delay: Duration, reason: String) -> ToolError {
    ToolError::RetryAfter {
        delay,
        reason,
        code: Cow::Borrowed(code),
        status: 503,
    }
}

/// `status` with its name, as "HTTP 413 Payload Too Large".
fn http_status(status: u16) -> String {
    match http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(name) => format!("HTTP {status} {name}"),
        None => format!("HTTP {status}"),
    }
}

/// An upstream's `input_required` answer as the caller's error: what it asks, and the
/// upstream's state, which the caller is to send back (sealed by the server first).
pub(super) fn input_required(asked: InputRequiredResult) -> ToolError {
    let requests = asked.input_requests.unwrap_or_default();
    ToolError::InputRequired {
        requests: serde_json::to_value(requests)
            .unwrap_or_else(|_| Value::Object(Default::default())),
        state: asked.request_state,
    }
}

/// Whether `e` is the error toolgate answered in place of an answer too long to read.
pub(super) fn is_oversized_answer(e: &ErrorData) -> bool {
    (e.data.as_ref()).is_some_and(|data| data.get(OVERSIZED_ANSWER).is_some())
}
