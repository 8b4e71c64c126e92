//! The errors a caller of the pipeline can get, and the errors of building one.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

pub use crate::provider::ProviderError;

/// The longest wait a retry-after tells its caller: one day. A longer
/// [`delay`](ToolError::RetryAfter::delay) — a hook's arithmetic that overflowed to
/// [`Duration::MAX`], a window that ends far away — is told as this, in
/// [`retry_after_delay`](ToolError::retry_after_delay), in the message, and so in an HTTP
/// `Retry-After`, a JSON `retry_after_ms` and an MCP `retryAfterMs`: a caller asked to wait
/// longer than a day is better told to come back tomorrow than to wait for ever, and a
/// count of milliseconds past 2^53 is not exact in JavaScript. (A wait an upstream server
/// asks for is cut shorter still, where the MCP client reads it.)
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::ToolError;
/// use toolgate_core::error::MAX_RETRY_AFTER;
///
/// let err = ToolError::retry_after(Duration::MAX, "the window never ends");
/// assert_eq!(err.retry_after_delay(), Some(MAX_RETRY_AFTER));
/// assert_eq!(err.to_string(), "the window never ends, retry after 86400000 ms");
/// ```
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Why an invocation did not produce an output.
///
/// Every variant has a stable machine [`code`](ToolError::code), an HTTP
/// [`status`](ToolError::status), and a `Display` message written for the reader who has to
/// act on it — often a language model ("rate limited, retry after 1200 ms",
/// "invalid arguments: argument `limit`: greater than 50").
///
/// The same error maps to an MCP tool result with `isError`, to an HTTP response (with
/// `Retry-After` where [`retry_after`](ToolError::retry_after) is set), and to an agent
/// `ToolResult` with status `error`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::ToolError;
///
/// let err = ToolError::retry_after(Duration::from_millis(1200), "rate limited");
/// assert_eq!(err.code(), "rate_limited");
/// assert_eq!(err.status(), 429);
/// assert_eq!(err.to_string(), "rate limited, retry after 1200 ms");
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool is registered under this name.
    #[error(
        "unknown tool `{}`: list the available tools and call one of them by its exact name",
        shown_id(name)
    )]
    UnknownTool {
        /// The name that was asked for.
        name: String,
    },
    /// The input does not fit the tool's input schema.
    #[error("invalid arguments: {0}")]
    InvalidInput(InputViolations),
    /// The input is larger than the pipeline accepts.
    #[error(
        "the input is too large: about {size} bytes of JSON (counted as read, not as sent), over the limit of {limit} bytes: send less data"
    )]
    InputTooLarge {
        /// The size of the input in bytes (approximate for already-parsed JSON).
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The input nests deeper than the pipeline accepts.
    #[error("input nests deeper than {limit} levels: flatten the arguments")]
    InputTooDeep {
        /// The configured limit.
        limit: usize,
    },
    /// A hook (or the tool) refused the call.
    #[error("{reason}")]
    Aborted {
        /// Why, for the reader.
        reason: String,
        /// A stable machine code such as `forbidden`.
        code: Cow<'static, str>,
        /// The HTTP status to answer with.
        status: u16,
    },
    /// The call may succeed later: wait `delay` before trying again.
    #[error("{reason}, retry after {} ms", delay.min(&MAX_RETRY_AFTER).as_millis())]
    RetryAfter {
        /// How long to wait; told to the caller as at most [`MAX_RETRY_AFTER`].
        delay: Duration,
        /// Why, for the reader.
        reason: String,
        /// A stable machine code such as `rate_limited` or `overloaded`.
        code: Cow<'static, str>,
        /// The HTTP status to answer with (429 or 503).
        status: u16,
    },
    /// The call waits for a person; resume it with its suspension id.
    #[error("waiting for approval ({reason}); resume with suspension id {suspension_id}")]
    Suspended {
        /// The id to resume the call with.
        suspension_id: String,
        /// What the call waits for.
        reason: String,
    },
    /// The tool needs input that only the caller can give before it can finish — an
    /// answer from the user (elicitation), from the caller's model (sampling) or the
    /// caller's roots: an MCP tool's multi-round-trip `input_required` result (MCP
    /// 2026-07-28). The call did not fail and nothing of it is stored: the caller answers
    /// `requests` and calls again with the answers and `state`, unchanged.
    #[error(
        "the tool needs input from the caller before it can finish: answer its requests and call it again with the answers (over MCP, which carries them)"
    )]
    InputRequired {
        /// What the tool asks, by key: `{"name": {"method": "elicitation/create",
        /// "params": {…}}, …}` (the MCP `inputRequests` object).
        requests: serde_json::Value,
        /// What the tool needs back with the answers, unchanged (MCP `requestState`).
        state: Option<String>,
    },
    /// The call ran past its deadline and was cancelled.
    #[error("timed out after {} ms", after.as_millis())]
    Timeout {
        /// How long the call had.
        after: Duration,
    },
    /// The caller cancelled the call.
    #[error("cancelled by the caller")]
    Cancelled,
    /// The tool itself failed.
    #[error("tool failed: {message}")]
    Execution {
        /// What went wrong, for the reader.
        message: String,
        /// Whether trying again may succeed (a transient failure).
        retryable: bool,
    },
    /// A provider the call needs is not bound in any scope.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// No suspended call has this id (it never existed, or was already resumed).
    #[error(
        "no suspended call with id `{}`: it was never suspended or has already been resumed",
        shown_id(id)
    )]
    UnknownSuspension {
        /// The id that was asked for.
        id: String,
    },
    /// The suspended call waited longer than its store allows: it will not run.
    #[error(
        "the suspended call `{}` expired before anyone decided on it and will not run: make the call again if it is still needed",
        shown_id(id)
    )]
    SuspensionExpired {
        /// The id that was asked for.
        id: String,
    },
    /// The suspension store failed as a decision was taking the waiting call: nothing was
    /// decided. The call was not handed out, or the store puts it back (a take whose answer
    /// was lost is undone), and it waits for a decision as before: a host records,
    /// tells and keeps nothing of this decision, and answers that it may be made again.
    #[error(
        "the decision on the waiting call `{}` was not made, because the suspension store failed: {message}. Nothing was decided and the call goes on waiting: decide again once the store answers",
        shown_id(id)
    )]
    NotDecided {
        /// The waiting call's id.
        id: String,
        /// What the store said.
        message: String,
    },
    /// Something inside toolgate or a hook went wrong (a panic, a broken invariant).
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong; never carries a panic payload.
        message: String,
    },
}

