//! What the start of a message an upstream sends says of it, read without parsing it
//! whole: for a line too long to read ([`BoundedLines`](super::stdio::BoundedLines)), or
//! one that does not read as a message ([`unreadable`](super::unreadable)), whether it
//! answers a request, and which.

use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

use crate::json_scan::members;

/// The longest line read from a stdio upstream: rmcp's limit, which is also what its HTTP
/// client reads of one message, so an answer acceptable over HTTP is acceptable here.
pub(crate) const MAX_MESSAGE_BYTES: usize = DEFAULT_MAX_LINE_LENGTH;

/// What the start of a message says of it, read from its top-level keys as far as their
/// values end within it.
pub(crate) struct Head {
    /// The `id`, when it came whole.
    pub(crate) id: Option<serde_json::Value>,
    /// Whether a `result` or an `error` key came.
    pub(crate) response: bool,
    /// The `method`, when that key came (a request or notification): its name, or
    /// `(cut)` when its value did not end within the start.
    pub(crate) method: Option<String>,
}

/// What `head`, the start of a message, says of it: `None` when it is no JSON object, or
/// names `id` or `method` twice.
pub(crate) fn scan_head(head: &[u8]) -> Option<Head> {
    let mut scanned = Head {
        id: None,
        response: false,
        method: None,
    };
    for (key, value) in members(head)? {
        match (key, value) {
            (b"method", _) if scanned.method.is_some() => return None,
            (b"method", None) => scanned.method = Some("(cut)".to_owned()),
            (b"method", Some(value)) => {
                let name: serde_json::Value = serde_json::from_slice(&head[value]).ok()?;
                scanned.method = Some(name.as_str().unwrap_or("(not a string)").to_owned());
            }
            (b"result" | b"error", _) => scanned.response = true,
            (b"id", Some(_)) if scanned.id.is_some() => return None,
            (b"id", Some(value)) => scanned.id = Some(serde_json::from_slice(&head[value]).ok()?),
            _ => {}
        }
    }
    Some(scanned)
}
