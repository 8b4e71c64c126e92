//! [`InvokeOptions`]: who calls, in which session, until when.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use typemap_rev::TypeMapKey;

use crate::provider::{Providers, kept_session_id};
use crate::suspension::RunningRecord;
use crate::user::{CallerId, User};

/// The options of one invocation.
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::{InvokeOptions, User};
///
/// let options = InvokeOptions::new()
///     .user(User::new("alice"))
///     .session("thread-42")
///     .request_id("call-7")
///     .timeout(Duration::from_secs(5));
/// ```
#[derive(Debug, Default)]
pub struct InvokeOptions {
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) request_id: Option<String>,
    pub(crate) user: Option<Arc<User>>,
    pub(crate) deadline: Option<tokio::time::Instant>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancellation: Option<CancellationToken>,
    pub(crate) providers: Providers,
    pub(crate) no_store: bool,
    /// Boxed: every call's options are moved into its invocation, by value, and only a
    /// resume reads these.
    pub(crate) resume: Option<Box<ResumeOptions>>,
}

/// The options only a resume reads.
#[derive(Debug, Default)]
pub(crate) struct ResumeOptions {
    pub(crate) decided_by: Option<CallerId>,
    pub(crate) decision_reason: Option<String>,
    pub(crate) running: Option<RunningRecord>,
}

impl InvokeOptions {
    /// No session, a generated request id, the anonymous user, no deadline.
    pub fn new() -> Self {
        Self::default()
    }

    fn resume_mut(&mut self) -> &mut ResumeOptions {
        self.resume.get_or_insert_default()
    }

    /// The session the call belongs to: every call made with the same `id` shares the
    /// session's providers, whoever makes it.
    ///
    /// The id is the host's key, trusted as given: the pipeline does not tie a session to
    /// a user. Never pass an id a client chose as it is — another user who sends the same
    /// id would read what the session holds. Qualify it with the caller first, as
    /// `toolgate_http::session_key` does (`[tenant, user, id]`), or use an id the host
    /// made itself (an MCP session id, a thread the host keeps per user).
    ///
    /// An id longer than [`MAX_SESSION_ID_LEN`](crate::provider::MAX_SESSION_ID_LEN) bytes
    /// is kept as its digest ([`bounded_session_id`](crate::provider::bounded_session_id)):
    /// the same id still finds the same session, and a session costs the same memory
    /// whatever its id's length. The session a call makes belongs to the call's
    /// [`user`](Self::user): when the store is full, the caller holding the most pays first
    /// ([`SessionConfig`](crate::provider::SessionConfig)).
    ///
    /// ```
    /// use toolgate_core::{InvokeOptions, User};
    ///
    /// let ann = User::new("ann");
    /// let sent_by_client = "chat-42";
    /// // One session per user and id: Bob's "chat-42" is another session.
    /// let key = serde_json::json!([ann.tenant, ann.id, sent_by_client]).to_string();
    /// let options = InvokeOptions::new().user(ann).session(key);
    /// ```
    #[must_use]
    pub fn session(mut self, id: impl AsRef<str>) -> Self {
        self.session_id = Some(kept_session_id(id.as_ref()));
        self
    }

    /// The request id (generated when not given).
    #[must_use]
    pub fn request_id(mut self, id: impl Into<String>) -> Self {
        self.request_id = Some(id.into());
        self
    }

    /// Who is calling.
    #[must_use]
    pub fn user(mut self, user: impl Into<Arc<User>>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The call must end by this instant; past it, it is cancelled with
    /// [`ToolError::Timeout`](crate::ToolError::Timeout).
    #[must_use]
    pub fn deadline(mut self, deadline: tokio::time::Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// On a resume: who decided on the call — an approver's user id, or the approver
    /// (`&User`) with their tenant — kept with the decision for hooks to read
    /// ([`ToolInvokeContext::decided_by`], the audit record). A fresh call ignores it.
    ///
    /// [`ToolInvokeContext::decided_by`]: crate::ToolInvokeContext::decided_by
    #[must_use]
    pub fn decided_by(mut self, approver: impl Into<CallerId>) -> Self {
        self.resume_mut().decided_by = Some(approver.into());
        self
    }

    /// On a resume: why the approver decided as they did, kept with the decision for hooks
    /// to read ([`ToolInvokeContext::decision_reason`], the audit record). A rejection
    /// carries its own reason; this one is for an approval. A fresh call ignores it.
    ///
    /// [`ToolInvokeContext::decision_reason`]: crate::ToolInvokeContext::decision_reason
    #[must_use]
    pub fn decision_reason(mut self, reason: impl Into<String>) -> Self {
        self.resume_mut().decision_reason = Some(reason.into());
        self
    }

    /// On a resume: the running record to keep for the call as the resume takes it, in
    /// the same step of the store ([`SuspensionStore::take_running`]), so that while the
    /// call runs its caller reads that it runs, decided by whoever took it — or, for a
    /// rejection, the call's end, which its caller then reads from the take on. A resume
    /// that does not take the call keeps nothing. A fresh call ignores it.
    ///
    /// [`SuspensionStore::take_running`]: crate::suspension::SuspensionStore::take_running
    #[must_use]
    pub fn running(mut self, running: RunningRecord) -> Self {
        self.resume_mut().running = Some(running);
        self
    }

    /// The call must end within this duration from when it starts.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Cancelling this token cancels the call with
    /// [`ToolError::Cancelled`](crate::ToolError::Cancelled); the tool sees the same token.
    #[must_use]
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Binds a request-scoped provider for this call.
    #[must_use]
    pub fn provide<K: TypeMapKey>(mut self, value: K::Value) -> Self {
        self.providers.insert::<K>(value);
        self
    }

    /// The call's result depends on more than its input (answers its caller gave in an
    /// earlier round, say): a cache neither answers it with a stored result nor stores
    /// its result. See [`ToolInvokeContext::set_no_store`](crate::ToolInvokeContext::set_no_store).
    #[must_use]
    pub fn no_store(mut self) -> Self {
        self.no_store = true;
        self
    }

    /// The deadline in force: the earlier of `deadline` and now + `timeout`. A timeout too
    /// long for the clock to add (`Duration::MAX`) sets no deadline. In place: every call
    /// asks, and most set neither.
    #[inline]
    pub(crate) fn effective_deadline(&self) -> Option<tokio::time::Instant> {
        let from_timeout = self
            .timeout
            .and_then(|t| tokio::time::Instant::now().checked_add(t));
        match (self.deadline, from_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every call's options are moved into its invocation, and from there into its
    /// context, by value: each byte is copied a few times a call. What only some calls
    /// use is boxed, as the resume's options are: kept in place, they made every call
    /// about 85 instructions dearer (2026-12-06, `benches/engine_instructions.sh`).
    #[test]
    fn the_options_every_call_moves_stay_small() {
        let size = std::mem::size_of::<InvokeOptions>();
        assert!(
            size <= 160,
            "the options are {size} bytes: box what only some calls use"
        );
    }
}