/// The most characters of an error's message that reach a caller — over `/v1`, over
/// MCP, in a batch's result — or an audit record: 60,000, the default size of a batch's
/// result. A longer message is cut on a character boundary and ends with a marker saying
/// how long it was and how much of it is shown ([`ToolError::caller_message`],
/// [`ToolError::bounded_message`]). An upstream server, or any tool, can fail with
/// megabytes of text; a model needs the start of it, and a caller should not have to
/// read the rest.
///
/// ```
/// use toolgate_core::ToolError;
/// use toolgate_core::error::MAX_ERROR_CHARS;
///
/// let error = ToolError::execution("x".repeat(10_000_000));
/// let message = error.caller_message();
/// assert!(message.chars().count() <= MAX_ERROR_CHARS);
/// assert!(message.ends_with("the message was 10,000,013 characters; the first 59,923 are shown]"));
/// ```
pub const MAX_ERROR_CHARS: usize = 60_000;

/// Room an error's message built by [`error_text`] leaves for the words its variant puts
/// around it (`tool failed: `, `internal error: `), so that the whole message stays
/// within [`MAX_ERROR_CHARS`] and is never cut a second time.
const ROOM_FOR_WORDS: usize = 100;

/// The text of an error's message written from `args` — typically with text an upstream
/// server sent — kept within the bound of [`MAX_ERROR_CHARS`] as it is written: only the
/// characters that will be shown are ever copied, so ten megabytes of an upstream's
/// error cost their count, not a second copy. A text cut ends with the marker saying how
/// long it was.
///
/// ```
/// use toolgate_core::ToolError;
/// use toolgate_core::error::{MAX_ERROR_CHARS, error_text};
///
/// let sent = "x".repeat(10_000_000);
/// let text = error_text(format_args!("MCP server `raw` refused the call: {sent}"));
/// assert!(text.starts_with("MCP server `raw` refused the call: xxx"));
/// assert!(text.ends_with("the message was 10,000,035 characters; the first 59,823 are shown]"));
/// // Its error's message is within the bound, and not cut again.
/// assert_eq!(ToolError::execution(text.clone()).caller_message(), format!("tool failed: {text}"));
/// ```
pub fn error_text(args: fmt::Arguments<'_>) -> String {
    bounded(args, MAX_ERROR_CHARS - ROOM_FOR_WORDS)
}

/// What `args` writes, cut to `max_chars` characters, marker included.
fn bounded(args: fmt::Arguments<'_>, max_chars: usize) -> String {
    let mut text = BoundedText {
        kept: String::new(),
        kept_chars: 0,
        total_chars: 0,
        max_chars,
    };
    // Writing to a `String` cannot fail, nor can a `Display` that is not broken.
    let _ = fmt::write(&mut text, args);
    text.finish()
}

