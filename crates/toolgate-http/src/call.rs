//! From an HTTP request to [`InvokeOptions`]: the caller your authentication put in the
//! request's extensions, the session and the request id from headers.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;
use http::{HeaderMap, HeaderName, StatusCode};
use toolgate_core::context::RequestId;
use toolgate_core::provider::bounded_session_id;
use toolgate_core::{InvokeOptions, User};

use crate::HttpError;

/// `x-request-id`: the caller's id of the request (at most 128 bytes), echoed in the answer.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `x-session-id`: the session the call belongs to.
pub const X_SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");

/// The longest `x-request-id` or `x-session-id` taken from a client.
const MAX_ID: usize = 128;

/// The `x-request-id` a client sent, when it is usable (not empty, at most 128 bytes,
/// visible ASCII).
///
/// ```
/// use http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-request-id", "req-7".parse().unwrap());
/// assert_eq!(toolgate_http::request_id(&headers), Some("req-7"));
/// ```
pub fn request_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| is_usable_id(v))
}

/// Whether an id a client chose is usable as a request or session id: 1 to 128 bytes of
/// visible ASCII (no spaces, tabs or control characters). The rule `x-request-id` and
/// `x-session-id` are held to, for a host that takes such an id from elsewhere (a query
/// parameter, another header) before it qualifies it with [`session_key`].
///
/// ```
/// assert!(toolgate_http::is_usable_id("chat-42"));
/// assert!(!toolgate_http::is_usable_id(""));
/// assert!(!toolgate_http::is_usable_id("chat 42"));
/// assert!(!toolgate_http::is_usable_id(&"x".repeat(129)));
/// ```
pub fn is_usable_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Why the id a client sent in a header cannot be used ([`header_id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnusableId {
    /// The header was sent more than once.
    SentTwice,
    /// Its value is not a usable id ([`is_usable_id`]).
    NotAnId,
}

/// The id a client sent in `header`, if it sent one: once, and usable ([`is_usable_id`]).
/// The rule `x-session-id` is held to, for a host's own header of a client-chosen id; the
/// host words the refusal.
///
/// ```
/// use http::HeaderMap;
/// use toolgate_http::{UnusableId, header_id};
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(header_id(&headers, "x-thread-id"), Ok(None));
/// headers.append("x-thread-id", "t-1".parse().unwrap());
/// assert_eq!(header_id(&headers, "x-thread-id"), Ok(Some("t-1")));
/// headers.append("x-thread-id", "t-2".parse().unwrap());
/// assert_eq!(header_id(&headers, "x-thread-id"), Err(UnusableId::SentTwice));
/// ```
///
/// # Errors
///
/// [`UnusableId`], as above.
pub fn header_id<'a>(headers: &'a HeaderMap, header: &str) -> Result<Option<&'a str>, UnusableId> {
    let mut sent = headers.get_all(header).iter();
    let Some(first) = sent.next() else {
        return Ok(None);
    };
    if sent.next().is_some() {
        return Err(UnusableId::SentTwice);
    }
    match first.to_str() {
        Ok(id) if is_usable_id(id) => Ok(Some(id)),
        _ => Err(UnusableId::NotAnId),
    }
}

/// The session of a request for [`CallOptions`]: none without `x-session-id`, 400
/// `bad_session_id` for one that is not usable or sent more than once.
fn checked_session_id(headers: &HeaderMap) -> Result<Option<&str>, HttpError> {
    header_id(headers, X_SESSION_ID.as_str()).map_err(|unusable| {
        let message = match unusable {
            UnusableId::SentTwice => {
                "the request carries `x-session-id` more than once: send it once"
            }
            UnusableId::NotAnId => {
                "`x-session-id` must be 1 to 128 visible ASCII characters (letters, digits, `-`, `_`, `.`, …, no spaces): send a usable id, or none"
            }
        };
        HttpError::new(StatusCode::BAD_REQUEST, "bad_session_id", message.to_owned())
    })
}

/// The session a call of `user` belongs to: the client's `x-session-id`, checked (none
/// without one; 400 `bad_session_id` for one sent twice, empty, over 128 bytes or not
/// visible ASCII), within `user`'s own sessions. A session id is the client's word, and two
/// users may send the same one, by chance or to read what another's session holds: so the
/// session the pipeline sees is the id qualified by the user and their tenant (written as
/// the JSON array `[tenant, user, id]`, which no other user's can equal), and what a hook
/// binds for one user's session no other user's call reads. [`CallOptions`] uses it.
///
/// ```
/// use http::HeaderMap;
/// use toolgate_core::User;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-session-id", "chat-42".parse().unwrap());
/// let ann = toolgate_http::caller_session(&headers, &User::new("ann")).unwrap();
/// let bob = toolgate_http::caller_session(&headers, &User::new("bob")).unwrap();
/// assert_eq!(ann.as_deref(), Some(r#"[null,"ann","chat-42"]"#));
/// assert_ne!(ann, bob);
/// ```
///
/// # Errors
///
/// 400 `bad_session_id`, as above.
pub fn caller_session(headers: &HeaderMap, user: &User) -> Result<Option<String>, HttpError> {
    Ok(checked_session_id(headers)?.map(|id| session_key(user, id)))
}

