//! rmcp's errors in words a caller and an operator can read.
//!
//! rmcp's transport errors display the transport's Rust type ("Transport
//! [OrderedProgress<WorkerTransport<…>>] error: …"), and a failed `initialize` may display a
//! whole message with `{:?}`. Neither belongs in an answer or a log line: only what failed
//! is kept.

use std::time::{Duration, SystemTime};

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::{HttpStatusError, StreamableHttpError};

use super::post::PostError;

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

/// An upstream's answer to one request that failed it: an HTTP failure status, or a body
/// toolgate cannot read as the request's answer. The upstream answered, so its
/// connection is sound and stays for the other callers on it: the failure is that
/// request's alone.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A failure status, with the upstream's `Retry-After` when it gave one.
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// A body longer than toolgate reads.
    TooLarge,
    /// Anything else that is not the request's answer: a body of another type, one that
    /// is not JSON-RPC, or a stream that ended without the answer.
    Unreadable,
}

/// The longest `Retry-After` an upstream's answer is taken at: a longer one is cut to
/// this, so that a wrong or hostile upstream cannot keep callers away for hours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What `e`, a request's failure, says of the upstream's answer: `Some` when the upstream
/// answered the request itself (over streamable HTTP), `None` when no answer came (the
/// connection failed, or closed).
pub(crate) fn refusal(e: &ServiceError) -> Option<Refusal> {
    let ServiceError::TransportSend(e) = e else {
        return None;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.error.as_ref());
    while let Some(current) = source {
        // The two clients a call goes out on: rmcp's (reqwest) and toolgate's own.
        if let Some(e) = current.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return http_refusal(e);
        }
        if let Some(e) = current.downcast_ref::<StreamableHttpError<PostError>>() {
            return http_refusal(e);
        }
        if let Some(e) = current.downcast_ref::<HttpStatusError>() {
            return Some(status_refusal(e));
        }
        source = current.source();
    }
    None
}

fn http_refusal<E: std::error::Error + Send + Sync + 'static>(
    e: &StreamableHttpError<E>,
) -> Option<Refusal> {
    match e {
        StreamableHttpError::HttpStatus(e) => Some(status_refusal(e)),
        // rmcp (and toolgate's client, which reads answers as rmcp does) reports any
        // other failure status as "HTTP 413 Payload Too Large: …".
        StreamableHttpError::UnexpectedServerResponse(text) => Some(match status_in(text) {
            Some(status) => Refusal::Status {
                status,
                retry_after: None,
            },
            None => Refusal::Unreadable,
        }),
        StreamableHttpError::ResponseBodyTooLarge { .. } => Some(Refusal::TooLarge),
        StreamableHttpError::UnexpectedContentType(_) | StreamableHttpError::Deserialize(_) => {
            Some(Refusal::Unreadable)
        }
        _ => None,
    }
}

fn status_refusal(e: &HttpStatusError) -> Refusal {
    Refusal::Status {
        status: e.status,
        retry_after: e.retry_after.as_deref().and_then(retry_after),
    }
}

/// The status of a text that starts "HTTP 400 …", when it is a failure status.
fn status_in(text: &str) -> Option<u16> {
    let digits = text.strip_prefix("HTTP ")?.get(..3)?;
    let status: u16 = digits.parse().ok()?;
    (400..=599).contains(&status).then_some(status)
}

/// A `Retry-After`, in whole seconds or an HTTP date (a date past is no wait), cut to
/// [`MAX_RETRY_AFTER`]; `None` for anything else (the caller gets toolgate's own wait).
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            at.duration_since(SystemTime::now()).unwrap_or_default()
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_status_is_read_from_the_words_rmcp_reports_it_in() {
        assert_eq!(status_in("HTTP 413 Payload Too Large: too long"), Some(413));
        assert_eq!(status_in("HTTP 599"), Some(599));
        // Not a failure status, or no status at all: not a refusal by status.
        assert_eq!(status_in("HTTP 307 Temporary Redirect: elsewhere"), None);
        assert_eq!(status_in("HTTP 4x0"), None);
        assert_eq!(status_in("the server closed the call's stream"), None);
    }

    #[test]
    fn a_retry_after_is_read_in_seconds_or_as_a_date_and_cut_to_five_minutes() {
        assert_eq!(retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(retry_after("86400"), Some(MAX_RETRY_AFTER));
        let soon = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let wait = retry_after(&soon).expect("a date");
        assert!(
            (Duration::from_secs(100)..=Duration::from_secs(120)).contains(&wait),
            "{soon}: {wait:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2099 07:28:00 GMT"),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(retry_after("soon"), None);
        assert_eq!(retry_after("-1"), None);
    }
}