/// A text being written that keeps its first characters, up to its bound, and counts
/// all of them.
struct BoundedText {
    kept: String,
    kept_chars: usize,
    total_chars: usize,
    max_chars: usize,
}

impl fmt::Write for BoundedText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.max_chars - self.kept_chars;
        match s.char_indices().nth(room) {
            None => {
                let chars = s.chars().count();
                self.kept.push_str(s);
                self.kept_chars += chars;
                self.total_chars += chars;
            }
            Some((end, _)) => {
                self.kept.push_str(&s[..end]);
                self.kept_chars = self.max_chars;
                self.total_chars += room + s[end..].chars().count();
            }
        }
        Ok(())
    }
}

impl BoundedText {
    /// The text, or its start and the marker when it is over the bound.
    fn finish(mut self) -> String {
        if self.total_chars <= self.max_chars {
            return self.kept;
        }
        // The marker's length depends on the count kept, which only shrinks it: one pass
        // with the widest count is enough.
        let widest = cut_marker(self.total_chars, self.total_chars)
            .chars()
            .count();
        let shown = self.max_chars.saturating_sub(widest);
        let end = self
            .kept
            .char_indices()
            .nth(shown)
            .map_or(self.kept.len(), |(i, _)| i);
        self.kept.truncate(end);
        if widest <= self.max_chars {
            self.kept.push_str(&cut_marker(self.total_chars, shown));
        }
        self.kept
    }
}

/// The marker ending a message cut to its bound.
fn cut_marker(total_chars: usize, shown_chars: usize) -> String {
    format!(
        "\n[cut: the message was {} characters; the first {} are shown]",
        grouped(total_chars as u64),
        grouped(shown_chars as u64)
    )
}

/// The longest id a message repeats whole.
pub const MAX_SHOWN_ID: usize = 64;

/// An id a caller sent, as a message repeats it: [`shown_text`] of its first
/// [`MAX_SHOWN_ID`] characters — so that a megabyte of id is not sent back, and the
/// message carries nothing a terminal or a log would act on.
///
/// ```
/// use toolgate_core::error::shown_id;
///
/// assert_eq!(shown_id("susp-1"), "susp-1");
/// assert_eq!(shown_id(&"x".repeat(1000)), format!("{}…", "x".repeat(64)));
/// assert_eq!(shown_id("t-1\n\u{1b}[2J"), "t-1\\n\\u{1b}[2J");
/// ```
pub fn shown_id(id: &str) -> std::borrow::Cow<'_, str> {
    shown_text(id, MAX_SHOWN_ID)
}

/// Text a sender chose (an id, a key), as a message repeats it: its first `max_chars`
/// characters, then `…` when it is longer; control characters, and those that break lines,
/// turn text around or hide in it ([`hides_text`]), escaped as `\n`, `\u{202e}` — so that
/// the text can neither forge a log line nor disguise what follows it. Borrowed when there
/// is nothing to change.
///
/// ```
/// use toolgate_core::error::shown_text;
///
/// assert_eq!(shown_text("path", 8), "path");
/// assert_eq!(shown_text("abcdefgh", 4), "abcd…");
/// assert_eq!(shown_text("a\u{202e}b\r", 8), "a\\u{202e}b\\r");
/// ```
pub fn shown_text(text: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    let (kept, cut) = match text.char_indices().nth(max_chars) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    };
    if !cut && !kept.contains(hides_text) {
        return text.into();
    }
    let mut shown = String::with_capacity(kept.len() + 3);
    for c in kept.chars() {
        if hides_text(c) {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    if cut {
        shown.push('…');
    }
    shown.into()
}

/// Text from outside toolgate (an upstream's error message, a policy's `@reason`), as an
/// error or a log line repeats it: every character that could forge a line or disguise
/// the text around it ([`hides_text`]: control characters, line breaks included,
/// bidirectional overrides and isolates, invisible marks) escaped as `\n`, `\u{202e}`;
/// nothing cut. Borrowed when there is nothing to change.
///
/// ```
/// use toolgate_core::error::escaped_text;
///
/// assert_eq!(escaped_text("no such table"), "no such table");
/// assert_eq!(
///     escaped_text("denied\u{202e}txt.exe\r\nINFO ok\u{1b}[2J\u{85}"),
///     "denied\\u{202e}txt.exe\\r\\nINFO ok\\u{1b}[2J\\u{85}"
/// );
/// ```
pub fn escaped_text(text: &str) -> std::borrow::Cow<'_, str> {
    shown_text(text, usize::MAX)
}

