//! rmcp's errors in words a caller and an operator can read.
//!
//! rmcp's transport errors display the transport's Rust type ("Transport
//! [OrderedProgress<WorkerTransport<…>>] error: …"), and a failed `initialize` may display a
//! whole message with `{:?}`. Neither belongs in an answer or a log line: only what failed
//! is kept.

use rmcp::service::{ClientInitializeError, ServiceError};

/// Why a request to an upstream failed.
pub(crate) fn request_failure(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(e) => e.error.to_string(),
        ServiceError::TransportClosed => "the connection closed".to_owned(),
        ServiceError::UnexpectedResponse => {
            "the server answered with a message of the wrong kind".to_owned()
        }
        other => other.to_string(),
    }
}

/// Whether `e` is the connection failing (rather than the server answering something).
pub(crate) fn is_connection_failure(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportSend(_) | ServiceError::TransportClosed
    )
}

/// Why a connection to an upstream could not be set up.
pub(crate) fn connect_failure(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, context } => {
            format!("{} (while {context})", error.error)
        }
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_) => {
            "the server did not answer `initialize` with an initialize result".to_owned()
        }
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => format!(
            "`server/discover` failed ({}) and `initialize` failed ({})",
            connect_failure(discover),
            connect_failure(fallback)
        ),
        other => other.to_string(),
    }
}