/// The session `user`'s calls with the session id `id` run in: `[tenant, user, id]` as JSON
/// (see [`caller_session`]). For a host that seeds that session itself, with
/// [`Pipeline::session`](toolgate_core::Pipeline::session).
///
/// A key longer than 128 bytes (a long id, tenant or user id) is its `sha256:` digest
/// instead ([`bounded_session_id`](toolgate_core::provider::bounded_session_id)), as the
/// pipeline would keep it: whatever the client sends, the key stays short, and two
/// different `(tenant, user, id)` still make two different keys.
///
/// ```
/// use toolgate_core::User;
///
/// let mut ann = User::new("ann");
/// ann.tenant = Some("acme".into());
/// assert_eq!(toolgate_http::session_key(&ann, "chat-42"), r#"["acme","ann","chat-42"]"#);
///
/// let long = "x".repeat(1 << 20);
/// let key = toolgate_http::session_key(&ann, &long);
/// assert!(key.starts_with("sha256:") && key.len() <= 128);
/// assert_ne!(key, toolgate_http::session_key(&User::new("ann"), &long));
/// ```
pub fn session_key(user: &User, id: &str) -> String {
    let key = serde_json::json!([user.tenant, user.id, id]).to_string();
    match bounded_session_id(&key) {
        std::borrow::Cow::Borrowed(_) => key,
        std::borrow::Cow::Owned(digest) => digest,
    }
}

/// The `x-session-id` a client sent, if any: the first one, unchecked and as sent. To run a
/// call in it, use [`caller_session`] (which [`CallOptions`] does): it refuses an unusable
/// id and keeps one user's sessions apart from another's.
///
/// ```
/// use http::HeaderMap;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-session-id", "chat-42".parse().unwrap());
/// assert_eq!(toolgate_http::session_id(&headers), Some("chat-42"));
/// ```
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(X_SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Who is calling: your authentication middleware inserts one in the request's extensions
/// (`request.extensions_mut().insert(Caller::new(user))`), and [`CallOptions`] makes it the
/// invocation's [`User`], which policies and `#[requires]` read.
///
/// ```
/// use toolgate_core::User;
/// use toolgate_http::Caller;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Caller::new(User::new("alice")));
/// assert_eq!(request.extensions().get::<Caller>().unwrap().user().id, "alice");
/// ```
#[derive(Clone, Debug)]
pub struct Caller(Arc<User>);

impl Caller {
    /// The caller this user is.
    pub fn new(user: impl Into<Arc<User>>) -> Self {
        Caller(user.into())
    }

    /// The user.
    pub fn user(&self) -> &Arc<User> {
        &self.0
    }
}

/// An axum extractor: the [`InvokeOptions`] of a request.
///
/// - the user: the [`Caller`] in the request's extensions (a request without one is
///   answered 401 `unauthenticated`: put your authentication middleware in front of the
///   route);
/// - the session: `x-session-id`, when sent, within the caller's own sessions
///   ([`caller_session`]: one that is sent twice, is empty, is over 128 bytes or holds
///   anything but visible ASCII is answered 400 `bad_session_id`, rather than run the call
///   in no session or in a session the client did not mean);
/// - the request id: `x-request-id` when usable, a generated one otherwise (it is in
///   [`request_id`](Self::request_id) too, to echo in the answer).
///
/// Add what is yours to [`options`](Self::options) before invoking: a deadline,
/// cancellation, values for the tool's context with
/// [`provide`](InvokeOptions::provide).
///
/// ```
/// use axum::{extract::State, response::Response};
/// use toolgate_core::Pipeline;
/// use toolgate_http::{CallOptions, JsonInput, invocation_response};
///
/// async fn search(
///     State(pipeline): State<Pipeline>,
///     call: CallOptions,
///     JsonInput(input): JsonInput,
/// ) -> Response {
///     let options = call.options.timeout(std::time::Duration::from_secs(5));
///     invocation_response(&pipeline.invoke_detailed("search", input, options).await)
/// }
/// # let _ = axum::routing::post(search).with_state::<()>(Pipeline::builder().build().unwrap());
/// ```
#[derive(Debug)]
pub struct CallOptions {
    /// The options to invoke with.
    pub options: InvokeOptions,
    /// The request's id: the client's `x-request-id` or a generated one.
    pub request_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for CallOptions {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, HttpError> {
        let Some(caller) = parts.extensions.get::<Caller>() else {
            return Err(HttpError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this route needs an authenticated caller: send your credentials",
            ));
        };
        let request_id = request_id(&parts.headers)
            .map(str::to_owned)
            .unwrap_or_else(|| RequestId::generate().to_string());
        let mut options = InvokeOptions::new()
            .user(Arc::clone(&caller.0))
            .request_id(request_id.clone());
        if let Some(session) = caller_session(&parts.headers, &caller.0)? {
            options = options.session(session);
        }
        Ok(CallOptions {
            options,
            request_id,
        })
    }
}