/// A count as people read it in a message, its thousands separated by commas.
///
/// ```
/// use toolgate_core::error::grouped;
///
/// assert_eq!(grouped(999), "999");
/// assert_eq!(grouped(9_990), "9,990");
/// assert_eq!(grouped(1_234_567), "1,234,567");
/// ```
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Whether `c`, shown as it is, could forge a line or disguise the text around it: a
/// control character (NUL, a line break, escape), a line or paragraph separator, a
/// bidirectional mark, embedding, override or isolate, or a character drawn as nothing —
/// a zero-width or other invisible formatting character, the byte-order mark, the soft
/// hyphen, a filler, a variation selector, an interlinear annotation mark, or a tag
/// character (U+E0000–U+E007F, which spell ASCII unseen: an instruction to a model hidden
/// in plain sight). Unicode's default-ignorable characters and its format characters, in
/// short. The one list of what must be escaped, in what a message repeats ([`shown_text`])
/// and in what a log line shows (the pipeline's log spans) — and of what an id, or an
/// approver's reason, may not hold where it is written in logs and records.
///
/// ```
/// use toolgate_core::error::hides_text;
///
/// assert!(hides_text('\n') && hides_text('\u{202e}') && hides_text('\u{200b}'));
/// assert!(hides_text('\u{ad}') && hides_text('\u{e0069}') && hides_text('\u{3164}'));
/// assert!(!hides_text('a') && !hides_text('é') && !hides_text(' ') && !hides_text('한'));
/// assert!("ann".chars().all(|c| !hides_text(c)));
/// ```
pub fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{34f}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{8e2}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `error` and each of its causes, `: `-separated: what a log line or a message says of
/// an error from a library whose top-level text omits why (an HTTP client's "error sending
/// request", whose cause is the refused connection).
///
/// ```
/// use toolgate_core::error::with_causes;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("the request could not be sent")]
/// struct Send(#[source] std::io::Error);
///
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// assert_eq!(with_causes(&Send(refused)), "the request could not be sent: connection refused");
/// ```
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl ToolError {
    /// An abort: the call is refused with this reason, machine code and HTTP status.
    pub fn abort(
        reason: impl Into<String>,
        code: impl Into<Cow<'static, str>>,
        status: u16,
    ) -> Self {
        ToolError::Aborted {
            reason: reason.into(),
            code: code.into(),
            status,
        }
    }

    /// A retry-after with code `rate_limited` and status 429.
    pub fn retry_after(delay: Duration, reason: impl Into<String>) -> Self {
        ToolError::RetryAfter {
            delay,
            reason: reason.into(),
            code: Cow::Borrowed("rate_limited"),
            status: 429,
        }
    }

    /// A permanent failure of the tool (not retried).
    pub fn execution(message: impl Into<String>) -> Self {
        ToolError::Execution {
            message: message.into(),
            retryable: false,
        }
    }

    /// A transient failure of the tool: a retry policy may try again.
    pub fn transient(message: impl Into<String>) -> Self {
        ToolError::Execution {
            message: message.into(),
            retryable: true,
        }
    }

    /// An internal error.
    pub fn internal(message: impl Into<String>) -> Self {
        ToolError::Internal {
            message: message.into(),
        }
    }

    /// The message for the caller — over HTTP, over MCP, in a model's tool result: the
    /// error's own, except for a [provider error](ToolError::Provider). That one is a
    /// wiring mistake of the host, and its message names the host's Rust types, so the
    /// caller is told only that the server cannot run the tool as configured; the pipeline
    /// logs the whole message at error level for the operator.
    ///
    /// ```
    /// use toolgate_core::ToolError;
    /// use toolgate_core::provider::ProviderError;
    ///
    /// let wiring = ToolError::Provider(ProviderError::Missing { key: "my_app::DbPool" });
    /// assert!(wiring.to_string().contains("my_app::DbPool"));
    /// assert!(!wiring.caller_message().contains("my_app"));
    /// ```
    ///
    /// It is at most [`MAX_ERROR_CHARS`] characters long, cut as
    /// [`bounded_message`](Self::bounded_message) cuts it.
    pub fn caller_message(&self) -> String {
        match self {
            ToolError::Provider(_) => "this tool cannot run: the server is not configured with something it needs; its operator's log says what".to_owned(),
            other => other.bounded_message(),
        }
    }

    /// The error's message (its `Display`) cut to [`MAX_ERROR_CHARS`] characters on a
    /// character boundary, with a marker saying how long it was: what a record or a log
    /// line keeps of it. Only the characters shown are copied.
    ///
    /// ```
    /// use toolgate_core::ToolError;
    ///
    /// let message = ToolError::execution("é".repeat(100_000)).bounded_message();
    /// assert!(message.starts_with("tool failed: éé"));
    /// assert!(message.ends_with("[cut: the message was 100,013 characters; the first 59,929 are shown]"));
    /// assert_eq!(ToolError::execution("short").bounded_message(), "tool failed: short");
    /// ```
    pub fn bounded_message(&self) -> String {
        bounded(format_args!("{self}"), MAX_ERROR_CHARS)
    }

    /// The stable machine code.
    pub fn code(&self) -> &str {
        match self {
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::InvalidInput(_) => "invalid_input",
            ToolError::InputTooLarge { .. } => "input_too_large",
            ToolError::InputTooDeep { .. } => "input_too_deep",
            ToolError::Aborted { code, .. } | ToolError::RetryAfter { code, .. } => code,
            ToolError::Suspended { .. } => "suspended",
            ToolError::InputRequired { .. } => "input_required",
            ToolError::Timeout { .. } => "timeout",
            ToolError::Cancelled => "cancelled",
            ToolError::Execution { .. } => "tool_error",
            ToolError::Provider(e) => e.code(),
            ToolError::UnknownSuspension { .. } => "unknown_suspension",
            ToolError::SuspensionExpired { .. } => "suspension_expired",
            ToolError::NotDecided { .. } => "suspension_store_unavailable",
            ToolError::Internal { .. } => "internal",
        }
    }

    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            ToolError::UnknownTool { .. } | ToolError::UnknownSuspension { .. } => 404,
            ToolError::InvalidInput(_) | ToolError::InputTooDeep { .. } => 400,
            ToolError::InputTooLarge { .. } => 413,
            ToolError::InputRequired { .. } => 422,
            ToolError::Aborted { status, .. } | ToolError::RetryAfter { status, .. } => *status,
            ToolError::Suspended { .. } => 202,
            ToolError::SuspensionExpired { .. } => 410,
            ToolError::NotDecided { .. } => 503,
            ToolError::Timeout { .. } => 504,
            ToolError::Cancelled => 499,
            ToolError::Execution { .. } => 502,
            ToolError::Provider(_) | ToolError::Internal { .. } => 500,
        }
    }

    /// How long to wait before trying again, for a retry-after: its delay, at most
    /// [`MAX_RETRY_AFTER`].
    pub fn retry_after_delay(&self) -> Option<Duration> {
        match self {
            ToolError::RetryAfter { delay, .. } => Some((*delay).min(MAX_RETRY_AFTER)),
            _ => None,
        }
    }

    /// Whether a retry policy may try the call again: transient tool failures, retry-afters
    /// and timeouts of one attempt.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ToolError::Execution {
                retryable: true,
                ..
            } | ToolError::RetryAfter { .. }
                | ToolError::Timeout { .. }
        )
    }

    /// Whether the call did not fail but waits: for a person to decide on it
    /// ([`Suspended`](ToolError::Suspended)) or for the caller's answers
    /// ([`InputRequired`](ToolError::InputRequired)). `on_error` hooks do not run for it,
    /// and audit and metrics count it apart from failures.
    pub fn is_waiting(&self) -> bool {
        matches!(
            self,
            ToolError::Suspended { .. } | ToolError::InputRequired { .. }
        )
    }

    /// Whether this error is a policy decision (abort, retry-after, suspension) rather than a
    /// failure. A hook registered with [`FailureMode::Ignore`](crate::hook::FailureMode::Ignore)
    /// still applies its decisions.
    pub fn is_decision(&self) -> bool {
        matches!(
            self,
            ToolError::Aborted { .. } | ToolError::RetryAfter { .. } | ToolError::Suspended { .. }
        )
    }
}

