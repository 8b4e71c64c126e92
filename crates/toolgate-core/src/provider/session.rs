//! The session scope: providers shared by the invocations with one session id, bounded by
//! an idle expiry and a maximum count that the heaviest caller pays for; and [`SessionProviders`], the
//! host's handle on one session.

mod store;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use typemap_rev::TypeMapKey;

use super::Scopes;
pub(crate) use store::{SessionScope, SessionStore};

/// Limits of the session scope.
///
/// A flood of session ids cannot exhaust memory, nor push out other callers' sessions:
///
/// * a session unused for `idle_timeout` is dropped;
/// * past `max_sessions`, a tenth of them (at least one) is evicted at once: the least
///   recently used sessions of the caller whose calls made the most (a caller is a user id
///   in a tenant; calls without a user are one caller, the anonymous user), if they hold
///   more than a tenth of `max_sessions` — the one flooding pays, never a caller under
///   that share — and otherwise the least recently used of all.
///
/// A session the host makes ([`Pipeline::session`](crate::Pipeline::session)) belongs to
/// no caller: it is evicted only when no caller holds more than their share.
///
/// ```
/// use std::time::Duration;
/// use toolgate_core::Pipeline;
/// use toolgate_core::provider::SessionConfig;
///
/// let pipeline = Pipeline::builder()
///     .sessions(SessionConfig {
///         max_sessions: 50_000,
///         ..SessionConfig::default()
///     })
///     .build()?;
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SessionConfig {
    /// The most sessions kept at once, whoever made them. Default 10 000.
    pub max_sessions: usize,
    /// How long an unused session is kept. Default 30 minutes.
    pub idle_timeout: Duration,
}

impl SessionConfig {
    /// The most sessions one caller's calls hold before, once the store is full, theirs
    /// are the ones evicted: a tenth of `max_sessions`, at least one.
    pub(crate) fn caller_share(&self) -> usize {
        (self.max_sessions / 10).max(1)
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_sessions: 10_000,
            idle_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// The longest session id kept as it is given; a longer one is kept as its digest (see
/// [`bounded_session_id`]).
pub const MAX_SESSION_ID_LEN: usize = 128;

/// The session id the pipeline keeps for `id`: `id` itself when it is at most
/// [`MAX_SESSION_ID_LEN`] bytes; otherwise `sha256:` and the hex SHA-256 of `id` (71
/// bytes), so that a session costs the same memory whatever the length of its id, and two
/// different ids stay two sessions.
///
/// [`InvokeOptions::session`](crate::InvokeOptions::session),
/// [`Pipeline::session`](crate::Pipeline::session) and
/// [`Pipeline::end_session`](crate::Pipeline::end_session) apply it, so a host passes an id
/// of any length and the same id always finds the same session;
/// [`ToolInvokeContext::session_id`](crate::ToolInvokeContext::session_id) and
/// [`SessionProviders::id`] answer the id as kept. Applying it twice changes nothing: the
/// kept id of a long id, passed back in, names the same session.
///
/// ```
/// use toolgate_core::provider::{MAX_SESSION_ID_LEN, bounded_session_id};
///
/// assert_eq!(bounded_session_id("thread-42"), "thread-42");
/// let long = "x".repeat(10_000);
/// let kept = bounded_session_id(&long);
/// assert!(kept.starts_with("sha256:") && kept.len() <= MAX_SESSION_ID_LEN);
/// assert_ne!(kept, bounded_session_id(&format!("{long}!")));
/// assert_eq!(bounded_session_id(&kept), kept);
/// ```
pub fn bounded_session_id(id: &str) -> Cow<'_, str> {
    use std::fmt::Write;
    if id.len() <= MAX_SESSION_ID_LEN {
        return Cow::Borrowed(id);
    }
    let mut kept = String::with_capacity(7 + 64);
    kept.push_str("sha256:");
    for byte in Sha256::digest(id.as_bytes()) {
        // Writing to a `String` cannot fail.
        let _ = write!(kept, "{byte:02x}");
    }
    Cow::Owned(kept)
}

/// A kept session id as the store's key.
pub(crate) fn kept_session_id(id: &str) -> Arc<str> {
    Arc::from(bounded_session_id(id))
}

/// The host's handle on the providers of one session, from
/// [`Pipeline::session`](crate::Pipeline::session): what it binds here, every invocation
/// with this session id reads (request → **session** → global), hooks and tools alike.
///
/// A session seeded by the host is bounded like every session ([`SessionConfig`]): unused
/// for the idle timeout, or evicted past the maximum count, it is gone with its providers,
/// and [`get`](Self::get) says so. A session the host makes belongs to no caller, so no
/// caller's count holds it, and a session a call made before keeps its caller. Seed
/// it where a session starts (a login, a new agent thread, an MCP `initialize`), and again
/// if it may have expired since. The handle holds the pipeline's scopes, not the session:
/// keeping it keeps nothing alive.
///
/// # Examples
///
/// ```
/// use toolgate_core::external::TypeMapKey;
/// use toolgate_core::Pipeline;
///
/// struct AllowedHosts;
/// impl TypeMapKey for AllowedHosts {
///     type Value = Vec<String>;
/// }
///
/// let pipeline = Pipeline::builder().build()?;
/// let session = pipeline.session("thread-42");
/// session.provide::<AllowedHosts>(vec!["docs.rs".into()]);
/// assert_eq!(*session.get::<AllowedHosts>().unwrap(), ["docs.rs"]);
/// assert!(pipeline.session("thread-7").get::<AllowedHosts>().is_none());
/// # Ok::<(), toolgate_core::error::BuildError>(())
/// ```
#[derive(Clone)]
pub struct SessionProviders {
    scopes: Arc<Scopes>,
    id: Arc<str>,
}

impl SessionProviders {
    pub(crate) fn new(scopes: Arc<Scopes>, id: Arc<str>) -> Self {
        SessionProviders { scopes, id }
    }

    /// The session id as the pipeline keeps it: the id given to
    /// [`Pipeline::session`](crate::Pipeline::session) when it is at most
    /// [`MAX_SESSION_ID_LEN`] bytes, its `sha256:` digest otherwise
    /// ([`bounded_session_id`]).
    ///
    /// ```
    /// use toolgate_core::Pipeline;
    ///
    /// let pipeline = Pipeline::builder().build()?;
    /// assert_eq!(pipeline.session("thread-42").id(), "thread-42");
    /// assert_eq!(pipeline.session("x".repeat(200)).id().len(), 71);
    /// # Ok::<(), toolgate_core::error::BuildError>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Binds `value` under key `K` for this session, replacing an earlier value. Makes the
    /// session if it does not exist, as the host's (which may evict the least recently used
    /// sessions past the maximum count).
    pub fn provide<K: TypeMapKey>(&self, value: K::Value) -> &Self {
        self.provide_shared::<K>(Arc::new(value))
    }

    /// Binds an already shared value under key `K` for this session.
    pub fn provide_shared<K: TypeMapKey>(&self, value: Arc<K::Value>) -> &Self {
        self.scopes
            .sessions
            .get_or_create(&self.id, None)
            .insert::<K>(value);
        self
    }

    /// The value bound under key `K` in this session, if the session is live and binds it
    /// (marks the session used).
    pub fn get<K: TypeMapKey>(&self) -> Option<Arc<K::Value>> {
        self.scopes.sessions.get(&self.id)?.get::<K>()
    }

    /// Ends the session: drops it and its providers. Returns whether it was live.
    pub fn end(&self) -> bool {
        self.scopes.sessions.remove(&self.id)
    }
}

impl std::fmt::Debug for SessionProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionProviders")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