/// One field of the input that failed a check.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputViolation {
    /// Where in the input, e.g. `items[0].name`; empty for the input as a whole.
    pub path: String,
    /// What is wrong, e.g. `greater than 50`.
    pub message: String,
}

/// The most characters of a violation's path, and of its message, that its words repeat:
/// both may hold what a caller sent (a key of its own, an unknown field's name).
const MAX_SHOWN_PATH: usize = 256;
const MAX_SHOWN_MESSAGE: usize = 2000;

impl InputViolation {
    /// This violation with its path cut to its first 256 characters and its message to
    /// 2,000, each followed by `…` where cut — what its words repeat of them — for a list of
    /// violations sent back to a caller beside those words. Its words are the same as the
    /// whole violation's.
    ///
    /// ```
    /// use toolgate_core::error::InputViolation;
    ///
    /// let long = InputViolation { path: "k".repeat(10_000), message: "unknown field".into() };
    /// let cut = long.cut();
    /// assert_eq!(cut.path.chars().count(), 257);
    /// assert_eq!(cut.to_string(), long.to_string());
    /// ```
    pub fn cut(&self) -> InputViolation {
        InputViolation {
            path: first_chars(&self.path, MAX_SHOWN_PATH),
            message: first_chars(&self.message, MAX_SHOWN_MESSAGE),
        }
    }
}

/// `text`'s first `max_chars` characters, then `…` when it is longer.
fn first_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

impl fmt::Display for InputViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = shown_text(&self.message, MAX_SHOWN_MESSAGE);
        if self.path.is_empty() {
            f.write_str(&message)
        } else {
            let path = shown_text(&self.path, MAX_SHOWN_PATH);
            write!(f, "argument `{path}`: {message}")
        }
    }
}

/// Every field of the input that failed its checks (never empty).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct InputViolations(pub Vec<InputViolation>);

/// A serde error's message in the words of JSON rather than Rust: serde names the Rust type
/// it expected ("expected u64", "expected struct SleepInput") and what it found in its own
/// words ("map", "sequence", "floating point `1.5`"), which tell a caller who writes JSON
/// nothing. Other messages are kept as they are.
///
/// # Examples
///
/// ```
/// use toolgate_core::error::in_json_words;
///
/// assert_eq!(
///     in_json_words("invalid type: string \"soon\", expected u64"),
///     "invalid type: string \"soon\", expected a whole number, 0 or more"
/// );
/// assert_eq!(
///     in_json_words("invalid type: sequence, expected struct Decision at line 1 column 2"),
///     "invalid type: an array, expected an object at line 1 column 2"
/// );
/// assert_eq!(
///     in_json_words("invalid type: string \"x\", expected internally tagged enum Decision"),
///     "invalid type: string \"x\", expected an object"
/// );
/// assert_eq!(
///     in_json_words("invalid value: integer `5000000000`, expected u32"),
///     "invalid value: the number 5000000000, expected a whole number from 0 to 4294967295"
/// );
/// // A number past 64 bits, as a YAML reader names it.
/// assert_eq!(
///     in_json_words("invalid type: integer `99999999999999999999` as u128, expected u64"),
///     "invalid value: the number 99999999999999999999, expected a whole number from 0 to 18446744073709551615"
/// );
/// assert_eq!(
///     in_json_words("unknown variant `calculater`, expected `calculator` or `echo`"),
///     "unknown value `calculater`, expected `calculator` or `echo`"
/// );
/// // Valid JSON, only deeper than serde_json reads: said so, not "recursion".
/// assert_eq!(
///     in_json_words("recursion limit exceeded at line 1 column 128"),
///     "arrays and objects nested 128 levels deep or more at line 1 column 128: send at most 127 levels"
/// );
/// // Half of a UTF-16 surrogate pair (`"\ud800"`, `"\udc00"`) is no character.
/// assert_eq!(
///     in_json_words("lone leading surrogate in hex escape at line 1 column 16"),
///     "a `\\u` escape of half a UTF-16 surrogate pair without its other half, which is no character, at line 1 column 16: strings must be valid Unicode"
/// );
/// ```
pub fn in_json_words(message: &str) -> String {
    if let Some(position) = message.strip_prefix("recursion limit exceeded") {
        // serde_json refuses a document as it opens its 128th level: 127 are read.
        return format!(
            "arrays and objects nested 128 levels deep or more{position}: send at most 127 levels"
        );
    }
    // serde_json's words for a lone surrogate: a high one not followed by its low half, and
    // a low one alone (which it calls "leading").
    if let Some(position) = [
        "unexpected end of hex escape",
        "lone leading surrogate in hex escape",
    ]
    .into_iter()
    .find_map(|said| message.strip_prefix(said))
    {
        return format!(
            "a `\\u` escape of half a UTF-16 surrogate pair without its other half, which is no character,{position}: strings must be valid Unicode"
        );
    }
    let message = match message.strip_prefix("unknown variant ") {
        Some(rest) => std::borrow::Cow::Owned(format!("unknown value {rest}")),
        None => std::borrow::Cow::Borrowed(message),
    };
    let Some((head, expected)) = message.rsplit_once("expected ") else {
        return message.into_owned();
    };
    let head = found_in_json_words(head);
    // serde_json adds where it was in the text it read.
    let (expected, position) = match expected.find(" at line ") {
        Some(at) => expected.split_at(at),
        None => (expected, ""),
    };
    // A number of the right kind out of range is told the range; a value of another kind,
    // the kind.
    let out_of_range = head.starts_with("invalid value: the number");
    let words = match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" if out_of_range => "a whole number from 0 to 4294967295",
        "u64" | "usize" if out_of_range => "a whole number from 0 to 18446744073709551615",
        "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i32" if out_of_range => "a whole number from -2147483648 to 2147483647",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "char" => "a single character",
        "unit" => "null",
        "a map" => "an object",
        "a sequence" => "an array",
        other
            if other.starts_with("struct ")
                || other.starts_with("tuple struct ")
                || other.starts_with("internally tagged enum ")
                || other.starts_with("adjacently tagged enum ") =>
        {
            "an object"
        }
        other if other.starts_with("enum ") => "one of the values the schema lists",
        other => other,
    };
    // An array where an object (a struct) is wanted: serde reads it as the struct's fields
    // in order, and says only that their count is wrong.
    let head = match head.strip_prefix("invalid length ") {
        Some(_) if words == "an object" => "invalid type: an array, ".to_owned(),
        _ => head,
    };
    format!("{head}expected {words}{position}")
}

/// The start of a serde message, `invalid type: <what it found>, `, with what it found
/// said as JSON says it.
fn found_in_json_words(head: &str) -> String {
    let Some((kind, found)) = ["invalid type: ", "invalid value: "]
        .into_iter()
        .find_map(|kind| head.strip_prefix(kind).map(|found| (kind, found)))
    else {
        return head.to_owned();
    };
    let Some(found) = found.strip_suffix(", ") else {
        return head.to_owned();
    };
    // A YAML reader names a number past 64 bits by the type it read it as, and calls it of
    // the wrong type: it is a number out of range.
    let (kind, found) = match [" as u128", " as i128"]
        .into_iter()
        .find_map(|wide| found.strip_suffix(wide))
    {
        Some(number) => ("invalid value: ", number),
        None => (kind, found),
    };
    let quoted = |prefix: &str| {
        found
            .strip_prefix(prefix)
            .map(|value| value.trim_matches('`').to_owned())
    };
    let words = match found {
        "map" => "an object".to_owned(),
        "sequence" => "an array".to_owned(),
        "unit value" | "unit" => "null".to_owned(),
        "enum" => "a tagged value (`!name`)".to_owned(),
        _ => match quoted("floating point ")
            .or_else(|| quoted("integer "))
            .map(|n| format!("the number {n}"))
            .or_else(|| quoted("boolean "))
        {
            Some(words) => words,
            None => return head.to_owned(),
        },
    };
    format!("{kind}{words}, ")
}

impl InputViolations {
    /// One violation.
    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        InputViolations(vec![InputViolation {
            path: path.into(),
            message: message.into(),
        }])
    }

    /// The violations.
    pub fn iter(&self) -> std::slice::Iter<'_, InputViolation> {
        self.0.iter()
    }
}

impl fmt::Display for InputViolations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            v.fmt(f)?;
        }
        Ok(())
    }
}

impl From<InputViolations> for ToolError {
    fn from(v: InputViolations) -> Self {
        ToolError::InvalidInput(v)
    }
}

/// Why a tool could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A tool with this name is already registered.
    #[error(
        "a tool named `{name}` is already registered: give one of them another name or a prefix"
    )]
    DuplicateTool {
        /// The name both tools share.
        name: String,
    },
    /// The name is empty, too long, has characters model providers refuse, or is `.` or
    /// `..` alone (which a URL path resolves away).
    #[error(
        "invalid tool name `{name}`: use 1 to 64 characters from a-z, A-Z, 0-9, `_`, `-` and `.`, and not `.` or `..` alone"
    )]
    InvalidName {
        /// The name that was refused.
        name: String,
    },
}

/// Why a pipeline could not be built: a wiring mistake, caught at start-up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A hook requires a provider nobody binds. The message gives the way to supply it in
    /// each scope.
    #[error(
        "hook `{hook}` requires provider `{key}`, which nothing supplies: for one value for every call, bind it on the builder with `.provide::<{key}>(…)`; for a value per request or per session that the host passes (`InvokeOptions::provide`, `Pipeline::session(id).provide`), declare it with `.per_call_provider::<{key}>()`, and each call is checked for it; for a value a hook binds at `will_bind_providers`, list it in that hook's `provided_providers` (`provider::bind_provider` does)"
    )]
    MissingProvider {
        /// The hook that requires it.
        hook: String,
        /// The provider key type.
        key: &'static str,
    },
    /// Hooks were attached to a tool that is not registered.
    #[error(
        "hooks were attached to tool `{tool}`, which is not registered: register the tool first or fix the name"
    )]
    UnknownTool {
        /// The name used.
        tool: String,
    },
    /// A tool could not be registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

#[cfg(test)]
mod tests {
    use super::{
        InputViolation, InputViolations, MAX_ERROR_CHARS, ToolError, bounded, error_text,
        in_json_words,
    };

    #[test]
    fn a_message_at_the_bound_is_kept_whole_and_one_past_it_is_cut_within_it() {
        let at = "x".repeat(MAX_ERROR_CHARS);
        assert_eq!(bounded(format_args!("{at}"), MAX_ERROR_CHARS), at);
        let past = format!("{at}y");
        let cut = bounded(format_args!("{past}"), MAX_ERROR_CHARS);
        assert_eq!(cut.chars().count(), MAX_ERROR_CHARS);
        assert!(cut.starts_with(&at[..59_931]));
        assert!(
            cut.ends_with(
                "x\n[cut: the message was 60,001 characters; the first 59,931 are shown]"
            )
        );
    }

    #[test]
    fn a_cut_message_keeps_whole_characters_from_pieces_written_apart() {
        // Four-byte characters, written in pieces that end past the bound.
        let piece = "🦀".repeat(40);
        let cut = bounded(format_args!("ab{piece}{piece}{piece}"), 80);
        assert!(cut.starts_with("ab🦀🦀🦀"), "{cut}");
        assert!(
            cut.ends_with("🦀\n[cut: the message was 122 characters; the first 17 are shown]"),
            "{cut}"
        );
        assert_eq!(cut.chars().count(), 79);
        // A bound too small for the marker keeps nothing.
        assert_eq!(bounded(format_args!("{piece}"), 16), "");
        let whole = bounded(format_args!("ab{piece}"), 200);
        assert_eq!(whole, format!("ab{piece}"));
    }

    #[test]
    fn a_huge_upstream_error_renders_and_records_within_the_bound() {
        let sent = "x".repeat(10_000_000);
        let text = error_text(format_args!("MCP server `raw` refused the call: {sent}"));
        let error = ToolError::execution(text);
        for message in [error.caller_message(), error.bounded_message()] {
            assert!(message.chars().count() <= MAX_ERROR_CHARS);
            assert!(message.starts_with("tool failed: MCP server `raw` refused the call: xx"));
            assert!(
                message.ends_with(
                    "the message was 10,000,035 characters; the first 59,823 are shown]"
                )
            );
            assert_eq!(message.matches("[cut:").count(), 1);
        }
        // A tool that builds its error whole is cut where it is rendered.
        let local = ToolError::Internal {
            message: "é".repeat(1_000_000),
        };
        let message = local.caller_message();
        assert!(message.chars().count() <= MAX_ERROR_CHARS);
        assert!(
            message.ends_with("the message was 1,000,016 characters; the first 59,925 are shown]")
        );
    }

    #[test]
    fn an_unknown_tool_s_name_is_repeated_only_up_to_the_length_of_an_id() {
        let name = "n".repeat(60_000);
        let message = ToolError::UnknownTool { name }.to_string();
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(
            message.contains(&format!("`{}…`", "n".repeat(64))),
            "{message}"
        );
    }

    #[test]
    fn what_serde_found_and_expected_is_said_in_json_words() {
        for (serde, json) in [
            (
                "invalid type: map, expected a string",
                "invalid type: an object, expected a string",
            ),
            (
                "invalid type: floating point `1000.5`, expected u64",
                "invalid type: the number 1000.5, expected a whole number, 0 or more",
            ),
            (
                "invalid type: unit value, expected a sequence at line 1 column 4",
                "invalid type: null, expected an array at line 1 column 4",
            ),
            (
                "invalid type: boolean `true`, expected struct Input",
                "invalid type: true, expected an object",
            ),
            ("missing field `expression`", "missing field `expression`"),
            (
                "invalid length 0, expected struct Inner with 1 element",
                "invalid type: an array, expected an object",
            ),
            (
                "invalid length 1, expected a tuple of size 2",
                "invalid length 1, expected a tuple of size 2",
            ),
        ] {
            assert_eq!(in_json_words(serde), json);
        }
    }

    #[test]
    fn a_violation_repeats_a_callers_key_cut_and_escaped() {
        let key = format!("\u{1b}[2J\n\u{202e}{}", "K".repeat(200_000));
        let violation = InputViolation {
            path: key.clone(),
            message: format!("unknown field `{key}`, expected `text`"),
        };

        let said = ToolError::InvalidInput(InputViolations(vec![violation])).to_string();

        assert!(
            said.starts_with("invalid arguments: argument `\\u{1b}[2J\\n\\u{202e}KKK"),
            "{}",
            &said[..80]
        );
        assert!(!said.contains('\u{1b}') && !said.contains('\n'));
        assert!(said.chars().count() < 2400, "{} characters", said.len());
    }
}
